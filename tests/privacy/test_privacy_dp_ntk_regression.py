"""Privacy verification of DP NTK regression (privkernels.dp_ntk_regression).

Released quantities (beta-close neighbours, Gu et al. Def. 4.1):

* ``K~ = (1/k) sum_j g_j g_j^T``, ``g_j ~ N(0, K + sI)`` (Gaussian sampling
  mechanism, Lemma D.1): private when ``M = ||K^{1/2} K'^{-1} K^{1/2} - I||_F
  <= Delta(k) = min(eps/sqrt(8k log(1/delta)), eps/(8 log(1/delta)))``.
* ``X~ = X + TLap(sqrt(d) beta, eps_X, delta_X)`` per coordinate (Lemma G.2;
  L1 sensitivity sqrt(d) beta).

What the audits cover. Beta-close kernel matrices are nearly identical, so an
end-to-end audit of ``K~`` is vacuous (its bound is ~0). Instead:
(1) property tests that the implementation's bound on M really bounds M for
beta-close pairs, and that fit only uses a k with ``M_bound <= Delta(k)``;
(2) an EXACT privacy-profile computation for commuting pairs (one diagonal entry
scaled by 1+M), where the k Gaussian samples reduce to a scaled chi-square and
eps(delta) is computable in closed form, showing the condition ``M <= Delta(k)``
is sufficient there and that k far beyond it is not;
(3) Monte-Carlo audits of ``privacy.gaussian_sampling_mechanism`` itself (the one
implementation of Alg. 1, which fit calls) on such pairs, on both of its
factorization paths (Cholesky and the eigh fallback): at the allowed k it passes;
with k x600 or with M x40 (a sensitivity bound that is wrong) it is refuted. For ``X~`` the audit of
``privacy.truncated_laplace`` at the parameters fit passes it is nearly tight.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import key_bytes, spy_privacy
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from privkernels import audit, privacy
from privkernels import dp_ntk_regression as reg
from privkernels.dp_ntk_regression.kernel import input_map
from privkernels.privacy import mechanisms


def _delta_k(eps: float, delta: float, k: int) -> float:
    """Def. 5.2: Delta(k) = min(eps / sqrt(8 k log(1/delta)), eps / (8 log(1/delta)))."""
    lg = math.log(1 / delta)
    return min(eps / math.sqrt(8 * k * lg), eps / (8 * lg))


def _chi2_delta(eps: float, a: float, b: float, k: int) -> float:
    """delta_{P||Q}(eps) for P = a chi2_k, Q = b chi2_k (sum of squares of k samples).

    log p/q (T) = (k/2) log(b/a) - (T/2)(1/a - 1/b) is monotone in T, so the
    optimal set is a tail of T and delta(eps) = P(S) - e^eps Q(S) exactly.
    """
    c0 = 0.5 * k * math.log(b / a)
    c1 = 0.5 * (1 / a - 1 / b)
    if c1 > 0:  # privacy loss decreasing in T: S = {T < t}
        t = (c0 - eps) / c1
        if t <= 0:
            return 0.0
        return stats.chi2.cdf(t / a, k) - math.exp(eps) * stats.chi2.cdf(t / b, k)
    t = (eps - c0) / (-c1)  # increasing: S = {T > t}
    t = max(t, 0.0)
    return stats.chi2.sf(t / a, k) - math.exp(eps) * stats.chi2.sf(t / b, k)


def _chi2_epsilon(delta: float, a: float, b: float, k: int) -> float:
    """Exact eps(delta) of the pair (both directions) via root finding."""

    def f(e):
        return max(_chi2_delta(e, a, b, k), _chi2_delta(e, b, a, k)) - delta

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return optimize.brentq(f, 0.0, hi, xtol=1e-10)


# --------------------------------------------------------------------------- #
# Sensitivity: beta-close inputs, kernel M, TLap L1
# --------------------------------------------------------------------------- #


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    log_beta=st.floats(-4, -1),
    scale=st.floats(0.1, 3.0),
)
def test_beta_close_kernel_change_is_bounded(seed, log_beta, scale):
    """For beta-close inputs (after the ball projection) the kernel moves by at most the fixed-weights
    bound: ||K-K'||_F <= 2||S|| B^3 beta sqrt(2n+2) and M <= sensitivity_bound(...)['fixed_weights']."""
    n, d = 5, 3  # fixed shapes: one compilation
    rng = np.random.default_rng(seed)
    beta = 10.0**log_beta
    shift = 0.5
    w = reg.draw_weights(jax.random.key(seed % 1000), d, width=32)
    x = scale * rng.normal(size=(n, d))
    x2 = x.copy()
    v = rng.normal(size=d)
    x2[-1] = x[-1] + beta * rng.uniform(0, 1) * v / np.linalg.norm(v)
    with jax.enable_x64(True):
        xp = reg.project_to_ball(jnp.asarray(x, jnp.float64), 1.0)
        xp2 = reg.project_to_ball(jnp.asarray(x2, jnp.float64), 1.0)
        assert float(jnp.linalg.norm(xp - xp2)) <= beta * (1 + 1e-9)  # projection is 1-Lipschitz
        # TLap L1 sensitivity per record: ||x - x'||_1 <= sqrt(d) beta
        assert float(jnp.abs(xp - xp2).sum()) <= math.sqrt(d) * beta * (1 + 1e-9)
        w64 = jnp.asarray(w, jnp.float64)
        k1 = np.asarray(reg.kernel.kernel_matrix(xp, xp, w64)) + shift * np.eye(n)
        k2 = np.asarray(reg.kernel.kernel_matrix(xp2, xp2, w64)) + shift * np.eye(n)
    s_norm = np.linalg.eigvalsh(np.asarray(w, np.float64).T @ np.asarray(w, np.float64) / 32)[-1]
    assert np.linalg.norm(k1 - k2) <= 2 * s_norm * beta * math.sqrt(2 * n + 2) * (1 + 1e-6) + 1e-12
    ev, vec = np.linalg.eigh(k1)
    half = vec @ np.diag(np.sqrt(ev)) @ vec.T
    m_actual = np.linalg.norm(half @ np.linalg.inv(k2) @ half - np.eye(n))
    bound = reg.sensitivity_bound(n, eta_min=shift, beta=beta, weights=w)
    assert m_actual <= bound["fixed_weights"] * (1 + 1e-6) + 1e-12
    assert m_actual <= bound["used"] * (1 + 1e-6) + 1e-12


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(2, 50),
    eps=st.floats(0.05, 0.99),
    log_delta=st.floats(-9, -2),
    log_beta=st.floats(-9, -5),
    eta=st.floats(1e-3, 1.0),
)
def test_max_k_satisfies_the_privacy_condition(n, eps, log_delta, log_beta, eta):
    """max_k returns the largest k with M_bound <= Delta(k) (Def. 5.2), or raises when none."""
    delta, beta = 10.0**log_delta, 10.0**log_beta
    w = reg.draw_weights(jax.random.key(n), 4, width=16)
    m = reg.sensitivity_bound(n, eta_min=eta, beta=beta, weights=w)["used"]
    try:
        k = reg.max_k(n, epsilon_alpha=eps, delta_alpha=delta, eta_min=eta, beta=beta, weights=w)
    except ValueError:
        assert m > _delta_k(eps, delta, 1) * (1 - 1e-9)
        return
    assert k >= 1
    assert m <= _delta_k(eps, delta, k) * (1 + 1e-9)
    assert m > _delta_k(eps, delta, k + 1) * (1 - 1e-9) or _delta_k(eps, delta, k + 1) == _delta_k(
        eps, delta, 1
    )


