"""Tests of privkernels.privacy.mechanisms: distributions checked against
closed forms (KS tests with fixed keys), supports, determinism, validation."""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels.privacy import mechanisms as mech
from privkernels.privacy.mechanisms import (
    gaussian_mechanism,
    gaussian_sampling_mechanism,
    truncated_laplace,
    truncated_laplace_bound,
    truncated_laplace_cdf,
)

KEY = jax.random.key(1234)
N_DRAWS = 3000  # one batch shape for every vmapped test (one compilation each)


# --------------------------------------------------------------------------- #
# Gaussian mechanism
# --------------------------------------------------------------------------- #


def test_gaussian_mechanism_noise_distribution():
    value = jnp.linspace(-3.0, 3.0, 40000, dtype=jnp.float32).reshape(200, 200)
    sigma, sens = 1.7, 0.3
    out = gaussian_mechanism(KEY, value, sensitivity=sens, sigma=sigma)
    assert out.shape == value.shape and out.dtype == jnp.float32
    z = np.asarray(out - value, np.float64).ravel() / (sigma * sens)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # chi-square on the variance: sum z^2 ~ chi2(N)
    n = z.size
    assert stats.chi2.sf(np.sum(z**2), n) > 5e-4 and stats.chi2.cdf(np.sum(z**2), n) > 5e-4


def test_gaussian_mechanism_determinism_dtype_and_scalars():
    v = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    a = gaussian_mechanism(KEY, v, sensitivity=1.0, sigma=1.0)
    b = gaussian_mechanism(KEY, v, sensitivity=1.0, sigma=1.0)
    c = gaussian_mechanism(jax.random.key(7), v, sensitivity=1.0, sigma=1.0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    raw = gaussian_mechanism(jax.random.PRNGKey(0), v, sensitivity=1.0, sigma=1.0)  # raw uint32 key
    assert raw.shape == (2, 3)
    s = gaussian_mechanism(KEY, 3.0, sensitivity=1.0, sigma=0.5)
    assert s.shape == () and s.dtype == jnp.float32
    h = gaussian_mechanism(KEY, np.ones(4, np.float16), sensitivity=1.0, sigma=0.5)
    assert h.dtype == jnp.float16
    i = gaussian_mechanism(KEY, np.arange(4), sensitivity=1.0, sigma=0.5)
    assert i.dtype == jnp.float32


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_gaussian_mechanism_rejects_nonfinite_value(bad):
    with pytest.raises(ValueError, match="value"):
        gaussian_mechanism(KEY, np.array([1.0, bad]), sensitivity=1.0, sigma=1.0)


def test_gaussian_mechanism_validation():
    v = np.ones(3)
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="sensitivity"):
            gaussian_mechanism(KEY, v, sensitivity=bad, sigma=1.0)
        with pytest.raises(ValueError, match="sigma"):
            gaussian_mechanism(KEY, v, sensitivity=1.0, sigma=bad)
    with pytest.raises(ValueError, match="value"):
        gaussian_mechanism(KEY, np.ones((0,)), sensitivity=1.0, sigma=1.0)
    with pytest.raises(TypeError, match="key"):
        gaussian_mechanism(0, v, sensitivity=1.0, sigma=1.0)


def test_gaussian_record():
    rec = mech.gaussian_record("mean", epsilon=1.0, delta=1e-5, sensitivity=0.5, sigma=3.73)
    assert rec.name == "gaussian" and rec.sensitivity == 0.5
    assert rec.param_dict["noise_std"] == pytest.approx(3.73 * 0.5)


# --------------------------------------------------------------------------- #
# truncated Laplace
# --------------------------------------------------------------------------- #

TLAP_CASES = [(1.0, 1.0, 1e-5), (0.3, 10.0, 1e-5), (2.0, 0.05, 0.2), (1e-3, 0.5, 1e-8)]


