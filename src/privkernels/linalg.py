"""Shared dense linear algebra: PSD solves by Cholesky with a documented jitter policy.

Kernel methods solve ``(K + reg I) X = Y`` with ``K`` symmetric positive
semi-definite (PSD). In float32, Gram matrices of many examples are often
numerically singular, and ``jnp.linalg.cholesky`` then returns NaNs instead of
raising. :func:`psd_solve` handles that deterministically:

Jitter policy
-------------
With ``s = mean(|diag(K)|)`` (``1`` when that is 0) and ``e = jitter`` (default:
the machine epsilon of ``K``'s dtype, ``1.19e-7`` in float32, ``2.2e-16`` in
float64):

* attempt 0 factorises ``K + reg I``;
* attempt ``t = 1 .. max_tries`` factorises ``K + (reg + e * growth**t * s) I``
  (with the default ``growth = 10``: ``10 e s``, ``100 e s``, ...);

the first attempt whose factor is finite with a positive diagonal is used, and
the extra diagonal ``e * growth**t * s`` (0 when attempt 0 succeeds) is
returned next to the solution, so callers can report it. The loop is a
``lax.while_loop``: it runs under ``jit``, costs one Cholesky when the matrix
is well conditioned, and never inspects anything but ``K`` (no data-dependent
privacy cost beyond what ``K`` already carries -- callers who solve with a
private ``K`` must treat the jitter as data dependent if they release it).

If every attempt fails the solution is all-NaN and ``ok`` is False
(:func:`psd_solve` never raises under ``jit``; check ``ok`` on the host).

Precision: float32 by default. For a float64 solve, pass float64 arrays inside
``jax.enable_x64()`` (or with ``jax_enable_x64`` set); the dtype of ``K`` and
``Y`` (promoted) is kept.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_array, check_int, check_nonnegative, check_positive

__all__ = ["PSDSolution", "CholeskyResult", "psd_cholesky", "psd_solve"]

_DEFAULT_MAX_TRIES = 8
_DEFAULT_GROWTH = 10.0


class CholeskyResult(NamedTuple):
    """Lower factor ``L`` (``L L^T = K + (reg + jitter) I``), the extra ``jitter`` and success flag."""

    factor: jax.Array  # (n, n)
    jitter: jax.Array  # () absolute diagonal shift added beyond reg
    ok: jax.Array  # () bool
    tries: jax.Array  # () int32, 0 = no jitter needed


class PSDSolution(NamedTuple):
    """``X = (K + (reg + jitter) I)^{-1} Y`` plus the jitter policy's outcome."""

    x: jax.Array  # shape of Y
    jitter: jax.Array  # () absolute diagonal shift added beyond reg
    ok: jax.Array  # () bool
    tries: jax.Array  # () int32


def _good(factor: jax.Array) -> jax.Array:
    d = jnp.diagonal(factor)
    return jnp.all(jnp.isfinite(factor)) & jnp.all(d > 0)