def test_fit_refuses_k_above_the_private_maximum():
    """fit with k larger than max_k (the broken variant at the method level) raises ValueError."""
    x = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    y = np.array([0, 1, 0, 1, 0, 1])
    kw = dict(epsilon=0.8, delta=1e-5, beta=1e-6, kernel_shift=0.5, width=16,
              neighbouring="beta-close")  # fmt: skip
    model = reg.fit(jax.random.key(0), x, y, **kw)
    rec = model.report.mechanisms[0]
    assert 1 <= model.k == rec.param_dict["k_max"]
    assert rec.param_dict["m_bound_fixed_weights"] <= _delta_k(rec.epsilon, rec.delta, model.k)
    with pytest.raises(ValueError, match="k="):
        reg.fit(jax.random.key(0), x, y, k=model.k + 1, **kw)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_fit_calls_the_mechanisms_with_the_stated_parameters(monkeypatch, fit_intercept):
    """fit passes TLap sensitivity sqrt(d) beta with (eps_X, delta_X), the gaussian sampling mechanism
    its k, uses three distinct subkeys (none is the user key) and releases X~ = map(X) + TLap noise
    (with an intercept: noise on the d data columns only, the public constant column exact)."""
    tl = spy_privacy(monkeypatch, "truncated_laplace")
    gs = spy_privacy(monkeypatch, "gaussian_sampling_mechanism")
    rng = np.random.default_rng(1)
    n, d = 6, 4
    x = (0.3 * rng.normal(size=(n, d))).astype(np.float32)
    y = np.array([0, 1, 0, 1, 0, 1])
    key = jax.random.key(5)
    beta = 1e-6
    model = reg.fit(
        key,
        x,
        y,
        epsilon=0.8,
        delta=1e-5,
        beta=beta,
        kernel_shift=0.5,
        width=16,
        split=(0.25, 0.75),
        neighbouring="beta-close",
        fit_intercept=fit_intercept,
    )
    assert len(tl) == 1 and len(gs) == 1
    kw = tl[0].kwargs
    assert kw["sensitivity"] == pytest.approx(math.sqrt(d) * beta)
    assert kw["epsilon"] == pytest.approx(0.8 * 0.75)
    assert kw["delta"] == pytest.approx(1e-5 * 0.75)
    k_arg = gs[0].args[2] if len(gs[0].args) > 2 else gs[0].kwargs["k"]
    assert k_arg == model.k
    xp = np.asarray(input_map(jnp.asarray(x), 1.0, fit_intercept))
    assert model.x_tilde.shape == (n, d + int(fit_intercept)) == xp.shape
    assert np.asarray(tl[0].result).shape == (n, d)
    np.testing.assert_allclose(
        np.asarray(model.x_tilde)[:, :d] - xp[:, :d], np.asarray(tl[0].result), atol=1e-6
    )
    if fit_intercept:
        assert np.all(np.asarray(model.x_tilde)[:, d] == np.float32(1.0 / math.sqrt(2.0)))
        assert np.all(np.linalg.norm(xp, axis=1) <= 1.0 + 1e-6)
    keys = {key_bytes(tl[0].args[0]), key_bytes(gs[0].args[0])}
    assert len(keys) == 2 and key_bytes(key) not in keys
    # the realised input noise is not what the user's key itself would give
    naive = privacy.truncated_laplace(
        key, (n, d), sensitivity=kw["sensitivity"], epsilon=kw["epsilon"], delta=kw["delta"]
    )
    assert not np.allclose(np.asarray(naive), np.asarray(tl[0].result))
    rep = model.report
    assert rep.neighbouring == privacy.BETA_CLOSE
    assert rep.epsilon == pytest.approx(0.8) and rep.delta == pytest.approx(1e-5)