@pytest.mark.parametrize("sens,eps,delta", TLAP_CASES)
def test_tlap_bound_formula_and_defining_property(sens, eps, delta):
    """B as in Gu et al. Sec. 3.2, and the Geng et al. property: the mass of the
    edge [B - Delta, B] is exactly delta (what makes the mechanism (eps, delta)-DP)."""
    b = truncated_laplace_bound(sens, eps, delta)
    assert b == pytest.approx(
        sens / eps * math.log(1 + (math.exp(eps) - 1) / (2 * delta)), rel=1e-12
    )
    kw = dict(sensitivity=sens, epsilon=eps, delta=delta)
    edge = 1.0 - truncated_laplace_cdf(b - sens, **kw)
    assert edge == pytest.approx(delta, rel=1e-6)
    assert truncated_laplace_cdf(-b, **kw) == pytest.approx(0.0, abs=1e-15)
    assert truncated_laplace_cdf(b, **kw) == pytest.approx(1.0, abs=1e-15)
    assert truncated_laplace_cdf(0.0, **kw) == pytest.approx(0.5)


def test_tlap_bound_large_epsilon_no_overflow():
    b = truncated_laplace_bound(1.0, 800.0, 1e-5)
    assert b == pytest.approx((800.0 - math.log(2e-5)) / 800.0, rel=1e-9)


@pytest.mark.parametrize("sens,eps,delta", TLAP_CASES[:3])
def test_tlap_ks_against_exact_cdf_and_symmetry(sens, eps, delta):
    z = truncated_laplace(KEY, (60000,), sensitivity=sens, epsilon=eps, delta=delta)
    assert z.dtype == jnp.float32 and z.shape == (60000,)
    zz = np.asarray(z, np.float64)
    cdf = lambda t: truncated_laplace_cdf(t, sensitivity=sens, epsilon=eps, delta=delta)
    assert stats.kstest(zz, cdf).pvalue > 1e-3
    assert stats.kstest(-zz, cdf).pvalue > 1e-3  # symmetric law
    assert abs(np.mean(zz > 0) - 0.5) < 4 * 0.5 / math.sqrt(zz.size)


@pytest.mark.parametrize("sens,eps,delta", TLAP_CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_tlap_support_never_exceeded(sens, eps, delta, dtype):
    b = truncated_laplace_bound(sens, eps, delta)
    z = truncated_laplace(
        jax.random.key(5), (500000,), sensitivity=sens, epsilon=eps, delta=delta, dtype=dtype
    )
    assert z.dtype == dtype
    assert float(jnp.max(jnp.abs(z.astype(jnp.float32)))) <= b


def test_tlap_clip_guard_at_the_boundary(monkeypatch):
    """Force the extreme uniform (v = 2^-53, |z| just below B) and
    pick B that float32 rounds *up*: the output must still be <= B."""
    sens = 1.0
    for i in range(1, 500):  # find parameters whose B rounds up in float32
        eps = 1.0 + i * 1e-3
        b = truncated_laplace_bound(sens, eps, 1e-5)
        if float(np.float32(b)) > b:
            break
    else:  # pragma: no cover
        pytest.fail("no rounding-up case found")
    real_uniform = jax.random.uniform
    # the largest float64 uniform below 1: v = 1 - u is the smallest magnitude uniform, so
    # |z| is as close to B as the sampler ever gets (in float64 strictly below B)
    monkeypatch.setattr(
        jax.random,
        "uniform",
        lambda key, shape, dtype: jnp.full(shape, 1.0 - 2.0**-53, dtype),
    )
    mech._tlap_sample64.clear_cache()
    try:
        z = truncated_laplace(KEY, (7, 3), sensitivity=sens, epsilon=eps, delta=1e-5)
    finally:
        monkeypatch.setattr(jax.random, "uniform", real_uniform)
        mech._tlap_sample64.clear_cache()
    assert float(jnp.max(jnp.abs(z))) <= b
    assert float(jnp.max(jnp.abs(z))) >= b * (1 - 1e-6)


def test_tlap_determinism_and_shapes():
    kw = dict(sensitivity=1.0, epsilon=1.0, delta=1e-5)
    a = truncated_laplace(KEY, (4, 5), **kw)
    np.testing.assert_array_equal(a, truncated_laplace(KEY, (4, 5), **kw))
    assert not np.array_equal(
        np.asarray(a), np.asarray(truncated_laplace(jax.random.key(3), (4, 5), **kw))
    )
    assert truncated_laplace(KEY, 6, **kw).shape == (6,)
    assert truncated_laplace(KEY, (), **kw).shape == ()


def test_tlap_validation():
    good = dict(sensitivity=1.0, epsilon=1.0, delta=1e-5)
    for eps in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            truncated_laplace(KEY, (3,), **{**good, "epsilon": eps})
        with pytest.raises(ValueError, match="epsilon"):
            truncated_laplace_bound(1.0, eps, 1e-5)
    for delta in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="delta"):
            truncated_laplace(KEY, (3,), **{**good, "delta": delta})
        with pytest.raises(ValueError, match="delta"):
            truncated_laplace_bound(1.0, 1.0, delta)
    for sens in (0.0, -2.0, math.nan):
        with pytest.raises(ValueError, match="sensitivity"):
            truncated_laplace(KEY, (3,), **{**good, "sensitivity": sens})
    with pytest.raises(ValueError, match="shape"):
        truncated_laplace(KEY, (3, -1), **good)
    with pytest.raises(TypeError, match="dtype"):
        truncated_laplace(KEY, (3,), dtype=jnp.int32, **good)
    rec = mech.truncated_laplace_record("X", epsilon=1.0, delta=1e-5, sensitivity=2.0)
    assert rec.param_dict["bound"] == pytest.approx(truncated_laplace_bound(2.0, 1.0, 1e-5))


