"""Tests of the auditing toolkit itself (privkernels.audit).

The audit must be (a) valid: its lower bound exceeds the true epsilon with
probability <= 1 - confidence, and (b) powerful: it refutes claims that are
clearly false. Both are checked on mechanisms whose exact privacy curve is
known in closed form (randomized response, the Gaussian mechanism).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privkernels import audit

# --------------------------------------------------------------------------- #
# Clopper-Pearson
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("n", [1, 7, 100, 5000])
def test_clopper_pearson_zero_and_full_counts_closed_form(n):
    """k=0 and k=n have the closed forms hi = 1-(a/2)^(1/n), lo = (a/2)^(1/n)."""
    alpha = 0.05
    lo, hi = audit.clopper_pearson(0, n, alpha)
    assert lo == 0.0
    assert hi == pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-9)
    lo, hi = audit.clopper_pearson(n, n, alpha)
    assert hi == 1.0
    assert lo == pytest.approx((alpha / 2) ** (1 / n), rel=1e-9)


@pytest.mark.parametrize("k,n", [(1, 10), (5, 10), (37, 200), (999, 1000)])
def test_clopper_pearson_defining_equations(k, n):
    """The bounds solve P[Bin(n,hi) <= k] = a/2 and P[Bin(n,lo) >= k] = a/2."""
    alpha = 0.1
    lo, hi = audit.clopper_pearson(k, n, alpha)
    assert stats.binom.cdf(k, n, hi) == pytest.approx(alpha / 2, rel=1e-6)
    assert stats.binom.sf(k - 1, n, lo) == pytest.approx(alpha / 2, rel=1e-6)
    assert 0 <= lo < k / n < hi <= 1


def test_clopper_pearson_vectorised_and_coverage():
    """Vectorised call; empirical coverage of the 95% interval is >= 95%."""
    rng = np.random.default_rng(0)
    p, n = 0.07, 60
    k = rng.binomial(n, p, size=4000)
    lo, hi = audit.clopper_pearson(k, n, 0.05)
    assert lo.shape == hi.shape == (4000,)
    coverage = np.mean((lo <= p) & (p <= hi))
    assert coverage >= 0.95


@pytest.mark.parametrize(
    "k,n,alpha,err",
    [
        (-1, 10, 0.05, ValueError),
        (11, 10, 0.05, ValueError),
        (1, 0, 0.05, ValueError),
        (1, 10, 0.0, ValueError),
        (1, 10, 1.0, ValueError),
        (1.5, 10, 0.05, TypeError),
    ],
)
def test_clopper_pearson_rejects_bad_input(k, n, alpha, err):
    """Invalid counts or levels raise a clear error."""
    with pytest.raises(err):
        audit.clopper_pearson(k, n, alpha)


# --------------------------------------------------------------------------- #
# epsilon_lower_bound on mechanisms with a known privacy curve
# --------------------------------------------------------------------------- #


def _randomized_response(rng, eps, n, bit):
    p = math.exp(eps) / (1 + math.exp(eps))
    keep = rng.random(n) < p
    return np.where(keep, bit, 1 - bit).astype(np.float64)


def test_lower_bound_is_tight_on_randomized_response():
    """RR is exactly (eps, 0)-DP; with many runs the bound approaches eps from below."""
    rng = np.random.default_rng(1)
    eps = 1.0
    a = _randomized_response(rng, eps, 400_000, 0)
    b = _randomized_response(rng, eps, 400_000, 1)
    res = audit.epsilon_lower_bound(a, b, delta=0.0, threshold=0.5, claimed_epsilon=eps)
    assert res.passed
    assert 0.95 < res.epsilon_lower_bound <= eps
    # the error rates are the RR flip probability
    assert res.fpr == pytest.approx(1 / (1 + math.e), abs=3e-3)
    assert res.fnr == pytest.approx(1 / (1 + math.e), abs=3e-3)
    # a smaller claim is refuted by the same data
    res2 = audit.epsilon_lower_bound(a, b, delta=0.0, threshold=0.5, claimed_epsilon=0.8)
    assert not res2.passed


def test_lower_bound_formula_matches_hand_computation():
    """lb = max(log((1-d-FNR_hi)/FPR_hi), log((1-d-FPR_hi)/FNR_hi)), CP at level 1-(1-c)/2."""
    a = np.r_[np.zeros(900), np.ones(100)]  # FPR = 0.1 at t=0.5
    b = np.r_[np.zeros(300), np.ones(700)]  # FNR = 0.3
    delta, conf = 1e-3, 0.9
    res = audit.epsilon_lower_bound(a, b, delta=delta, threshold=0.5, confidence=conf)
    alpha1 = 1 - conf  # two-sided alpha whose upper tail is (1 - conf) / 2
    fpr_hi = audit.clopper_pearson(100, 1000, alpha1)[1]
    fnr_hi = audit.clopper_pearson(300, 1000, alpha1)[1]
    expect = max(
        math.log((1 - delta - fnr_hi) / fpr_hi), math.log((1 - delta - fpr_hi) / fnr_hi), 0
    )
    assert res.epsilon_lower_bound == pytest.approx(expect, rel=1e-9)
    assert res.fpr_upper == pytest.approx(fpr_hi)
    assert res.fnr_upper == pytest.approx(fnr_hi)


def test_zero_error_counts_give_finite_bound():
    """Perfect separation: FPR=FNR=0 still yields a finite bound log((1-d-h)/h), h=1-(a)^(1/n)."""
    n = 1000
    res = audit.epsilon_lower_bound(np.zeros(n), np.ones(n), delta=0.0, threshold=0.5)
    h = 1 - 0.025 ** (1 / n)
    assert res.fpr == 0 and res.fnr == 0
    assert res.epsilon_lower_bound == pytest.approx(math.log((1 - h) / h), rel=1e-9)
    assert math.isfinite(res.epsilon_lower_bound)


def test_identical_distributions_give_near_zero_bound():
    """M(D) and M(D') identically distributed: the bound must stay ~0 (no false alarm)."""
    rng = np.random.default_rng(2)
    res = audit.epsilon_lower_bound(
        rng.normal(size=20_000), rng.normal(size=20_000), delta=1e-5, claimed_epsilon=0.1
    )
    assert res.epsilon_lower_bound < 0.1
    assert res.passed


def test_auto_threshold_validity_over_repetitions():
    """Coverage: on a Gaussian pair with known eps(delta), lb > eps in at most ~5% of repeats."""
    rng = np.random.default_rng(3)
    mu, delta = 2.0, 1e-3
    true_eps = audit.gaussian_audit_epsilon(mu, delta)
    exceed = 0
    reps = 60
    for _ in range(reps):
        a = rng.normal(size=3000)
        b = rng.normal(size=3000) + mu
        res = audit.epsilon_lower_bound(a, b, delta=delta)
        exceed += res.epsilon_lower_bound > true_eps
    assert exceed <= 0.1 * reps  # expected 0-3 at 95% confidence (CP is conservative)


def test_auto_threshold_uses_a_separate_split():
    """The threshold is selected on the first half: corrupting only that half changes the
    threshold, corrupting only the counted half changes the counts (not the threshold)."""
    rng = np.random.default_rng(4)
    a = rng.normal(size=2000)
    b = rng.normal(size=2000) + 3
    base = audit.epsilon_lower_bound(a, b, delta=1e-5)
    assert base.n_counted == 1000
    a2 = a.copy()
    a2[1000:] = rng.normal(size=1000)  # new counted half, same selection half
    res = audit.epsilon_lower_bound(a2, b, delta=1e-5)
    assert res.threshold == base.threshold and res.orientation == base.orientation


def test_orientation_is_found_automatically():
    """A statistic that is *smaller* under D' is audited just as well as its negation."""
    rng = np.random.default_rng(5)
    a = rng.normal(size=10_000)
    b = rng.normal(size=10_000) + 2.5
    r1 = audit.epsilon_lower_bound(a, b, delta=1e-5)
    r2 = audit.epsilon_lower_bound(-a, -b, delta=1e-5)
    assert r1.epsilon_lower_bound == pytest.approx(r2.epsilon_lower_bound, rel=1e-9)
    assert r1.epsilon_lower_bound > 1.5


@pytest.mark.parametrize(
    "kwargs,err",
    [
        ({"delta": -0.1}, ValueError),
        ({"delta": 1.0}, ValueError),
        ({"delta": "0.1"}, TypeError),
        ({"delta": 1e-5, "confidence": 1.0}, ValueError),
        ({"delta": 1e-5, "confidence": 0.0}, ValueError),
        ({"delta": 1e-5, "threshold": "best"}, ValueError),
        ({"delta": 1e-5, "threshold": float("nan")}, ValueError),
        ({"delta": 1e-5, "claimed_epsilon": -1.0}, ValueError),
    ],
)
def test_epsilon_lower_bound_rejects_bad_arguments(kwargs, err):
    """Bad delta/confidence/threshold/claims raise before anything is computed."""
    with pytest.raises(err):
        audit.epsilon_lower_bound(np.zeros(10), np.ones(10), **kwargs)


@pytest.mark.parametrize(
    "a,b",
    [
        (np.zeros((5, 2)), np.zeros(5)),
        (np.zeros(5), np.array([0.0, np.nan, 1.0])),
        (np.zeros(5), np.array([0.0, np.inf, 1.0])),
        (np.zeros(0), np.zeros(5)),
        (np.zeros(5), np.array(["a", "b"])),
    ],
)
def test_epsilon_lower_bound_rejects_bad_samples(a, b):
    """Wrong rank, NaN/Inf, empty or non-numeric statistics are refused."""
    with pytest.raises((ValueError, TypeError)):
        audit.epsilon_lower_bound(a, b, delta=1e-5)


def test_gaussian_audit_epsilon_matches_closed_form_delta():
    """eps(mu) solves Phi(-eps/mu+mu/2) - e^eps Phi(-eps/mu-mu/2) = delta (Balle & Wang)."""
    for mu in (0.3, 1.0, 3.0):
        eps = audit.gaussian_audit_epsilon(mu, 1e-5)
        d = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
        assert d == pytest.approx(1e-5, rel=1e-6)


# --------------------------------------------------------------------------- #
# Auditing JAX mechanisms
# --------------------------------------------------------------------------- #


def _gaussian_mech(std):
    import jax

    def mech(key, value):
        return value + std * jax.random.normal(key, value.shape)

    return mech


def test_audit_gaussian_release_passes_calibrated_and_catches_quarter_noise():
    """Analytic-Gaussian noise for eps=1 passes; the same noise / 4 is refuted."""
    import jax.numpy as jnp

    from privkernels import privacy

    sigma = float(privacy.gaussian_sigma(1.0, 1e-5))
    d, dp = jnp.zeros(4), jnp.array([0.0, 0.6, 0.8, 0.0])  # ||d - d'|| = 1
    import jax

    ok = audit.audit_gaussian_release(
        jax.random.key(0), _gaussian_mech(sigma), d, dp, epsilon=1.0, delta=1e-5, trials=20_000
    )
    bad = audit.audit_gaussian_release(
        jax.random.key(0), _gaussian_mech(sigma / 4), d, dp, epsilon=1.0, delta=1e-5, trials=20_000
    )
    assert ok.passed and ok.epsilon_lower_bound < 1.0
    assert not bad.passed and bad.epsilon_lower_bound > 1.5
    assert ok.claimed_epsilon == 1.0 and ok.trials == 20_000


def test_audit_vmap_and_loop_agree():
    """Vectorised (vmap over keys) and looped runs see the same per-trial keys."""
    import jax
    import jax.numpy as jnp

    mech = _gaussian_mech(1.0)
    a = audit.run_trials(jax.random.key(3), mech, jnp.zeros(2), 25, vectorize=True, batch_size=7)
    b = audit.run_trials(jax.random.key(3), mech, jnp.zeros(2), 25, vectorize=False)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert a.shape == (25, 2)


def test_audit_gaussian_release_fixed_direction_and_validation():
    """A fixed (auditor-known) direction works; mismatched sizes and bad args raise."""
    import jax
    import jax.numpy as jnp

    d, dp = jnp.zeros(3), jnp.array([1.0, 0.0, 0.0])
    res = audit.audit_gaussian_release(
        jax.random.key(1),
        _gaussian_mech(0.2),
        d,
        dp,
        epsilon=1.0,
        delta=1e-5,
        trials=4000,
        direction=np.array([1.0, 0.0, 0.0]),
    )
    assert not res.passed  # noise std 0.2 at sensitivity 1 is far from eps=1
    with pytest.raises(ValueError):
        audit.audit_gaussian_release(
            jax.random.key(1),
            _gaussian_mech(1.0),
            d,
            dp,
            epsilon=1.0,
            delta=1e-5,
            trials=100,
            direction=np.ones(2),
        )
    with pytest.raises(TypeError):
        audit.audit_gaussian_release(0, _gaussian_mech(1.0), d, dp, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError):
        audit.audit_gaussian_release(
            jax.random.key(1), _gaussian_mech(1.0), d, dp, epsilon=0.0, delta=1e-5
        )
    with pytest.raises(ValueError):
        audit.audit_gaussian_release(
            jax.random.key(1), _gaussian_mech(1.0), d, dp, epsilon=1.0, delta=1e-5, trials=5
        )


def test_audit_result_summary_mentions_verdict():
    """AuditResult.summary states the bound, the claim and the verdict."""
    res = audit.epsilon_lower_bound(
        np.zeros(100), np.ones(100), delta=0.0, threshold=0.5, claimed_epsilon=1.0
    )
    s = res.summary()
    assert "FAIL" in s and "claimed eps=1" in s