# --------------------------------------------------------------------------- #
# Exact privacy profile of the Gaussian sampling mechanism on commuting pairs
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("eps", [0.3, 0.9])
@pytest.mark.parametrize("k", [1, 8, 92, 500, 5000])
def test_gaussian_sampling_condition_is_sufficient_on_commuting_pairs(eps, k):
    """With M = Delta(k) exactly (one eigenvalue scaled by 1 +- M), the exact eps(delta) of k Gaussian
    samples is <= the claimed eps (Lemma D.1 Part 1 holds on this family)."""
    delta = 1e-5
    m = _delta_k(eps, delta, k)
    for b in (1 / (1 + m), 1 / (1 - m)):
        assert _chi2_epsilon(delta, 1.0, b, k) <= eps


def test_gaussian_sampling_with_k_far_too_large_violates_the_claim():
    """Broken variant (exact): at the same pair, k 1000x the allowed value exceeds the claim."""
    eps, delta = 0.9, 1e-5
    k0 = 92
    m = _delta_k(eps, delta, k0)
    assert _chi2_epsilon(delta, 1.0, 1 / (1 + m), k0) <= eps
    assert _chi2_epsilon(delta, 1.0, 1 / (1 + m), 1000 * k0) > eps


# --------------------------------------------------------------------------- #
# Monte-Carlo audits of the mechanisms fit uses
# --------------------------------------------------------------------------- #

GS_EPS, GS_DELTA = 0.9, 1e-2

#: Alg. 1 has one implementation (privacy.gaussian_sampling_mechanism, which fit calls) with two
#: factorization paths: Cholesky (every positive definite K, e.g. the K + sI of fit) and the exact
#: eigh fallback (singular K). Both are audited; "eigh" forces the fallback by making the Cholesky
#: attempt fail the way a real failure does (non-finite factor).
GS_PATHS = ["cholesky", "eigh"]


