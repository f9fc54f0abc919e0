"""Privacy verification of the privacy core (privkernels.privacy) mechanisms.

Distribution tests (KS with fixed keys), an opacus-style per-example clipping
check against an explicit loop, Poisson sampling rates, an independent
cross-check of the analytic-Gaussian calibration, and the Gaussian-mechanism
audit (real passes, sigma/4 refuted).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels import audit, privacy
from privkernels.privacy.clipping import NORM_MARGIN

EPS, DELTA = 1.0, 1e-5


@pytest.mark.parametrize("eps,delta", [(0.2, 1e-6), (1.0, 1e-5), (4.0, 1e-3)])
def test_gaussian_sigma_matches_independent_balle_wang(eps, delta):
    """gaussian_sigma(eps, delta) solves the exact Balle-Wang condition: the pair of Gaussians at
    distance 1/sigma has eps(delta) = eps (computed here from the closed-form delta(eps))."""
    sigma = privacy.gaussian_sigma(eps, delta)
    assert audit.gaussian_audit_epsilon(1.0 / sigma, delta) == pytest.approx(eps, rel=1e-4)
    assert privacy.gaussian_epsilon(sigma, delta) == pytest.approx(eps, rel=1e-6)


def test_one_full_batch_dpsgd_step_is_one_gaussian_release():
    """dpsgd_epsilon with q = 1 and one step equals the analytic Gaussian epsilon (no amplification)."""
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    assert privacy.dpsgd_epsilon(sigma, DELTA, sampling_rate=1.0, steps=1) == pytest.approx(
        EPS, rel=2e-3
    )
    assert privacy.dpsgd_epsilon(sigma, DELTA, sampling_rate=1.0, steps=1, accountant="rdp") >= EPS


def test_gaussian_mechanism_noise_distribution():
    """gaussian_mechanism adds N(0, (sigma * sensitivity)^2) i.i.d. noise (KS, fixed key), keeps the
    shape and dtype, and is a pure function of the key."""
    value = jnp.full((50, 40), 3.0, jnp.float32)
    out = privacy.gaussian_mechanism(jax.random.key(0), value, sensitivity=0.2, sigma=2.5)
    assert out.shape == value.shape and out.dtype == jnp.float32
    z = (np.asarray(out, np.float64) - 3.0).ravel() / 0.5
    assert stats.kstest(z, "norm").pvalue > 1e-3
    again = privacy.gaussian_mechanism(jax.random.key(0), value, sensitivity=0.2, sigma=2.5)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(again))
    other = privacy.gaussian_mechanism(jax.random.key(1), value, sensitivity=0.2, sigma=2.5)
    assert abs(np.corrcoef(np.asarray(out).ravel(), np.asarray(other).ravel())[0, 1]) < 0.1


def test_gaussian_mechanism_audit_real_passes_quarter_noise_caught():
    """privacy.gaussian_mechanism at gaussian_sigma(1, 1e-5): audit passes; with sigma / 4 refuted."""
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    d, dp = jnp.zeros(4), jnp.asarray([0.0, 0.6, 0.8, 0.0])
    results = {}
    for scale in (1.0, 0.25):

        def mech(k, v, scale=scale):
            return privacy.gaussian_mechanism(k, v, sensitivity=1.0, sigma=sigma * scale)

        results[scale] = audit.audit_gaussian_release(
            jax.random.key(1),
            mech,
            d,
            dp,
            epsilon=EPS,
            delta=DELTA,
            trials=20_000,
            direction=np.asarray(dp),
        )
    assert results[1.0].passed, results[1.0].summary()
    assert not results[0.25].passed, results[0.25].summary()


def test_clip_per_example_matches_explicit_loop():
    """clip_per_example equals clipping each example's flattened gradient in a Python loop (global
    norm across leaves), including zero and non-finite examples (-> 0)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 3)).astype(np.float32) * np.array(
        [[0.01], [1], [10], [0], [3], [1]], np.float32
    )
    b = rng.normal(size=(6, 2, 2)).astype(np.float32)
    b[3] = 0
    a[5, 0] = np.nan
    clipped, norms = privacy.clip_per_example({"a": jnp.asarray(a), "b": jnp.asarray(b)}, 1.5)
    for i in range(6):
        flat = np.concatenate([a[i].ravel(), b[i].ravel()]).astype(np.float64)
        nrm = np.linalg.norm(flat)
        got = np.concatenate(
            [np.asarray(clipped["a"][i]).ravel(), np.asarray(clipped["b"][i]).ravel()]
        )
        if not np.isfinite(nrm):
            np.testing.assert_array_equal(got, 0.0)
            assert not np.isfinite(float(norms[i]))
            continue
        target = 1.5 / (1.0 + NORM_MARGIN)  # clipped norms land on C / (1 + margin)
        expect = flat * min(1.0, target / nrm) if nrm > 0 else flat
        np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-7)
        assert float(norms[i]) == pytest.approx(nrm, rel=1e-5)
        assert np.linalg.norm(got.astype(np.float64)) <= 1.5


def test_noisy_clipped_sum_distribution_and_independent_leaves():
    """noisy_clipped_sum = masked sum + N(0, (sigma C)^2) per coordinate; the two leaves get
    independent noise (split keys): KS per leaf and near-zero cross-correlation."""
    g = {"a": jnp.ones((5, 300), jnp.float32), "b": jnp.ones((5, 300), jnp.float32)}
    mask = jnp.asarray([True, True, False, True, False])
    out = privacy.noisy_clipped_sum(jax.random.key(4), g, mask, clip_norm=0.5, noise_multiplier=2.0)
    za = (np.asarray(out["a"], np.float64) - 3.0) / 1.0
    zb = (np.asarray(out["b"], np.float64) - 3.0) / 1.0
    assert stats.kstest(za, "norm").pvalue > 1e-3
    assert stats.kstest(zb, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(za, zb)[0, 1]) < 0.2
    assert not np.allclose(za, zb)


def test_poisson_batch_inclusion_rate_and_no_truncation():
    """Each index is included with probability q independently (binomial test on the counts), the
    mask marks exactly `size` entries, and an overflowing fixed pad raises instead of truncating."""
    n, q = 200, 0.1
    counts = np.zeros(n)
    sizes = []
    for t in range(150):
        b = privacy.poisson_batch(jax.random.key(t), n, q)
        idx = np.asarray(b.indices)[np.asarray(b.mask)]
        assert len(idx) == int(b.size) and len(set(idx.tolist())) == len(idx)
        counts[idx] += 1
        sizes.append(int(b.size))
    total = counts.sum()
    assert stats.binomtest(int(total), n * 150, q).pvalue > 1e-3
    assert stats.chisquare(counts).pvalue > 1e-3  # no index is favoured
    with pytest.raises(ValueError):
        privacy.poisson_batch(jax.random.key(0), 1000, 0.5, pad_to=10)
