"""The one ridge solve of privkernels: ``(K + s I) X = Y`` by Cholesky, one fallback.

Kernel methods solve ``(K + s I) X = Y`` with ``K`` symmetric positive
semi-definite (PSD). In float32 a Gram matrix of many points can be
numerically singular, and ``jnp.linalg.cholesky`` then returns NaNs instead of
raising. `ridge_cholesky` handles that deterministically (the jitter
policy):

* factorise ``K + s I`` (``jnp.linalg.cholesky`` symmetrises its input);
* if that factor is not finite and a ``fallback`` shift ``f > 0`` is given,
  factorise ``K + (s + f) I`` instead, and report it (``ok=False``,
  ``shift = s + f``), so callers can use the shift actually applied.

The choice is a ``lax.cond`` (differentiable, runs under ``jit`` and ``vmap``)
that looks only at ``K``: whatever privacy cost ``K`` carries, the policy adds
none of its own. DP-KIP (relative ridge ``s = reg tr(K)/m``, fallback
``FALLBACK_JITTER tr(K)/m``) and DP NTK regression (absolute ``reg``, no
fallback) both solve through here; `psd_solve` is the validated public
entry point.

Precision: the factorisation and the triangular solves run at full float32
(``precision=HIGHEST`` for every matmul around them, see
`privkernels.precision`); for float64 pass float64 arrays inside
``jax.enable_x64()``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from privkernels._validation import check_array, check_nonnegative
from privkernels.precision import full_precision

__all__ = ["RidgeFactor", "PSDSolution", "ridge_cholesky", "ridge_solve", "psd_solve"]


class RidgeFactor(NamedTuple):
    """Lower Cholesky factor ``L`` of ``K + shift I`` and whether the first try worked."""

    factor: jax.Array  # (n, n)
    shift: jax.Array  # () diagonal shift actually applied (s, or s + fallback)
    ok: jax.Array  # () bool: True when no fallback was needed


class PSDSolution(NamedTuple):
    """``X = (K + shift I)^{-1} Y`` and the jitter policy's outcome."""

    x: jax.Array
    shift: jax.Array
    ok: jax.Array


@full_precision
def ridge_cholesky(k: jax.Array, shift: Any, *, fallback: Any = None) -> RidgeFactor:
    """Cholesky factor of ``k + shift I`` with at most one fallback shift (module docstring).

    Args:
      k: ``(n, n)`` symmetric PSD matrix (traced or concrete; no validation).
      shift: diagonal ridge ``s >= 0`` (scalar, may be traced).
      fallback: extra diagonal used when the first factor is not finite, or None.

    Returns:
      `RidgeFactor`.
    """
    eye = jnp.eye(k.shape[0], dtype=k.dtype)
    mat = k + shift * eye
    first = jnp.linalg.cholesky(mat)
    ok = jnp.all(jnp.isfinite(first))
    if fallback is None:
        return RidgeFactor(first, jnp.asarray(shift, k.dtype), ok)
    factor = jax.lax.cond(ok, lambda: first, lambda: jnp.linalg.cholesky(mat + fallback * eye))
    used = jnp.where(ok, jnp.asarray(shift, k.dtype), jnp.asarray(shift + fallback, k.dtype))
    return RidgeFactor(factor, used, ok)


@full_precision
def ridge_solve(k: jax.Array, y: jax.Array, shift: Any, *, fallback: Any = None) -> jax.Array:
    """``(k + shift I)^{-1} y`` through `ridge_cholesky` (jit-able, no validation)."""
    rf = ridge_cholesky(k, shift, fallback=fallback)
    return jax.scipy.linalg.cho_solve((rf.factor, True), y)


@jax.jit
def _psd_solve(k: jax.Array, y: jax.Array, shift: jax.Array, fallback: jax.Array) -> PSDSolution:
    rf = ridge_cholesky(k, shift, fallback=fallback)
    return PSDSolution(jax.scipy.linalg.cho_solve((rf.factor, True), y), rf.shift, rf.ok)


def psd_solve(K: Any, Y: Any, *, reg: float = 0.0, fallback: float | None = None) -> PSDSolution:
    """Validated ``(K + reg I)^{-1} Y`` for a symmetric PSD ``K`` (the jitter policy above).

    Args:
      K: ``(n, n)`` symmetric PSD, finite.
      Y: ``(n,)`` or ``(n, c)`` right-hand side.
      reg: ridge ``>= 0``.
      fallback: extra diagonal for a numerically singular ``K + reg I``; default
        ``eps(dtype) * mean(|diag K|)`` (at least ``eps``), 0 to disable.

    Returns:
      `PSDSolution` ``(x, shift, ok)``; ``x`` is NaN only when even the
      fallback factor failed.
    """
    kmat = jnp.asarray(check_array(K, "K", ndim=2))
    if kmat.shape[0] != kmat.shape[1]:
        raise ValueError(f"K must be a square matrix, got shape {tuple(kmat.shape)}")
    if not jnp.issubdtype(kmat.dtype, jnp.floating):
        kmat = kmat.astype(jnp.float32)
    y = jnp.asarray(check_array(Y, "Y", ndim=(1, 2)), kmat.dtype)
    if y.shape[0] != kmat.shape[0]:
        raise ValueError(f"Y has {y.shape[0]} rows but K is {kmat.shape[0]} x {kmat.shape[0]}")
    reg = check_nonnegative(reg, "reg")
    eps = float(jnp.finfo(kmat.dtype).eps)
    if fallback is None:
        scale = float(jnp.mean(jnp.abs(jnp.diagonal(kmat))))
        fb = eps * max(scale, 1.0)
    else:
        fb = check_nonnegative(fallback, "fallback")
    return _psd_solve(kmat, y, jnp.asarray(reg, kmat.dtype), jnp.asarray(fb, kmat.dtype))
