"""Privacy verification of replace-one DP NTK regression (sufficient-statistics perturbation).

Released: ``(upper(Psi^T Psi), Psi^T Y)`` with one Gaussian mechanism of L2
sensitivity ``sqrt(2 + 4 B_y^2)`` (rows of Psi clipped to norm 1, of Y to B_y).
Tested here: the sensitivity bound on worst-case and hostile neighbour pairs,
that fit hands the mechanism exactly that sensitivity and the analytic-Gaussian
sigma of its budget, the noise scale (a statistical test), validation before
any noise, and the report.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import NoiseDrawn, forbid_noise, spy_privacy
from scipy import stats

from privkernels import dp_ntk_regression as reg
from privkernels import privacy
from privkernels.dp_ntk_regression import replace_one as r1
from privkernels.dp_ntk_regression.kernel import draw_weights, input_map


def _released(x, y, w, sketch, target_bound):
    s, b = r1.sufficient_statistics(jnp.asarray(x), jnp.asarray(y), w, sketch,
                                    target_bound=target_bound, chunk_size=7)  # fmt: skip
    iu = np.triu_indices(s.shape[0])
    return np.concatenate([np.asarray(s, np.float64)[iu], np.asarray(b, np.float64).ravel()])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("target_bound", [1.0, 3.0])
def test_replace_one_sensitivity_bound_holds(seed, target_bound):
    rng = np.random.default_rng(seed)
    d, m, D, n, c = 6, 8, 16, 20, 3
    k = jax.random.key(seed)
    w = draw_weights(k, d + 1, width=m)
    sketch = r1.draw_sketch(jax.random.fold_in(k, 1), d + 1, m, D, jnp.float32)
    scale = 10.0 ** rng.uniform(-3, 3)  # tiny to huge raw rows: the ball map bounds them
    x = input_map(jnp.asarray(rng.normal(size=(n, d)) * scale, jnp.float32), 1.0, True)
    y = rng.normal(size=(n, c)) * 5.0  # target rows far beyond the bound: clipped
    bound = r1.ssp_sensitivity(target_bound)
    base = _released(x, y, w, sketch, target_bound)
    worst = 0.0
    for _ in range(25):
        i = int(rng.integers(n))
        x2, y2 = np.array(x), np.array(y)
        x2[i] = np.asarray(
            input_map(jnp.asarray(rng.normal(size=(1, d)) * 1e3, jnp.float32), 1.0, True)
        )[0]
        y2[i] = -y[i] * rng.uniform(0.5, 50.0)  # opposite target: the b term's worst direction
        worst = max(worst, float(np.linalg.norm(_released(x2, y2, w, sketch, target_bound) - base)))
    assert worst <= bound * (1 + 1e-5), (worst, bound)
    assert worst > 0.3 * bound  # the pairs probe the bound, not a tiny corner


@pytest.mark.parametrize("weight_std", [1.0, 5.0])
def test_feature_rows_have_norm_at_most_one(weight_std):
    k = jax.random.key(0)
    w = draw_weights(k, 5, width=16, weight_std=weight_std)  # std 5: raw rows of norm ~25
    sketch = r1.draw_sketch(jax.random.fold_in(k, 1), 5, 16, 64, jnp.float32)
    x = input_map(
        jnp.asarray(np.random.default_rng(0).normal(size=(50, 4)) * 1e4, jnp.float32), 1.0, True
    )
    psi = r1.ssp_features(x, w, sketch, 16)
    norms = np.linalg.norm(psi.astype(np.float64), axis=1)
    assert norms.max() <= 1.0 + 1e-6
    assert norms.max() > 0.9  # the rows reach the bound (clipped, not vanishing)


def test_fit_uses_the_stated_sensitivity_and_sigma(monkeypatch):
    calls = spy_privacy(monkeypatch, "gaussian_mechanism")
    x = np.random.default_rng(1).normal(size=(80, 5)).astype(np.float32)
    y = np.arange(80) % 3
    model = reg.fit(jax.random.key(2), x, y, epsilon=0.7, delta=2e-5, n_classes=3,
                    neighbouring="replace-one", features=32, target_bound=1.0)  # fmt: skip
    assert len(calls) == 1
    kw = calls[0].kwargs
    assert kw["sensitivity"] == pytest.approx(np.sqrt(6.0))
    assert kw["sigma"] == pytest.approx(privacy.gaussian_sigma(0.7, 2e-5))
    rep = model.report
    assert rep.neighbouring == "replace-one" and rep.private and rep.proven
    assert rep.epsilon == pytest.approx(0.7) and rep.delta == pytest.approx(2e-5)
    assert not any("LABELS ARE NOT PROTECTED" in n for n in rep.notes)
    assert model.config.ridge > model.config.reg  # the noise-scaled ridge was added


def test_release_noise_has_the_stated_std():
    D, c = 24, 2
    s = jnp.zeros((D, D))
    b = jnp.zeros((D, c))
    budget = privacy.Budget(1.0, 1e-5)
    s_t, b_t, rec, std = r1.release_statistics(jax.random.key(5), s, b, budget=budget,
                                               target_bound=1.0, n=100)  # fmt: skip
    expected = privacy.gaussian_sigma(1.0, 1e-5) * np.sqrt(6.0)
    assert std == pytest.approx(expected)
    noise = np.concatenate([np.asarray(s_t)[np.triu_indices(D)], np.asarray(b_t).ravel()])
    assert np.allclose(np.asarray(s_t), np.asarray(s_t).T)
    # chi-square test of the variance (n = 348 draws): the std is the stated one
    n = noise.size
    stat = np.sum(noise**2) / expected**2
    assert stats.chi2.cdf(stat, n) > 1e-4 and stats.chi2.sf(stat, n) > 1e-4
    assert abs(np.mean(noise)) < 5 * expected / np.sqrt(n)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=1.0), "delta"),
        (dict(delta=0.0), "delta"),
        (dict(k=10), "beta-close"),
        (dict(eta_min=0.1), "beta-close"),
        (dict(features=0), "features"),
        (dict(target_bound=0.0), "target_bound"),
        (dict(ridge_factor=-1.0), "ridge_factor"),
        (dict(neighbouring="add-one"), "neighbouring"),
    ],
)
def test_bad_input_is_refused_before_any_noise(monkeypatch, change, match):
    x = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
    y = np.arange(30) % 2
    forbid_noise(monkeypatch)
    kw = dict(epsilon=1.0, n_classes=2, neighbouring="replace-one", features=16)
    kw.update(change)
    try:
        with pytest.raises(ValueError, match=match):
            reg.fit(jax.random.key(0), x, y, **kw)
    except NoiseDrawn as err:  # pragma: no cover - the failure this test exists for
        pytest.fail(str(err))


def test_nan_and_empty_inputs_are_refused(monkeypatch):
    forbid_noise(monkeypatch)
    x = np.ones((10, 3), np.float32)
    x[2, 1] = np.nan
    with pytest.raises(ValueError):
        reg.fit(jax.random.key(0), x, np.arange(10) % 2, epsilon=1.0, n_classes=2,
                neighbouring="replace-one")  # fmt: skip
    with pytest.raises(ValueError):
        reg.fit(jax.random.key(0), np.ones((10, 0), np.float32), np.arange(10) % 2, epsilon=1.0,
                n_classes=2, neighbouring="replace-one")  # fmt: skip


def test_replace_one_fit_roundtrip_and_determinism(tmp_path):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    kw = dict(epsilon=10.0, n_classes=10, neighbouring="replace-one", features=128)
    m1 = reg.fit(jax.random.key(4), x[:1000], y[:1000], **kw)
    m2 = reg.fit(jax.random.key(4), x[:1000], y[:1000], **kw)
    np.testing.assert_array_equal(np.asarray(m1.alpha), np.asarray(m2.alpha))
    acc = np.mean(reg.predict_labels(m1, x[1000:]) == y[1000:])
    assert acc > 0.6  # eps 10 on 1000 digits (0.8-0.9 measured); chance is 0.1
    back = reg.load(m1.save(tmp_path / "r1.npz"))
    np.testing.assert_array_equal(reg.predict(back, x[1000:1100]), reg.predict(m1, x[1000:1100]))
    assert back.report == m1.report and back.config == m1.config
    m3 = reg.fit(jax.random.key(5), x[:1000], y[:1000], **kw)
    assert not np.array_equal(
        np.asarray(m3.alpha), np.asarray(m1.alpha)
    )  # noise drawn from the key


def _ssp_audit(seed: int, sensitivity_scale: float, monkeypatch):
    """Audit sketch -> clip -> statistics -> release at eps 1 on a bad replace-one pair.

    A hand-set sketch (d=2, m=1, D=2) maps x to (x1, x2) (x1 + x2) / sqrt(2): D's row
    (5, 0) with label 0 and D''s row (0, -3) with label 1 clip to e1 and e2, so the
    released vector moves by 2 (bound sqrt(6)). ``sensitivity_scale`` < 1 is the
    deliberately broken variant (the shipped release told a smaller bound).
    """
    from privkernels import audit
    from privkernels.privacy.budget import as_budget

    true_bound = r1.ssp_sensitivity
    monkeypatch.setattr(r1, "ssp_sensitivity", lambda b: true_bound(b) * sensitivity_scale)
    w, sketch = jnp.ones((1, 2)), (jnp.eye(2), jnp.ones((2, 1)))
    d = (np.array([[5.0, 0.0], [0.0, 1.0]]), np.eye(2)[[0, 1]])
    d_prime = (np.array([[0.0, -3.0], [0.0, 1.0]]), np.eye(2)[[1, 1]])
    iu = np.triu_indices(2)

    def stats(data):
        x, y = jnp.asarray(data[0], jnp.float32), jnp.asarray(data[1], jnp.float32)
        return r1.sufficient_statistics(x, y, w, sketch, target_bound=1.0, chunk_size=2)

    def mech(key, data):
        s, b = r1.release_statistics(key, *stats(data), budget=as_budget(1.0, 1e-5),
                                     target_bound=1.0, n=2)[:2]  # fmt: skip
        return jnp.concatenate([s[iu], b.reshape(-1)])

    (s0, b0), (s1, b1) = stats(d), stats(d_prime)
    diff = np.concatenate([np.asarray(s1 - s0)[iu], np.asarray(b1 - b0).ravel()])
    assert np.linalg.norm(diff) == pytest.approx(2.0, rel=1e-3)  # clipping keeps a 2.4e-4 margin
    return audit.audit_gaussian_release(
        jax.random.key(seed), mech, d, d_prime, epsilon=1.0, delta=1e-5, trials=20_000,
        direction=diff,
    )  # fmt: skip


def test_audit_passes_the_calibrated_release(monkeypatch):
    res = _ssp_audit(60, 1.0, monkeypatch)
    assert res.passed and res.epsilon_lower_bound < 1.0, res.summary()


def test_audit_catches_noise_for_a_quarter_of_the_bound(monkeypatch):
    """Broken variant: noise calibrated to sqrt(6)/4 with the pair at distance 2 -> refuted."""
    res = _ssp_audit(61, 0.25, monkeypatch)
    assert not res.passed and res.epsilon_lower_bound > 1.3, res.summary()
