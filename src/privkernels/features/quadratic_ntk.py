"""Discrete quadratic-activation NTK (Gu et al., "DP NTK regression", Def. 3.5).

For the two-layer network ``f(x) = sum_r a_r <w_r, x>^2`` with ``m`` fixed
neurons ``w_r ~ N(0, sigma^2 I_d)`` the discrete NTK is

    H_ij = (1/m) sum_r < <w_r, x_i> x_i, <w_r, x_j> x_j >
         = (1/m) sum_r <w_r, x_i> <w_r, x_j> <x_i, x_j>,

i.e. ``H = ((X W^T)(Z W^T)^T / m) * (X Z^T)`` (elementwise product), the Gram
matrix of the features ``phi(x) = vec(<w_r, x> x)_r / sqrt(m)``. It is PSD
(Lemma C.1; Schur product of two PSD Gram matrices). The paper's experiments
(Sec. 6.1) use ``m = 256`` and ``sigma = 1``.

The weights are data-independent: draw them with `random_ntk_weights`
from a key that is not used for any noise.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from privkernels._validation import check_array, check_int, check_key, check_positive
from privkernels.precision import full_precision

__all__ = [
    "quadratic_ntk_kernel",
    "quadratic_ntk_features",
    "random_ntk_weights",
    "compiled_quadratic_ntk_kernel",
]


def random_ntk_weights(
    key: jax.Array, m: int, d: int, *, sigma: float = 1.0, dtype: Any = jnp.float32
) -> jax.Array:
    """Draw the ``m`` fixed neurons ``w_r ~ N(0, sigma^2 I_d)`` of Def. 3.5.

    Args:
      key: ``jax.random.key`` (data-independent randomness).
      m: number of neurons (paper: 256).
      d: input dimension.
      sigma: standard deviation of each weight entry (paper: 1).
      dtype: floating dtype of the result.

    Returns:
      ``(m, d)`` array.
    """
    key = check_key(key)
    m = check_int(m, "m", minimum=1)
    d = check_int(d, "d", minimum=1)
    sigma = check_positive(sigma, "sigma")
    return sigma * jax.random.normal(key, (m, d), dtype=dtype)


@full_precision
def _block(x1: jax.Array, x2: jax.Array, w: jax.Array) -> jax.Array:
    p1 = x1 @ w.T  # (b1, m)
    p2 = x2 @ w.T  # (n2, m)
    return (p1 @ p2.T) / w.shape[0] * (x1 @ x2.T)


@partial(jax.jit, static_argnames=("chunk_size",))
def compiled_quadratic_ntk_kernel(
    x1: jax.Array, x2: jax.Array, w: jax.Array, *, chunk_size: int | None
) -> jax.Array:
    """`quadratic_ntk_kernel` without its argument checks: ``x1``, ``x2``, ``w`` already
    2-D arrays of one floating dtype, ``chunk_size`` ``None`` or positive. For callers
    that trace it themselves (e.g. per device inside ``shard_map``)."""
    n1 = x1.shape[0]
    if chunk_size is None or chunk_size >= n1:
        return _block(x1, x2, w)
    n_chunks = -(-n1 // chunk_size)
    pad = n_chunks * chunk_size - n1
    x1p = jnp.concatenate([x1, jnp.zeros((pad, x1.shape[1]), x1.dtype)], axis=0)
    out = jax.lax.map(lambda xb: _block(xb, x2, w), x1p.reshape(n_chunks, chunk_size, x1.shape[1]))
    return out.reshape(n_chunks * chunk_size, x2.shape[0])[:n1]


def _prepare(x1: Any, x2: Any, w: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    a1 = check_array(x1, "x1", ndim=2)
    a2 = check_array(x2, "x2", ndim=2)
    aw = check_array(w, "w", ndim=2)
    for name, arr in (("x1", a1), ("x2", a2), ("w", aw)):
        if arr.size == 0:
            raise ValueError(f"{name} is empty (shape {tuple(arr.shape)})")
    if a1.shape[1] != a2.shape[1]:
        raise ValueError(
            f"x1 and x2 must have the same dimension d, got {a1.shape[1]} and {a2.shape[1]}"
        )
    if aw.shape[1] != a1.shape[1]:
        raise ValueError(f"w must have shape (m, d) with d = {a1.shape[1]}, got {tuple(aw.shape)}")
    dtype = jnp.result_type(a1.dtype, a2.dtype, aw.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    return (
        jnp.asarray(a1).astype(dtype),
        jnp.asarray(a2).astype(dtype),
        jnp.asarray(aw).astype(dtype),
    )


def quadratic_ntk_kernel(x1: Any, x2: Any, w: Any, *, chunk_size: int | None = None) -> jax.Array:
    """Discrete quadratic NTK ``H(x1, x2)`` of Gu et al. Def. 3.5.

    ``H = ((x1 w^T)(x2 w^T)^T / m) * (x1 x2^T)``.

    Args:
      x1: ``(n1, d)`` inputs.
      x2: ``(n2, d)`` inputs.
      w: ``(m, d)`` fixed neurons (see `random_ntk_weights`).
      chunk_size: process rows of ``x1`` this many at a time (last chunk
        padded; compiled once).

    Returns:
      ``(n1, n2)`` kernel in the promoted floating dtype; jit-compiled and
      differentiable w.r.t. all arguments.
    """
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    a1, a2, aw = _prepare(x1, x2, w)
    return compiled_quadratic_ntk_kernel(a1, a2, aw, chunk_size=chunk_size)


def quadratic_ntk_features(x: Any, w: Any) -> jax.Array:
    """Explicit features ``phi(x) = vec(<w_r, x> x)_{r<m} / sqrt(m)``.

    ``quadratic_ntk_features(x1, w) @ quadratic_ntk_features(x2, w).T`` equals
    `quadratic_ntk_kernel`. Memory is ``n * m * d``: meant for small
    problems and checks.

    Args:
      x: ``(n, d)`` inputs.
      w: ``(m, d)`` fixed neurons.

    Returns:
      ``(n, m * d)`` features, row-major over ``(r, d)``.
    """
    a, _, aw = _prepare(x, x, w)
    proj = a @ aw.T  # (n, m)
    phi = proj[:, :, None] * a[:, None, :] / math.sqrt(aw.shape[0])
    return phi.reshape(a.shape[0], -1)
