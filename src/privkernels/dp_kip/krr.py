"""Kernel ridge regression on the support set (Vinaroz & Park, eq. 3 / 6).

The loss of one target example ``(x_i, y_i)`` is::

    loss_i(X_s) = || y_i - K(x_i, X_s) (K_ss + lambda I)^{-1} Y_s ||^2,
    lambda      = reg * tr(K_ss) / m                  (paper Sec. 3.2)

``reg`` here is the *relative* ridge of the paper (``relative_reg`` in
`privkernels.dp_kip.fit`). Ridge solves go through
`privkernels.linalg.ridge_cholesky` with the fallback shift
``FALLBACK_JITTER * tr(K_ss) / m`` for a numerically singular ``K_ss`` (it
only depends on the support set, which is already private). For
linear-feature kernels the solve runs in the smaller of the support size ``m``
and the feature dimension ``f`` (push-through identity).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from privkernels.dp_kip.kernels import KernelSpec
from privkernels.linalg import ridge_cholesky
from privkernels.precision import full_precision

__all__ = [
    "FALLBACK_JITTER",
    "ridge_factor",
    "krr_adjoint_terms",
    "krr_predict_repr",
    "support_repr",
    "target_repr",
    "encode_labels",
    "krr_loss",
    "loss_one",
]

#: Relative diagonal shift used when the first Cholesky factor is not finite.
FALLBACK_JITTER = 1e-5


@full_precision
def ridge_factor(k_ss: jax.Array, ridge: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cholesky of ``K_ss + rho * tr(K_ss)/m I`` (paper eq. 3 ridge) with the fallback policy.

    Returns ``(chol (m, m) lower, scale = tr(K_ss)/m, rho)``: ``rho`` is ``ridge``,
    or ``ridge + FALLBACK_JITTER`` when the first factorisation was not finite.
    """
    m = k_ss.shape[0]
    k_ss = 0.5 * (k_ss + k_ss.T)
    scale = jnp.trace(k_ss) / m
    rf = ridge_cholesky(k_ss, ridge * scale, fallback=FALLBACK_JITTER * scale)
    rho = jnp.where(rf.ok, ridge, ridge + FALLBACK_JITTER)
    return rf.factor, scale, rho


@full_precision
def _ridge_solve(k_ss: jax.Array, y_s: jax.Array, ridge: float) -> jax.Array:
    """``(K_ss + ridge * tr(K_ss)/m I)^{-1} Y_s``; ``(m, m), (m, c) -> (m, c)``."""
    chol, _, _ = ridge_factor(k_ss, ridge)
    return jax.scipy.linalg.cho_solve((chol, True), y_s)