# --------------------------------------------------------------------------- #
# Gaussian sampling mechanism (Gu et al. Alg. 1)
# --------------------------------------------------------------------------- #


def _psd(n: int, rank: int | None = None, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, rank or n + 2))
    return (a @ a.T / a.shape[1]).astype(np.float32)


def _draws(kmat: np.ndarray, k: int, n_draws: int, seed: int = 0) -> np.ndarray:
    """``n_draws`` independent outputs of the public mechanism, vmapped over keys
    (``K`` is factored once; the sampler is batched over the keys)."""
    keys = jax.random.split(jax.random.key(seed), n_draws)
    km = jnp.asarray(kmat)
    out = jax.vmap(lambda kk: gaussian_sampling_mechanism(kk, km, k, epsilon=0.5, delta=1e-5))(keys)
    return np.asarray(out, np.float64)


def _count_calls(monkeypatch, name: str) -> list[int]:
    """Count calls of the module-level helper ``mech.<name>`` (looked up at call time)."""
    original = getattr(mech, name)
    calls: list[int] = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mech, name, wrapper)
    return calls


def _force_eigh(monkeypatch) -> None:
    """Make the Cholesky attempt fail the way a real failure does (NaN factor)."""

    def failed(kmat):
        return jnp.full_like(kmat, jnp.nan), jnp.asarray(False)

    monkeypatch.setattr(mech, "_cholesky_factor", failed)


@pytest.mark.parametrize("k", [1, 5, 6, 10**6])
def test_gsm_symmetric_psd_deterministic(k):
    kmat = _psd(5)
    out = gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5)
    assert out.shape == (5, 5) and out.dtype == jnp.float32
    o = np.asarray(out)
    np.testing.assert_array_equal(o, o.T)
    assert np.linalg.eigvalsh(o.astype(np.float64)).min() >= -1e-5 * np.abs(o).max()
    np.testing.assert_array_equal(
        o, np.asarray(gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5))
    )
    other = np.asarray(
        gaussian_sampling_mechanism(jax.random.key(99), kmat, k, epsilon=0.5, delta=1e-5)
    )
    assert not np.array_equal(o, other)
    if k == 1:  # rank one: g g^T; a raw uint32 key works too
        assert gaussian_sampling_mechanism(
            jax.random.PRNGKey(0), kmat, k, epsilon=0.5, delta=1e-5
        ).shape == (5, 5)
        assert np.linalg.matrix_rank(o.astype(np.float64), tol=1e-4 * np.abs(o).max()) == 1


@pytest.mark.parametrize("k", [3, 5, 6, 17])  # k <= n explicit samples, k > n Bartlett
def test_gsm_quadratic_forms_are_chi_square(k):
    """For fixed a: k a^T K~ a / a^T K a ~ chi2_k exactly (Alg. 1: a^T g_j ~ N(0, a^T K a)).
    Checks diagonal entries and a random direction, for both branches."""
    kmat = _psd(5, seed=1)
    draws = _draws(kmat, k, N_DRAWS, seed=k)
    rng = np.random.default_rng(2)
    for a in (np.eye(5)[0], np.eye(5)[3], rng.normal(size=5)):
        stat = k * np.einsum("i,dij,j->d", a, draws, a) / (a @ kmat.astype(np.float64) @ a)
        assert stats.kstest(stat, stats.chi2(k).cdf).pvalue > 1e-3


