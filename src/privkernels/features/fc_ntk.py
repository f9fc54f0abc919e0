"""Closed-form infinite-width NTK of a fully-connected ReLU network.

Architecture (neural-tangents notation, NTK parameterization)::

    stax.serial(*[Dense(w, W_std, b_std), Relu()] * depth, Dense(1, W_std, b_std))

A ``Dense`` layer computes ``z = W_std / sqrt(fan_in) * W h + b_std * b`` with
``W, b ~ N(0, 1)``. With ``sigma_w = W_std**2`` and ``sigma_b = b_std**2`` the
infinite-width recursions (Jacot et al. 2018; Arora et al. 2019) read

* input layer:  ``Sigma_1(x, z) = sigma_w * <x, z> / d + sigma_b``,
  ``Theta_1 = Sigma_1`` (the weights contribute the first term, the bias the
  second);
* for ``l = 1..depth`` with ``c = Sigma_l(x, z) / sqrt(Sigma_l(x, x) Sigma_l(z, z))``:

  ``Sigma_{l+1} = sigma_w * sqrt(Sigma_l(x,x) Sigma_l(z,z)) * kappa1(c) + sigma_b``

  ``Theta_{l+1} = Sigma_{l+1} + sigma_w * Theta_l * kappa0(c)``

  where ``kappa1(c) = (sqrt(1 - c^2) + (pi - arccos c) c) / (2 pi)`` is
  ``E[relu(u) relu(v)]`` for unit-variance Gaussians with correlation ``c`` and
  ``kappa0(c) = (pi - arccos c) / (2 pi)`` is ``E[relu'(u) relu'(v)]``
  (the arc-cosine kernels of Cho & Saul 2009).

The result is ``Theta_{depth+1}``, which matches
``kernel_fn(x1, x2, 'ntk')`` of neural-tangents (see
``scripts/generate_fc_ntk_fixture.py`` and ``tests/test_fc_ntk.py``).

Self-comparison: for ``fc_ntk_kernel(x, x)`` (or ``x2=None``) the diagonal has
``c = 1`` by definition, and it is set so. Computed, ``<x, x>`` (a matmul entry)
and ``||x||^2`` (a row sum) can differ by an ulp, and ``arccos`` turns a ``c``
one ulp below 1 into an angle of ``sqrt(2 ulp)``: about 3e-4 relative on
``K(x, x)`` in float32 for 784 dimensions, far above a ridge of 1e-6.

Differentiability: ``kappa1'(c) = kappa0(c)`` is bounded, so ``kappa1`` gets a
custom JVP that avoids the ``inf - inf`` autodiff would produce at ``c = 1``.
``kappa0'(c) = 1 / (2 pi sqrt(1 - c^2))`` is unbounded at ``|c| = 1`` (the NTK
has a kink on the diagonal, like ``-|x - z|``); its custom JVP caps
``1 / sqrt(1 - c^2)`` at ``1 / sqrt(_CAP_EPS * eps(dtype))``. On the exact
diagonal (``K(x, x)``) the true tangent of ``c`` is zero, so the cap only
multiplies rounding noise and gradients stay finite and accurate.

This kernel is data-independent as a function; evaluating it on private data
releases nothing by itself (the caller must privatize what it publishes).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_array, check_int, check_nonnegative, check_positive
from privkernels.precision import full_precision

__all__ = ["fc_ntk_kernel", "fc_ntk_kernel_from_gram", "NEURAL_TANGENTS_REQUIREMENT"]

#: Environment in which the optional neural-tangents backend is known to work.
NEURAL_TANGENTS_REQUIREMENT = (
    "neural-tangents 0.6.5 only imports on jax<=0.5.3 (it uses JAX internals such as "
    "jax.core.Jaxpr that were removed in jax 0.6); the reference environment is "
    '\'pip install jax==0.4.25 jaxlib==0.4.25 "numpy<2" "scipy<1.17" neural-tangents\''
)

# 1 - c^2 is floored at _CAP_EPS * eps(dtype) inside the derivative of kappa0.
_CAP_EPS = 4.0


def _is_concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


@jax.custom_jvp
def _kappa0(c: jax.Array) -> jax.Array:
    """``E[relu'(u) relu'(v)] = (pi - arccos c) / (2 pi)`` for correlation ``c``."""
    return (jnp.pi - jnp.arccos(c)) / (2.0 * jnp.pi)


@_kappa0.defjvp
def _kappa0_jvp(primals, tangents):  # type: ignore[no-untyped-def]
    (c,), (dc,) = primals, tangents
    floor = _CAP_EPS * jnp.finfo(c.dtype).eps
    one_minus = jnp.maximum(1.0 - c * c, floor)
    slope = 1.0 / (2.0 * jnp.pi * jnp.sqrt(one_minus))
    return _kappa0(c), slope.astype(c.dtype) * dc


@jax.custom_jvp
def _kappa1(c: jax.Array) -> jax.Array:
    """``E[relu(u) relu(v)] = (sqrt(1-c^2) + (pi - arccos c) c) / (2 pi)``."""
    sin = jnp.sqrt(jnp.maximum(1.0 - c * c, 0.0))
    return (sin + (jnp.pi - jnp.arccos(c)) * c) / (2.0 * jnp.pi)


@_kappa1.defjvp
def _kappa1_jvp(primals, tangents):  # type: ignore[no-untyped-def]
    (c,), (dc,) = primals, tangents
    return _kappa1(c), _kappa0(c) * dc


def _safe_sqrt(v: jax.Array) -> jax.Array:
    """sqrt with a finite (zero) gradient at 0 (double-where trick)."""
    pos = v > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, v, 1.0)), 0.0)


def _ntk_from_gram(
    gram: jax.Array,
    sq1: jax.Array,
    sq2: jax.Array,
    dim: int,
    depth: int,
    sigma_w: jax.Array,
    sigma_b: jax.Array,
    row0: jax.Array | None = None,
) -> jax.Array:
    """The recursion on inner products: ``gram (b1, b2)``, ``sq1 (b1,)``, ``sq2 (b2,)`` -> (b1, b2).

    ``row0`` (int scalar, optional): the rows are rows ``row0 ..`` of the columns'
    own set, so entry ``(i, row0 + i)`` compares a point with itself and has
    ``c = 1`` exactly (module docstring, self-comparison).
    """
    same = None
    if row0 is not None:
        rows = row0 + jnp.arange(gram.shape[0])
        same = rows[:, None] == jnp.arange(gram.shape[1])[None, :]
    # Input layer (1/d from the NTK parameterization of the first Dense).
    q1 = sigma_w * sq1 / dim + sigma_b  # (b1,)
    q2 = sigma_w * sq2 / dim + sigma_b  # (b2,)
    cross = sigma_w * gram / dim + sigma_b  # (b1, b2)
    theta = cross
    for _ in range(depth):
        norm = _safe_sqrt(q1[:, None] * q2[None, :])
        pos = norm > 0
        c = jnp.where(pos, cross / jnp.where(pos, norm, 1.0), 0.0)
        c = jnp.clip(c, -1.0, 1.0)
        if same is not None:
            c = jnp.where(same & pos, 1.0, c).astype(c.dtype)
        new_cross = sigma_w * norm * _kappa1(c) + sigma_b
        theta = new_cross + sigma_w * theta * _kappa0(c)
        cross = new_cross
        # Diagonal: kappa1(1) = 1/2.
        q1 = sigma_w * q1 / 2.0 + sigma_b
        q2 = sigma_w * q2 / 2.0 + sigma_b
    return theta


@full_precision
def _ntk_block(
    x1: jax.Array,
    x2: jax.Array,
    depth: int,
    sigma_w: jax.Array,
    sigma_b: jax.Array,
    row0: jax.Array | None = None,
) -> jax.Array:
    """Core recursion for one block: ``x1`` (b1, d), ``x2`` (b2, d) -> (b1, b2).

    ``row0``: ``x1`` is rows ``row0 ..`` of ``x2`` itself (`_ntk_from_gram`).
    """
    return _ntk_from_gram(
        x1 @ x2.T,
        jnp.sum(x1 * x1, axis=-1),
        jnp.sum(x2 * x2, axis=-1),
        x1.shape[-1],
        depth,
        sigma_w,
        sigma_b,
        row0,
    )


@full_precision
def fc_ntk_kernel_from_gram(
    gram: jax.Array,
    sq1: jax.Array,
    sq2: jax.Array,
    *,
    dim: int,
    depth: int,
    W_std: float = 1.0,
    b_std: float = 0.0,
    same: bool = False,
) -> jax.Array:
    """`fc_ntk_kernel` as a function of inner products only.

    The FC-NTK is a dot-product kernel: ``K(x1, x2)`` depends on the inputs only
    through ``x1 x2^T``, ``||x1||^2`` and ``||x2||^2``. This form lets callers
    differentiate through the Gram matrix instead of the inputs (DP-KIP's
    exact input-space clipping, `privkernels.dp_kip`).

    Args:
      gram: ``(n1, n2)`` inner products ``x1 @ x2.T``.
      sq1: ``(n1,)`` squared norms of ``x1``; sq2: ``(n2,)`` of ``x2``.
      dim: input dimension ``d`` (the first layer scales by ``1/d``).
      depth, W_std, b_std: as in `fc_ntk_kernel`.
      same: ``gram`` is the Gram matrix of ONE set (``n1 == n2``): its diagonal
        compares each point with itself and is computed at ``c = 1`` exactly
        (module docstring, self-comparison; its derivative in ``c`` is then 0,
        the true one along the diagonal).

    Returns:
      ``(n1, n2)``, equal to ``fc_ntk_kernel(x1, x2, ...)`` for the inputs the
      inner products came from. Shapes and hyperparameters are always checked;
      finiteness only for concrete (non-traced) arrays.
    """
    gram = check_array(gram, "gram", ndim=2)
    sq1 = check_array(sq1, "sq1", ndim=1)
    sq2 = check_array(sq2, "sq2", ndim=1)
    if (sq1.shape[0], sq2.shape[0]) != tuple(gram.shape):
        raise ValueError(
            f"sq1 {tuple(sq1.shape)} and sq2 {tuple(sq2.shape)} must match gram {tuple(gram.shape)}"
        )
    dim = check_int(dim, "dim", minimum=1)
    depth = check_int(depth, "depth", minimum=1)
    if _is_concrete(W_std):
        check_positive(W_std, "W_std")
    if _is_concrete(b_std):
        check_nonnegative(b_std, "b_std")
    gram, sq1, sq2 = jnp.asarray(gram), jnp.asarray(sq1), jnp.asarray(sq2)
    dtype = jnp.result_type(gram.dtype, sq1.dtype, sq2.dtype)
    sigma_w = jnp.asarray(W_std, dtype) ** 2
    sigma_b = jnp.asarray(b_std, dtype) ** 2
    if same and gram.shape[0] != gram.shape[1]:
        raise ValueError(f"same=True needs a square gram, got {tuple(gram.shape)}")
    row0 = jnp.asarray(0) if same else None
    return _ntk_from_gram(gram, sq1, sq2, dim, depth, sigma_w, sigma_b, row0)


@partial(jax.jit, static_argnames=("depth", "chunk_size", "same"))
def _fc_ntk_jit(
    x1: jax.Array,
    x2: jax.Array,
    W_std: jax.Array,
    b_std: jax.Array,
    *,
    depth: int,
    chunk_size: int | None,
    same: bool = False,
) -> jax.Array:
    """``same``: ``x1`` and ``x2`` are one set (``c = 1`` on the diagonal)."""
    dtype = x1.dtype
    sigma_w = jnp.asarray(W_std, dtype) ** 2
    sigma_b = jnp.asarray(b_std, dtype) ** 2
    n1 = x1.shape[0]
    if chunk_size is None or chunk_size >= n1:
        return _ntk_block(x1, x2, depth, sigma_w, sigma_b, jnp.asarray(0) if same else None)
    n_chunks = -(-n1 // chunk_size)
    pad = n_chunks * chunk_size - n1
    # Pad with copies of the first row (a valid input: no 0/0 in the padded rows).
    x1p = jnp.concatenate([x1, jnp.broadcast_to(x1[:1], (pad, x1.shape[1]))], axis=0)
    blocks = x1p.reshape(n_chunks, chunk_size, x1.shape[1])
    starts = jnp.arange(n_chunks) * chunk_size

    def block(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        xb, row0 = args
        return _ntk_block(xb, x2, depth, sigma_w, sigma_b, row0 if same else None)

    out = jax.lax.map(block, (blocks, starts))
    return out.reshape(n_chunks * chunk_size, x2.shape[0])[:n1]


def _prepare(x: Any, name: str) -> jax.Array:
    arr = check_array(x, name)
    if arr.ndim < 2:
        raise ValueError(
            f"{name} must have shape (n, d) or (n, *input_shape), got shape {tuple(arr.shape)}"
        )
    if arr.shape[0] < 1 or math.prod(arr.shape[1:]) < 1:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)})")
    arr = jnp.asarray(arr)
    return arr.reshape(arr.shape[0], -1)


def fc_ntk_kernel(
    x1: Any,
    x2: Any = None,
    *,
    depth: int,
    W_std: float = 1.0,
    b_std: float = 0.0,
    chunk_size: int | None = None,
    backend: Literal["closed_form", "neural_tangents"] = "closed_form",
    same: bool | None = None,
) -> jax.Array:
    """Infinite-width NTK of a ReLU MLP with ``depth`` hidden layers.

    Equals neural-tangents'
    ``stax.serial(*[Dense(., W_std, b_std), Relu()] * depth, Dense(1, W_std, b_std))``
    ``kernel_fn(x1, x2, 'ntk')`` (NTK parameterization; see the module docstring
    for the recursion).

    Args:
      x1: ``(n1, d)`` inputs, or ``(n1, *input_shape)`` which is flattened
        (i.e. a ``stax.Flatten()`` in front of the network).
      x2: ``(n2, d)`` (or ``(n2, *input_shape)``) inputs; None or ``x1`` itself
        (the same object): ``K(x1, x1)``, whose diagonal is computed at ``c = 1``
        exactly (module docstring, self-comparison).
      depth: number of hidden ``Dense + Relu`` layers, ``>= 1``.
      W_std: weight standard deviation ``> 0`` (variance ``W_std**2 / fan_in``).
      b_std: bias standard deviation ``>= 0``.
      chunk_size: if given, rows of ``x1`` are processed ``chunk_size`` at a
        time (last chunk padded; one compilation) to bound memory.
      backend: ``"closed_form"`` (default, pure JAX, jit/vmap/grad-able) or
        ``"neural_tangents"`` (optional reference; needs jax<=0.5.3).
      same: whether row ``i`` of ``x1`` and row ``i`` of ``x2`` are one point
        (``n1 == n2``), so the diagonal is a self-comparison at ``c = 1``. None
        (default): only when ``x2`` is None or ``x1`` itself; True also for another
        object holding the same points (a copy, or ``x1`` and a traced ``x2``
        linearised in ``x1`` alone, where ``dc/dx1 = 0`` on the diagonal).

    Returns:
      ``(n1, n2)`` kernel matrix; dtype is the promoted floating dtype of the
      inputs (float32 by default, float64 under x64). Differentiable w.r.t. both
      inputs with finite gradients (also at ``x1 == x2``).
    """
    depth = check_int(depth, "depth", minimum=1)
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    if _is_concrete(W_std):
        check_positive(W_std, "W_std")
    if _is_concrete(b_std):
        check_nonnegative(b_std, "b_std")
    one_set = x2 is None or x2 is x1
    same = one_set if same is None else bool(same)
    a1 = _prepare(x1, "x1")
    a2 = a1 if one_set else _prepare(x2, "x2")
    if same and a1.shape[0] != a2.shape[0]:
        raise ValueError(f"same=True needs as many rows in x2 as in x1, got {a1.shape[0]} "
                         f"and {a2.shape[0]}")  # fmt: skip
    if a1.shape[1] != a2.shape[1]:
        raise ValueError(
            f"x1 and x2 must have the same feature dimension, got {a1.shape[1]} and {a2.shape[1]}"
        )
    dtype = jnp.result_type(a1.dtype, a2.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    a1 = a1.astype(dtype)
    a2 = a2.astype(dtype)

    if backend == "closed_form":
        return _fc_ntk_jit(a1, a2, W_std, b_std, depth=depth, chunk_size=chunk_size, same=same)
    if backend == "neural_tangents":
        return _fc_ntk_neural_tangents(a1, a2, depth, W_std, b_std, chunk_size)
    raise ValueError(f"backend must be 'closed_form' or 'neural_tangents', got {backend!r}")


def _import_neural_tangents() -> Any:
    """Import neural-tangents lazily, with an actionable error when unavailable."""
    try:
        # optional dependency (not installed by privkernels)
        import neural_tangents  # noqa: PLC0415
    except Exception as err:  # ImportError on jax>=0.6, or anything else at import
        raise ImportError(
            "fc_ntk_kernel(backend='neural_tangents') could not import neural_tangents "
            f"({type(err).__name__}: {err}). The installed JAX is {jax.__version__}; "
            f"{NEURAL_TANGENTS_REQUIREMENT}. Use backend='closed_form' (the default), "
            "which reproduces neural-tangents' kernel to 1e-5 relative."
        ) from err
    return neural_tangents


def _fc_ntk_neural_tangents(
    x1: jax.Array, x2: jax.Array, depth: int, W_std: float, b_std: float, chunk_size: int | None
) -> jax.Array:
    nt = _import_neural_tangents()
    stax = nt.stax
    b = None if float(b_std) == 0.0 else float(b_std)
    layers = []
    for _ in range(depth):
        layers += [stax.Dense(512, W_std=float(W_std), b_std=b), stax.Relu()]
    layers.append(stax.Dense(1, W_std=float(W_std), b_std=b))
    _, _, kernel_fn = stax.serial(*layers)
    step = x1.shape[0] if chunk_size is None else chunk_size
    rows = [np.asarray(kernel_fn(x1[i : i + step], x2, "ntk")) for i in range(0, x1.shape[0], step)]
    return jnp.asarray(np.concatenate(rows, axis=0), dtype=x1.dtype)
