"""Noise mechanisms: Gaussian, truncated Laplace, Gaussian sampling (PSD).

Every function validates its inputs *before* drawing any noise, takes an
explicit ``jax.random`` key (typed ``jax.random.key`` or raw ``uint32[2]``)
and is deterministic given the key.

* `gaussian_mechanism` -- ``value + N(0, (sigma * Delta_2)^2 I)``; with
  ``sigma = gaussian_sigma(eps, delta)`` it is (eps, delta)-DP for L2
  sensitivity ``Delta_2`` (Balle & Wang 2018).
* `truncated_laplace` / `truncated_laplace_bound` -- the truncated
  Laplace mechanism TLap(Delta, eps, delta) of Geng, Ding, Guo & Kumar
  (AISTATS 2020, "Tight analysis of privacy and utility tradeoff in approximate
  differential privacy"), as restated by Gu et al. (DP NTK regression,
  Sec. 3.2, Lemma 3.2): density proportional to ``exp(-|z| / lambda)``,
  ``lambda = Delta / eps``, on ``[-B, B]`` with
  ``B = (Delta / eps) * log(1 + (e^eps - 1) / (2 delta))``.
* `gaussian_sampling_mechanism` -- Gu et al. Alg. 1 (from Gu, Song, Yang
  & Zhou 2024): ``K~ = (1/k) sum_{j<k} g_j g_j^T``, ``g_j ~ N(0, K)`` i.i.d.,
  a PSD private estimate of the PSD matrix ``K`` (one Cholesky factorization;
  exact ``eigh`` fallback for singular ``K``; clearly indefinite ``K`` is
  rejected). Its (eps, delta) guarantee is conditional (Gu et al. Def.
  5.1-5.2, Lemma 5.4); the caller accounts it. This is the only
  implementation of Alg. 1 in privkernels (DP NTK regression calls it).

``*_record`` helpers build the matching
`MechanismRecord`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import (
    check_array,
    check_delta,
    check_epsilon,
    check_int,
    check_nonnegative,
    check_positive,
)
from privkernels.precision import full_precision
from privkernels.privacy.accounting import tlap_bound
from privkernels.privacy.keys import mechanism_key, release_key
from privkernels.privacy.report import MechanismRecord

__all__ = [
    "gaussian_mechanism",
    "truncated_laplace",
    "truncated_laplace_bound",
    "truncated_laplace_cdf",
    "gaussian_sampling_mechanism",
    "gaussian_record",
    "truncated_laplace_record",
    "gaussian_sampling_record",
]


def _float_dtype(dtype: Any, name: str = "dtype") -> Any:
    dt = jnp.dtype(dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"{name} must be a floating dtype, got {dt}")
    return dt


def _release_dtype(dtype: Any) -> Any:
    """Floating dtypes are kept (float64 -> float32 unless x64 is enabled);
    integer/bool inputs are released as float32."""
    if jnp.issubdtype(dtype, jnp.floating):
        return jax.dtypes.canonicalize_dtype(dtype)
    return jnp.dtype(jnp.float32)


# --------------------------------------------------------------------------- #
# Gaussian mechanism
# --------------------------------------------------------------------------- #


def gaussian_mechanism(
    key: jax.Array, value: Any, *, sensitivity: float, sigma: float, host_float64: bool = False
) -> Any:
    """Release ``value + N(0, (sigma * sensitivity)^2 I)``.

    The normals are drawn from ``mechanism_key(key, "gaussian", sigma,
    sensitivity, shape, dtype)`` (`privkernels.privacy.keys`): one key at
    two noise scales gives independent noise.

    Args:
      key: JAX PRNG key (one draw of ``value.size`` normals).
      value: array-like of any shape (scalar allowed), finite. Floating arrays
        keep their dtype (float64 becomes float32 unless x64 is enabled);
        integer/bool arrays are released as float32.
      sensitivity: L2 sensitivity ``Delta_2`` of ``value`` under the
        neighbouring relation being claimed (> 0).
      sigma: noise multiplier (std per unit sensitivity, > 0), e.g.
        `gaussian_sigma`.
      host_float64: add the noise to ``value`` in float64 on the host and return a
        float64 NumPy array (the noise itself is the float32 draw a float32 release of
        the same key makes). For sums whose magnitude grows with ``n``: a float32 copy
        of the value would round each entry by up to its spacing, which at a million
        rows is no longer small against the sensitivity. Under a transformation of the
        key (``jax.vmap`` in `privkernels.audit`) the sum stays float32 (traceable).

    Returns:
      Array of ``value``'s shape: the noisy release.
    """
    key, _ = release_key(key)  # warns on a key made from a small int
    sens = check_positive(sensitivity, "sensitivity")
    sig = check_positive(sigma, "sigma")
    arr = check_array(value, "value", min_rows=1)
    # the host path draws the float32 noise a float32 release of the key draws
    dtype = jnp.dtype(jnp.float32) if host_float64 else _release_dtype(arr.dtype)
    std = sig * sens
    noise_key = mechanism_key(
        key, "gaussian", sigma=sig, sensitivity=sens, shape=tuple(arr.shape), dtype=str(dtype)
    )
    noise = jnp.asarray(std, dtype) * jax.random.normal(noise_key, arr.shape, dtype)
    if host_float64 and not isinstance(noise, jax.core.Tracer):  # traced (an audit's vmap
        return np.asarray(arr, np.float64) + np.asarray(noise, np.float64)  # of the key): f32
    return jnp.asarray(arr, dtype) + noise


def gaussian_record(
    released: str,
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    sigma: float,
    accountant: str = "analytic-gaussian",
    **params: Any,
) -> MechanismRecord:
    """`MechanismRecord` of one `gaussian_mechanism` release."""
    return MechanismRecord.make(
        "gaussian",
        released,
        check_epsilon(epsilon),
        check_delta(delta),
        sensitivity=check_positive(sensitivity, "sensitivity"),
        accountant=accountant,
        sigma=check_positive(sigma, "sigma"),
        noise_std=float(sigma) * float(sensitivity),
        **params,
    )


# --------------------------------------------------------------------------- #
# truncated Laplace
# --------------------------------------------------------------------------- #


def truncated_laplace_bound(sensitivity: float, epsilon: float, delta: float) -> float:
    """Support half-width ``B`` of TLap(Delta, eps, delta).

    ``B = (Delta / eps) * log(1 + (e^eps - 1) / (2 delta))`` (Geng et al.
    2020; Gu et al., DP NTK regression, Sec. 3.2). Computed with
    ``expm1``/``log1p`` in float64.

    Args:
      sensitivity: Delta > 0 (L1 sensitivity for vector queries, see
        `truncated_laplace`).
      epsilon: > 0, finite.
      delta: in (0, 1).

    Returns:
      B (float): every sample satisfies ``|z| <= B``.
    """
    sens = check_positive(sensitivity, "sensitivity")
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    return tlap_bound(sens, eps, d)


def truncated_laplace_cdf(
    z: Any, *, sensitivity: float, epsilon: float, delta: float
) -> np.ndarray:
    """Exact CDF of TLap(Delta, eps, delta) (NumPy, float64), for tests/audits.

    With ``lambda = Delta/eps``, ``c = 1 - exp(-B/lambda)``:
    ``F(z) = 1/2 + sign(z) (1 - exp(-|z|/lambda)) / (2c)`` on ``[-B, B]``.
    """
    sens = check_positive(sensitivity, "sensitivity")
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    lam = sens / eps
    bound = tlap_bound(sens, eps, d)
    c = -math.expm1(-bound / lam)
    zz = np.clip(np.asarray(z, dtype=np.float64), -bound, bound)
    return 0.5 + np.sign(zz) * (-np.expm1(-np.abs(zz) / lam)) / (2.0 * c)


@partial(jax.jit, static_argnames=("shape",))
def _tlap_sample64(
    key: jax.Array, shape: tuple[int, ...], lam: Any, c: Any, tail: Any
) -> jax.Array:
    # Called under jax.enable_x64: float64 throughout. The sign is one fair bit
    # and the magnitude comes from an independent uniform v in (0, 1] (53-bit
    # resolution) through the exact inverse CDF of the truncated exponential on
    # [0, B]:  |z| = -lambda * log(e^{-B/lambda} + v * c),  c = 1 - e^{-B/lambda}.
    # v = 1 gives 0 and v -> 0 gives B, which is never reached (v >= 2^-53):
    # no probability atom at +-B, unlike a float32 uniform on [-1, 1) whose
    # value -1 (probability 2^-23) maps to exactly -B.
    k_sign, k_mag = jax.random.split(key)
    negative = jax.random.bits(k_sign, shape, jnp.uint32) & 1
    v = 1.0 - jax.random.uniform(k_mag, shape, jnp.float64)  # (0, 1]
    mag = -lam * jnp.log(tail + v * c)
    return jnp.where(negative == 1, -mag, mag)


def _tlap_noise(
    key: jax.Array, shape: tuple[int, ...], dtype: Any, sens: float, eps: float, delta: float
) -> jax.Array:
    """Float64 truncated-Laplace draws, rounded to ``dtype`` inside ``[-B_f, B_f]``."""
    lam = sens / eps
    bound = tlap_bound(sens, eps, delta)
    tail = math.exp(-bound / lam)
    c = -math.expm1(-bound / lam)
    with jax.enable_x64(True):
        z = _tlap_sample64(key, shape, jnp.float64(lam), jnp.float64(c), jnp.float64(tail)).astype(
            dtype
        )
        clip = jnp.asarray(bound, dtype)
        while float(clip) > bound:  # rounded up: step down to the largest value <= B
            clip = jnp.nextafter(clip, jnp.zeros((), dtype))
        return jnp.clip(z, -clip, clip)  # rounding to dtype can never leave [-B, B]


def truncated_laplace(
    key: jax.Array,
    shape: tuple[int, ...] | int,
    *,
    sensitivity: float,
    epsilon: float,
    delta: float,
    dtype: Any = jnp.float32,
) -> jax.Array:
    """i.i.d. samples of TLap(Delta, eps, delta) by exact inverse-CDF sampling.

    Density ``exp(-|z|/lambda) / (2 lambda c)`` on ``[-B, B]``,
    ``lambda = Delta/eps``, ``c = 1 - exp(-B/lambda)``, ``B`` from
    `truncated_laplace_bound`. No rejection loop: one uniform per sample.
    Results are clipped to ``[-B_f, B_f]`` where ``B_f`` is the largest
    number of ``dtype`` that is ``<= B``, so the support is never exceeded even
    after float32 rounding.

    Privacy (Geng et al. 2020; Gu et al. Lemma 3.2): ``f(X) + Z`` is
    (eps, delta)-DP for a scalar query of sensitivity Delta. For a vector
    query, add i.i.d. TLap per coordinate with Delta the **L1** sensitivity
    (as Gu et al. Lemma G.1 do): on the common support the density ratio is
    at most ``exp(||v||_1 / lambda) <= e^eps``, and the mass outside the
    neighbour's support is at most ``sum_i delta (e^{|v_i|/lambda} - 1) /
    (e^eps - 1) <= delta`` (convexity), so the release stays (eps, delta)-DP.

    Sampling is done in float64 (a sign bit and an independent uniform in
    ``(0, 1]`` of 53-bit resolution through the exact inverse CDF), so no
    value carries probability mass of its own: ``+-B`` are never drawn,
    whereas a float32 uniform on ``[-1, 1)`` puts mass ``2^-23`` on exactly
    ``-B``, outside a shifted neighbour's support (``d * 2^-23`` of unaccounted
    delta for ``d`` coordinates). The key is ``mechanism_key(key,
    "truncated_laplace", sensitivity, epsilon, delta, shape, dtype)``. Other
    floating-point subtleties of sampling (Mironov 2012) are not addressed.

    Args:
      key: JAX PRNG key.
      shape: output shape (int or tuple of ints).
      sensitivity: Delta > 0 (L1 sensitivity for vectors).
      epsilon: > 0, finite. delta: in (0, 1).
      dtype: floating output dtype (default float32).

    Returns:
      Array of ``shape`` and ``dtype`` with values in ``[-B, B]``.
    """
    key, _ = release_key(key)  # warns on a key made from a small int
    sens = check_positive(sensitivity, "sensitivity")
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    dt = _float_dtype(dtype)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(check_int(s, "shape", minimum=0) for s in shape)
    noise_key = mechanism_key(
        key,
        "truncated_laplace",
        sensitivity=sens,
        epsilon=eps,
        delta=d,
        shape=shape,
        dtype=str(jnp.dtype(dt)),
    )
    return _tlap_noise(noise_key, shape, dt, sens, eps, d)


def truncated_laplace_record(
    released: str,
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    **params: Any,
) -> MechanismRecord:
    """`MechanismRecord` of one `truncated_laplace` release."""
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    sens = check_positive(sensitivity, "sensitivity")
    return MechanismRecord.make(
        "truncated_laplace",
        released,
        eps,
        d,
        sensitivity=sens,
        accountant="closed-form",
        scale=sens / eps,
        bound=tlap_bound(sens, eps, d),
        **params,
    )


# --------------------------------------------------------------------------- #
# Gaussian sampling mechanism (Gu et al. Alg. 1)
# --------------------------------------------------------------------------- #

#: Default relative tolerance of the PSD check (see gaussian_sampling_mechanism).
GSM_PSD_RTOL = 1e-6


@jax.jit
def _gsm_input_stats(kmat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(max|K|, max|K - K^T|)`` computed where ``K`` lives (no host copy)."""
    return jnp.max(jnp.abs(kmat)), jnp.max(jnp.abs(kmat - kmat.T))