@full_precision
def krr_adjoint_terms(
    k_ss: jax.Array, k_t: jax.Array, y_s: jax.Array, y_t: jax.Array, ridge: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Per-target KRR quantities shared by the explicit-adjoint gradients.

    ``A = K_ss + rho tr(K_ss)/m I`` (`ridge_factor`), ``alpha = A^{-1} Y_s``.
    Returns ``(r (b, c), u (b, m), v (b, m), rho)`` with ``r_i = alpha^T k_i - y_i``,
    ``u_i = A^{-1} k_i``, ``v_i = alpha r_i`` (see
    `privkernels.dp_kip.grads.example_grads`).
    """
    chol, _, rho = ridge_factor(k_ss, ridge)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y_s)  # (m, c)
    r = k_t @ alpha - y_t  # (b, c)
    u = jax.scipy.linalg.cho_solve((chol, True), k_t.T).T  # (b, m), A symmetric
    v = r @ alpha.T  # (b, m)
    return r, u, v, rho


@full_precision
def krr_predict_repr(
    spec_kind: str,
    kernel_fn: Callable | None,
    s_repr: jax.Array,
    y_s: jax.Array,
    t_repr: jax.Array,
    ridge: float,
) -> jax.Array:
    """KRR predictions ``(b, c)`` for targets from the support representation (eq. 3).

    ``kind == "kernel"``: representations are inputs; ``"features"``: rows of
    ``Phi``. ``ridge = reg + jitter`` (relative to ``tr(K_ss)/m``).
    """
    if spec_kind == "kernel":
        assert kernel_fn is not None
        alpha = _ridge_solve(kernel_fn(s_repr, s_repr), y_s, ridge)
        return kernel_fn(t_repr, s_repr) @ alpha
    m, f = s_repr.shape
    if f < m:  # solve in feature space (Woodbury / push-through)
        scale = jnp.sum(s_repr * s_repr) / m
        gram = s_repr.T @ s_repr
        gram = 0.5 * (gram + gram.T)
        rf = ridge_cholesky(gram, ridge * scale, fallback=FALLBACK_JITTER * scale)
        w = jax.scipy.linalg.cho_solve((rf.factor, True), s_repr.T @ y_s)
        return t_repr @ w
    alpha = _ridge_solve(s_repr @ s_repr.T, y_s, ridge)
    return (t_repr @ s_repr.T) @ alpha


def support_repr(spec: KernelSpec, x: jax.Array) -> jax.Array:
    """What the kernel sees of ``x (b, *input_shape)``: flat inputs or features ``(b, f)``."""
    if spec.kind == "kernel":
        return x.reshape(x.shape[0], -1)
    assert spec.feature_fn is not None
    return spec.feature_fn(x)


def repr_width(spec: KernelSpec, input_shape: tuple[int, ...]) -> int:
    """``f``, the width of `support_repr` for rows of ``input_shape`` (traced, nothing runs)."""
    probe = jax.ShapeDtypeStruct((1, *input_shape), jnp.float32)
    return math.prod(jax.eval_shape(lambda xb: support_repr(spec, xb), probe).shape[1:])


def target_repr(spec: KernelSpec, x: jax.Array, chunk_size: int) -> jax.Array:
    """`support_repr` of many rows, ``(n, *input_shape) -> (n, f)`` float32 on the device.

    Rows are featurised ``chunk_size`` at a time and written into one preallocated
    ``(n, f)`` buffer, donated at every write, so the peak memory is the result plus a
    chunk (no host copy, no concatenation). The last chunk ends at row ``n`` and
    overlaps the one before: the feature map is row-wise, so an overlapped row is
    written twice with the same value.
    """
    n = int(x.shape[0])
    c = max(1, min(int(chunk_size), n))
    f = repr_width(spec, tuple(x.shape[1:]))
    out = jnp.zeros((n, f), jnp.float32)
    for start in [*range(0, n - c, c), n - c]:
        rows = support_repr(spec, jnp.asarray(x[start : start + c]))
        out = _write_rows(out, rows.reshape(c, f).astype(jnp.float32), start)
    return out


@partial(jax.jit, donate_argnums=0)
def _write_rows(buf: jax.Array, rows: jax.Array, start: jax.Array) -> jax.Array:
    """``buf`` with ``rows (c, f)`` written at row ``start`` (``buf`` is donated)."""
    return jax.lax.dynamic_update_slice(buf, rows, (start, 0))


def encode_labels(y: jax.Array, n_classes: int, dtype: Any = jnp.float32) -> jax.Array:
    """Centred one-hot ``onehot(y) - 1/c``: ``(n,) int -> (n, c)``."""
    return jax.nn.one_hot(y, n_classes, dtype=dtype) - 1.0 / n_classes


def krr_loss(
    spec: KernelSpec,
    x_s: jax.Array,
    y_s: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    reg: float = 1e-6,
    jitter: float = 0.0,
) -> jax.Array:
    """Per-example KRR losses ``(b,)`` (paper eq. 3/6).

    Args:
      x_s: ``(m, *input_shape)`` support inputs; y_s: ``(m, c)`` support targets.
      x_t: ``(b, *input_shape)`` targets; y_t: ``(b, c)`` target label vectors.
      reg, jitter: relative ridge (``lambda = (reg + jitter) tr(K_ss)/m``).
    """
    pred = krr_predict_repr(
        spec.kind,
        spec.kernel_fn,
        support_repr(spec, x_s),
        y_s,
        support_repr(spec, x_t),
        reg + jitter,
    )
    return jnp.sum((pred - y_t) ** 2, axis=-1)


def loss_one(
    params: dict[str, jax.Array],
    y_s_fixed: jax.Array,
    t_i: jax.Array,
    y_i: jax.Array,
    *,
    spec: KernelSpec,
    space: str,
    ridge: float,
) -> jax.Array:
    """Loss of one target (representation ``t_i``) as a function of the support params."""
    if space == "feature":
        s_repr = params["phi"]
    else:
        s_repr = support_repr(spec, params["x"])
    y_s = params.get("y", y_s_fixed)
    pred = krr_predict_repr(spec.kind, spec.kernel_fn, s_repr, y_s, t_i[None], ridge)[0]
    return jnp.sum((pred - y_i) ** 2)


def make_predictor(spec: KernelSpec, ridge: float) -> Callable[..., jax.Array]:
    """Jitted ``(x_s, y_s, x_batch) -> (b, c)`` KRR predictions (compiled once per shape)."""

    @partial(jax.jit)
    def run(x_s: jax.Array, y_s: jax.Array, xb: jax.Array) -> jax.Array:
        return krr_predict_repr(
            spec.kind, spec.kernel_fn, support_repr(spec, x_s), y_s, support_repr(spec, xb), ridge
        )

    return run