@pytest.fixture
def gs_path(request, monkeypatch):
    """Select the factorization path of privacy.gaussian_sampling_mechanism; check it is taken."""
    calls = {"cholesky": 0, "eigh": 0}
    chol, eigh = mechanisms._cholesky_factor, mechanisms._eigh_factor

    def cholesky(kmat):
        calls["cholesky"] += 1
        lfac, ok = chol(kmat)
        if request.param == "eigh":
            return jnp.full_like(lfac, jnp.nan), jnp.asarray(False)
        return lfac, ok

    def eigh_factor(kmat):
        calls["eigh"] += 1
        return eigh(kmat)

    monkeypatch.setattr(mechanisms, "_cholesky_factor", cholesky)
    monkeypatch.setattr(mechanisms, "_eigh_factor", eigh_factor)
    yield request.param
    assert calls["cholesky"] >= 1
    assert (calls["eigh"] >= 1) == (request.param == "eigh"), calls


def _gs_audit(key, k, m_scale=1.0, trials=20_000, batch_size=None):
    """Audit Alg. 1 on Sigma = I_2 vs Sigma' = diag(1/(1+M), 1), M = m_scale Delta(k0)."""
    k0 = 36  # the second branch of Delta binds for k <= 8 log(1/delta) = 36.8
    m = _delta_k(GS_EPS, GS_DELTA, k0) * m_scale
    s = jnp.eye(2, dtype=jnp.float32)
    s2 = jnp.diag(jnp.asarray([1 / (1 + m), 1.0], jnp.float32))

    def mech(kk, sigma):
        return privacy.gaussian_sampling_mechanism(kk, sigma, k, epsilon=0.5, delta=1e-5)

    return audit.audit_gaussian_release(
        key,
        mech,
        s,
        s2,
        epsilon=GS_EPS,
        delta=GS_DELTA,
        trials=trials,
        direction=np.array([1.0, 0, 0, 0]),
        batch_size=batch_size,
    )


@pytest.mark.parametrize("gs_path", GS_PATHS, indirect=True)
@pytest.mark.parametrize("k", [1, 7, 5000])
def test_gaussian_sampling_output_distribution(gs_path, k):
    """k * K~[i,i] / K[i,i] ~ chi2_k, K~ symmetric PSD with mean K (Alg. 1), for explicit sampling
    (k <= n) and the Bartlett/Wishart path (k > n), on both factorization paths: KS tests with
    fixed keys."""
    sig = jnp.asarray([[2.0, 0.5], [0.5, 1.0]], jnp.float32)
    out = jax.vmap(
        lambda kk: privacy.gaussian_sampling_mechanism(kk, sig, k, epsilon=0.5, delta=1e-5)
    )(jax.random.split(jax.random.key(3), 3000))
    out = np.asarray(out, np.float64)
    np.testing.assert_allclose(out, np.swapaxes(out, 1, 2), atol=1e-5)
    assert np.all(np.linalg.eigvalsh(out) > -1e-5)
    assert stats.kstest(k * out[:, 0, 0] / 2.0, stats.chi2(k).cdf).pvalue > 1e-3
    assert stats.kstest(k * out[:, 1, 1] / 1.0, stats.chi2(k).cdf).pvalue > 1e-3
    np.testing.assert_allclose(out.mean(0), np.asarray(sig), atol=0.15 if k == 1 else 0.05)
    # off-diagonal: Var(K~_01) = (K_01^2 + K_00 K_11) / k
    assert np.var(out[:, 0, 1]) == pytest.approx((0.25 + 2.0) / k, rel=0.15)


@pytest.mark.parametrize("gs_path", GS_PATHS, indirect=True)
def test_gaussian_sampling_audit_passes_at_allowed_k(gs_path):
    """Allowed k and worst allowed pair: the audited lower bound stays below eps_alpha."""
    res = _gs_audit(jax.random.key(40), k=36)
    assert res.passed, res.summary()


@pytest.mark.parametrize("gs_path", GS_PATHS, indirect=True)
def test_gaussian_sampling_audit_catches_wrong_sensitivity_bound(gs_path):
    """Broken variant: the true M is 40x the bound that chose k -> refuted."""
    res = _gs_audit(jax.random.key(41), k=36, m_scale=40.0)
    assert not res.passed, res.summary()