@pytest.mark.parametrize("k", [3, 17])
def test_gsm_mean_and_entry_variance(k):
    kmat = _psd(5, seed=3).astype(np.float64)
    draws = _draws(kmat.astype(np.float32), k, N_DRAWS, seed=10 + k)
    var_theory = (kmat**2 + np.outer(np.diag(kmat), np.diag(kmat))) / k
    mean_err = np.abs(draws.mean(0) - kmat) / np.sqrt(var_theory / draws.shape[0])
    assert mean_err.max() < 4.5  # z-scores of all 25 entries
    ratio = draws.var(0) / var_theory
    assert np.all(np.abs(ratio - 1) < 0.2)


def test_gsm_mean_error_shrinks_like_inverse_sqrt_draws():
    """Averaging m independent releases: E||mean - K||_F^2 = sum_ij Var(K~_ij) / m."""
    kmat = _psd(5, seed=4)
    k = 3
    draws = _draws(kmat, k, N_DRAWS, seed=99)
    kd = kmat.astype(np.float64)
    expected_sq = np.sum(kd**2 + np.outer(np.diag(kd), np.diag(kd))) / k  # E||K~ - K||_F^2
    errs = {}
    for m in (20, 1500):
        blocks = draws[: (N_DRAWS // m) * m].reshape(-1, m, 5, 5).mean(1)
        errs[m] = np.mean(np.linalg.norm(blocks - kd, axis=(1, 2)) ** 2)
    assert errs[20] == pytest.approx(expected_sq / 20, rel=0.25)  # 150 blocks
    assert errs[1500] < 4 * expected_sq / 1500  # 2 blocks: loose upper bound only
    assert errs[1500] < errs[20] / 10  # 75x more draws -> squared error ~75x smaller


@pytest.mark.parametrize("k", [3, 17])  # explicit samples and Bartlett
def test_gsm_cholesky_and_eigh_paths_agree_in_distribution(monkeypatch, k):
    """A positive definite K takes the Cholesky path (no eigh); forcing the eigh
    fallback gives the same law: both factors satisfy L L^T = K, and the draws of
    the two paths agree in mean, entry variances (Wishart formula) and, by
    two-sample KS tests, in the laws of diagonal, off-diagonal and quadratic-form
    statistics."""
    kmat = _psd(5, seed=5)
    kd = kmat.astype(np.float64)
    l_chol, ok = mech._cholesky_factor(jnp.asarray(kmat))
    l_eig, lam_min = mech._eigh_factor(jnp.asarray(kmat))
    assert bool(ok) and float(lam_min) > 0
    for lfac in (l_chol, l_eig):
        lf = np.asarray(lfac, np.float64)
        np.testing.assert_allclose(lf @ lf.T, kd, rtol=1e-5, atol=1e-5)

    chol_calls = _count_calls(monkeypatch, "_cholesky_factor")
    eigh_calls = _count_calls(monkeypatch, "_eigh_factor")
    d_chol = _draws(kmat, k, N_DRAWS, seed=200 + k)
    assert len(chol_calls) == 1 and len(eigh_calls) == 0  # PD: one Cholesky, no eigh
    _force_eigh(monkeypatch)
    d_eig = _draws(kmat, k, N_DRAWS, seed=300 + k)
    assert len(eigh_calls) == 1

    var_theory = (kd**2 + np.outer(np.diag(kd), np.diag(kd))) / k
    for draws in (d_chol, d_eig):
        z = np.abs(draws.mean(0) - kd) / np.sqrt(var_theory / N_DRAWS)
        assert z.max() < 4.5
        assert np.all(np.abs(draws.var(0) / var_theory - 1) < 0.2)
    a = np.random.default_rng(6).normal(size=5)
    for stat in (
        lambda d: d[:, 0, 0],
        lambda d: d[:, 1, 3],
        lambda d: np.einsum("i,dij,j->d", a, d, a),
    ):
        assert stats.ks_2samp(stat(d_chol), stat(d_eig)).pvalue > 1e-3


def test_gsm_singular_psd_uses_exact_eigh_fallback(monkeypatch):
    """An exactly singular PSD K (rank 2, integer entries) makes Cholesky fail; the
    eigh fallback is exact: K~ is PSD, lies in the range of K (no jitter: a null
    vector v of K has v^T K~ v = 0 up to rounding), and quadratic forms in the
    range follow k * a^T K~ a / a^T K a ~ chi2_k."""
    u = np.array([1.0, 2.0, 0.0, -1.0, 1.0])
    v = np.array([0.0, 1.0, 1.0, 1.0, -2.0])
    kmat = (np.outer(u, u) + np.outer(v, v)).astype(np.float32)  # exact in float32
    null = np.array([1.0, 0.0, -1.0, 1.0, 0.0])  # orthogonal to u and v: K null = 0
    assert abs(null @ u) < 1e-12 and abs(null @ v) < 1e-12
    assert not bool(mech._cholesky_factor(jnp.asarray(kmat))[1])  # Cholesky really fails
    eigh_calls = _count_calls(monkeypatch, "_eigh_factor")
    k = 4
    out = np.asarray(gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5), np.float64)
    assert len(eigh_calls) == 1
    np.testing.assert_array_equal(out, out.T)
    w = np.linalg.eigvalsh(out)
    assert w.min() >= -1e-5 * w.max() and np.sum(w > 1e-4 * w.max()) == 2
    draws = _draws(kmat, k, N_DRAWS, seed=7)
    assert len(eigh_calls) == 2  # vmapped over keys: still one factorization
    scale = np.abs(kmat).max()
    assert np.abs(np.einsum("i,dij,j->d", null, draws, null)).max() < 1e-5 * scale
    for a in (u, u + 2 * v):
        stat = k * np.einsum("i,dij,j->d", a, draws, a) / (a @ kmat.astype(np.float64) @ a)
        assert stats.kstest(stat, stats.chi2(k).cdf).pvalue > 1e-3


def test_gsm_rank_deficient_and_slightly_indefinite_input():
    kmat = _psd(5, rank=2)
    out = np.asarray(gaussian_sampling_mechanism(KEY, kmat, 5, epsilon=0.5, delta=1e-5), np.float64)
    w = np.linalg.eigvalsh(out)
    assert w.min() >= -1e-5 * w.max()
    assert np.sum(w > 1e-4 * w.max()) <= 2  # K~ lives in the range of K
    bumped = kmat - 1e-6 * np.eye(5, dtype=np.float32)  # rounding-level negative eigenvalues
    assert np.all(
        np.isfinite(
            np.asarray(gaussian_sampling_mechanism(KEY, bumped, 5, epsilon=0.5, delta=1e-5))
        )
    )


def _no_noise(monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("noise drawn before K was rejected")

    for name in ("normal", "gamma", "split", "uniform"):
        monkeypatch.setattr(jax.random, name, boom)


@pytest.mark.parametrize("k", [2, 50])
def test_gsm_rejects_indefinite_matrix_before_noise(monkeypatch, k):
    """Clearly indefinite K raises ValueError (nothing drawn); negatives at the
    tolerance tol = psd_rtol * n * max|K| are the boundary."""
    rng = np.random.default_rng(8)
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    evals = np.array([-0.05, 0.5, 1.0, 2.0, 3.0])
    indefinite = ((q * evals) @ q.T).astype(np.float32)
    indefinite = 0.5 * (indefinite + indefinite.T)
    _no_noise(monkeypatch)
    for bad in (
        -np.eye(3, dtype=np.float32),
        np.diag([1.0, 1.0, -0.01]).astype(np.float32),
        indefinite,
    ):
        with pytest.raises(ValueError, match="positive semi-definite"):
            gaussian_sampling_mechanism(KEY, bad, k, epsilon=0.5, delta=1e-5)
    # the tolerance: lambda_min = -0.05 and tol = psd_rtol * 5 * max|K|
    scale = float(np.abs(indefinite).max())
    with pytest.raises(ValueError, match="positive semi-definite"):
        gaussian_sampling_mechanism(
            KEY, indefinite, k, psd_rtol=0.5 * 0.05 / (5 * scale), epsilon=0.5, delta=1e-5
        )
    monkeypatch.undo()
    out = gaussian_sampling_mechanism(
        KEY, indefinite, k, psd_rtol=2.0 * 0.05 / (5 * scale), epsilon=0.5, delta=1e-5
    )
    assert np.all(np.isfinite(np.asarray(out)))  # within tolerance: clamped, released
    with pytest.raises(ValueError, match="psd_rtol"):
        gaussian_sampling_mechanism(KEY, indefinite, k, psd_rtol=0.0, epsilon=0.5, delta=1e-5)


def test_gsm_one_compilation_serves_several_k():
    """k is a runtime value: every k > n shares one compiled Bartlett sampler, and
    every k <= n with the same padded width (next power of two) one explicit sampler."""
    if not hasattr(mech._gsm_wishart, "_cache_size"):
        pytest.skip("jax.jit objects expose no _cache_size in this JAX version")
    kmat = _psd(5, seed=9)
    gaussian_sampling_mechanism(KEY, kmat, 6, epsilon=0.5, delta=1e-5)
    gaussian_sampling_mechanism(KEY, kmat, 3, epsilon=0.5, delta=1e-5)
    before = (mech._gsm_wishart._cache_size(), mech._gsm_explicit._cache_size())
    for k in (7, 40, 1000, 10**6):
        gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5)
    gaussian_sampling_mechanism(KEY, kmat, 4, epsilon=0.5, delta=1e-5)  # width 4 like k = 3
    assert (mech._gsm_wishart._cache_size(), mech._gsm_explicit._cache_size()) == before
    assert [mech._explicit_width(k, 10) for k in (1, 2, 3, 5, 8, 9, 10)] == [1, 2, 4, 8, 8, 10, 10]


def test_gsm_n2000_single_cholesky(monkeypatch):
    """n = 2000: one Cholesky, no eigh (the speed path); output symmetric, finite,
    with the right diagonal scale. The time is printed, not asserted."""
    n, k = 2000, 64
    rng = np.random.default_rng(10)
    a = rng.normal(size=(n, 48)).astype(np.float32)
    kmat = jnp.asarray(a @ a.T / 48 + np.eye(n, dtype=np.float32))
    chol_calls = _count_calls(monkeypatch, "_cholesky_factor")
    eigh_calls = _count_calls(monkeypatch, "_eigh_factor")
    t0 = time.perf_counter()
    out = gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5).block_until_ready()
    seconds = time.perf_counter() - t0
    print(f"gaussian_sampling_mechanism n={n} k={k}: {seconds:.2f} s (incl. compile)")
    assert len(chol_calls) == 1 and len(eigh_calls) == 0
    o = np.asarray(out, np.float64)
    assert o.shape == (n, n) and np.all(np.isfinite(o))
    np.testing.assert_array_equal(o, o.T)
    # for a fixed direction a: k a^T K~ a / a^T K a ~ chi2_k (one draw each, fixed key)
    kd = np.asarray(kmat, np.float64)
    for a in (np.eye(n)[0], rng.normal(size=n)):
        stat = k * (a @ o @ a) / (a @ kd @ a)
        assert 1e-4 < stats.chi2(k).cdf(stat) < 1 - 1e-4