@jax.jit
@full_precision
def _cholesky_factor(kmat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Lower Cholesky factor ``L`` of ``(K + K^T)/2`` and whether it is finite.

    A failed factorization (K not numerically positive definite) comes back
    as NaNs; ``ok`` is False then.
    """
    lfac = jnp.linalg.cholesky(kmat, symmetrize_input=True)
    return lfac, jnp.all(jnp.isfinite(lfac))


@jax.jit
@full_precision
def _eigh_factor(kmat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(U sqrt(max(lambda, 0)), lambda_min)`` from ``eigh((K + K^T)/2)``.

    Exact factor ``L L^T = K`` of a PSD (possibly singular) ``K``; negative
    eigenvalues are clamped to 0 (the caller has already rejected any below
    the rounding-level tolerance).
    """
    evals, evecs = jnp.linalg.eigh(kmat, symmetrize_input=True)
    return evecs * jnp.sqrt(jnp.maximum(evals, 0.0))[None, :], evals[0]


def _outer_mean(b: jax.Array, k: jax.Array) -> jax.Array:
    out = (b @ b.T) / k.astype(b.dtype)
    return 0.5 * (out + out.T)  # exactly symmetric


@partial(jax.jit, static_argnames=("width",))
@full_precision
def _gsm_explicit(key: jax.Array, lfac: jax.Array, k: jax.Array, width: int) -> jax.Array:
    # k <= width <= n explicit samples: g_j = L z_j, K~ = (L Z)(L Z)^T / k with
    # Z (n, width) standard normal whose columns j >= k are zeroed, i.e. exactly
    # the k-column Z of Alg. 1. ``k`` is traced, so one compilation serves
    # every k with the same ``width`` (a power of two, capped at n).
    z = jax.random.normal(key, (lfac.shape[0], width), lfac.dtype)
    z = jnp.where(jnp.arange(width) < k, z, jnp.zeros((), lfac.dtype))
    return _outer_mean(lfac @ z, k)


@jax.jit
@full_precision
def _gsm_wishart(key: jax.Array, lfac: jax.Array, k: jax.Array) -> jax.Array:
    # k > n: Z Z^T ~ Wishart_n(k, I) = A A^T with A lower-triangular (Bartlett
    # decomposition): A_ii = sqrt(chi2_{k-i}) (i = 0..n-1), A_ij ~ N(0, 1) for
    # i > j, all independent. ``k`` is traced, so one compilation serves every
    # k > n (jax.random.gamma is slow to compile). The degrees of freedom are
    # exact integers, rounded to the float dtype only beyond 2^24 (float32).
    n = lfac.shape[0]
    dt = lfac.dtype
    k_norm, k_chi = jax.random.split(key)
    normals = jax.random.normal(k_norm, (n, n), dt)
    dof = (k - jnp.arange(n, dtype=k.dtype)).astype(dt)
    chi2 = 2.0 * jax.random.gamma(k_chi, 0.5 * dof, (n,), dt)
    a = jnp.tril(normals, -1) + jnp.diag(jnp.sqrt(chi2))
    return _outer_mean(lfac @ a, k)


def _explicit_width(k: int, n: int) -> int:
    """Static width of the explicit branch: the next power of two >= k, capped at n."""
    return min(n, 1 << (k - 1).bit_length())


def _psd_factor(kmat: jax.Array, psd_tol: float) -> tuple[jax.Array, str]:
    """A factor ``L`` with ``L L^T = K`` (up to rounding) and the path taken.

    Cholesky first: one ``O(n^3 / 3)`` factorization, and its success certifies
    that ``K`` is positive definite up to rounding (``L L^T = K + E`` with
    ``E`` the backward error of the factorization). Only if it fails (singular
    or indefinite ``K``) is ``eigh`` run; it is exact for singular PSD ``K``
    (no jitter: sampling from ``N(0, K + t I)`` would be another mechanism) and
    gives the spectrum, so a clearly indefinite ``K`` is rejected here, before
    any noise is drawn.
    """
    lfac, ok = _cholesky_factor(kmat)
    if bool(ok):
        return lfac, "cholesky"
    del lfac
    lfac, lam_min = _eigh_factor(kmat)
    lam_min = float(lam_min)
    if not lam_min >= -psd_tol:  # also catches NaN
        raise ValueError(
            "K must be positive semi-definite: its smallest eigenvalue is below "
            "-psd_rtol * n * max|K| (no value of K is named: K is private); the Gaussian "
            "sampling mechanism needs a covariance matrix and its privacy analysis assumes K PSD"
        )
    return lfac, "eigh"


def _gsm(key: jax.Array, kmat: jax.Array, k: int, psd_tol: float) -> jax.Array:
    """Factor once (`_psd_factor`), then sample: explicit draws for
    ``k <= n``, Bartlett Wishart for ``k > n``."""
    lfac, _ = _psd_factor(kmat, psd_tol)
    n = kmat.shape[0]
    k_arr = jnp.asarray(k, jnp.int32)
    if k <= n:
        return _gsm_explicit(key, lfac, k_arr, _explicit_width(k, n))
    return _gsm_wishart(key, lfac, k_arr)


def gaussian_sampling_mechanism(
    key: jax.Array,
    K: Any,
    k: int,
    *,
    epsilon: float,
    delta: float,
    shift: float = 0.0,
    symmetry_rtol: float = 1e-4,
    psd_rtol: float = GSM_PSD_RTOL,
) -> jax.Array:
    """Gaussian Sampling Mechanism (Gu et al., DP NTK regression, Alg. 1).

    Returns ``K~ = (1/k) sum_{j<k} g_j g_j^T`` with ``g_j ~ N(0, K + shift I)``
    i.i.d., an exactly symmetric PSD matrix with ``E[K~] = K + shift I`` and
    ``Var(K~_ij) = (K_ij^2 + K_ii K_jj) / k`` (of the shifted matrix).

    Key binding. The samples come from ``mechanism_key(key, "gaussian_sampling",
    epsilon, delta, shift, k, n, dtype)``: one key at two budgets or two shifts
    gives independent samples (with one ``Z``, two outputs at two shifts give
    ``K`` back to rounding). ``epsilon`` and ``delta`` are the guarantee the
    caller claims (Lemma 5.4); ``k`` carries the calibration, so they only bind.

    Implementation. ``g_j = L z_j`` with ``z_j ~ N(0, I_n)`` for any factor
    ``L L^T = K``; the output distribution depends only on ``K``.

    * Factor: Cholesky of ``(K + K^T)/2`` first (about 15x faster than
      ``eigh`` on CPU). Success certifies ``K`` positive definite up to
      rounding. If it fails (the factor is not finite: ``K`` singular or
      indefinite), ``eigh`` is used: ``L = U sqrt(max(lambda, 0))``, exact
      for singular PSD ``K``. No jitter is ever added (``N(0, K + t I)``
      would be a different mechanism).
    * PSD check: the privacy analysis assumes ``K`` PSD. On the ``eigh`` path
      ``K`` is rejected (ValueError, before any noise) when
      ``lambda_min < -tol`` with ``tol = psd_rtol * n * max|K|``
      (``n max|K|`` bounds ``||K||_2``; the default ``1e-6`` is about 8 float32
      ulps of that bound). Negative eigenvalues within ``tol`` are rounding
      and are clamped to 0.
    * Sampling: for ``k <= n`` the ``k`` samples are drawn explicitly,
      ``G = L Z`` with ``Z (n, k)`` standard normal (padded with zero columns
      to the next power of two so one compilation serves a range of k); for
      ``k > n`` the Wishart matrix ``Z Z^T ~ W_n(k, I)`` is drawn directly by
      the Bartlett decomposition (``n(n-1)/2`` normals and ``n`` chi-square
      variates), so the cost does not grow with ``k`` and one compilation
      serves every ``k > n``. Both give exactly the distribution of Alg. 1.

    Cost: ``O(n^3 / 3)`` (Cholesky) + ``O(n^2 min(k, n))`` (sampling);
    ``O(n^3)`` eigh only for singular or indefinite ``K``. The function reads
    concrete values of ``K`` to choose the path, so it cannot be wrapped in
    ``jax.jit`` as a whole (``K`` traced); ``jax.vmap`` over keys with ``K``
    fixed works and factors ``K`` once.

    Privacy: the (eps, delta) guarantee (Gu et al. Lemma 5.4, from GSYZ24 Thm.
    6.12) holds only under Condition 5.3 (``M <= Delta(eps, delta, k)``,
    Def. 5.1-5.2); checking it and recording the cost is the caller's job.

    Args:
      key: JAX PRNG key.
      K: (n, n) symmetric PSD matrix, finite (floating dtype kept; float64
        becomes float32 unless x64 is enabled; else float32).
      k: number of Gaussian samples, integer in [1, 2^31).
      epsilon, delta: the release's claimed guarantee (bound into the key).
      shift: ``s >= 0`` added to the diagonal before sampling (the kernel shift
        of Gu et al.'s ``eta_min``; bound into the key).
      symmetry_rtol: ``K`` is rejected when
        ``max|K - K^T| > symmetry_rtol * max|K|``.
      psd_rtol: relative tolerance of the PSD check (see above), > 0.

    Returns:
      (n, n) array ``K~`` in ``K``'s (release) dtype.

    Raises:
      ValueError: non-square, empty, non-finite, asymmetric or clearly
        indefinite ``K``; ``k`` out of range. TypeError: non-integer ``k``,
        non-numeric ``K`` or a bad key. All before any noise is drawn.
    """
    key, _ = release_key(key)  # warns on a key made from a small int
    kmat, k, shift = _gsm_inputs(K, k, shift)
    rtol = check_positive(symmetry_rtol, "symmetry_rtol")
    prtol = check_positive(psd_rtol, "psd_rtol")
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    scale_a, asym_a = _gsm_input_stats(kmat)
    scale, asym = float(scale_a), float(asym_a)
    if asym > rtol * scale:  # no value of K in the message: K is private
        raise ValueError("K must be symmetric: max|K - K^T| exceeds symmetry_rtol * max|K|")
    noise_key = mechanism_key(
        key, "gaussian_sampling", epsilon=eps, delta=dlt, shift=shift, k=k,
        n=int(kmat.shape[0]), dtype=str(kmat.dtype),
    )  # fmt: skip
    return _gsm(noise_key, kmat, k, prtol * kmat.shape[0] * scale)


def _gsm_inputs(K: Any, k: Any, shift: Any) -> tuple[jax.Array, int, float]:
    """``(K + shift I`` in its release dtype ``, k, shift)``, checked (nothing drawn)."""
    arr = check_array(K, "K", ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise ValueError(f"K must be a square matrix, got shape {tuple(arr.shape)}")
    k = check_int(k, "k", minimum=1)
    if k >= 2**31:
        raise ValueError(f"k must be < 2**31, got {k}")
    shift = check_nonnegative(shift, "shift")
    kmat = jnp.asarray(arr, _release_dtype(arr.dtype))
    if shift > 0:
        idx = jnp.arange(kmat.shape[0])
        kmat = kmat.at[idx, idx].add(jnp.asarray(shift, kmat.dtype))
    return kmat, k, shift


def gaussian_sampling_record(
    released: str,
    *,
    epsilon: float,
    delta: float,
    k: int,
    accountant: str = "gaussian-sampling (Gu et al. Lemma 5.4)",
    sensitivity: float | None = None,
    **params: Any,
) -> MechanismRecord:
    """`MechanismRecord` of one `gaussian_sampling_mechanism` release.

    ``sensitivity`` is the bound ``M`` of Gu et al. Def. 5.1 when the caller has one.
    """
    return MechanismRecord.make(
        "gaussian_sampling",
        released,
        check_epsilon(epsilon),
        check_delta(delta),
        sensitivity=sensitivity,
        accountant=accountant,
        k=check_int(k, "k", minimum=1),
        **params,
    )