@partial(jax.jit, static_argnames=("max_tries",))
def _cholesky_impl(
    k: jax.Array, reg: jax.Array, jitter: jax.Array, growth: jax.Array, *, max_tries: int
) -> CholeskyResult:
    n = k.shape[0]
    dt = k.dtype
    sym = 0.5 * (k + k.T)
    diag_idx = jnp.arange(n)
    scale = jnp.mean(jnp.abs(jnp.diagonal(sym)))
    scale = jnp.where(scale > 0, scale, jnp.ones((), dt))

    def factor(shift: jax.Array) -> jax.Array:
        return jnp.linalg.cholesky(sym.at[diag_idx, diag_idx].add(reg + shift))

    l0 = factor(jnp.zeros((), dt))
    ok0 = _good(l0)

    def cond(state: tuple[jax.Array, jax.Array, jax.Array, jax.Array]) -> jax.Array:
        t, _, _, ok = state
        return jnp.logical_and(jnp.logical_not(ok), t < max_tries)

    def body(
        state: tuple[jax.Array, jax.Array, jax.Array, jax.Array],
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        t, _, _, _ = state
        t = t + 1
        shift = jitter * growth ** t.astype(dt) * scale
        lt = factor(shift)
        return t, lt, shift, _good(lt)

    t, lfac, shift, ok = jax.lax.while_loop(
        cond, body, (jnp.zeros((), jnp.int32), l0, jnp.zeros((), dt), ok0)
    )
    return CholeskyResult(lfac, shift, ok, t)


def _prepare(
    K: Any, reg: Any, jitter: float | None, max_tries: int, growth: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, int]:
    arr = check_array(K, "K", ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise ValueError(f"K must be a square matrix, got shape {tuple(arr.shape)}")
    kmat = jnp.asarray(arr)
    if not jnp.issubdtype(kmat.dtype, jnp.floating):
        kmat = kmat.astype(jnp.float32)
    dt = kmat.dtype
    if not isinstance(reg, jax.core.Tracer):
        reg = check_nonnegative(reg, "reg")
    eps = float(np.finfo(np.dtype(dt)).eps)
    jit_rel = eps if jitter is None else check_positive(jitter, "jitter")
    tries = check_int(max_tries, "max_tries", minimum=0)
    grow = check_positive(growth, "growth")
    if grow <= 1.0:
        raise ValueError(f"growth must be > 1, got {growth}")
    return (
        kmat,
        jnp.asarray(reg, dt),
        jnp.asarray(jit_rel, dt),
        jnp.asarray(grow, dt),
        tries,
    )


def psd_cholesky(
    K: Any,
    *,
    reg: float | jax.Array = 0.0,
    jitter: float | None = None,
    max_tries: int = _DEFAULT_MAX_TRIES,
    growth: float = _DEFAULT_GROWTH,
) -> CholeskyResult:
    """Cholesky factor of ``(K + K^T)/2 + (reg + j) I`` with the module's jitter policy.

    Args:
        K: ``(n, n)`` symmetric PSD matrix (float32, or float64 under x64).
        reg: ridge added on the diagonal in every attempt (>= 0, may be traced).
        jitter: relative jitter ``e`` (default: machine epsilon of ``K``'s dtype).
        max_tries: number of jittered retries after the plain attempt.
        growth: geometric growth factor of the jitter (> 1).

    Returns:
        :class:`CholeskyResult` ``(factor (n, n), jitter (), ok (), tries ())``.
    """
    kmat, reg_a, jit_a, grow_a, tries = _prepare(K, reg, jitter, max_tries, growth)
    return _cholesky_impl(kmat, reg_a, jit_a, grow_a, max_tries=tries)


@partial(jax.jit, static_argnames=("max_tries",))
def _solve_impl(
    k: jax.Array,
    y: jax.Array,
    reg: jax.Array,
    jitter: jax.Array,
    growth: jax.Array,
    *,
    max_tries: int,
) -> PSDSolution:
    res = _cholesky_impl(k, reg, jitter, growth, max_tries=max_tries)
    x = jax.scipy.linalg.cho_solve((res.factor, True), y)
    x = jnp.where(res.ok, x, jnp.full_like(x, jnp.nan))
    return PSDSolution(x, res.jitter, res.ok, res.tries)


def psd_solve(
    K: Any,
    Y: Any,
    *,
    reg: float | jax.Array = 0.0,
    jitter: float | None = None,
    max_tries: int = _DEFAULT_MAX_TRIES,
    growth: float = _DEFAULT_GROWTH,
) -> PSDSolution:
    """Solve ``(K + reg I) X = Y`` for PSD ``K`` by Cholesky, adding jitter on failure.

    See the module docstring for the jitter policy: attempt ``t`` adds
    ``jitter * growth**t * mean(|diag K|)`` (``t = 1..max_tries``) on top of
    ``reg`` until the factor is finite with a positive diagonal.

    Args:
        K: ``(n, n)`` symmetric PSD matrix (only ``(K + K^T)/2`` is used).
        Y: ``(n,)`` or ``(n, c)`` right-hand side.
        reg: ridge ``>= 0`` (Python float or traced scalar).
        jitter: relative jitter ``e``; default machine epsilon of the dtype.
        max_tries: jittered retries after the plain attempt (0 = no jitter ever).
        growth: factor between consecutive jitters (> 1).

    Returns:
        :class:`PSDSolution` ``(x, jitter, ok, tries)``: ``x`` has ``Y``'s shape and
        the promoted dtype of ``K`` and ``Y``; ``jitter`` is the absolute shift added
        beyond ``reg`` (0 if none was needed); ``x`` is NaN when ``ok`` is False.
        Works under ``jax.jit`` (``max_tries`` / ``growth`` / ``jitter`` static Python numbers).
    """
    kmat, reg_a, jit_a, grow_a, tries = _prepare(K, reg, jitter, max_tries, growth)
    yarr = check_array(Y, "Y", ndim=(1, 2))
    if yarr.shape[0] != kmat.shape[0]:
        raise ValueError(f"Y has {yarr.shape[0]} rows but K is {kmat.shape[0]}x{kmat.shape[1]}")
    dt = jnp.result_type(kmat.dtype, jnp.asarray(yarr).dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = kmat.dtype
    return _solve_impl(
        kmat.astype(dt),
        jnp.asarray(yarr, dt),
        reg_a.astype(dt),
        jit_a.astype(dt),
        grow_a.astype(dt),
        max_tries=tries,
    )