def test_gsm_validation():
    kmat = _psd(4)
    with pytest.raises(ValueError, match="K"):
        gaussian_sampling_mechanism(KEY, kmat[:3], 2, epsilon=0.5, delta=1e-5)  # not square
    with pytest.raises(ValueError, match="K"):
        gaussian_sampling_mechanism(KEY, kmat[0], 2, epsilon=0.5, delta=1e-5)  # rank 1
    bad = kmat.copy()
    bad[0, 1] += 1.0
    with pytest.raises(ValueError, match="symmetric"):
        gaussian_sampling_mechanism(KEY, bad, 2, epsilon=0.5, delta=1e-5)
    nan = kmat.copy()
    nan[1, 1] = np.nan
    with pytest.raises(ValueError, match="K"):
        gaussian_sampling_mechanism(KEY, nan, 2, epsilon=0.5, delta=1e-5)
    with pytest.raises(ValueError, match="k"):
        gaussian_sampling_mechanism(KEY, kmat, 0, epsilon=0.5, delta=1e-5)
    with pytest.raises(TypeError, match="k"):
        gaussian_sampling_mechanism(KEY, kmat, 2.5, epsilon=0.5, delta=1e-5)
    rec = mech.gaussian_sampling_record("K~", epsilon=0.5, delta=1e-5, k=10)
    assert rec.param_dict["k"] == 10 and rec.name == "gaussian_sampling"