@pytest.mark.parametrize("gs_path", GS_PATHS, indirect=True)
def test_gaussian_sampling_audit_catches_k_far_too_large(gs_path):
    """Broken variant: k = 600 x the allowed k at the worst allowed pair -> refuted."""
    res = _gs_audit(jax.random.key(42), k=36 * 600)
    assert not res.passed, res.summary()


TL_EPS, TL_DELTA = 1.0, 1e-5


def _tlap_audit(key, scale_factor=1.0, d=1):
    """x + TLap(sens, eps, delta) on the worst L1 pair 0 vs sens*e_0 (d=1: tight)."""
    sens = 0.3

    def mech(k, v):
        noise = privacy.truncated_laplace(
            k, v.shape, sensitivity=sens * scale_factor, epsilon=TL_EPS, delta=TL_DELTA
        )
        return v + noise

    x = jnp.zeros((d,), jnp.float32)
    x2 = x.at[0].set(sens)
    direction = np.zeros(d)
    direction[0] = 1.0
    return audit.audit_gaussian_release(
        key, mech, x, x2, epsilon=TL_EPS, delta=TL_DELTA, trials=50_000, direction=direction
    )


def test_truncated_laplace_distribution_matches_exact_cdf():
    """TLap(Delta, eps, delta) samples follow the density prop. to exp(-|z| eps/Delta) on [-B, B],
    B = (Delta/eps) log(1 + (e^eps - 1)/(2 delta)) (Gu et al. Sec. 3.2): KS vs the exact CDF."""
    sens, eps, delta = 0.7, 0.5, 1e-4
    lam = sens / eps
    b = lam * math.log(1 + (math.exp(eps) - 1) / (2 * delta))
    assert privacy.truncated_laplace_bound(sens, eps, delta) == pytest.approx(b, rel=1e-6)
    z = np.asarray(
        privacy.truncated_laplace(
            jax.random.key(8), (40_000,), sensitivity=sens, epsilon=eps, delta=delta
        ),
        np.float64,
    )
    assert np.all(np.abs(z) <= b * (1 + 1e-6))
    norm = 2 * lam * (1 - math.exp(-b / lam))

    def cdf(t):
        t = np.clip(t, -b, b)
        neg = lam * (np.exp(np.minimum(t, 0) / lam) - math.exp(-b / lam))
        pos = lam * (1 - np.exp(-np.maximum(t, 0) / lam))
        return (neg + pos) / norm

    assert stats.kstest(z, cdf).pvalue > 1e-3


def test_truncated_laplace_audit_passes():
    """Worst-case 1-D pair at the claimed (eps, delta): lb <= eps (the mechanism is nearly tight)."""
    res = _tlap_audit(jax.random.key(50))
    assert res.passed, res.summary()
    assert res.epsilon_lower_bound > 0.3  # the audit has power on a tight mechanism


def test_truncated_laplace_audit_catches_quarter_scale():
    """Broken variant: scale for sensitivity beta instead of sqrt(d) beta (d=16, i.e. /4) -> refuted."""
    res = _tlap_audit(jax.random.key(50), scale_factor=0.25)
    assert not res.passed, res.summary()
    assert res.epsilon_lower_bound > 2.0


def test_a_resume_never_hands_back_another_beta_or_an_unproven_report(tmp_path):
    """Resuming returns the saved model only under the guarantee asked for: beta is what the
    beta-close relation hides, so another beta is refused; a report marked unproven comes back
    only with ``allow_unproven=True``, as a fresh fit at that budget would require."""
    x = np.random.default_rng(4).normal(size=(20, 3)).astype(np.float32)
    ck = tmp_path / "unproven.npz"
    kw = dict(epsilon=4.0, checkpoint_path=ck, neighbouring="beta-close")  # eps_alpha = 2 >= 1
    saved = reg.fit(jax.random.key(0), x, np.arange(20) % 2, n_classes=2, allow_unproven=True,
                    **kw)  # fmt: skip
    assert not saved.report.proven
    with pytest.raises(ValueError, match="unproven"):
        reg.fit(jax.random.key(0), None, None, resume=True, **kw)
    with pytest.raises(ValueError, match="beta"):
        reg.fit(jax.random.key(0), None, None, resume=True, beta=1e-2, allow_unproven=True, **kw)
    back = reg.fit(jax.random.key(0), None, None, resume=True, allow_unproven=True, **kw)
    assert back.report.to_dict() == saved.report.to_dict()
