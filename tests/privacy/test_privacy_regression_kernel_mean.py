"""Privacy verification of replace-one DP NTK regression with ``solver="kernel-mean"``.

Released: the class second moments ``M_c = sum_{y_i=c} x_i x_i^T / R^2`` of the
mapped inputs with one Gaussian mechanism of L2 sensitivity ``sqrt(2)`` (the
inner products of ``x (x) x`` are never negative). Tested here: the bound on
worst-case and hostile neighbour pairs (and that it is reached), that fit hands
the mechanism exactly that sensitivity and the budget's sigma, the noise scale
(a statistical test), validation before any noise, the label-read warning, and
save/load and key discipline.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import NoiseDrawn, forbid_noise, spy_privacy
from scipy import stats

from privkernels import dp_ntk_regression as reg
from privkernels import privacy
from privkernels.dp_ntk_regression import kernel_mean as km
from privkernels.dp_ntk_regression.kernel import input_map
from privkernels.privacy.warnings import PrivacyLeakWarning


def _moments(x, labels, bound, intercept):
    xp = input_map(jnp.asarray(x, jnp.float32), bound, intercept)
    return np.asarray(km.class_moments(xp, labels, 3, input_bound=bound, chunk_size=4), np.float64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bound, intercept", [(1.0, False), (2.5, True)])
def test_kernel_mean_sensitivity_bound_holds_and_is_reached(seed, bound, intercept):
    rng = np.random.default_rng(seed)
    n, d = 11, 5
    x = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-2, 3)  # tiny to huge: the ball map bounds
    labels = rng.integers(0, 3, n)
    base = _moments(x, labels, bound, intercept)
    worst = 0.0
    for trial in range(30):
        i = int(rng.integers(n))
        x2, l2 = x.copy(), labels.copy()
        if trial % 3 == 0:  # same label, a row orthogonal to x_i and far outside the ball
            v = rng.normal(size=d)
            v -= v @ x[i] / (x[i] @ x[i]) * x[i]
            x2[i] = v * 1e4
        elif trial % 3 == 1:  # another label, any row
            x2[i], l2[i] = rng.normal(size=d) * 1e3, (labels[i] + 1) % 3
        else:  # the opposite row, same label (x (x) x cannot tell -x from x)
            x2[i] = -x[i]
        worst = max(worst, float(np.linalg.norm(_moments(x2, l2, bound, intercept) - base)))
    assert worst <= km.SENSITIVITY * (1 + 1e-5), worst
    assert worst > 0.7 * km.SENSITIVITY  # the pairs probe the bound


def test_orthogonal_rows_of_one_class_attain_sqrt2():
    x = np.zeros((2, 4))
    x[0, 0] = 3.0  # projected to the unit sphere
    x2 = x.copy()
    x2[0] = [0.0, 5.0, 0.0, 0.0]
    diff = _moments(x2, np.array([1, 1]), 1.0, False) - _moments(x, np.array([1, 1]), 1.0, False)
    assert np.linalg.norm(diff) == pytest.approx(math.sqrt(2.0), rel=1e-6)


def test_fit_uses_the_stated_sensitivity_and_sigma(monkeypatch):
    calls = spy_privacy(monkeypatch, "gaussian_mechanism")
    x = np.random.default_rng(1).normal(size=(60, 5)).astype(np.float32)
    model = reg.fit(jax.random.key(2), x, np.arange(60) % 3, epsilon=0.7, delta=2e-5,
                    n_classes=3, neighbouring="replace-one", solver="kernel-mean")  # fmt: skip
    assert len(calls) == 1
    assert calls[0].kwargs["sensitivity"] == pytest.approx(math.sqrt(2.0))
    assert calls[0].kwargs["sigma"] == pytest.approx(privacy.gaussian_sigma(0.7, 2e-5))
    rep = model.report
    assert rep.neighbouring == "replace-one" and rep.private and rep.proven
    assert rep.epsilon == pytest.approx(0.7) and rep.delta == pytest.approx(2e-5)
    assert any("kernel-mean" in n for n in rep.notes)
    assert model.alpha.shape == (3, 6, 6) and model.config.solver == "kernel-mean"


def test_released_moments_have_the_stated_noise():
    c, d = 3, 12
    budget = privacy.Budget(1.0, 1e-5)
    noisy, rec = km.release_moments(jax.random.key(5), jnp.zeros((c, d, d)), budget=budget, n=50)
    noisy = np.asarray(noisy, np.float64)
    std = privacy.gaussian_sigma(1.0, 1e-5) * math.sqrt(2.0)
    assert float(dict(rec.params)["noise_std"]) == pytest.approx(std)
    assert np.allclose(noisy, np.swapaxes(noisy, 1, 2))
    iu = np.triu_indices(d, 1)
    diag = np.concatenate([np.diag(m) for m in noisy])
    off = np.concatenate([m[iu] for m in noisy])  # symmetrised: std / sqrt(2)
    for vals, s in ((diag, std), (off, std / math.sqrt(2.0))):
        stat = np.sum(vals**2) / s**2
        assert stats.chi2.cdf(stat, vals.size) > 1e-4 and stats.chi2.sf(stat, vals.size) > 1e-4


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(delta=1.0), "delta"),
        (dict(solver="mean"), "solver"),
        (dict(neighbouring="beta-close"), "replace-one"),
        (dict(features=16), "features"),
        (dict(ridge_factor=1.0), "ridge_factor"),
        (dict(target_bound=2.0), "target_bound"),
        (dict(k=5), "k does not apply"),
        (dict(dtype="float64"), "float32"),
        (dict(y=np.linspace(-1, 1, 30), n_classes=None), "class labels"),
        (dict(y=np.arange(30) % 4), "label"),  # a label outside n_classes
        (dict(input_bound=1e-20), "input_bound"),  # float32 norms would underflow
        (dict(input_bound=1e7), "input_bound"),
        (dict(mesh="any"), "mesh"),  # replace-one runs on one device: never ignored
        (dict(solver="ridge", mesh="any"), "mesh"),
        (dict(width=64), "width does not apply"),  # ignored by the limit: never silently
        (dict(weight_std=2.0), "weight_std"),
        (dict(reg=1.0), "reg does not apply"),
        (dict(beta=1e-3), "beta does not apply"),
        (dict(solver="ridge", beta=1e-3), "beta does not apply"),
        (dict(solver="ridge", split=(0.9, 0.1)), "split does not apply"),
        (dict(solver="ridge", kernel_shift=0.5), "kernel_shift does not apply"),
        (dict(allow_unproven=True), "allow_unproven"),
        (dict(solver="ridge", split=None), "split does not apply"),  # not a sequence
        (dict(solver="ridge", reg=1e-9), "reg must be"),  # the float32 solve would overflow
        (dict(solver="ridge", reg=1e-50, ridge_factor=0.0), "reg must be"),
    ],
)
def test_bad_input_is_refused_before_any_noise(monkeypatch, change, match):
    x = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
    kw = dict(y=np.arange(30) % 3, epsilon=1.0, n_classes=3, neighbouring="replace-one",
              solver="kernel-mean")  # fmt: skip
    kw.update(change)
    forbid_noise(monkeypatch)
    try:
        with pytest.raises(ValueError, match=match):
            reg.fit(jax.random.key(0), x, **kw)
    except NoiseDrawn as err:  # pragma: no cover - the failure this test exists for
        pytest.fail(str(err))


def test_nan_inputs_are_refused_before_any_noise(monkeypatch):
    forbid_noise(monkeypatch)
    x = np.ones((10, 3), np.float32)
    x[4, 2] = np.nan
    with pytest.raises(ValueError):
        reg.fit(jax.random.key(0), x, np.arange(10) % 2, epsilon=1.0, n_classes=2,
                neighbouring="replace-one", solver="kernel-mean")  # fmt: skip


@pytest.mark.parametrize("asked", [dict(), dict(solver="kernel-mean")])
def test_resume_never_hands_back_another_relation_or_solver(tmp_path, asked):
    """A saved beta-close fit (labels unprotected) is refused on a replace-one resume."""
    x = np.random.default_rng(2).normal(size=(20, 3)).astype(np.float32)
    ck = tmp_path / "beta.npz"
    reg.fit(jax.random.key(0), x, np.arange(20) % 2, epsilon=0.5, n_classes=2, checkpoint_path=ck,
            neighbouring="beta-close")  # fmt: skip
    with pytest.raises(ValueError, match="neighbouring='beta-close'"):
        reg.fit(jax.random.key(0), None, None, epsilon=0.5, checkpoint_path=ck, resume=True,
                neighbouring="replace-one", **asked)  # fmt: skip
    back = reg.fit(jax.random.key(0), None, None, epsilon=0.5, checkpoint_path=ck, resume=True,
                   neighbouring="beta-close")  # fmt: skip
    assert back.config.neighbouring == "beta-close"


def test_inferred_class_count_is_warned_and_noted():
    x = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float32)
    with pytest.warns(PrivacyLeakWarning):
        model = reg.fit(jax.random.key(1), x, np.arange(40) % 4, epsilon=1.0,
                        neighbouring="replace-one", solver="kernel-mean")  # fmt: skip
    assert model.n_classes == 4
    assert any("n_classes" in n for n in model.report.notes)


def test_kernel_mean_fit_roundtrip_determinism_and_accuracy(tmp_path):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    kw = dict(epsilon=10.0, n_classes=10, neighbouring="replace-one", solver="kernel-mean",
              fit_intercept=False, input_bound=100.0)  # fmt: skip
    m1 = reg.fit(jax.random.key(4), x[:1000], y[:1000], **kw)
    m2 = reg.fit(jax.random.key(4), x[:1000], y[:1000], **kw)
    np.testing.assert_array_equal(np.asarray(m1.alpha), np.asarray(m2.alpha))
    acc = np.mean(reg.predict_labels(m1, x[1000:]) == y[1000:])
    assert acc > 0.7  # eps 10 on 1000 digits; chance is 0.1
    back = reg.load(m1.save(tmp_path / "km.npz"))
    np.testing.assert_array_equal(reg.predict(back, x[1000:1100]), reg.predict(m1, x[1000:1100]))
    assert back.report == m1.report and back.config == m1.config
    m3 = reg.fit(jax.random.key(5), x[:1000], y[:1000], **kw)
    assert not np.array_equal(np.asarray(m3.alpha), np.asarray(m1.alpha))


def test_non_private_kernel_mean_is_the_exact_class_moment_classifier():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # inside the unit ball: the map is the identity
    y = np.arange(50) % 3
    model = reg.fit(jax.random.key(0), x, y, epsilon=None, n_classes=3,
                    neighbouring="replace-one", solver="kernel-mean", fit_intercept=False)  # fmt: skip
    q = rng.normal(size=(9, 4)).astype(np.float32) * 0.3
    expected = np.stack(
        [np.einsum("ni,ki,kj,nj->n", q, x[y == c], x[y == c], q) for c in range(3)], 1
    )
    np.testing.assert_allclose(reg.predict(model, q), expected, rtol=1e-5, atol=1e-6)
    assert not model.private


def _km_audit(seed: int, sensitivity_scale: float, monkeypatch):
    """Audit input map -> class moments -> release at eps 1 on the worst replace-one pair.

    D has rows (5 e1, label 0) and (e2, label 1); D' replaces the first by (-3 e2, label 0):
    after the ball map the moments differ by e1 e1^T - e2 e2^T (norm sqrt(2), the bound).
    ``sensitivity_scale`` < 1 is the deliberately broken variant (noise for a smaller bound).
    """
    from privkernels import audit
    from privkernels.privacy.budget import as_budget

    monkeypatch.setattr(km, "SENSITIVITY", math.sqrt(2.0) * sensitivity_scale)
    budget = as_budget(1.0, 1e-5)
    d = (np.array([[5.0, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    d_prime = (np.array([[0.0, -3.0], [0.0, 1.0]]), np.array([0, 1]))

    def mech(key, data):
        xp = input_map(jnp.asarray(data[0], jnp.float32), 1.0, False)
        m = km.class_moments(xp, data[1], 2, input_bound=1.0, chunk_size=2)
        return km.release_moments(key, m, budget=budget, n=2)[0]

    diff = np.zeros((2, 2, 2))
    diff[0, 0, 0], diff[0, 1, 1] = -1.0, 1.0
    return audit.audit_gaussian_release(
        jax.random.key(seed), mech, d, d_prime, epsilon=1.0, delta=1e-5, trials=20_000,
        direction=diff.reshape(-1),
    )  # fmt: skip


def test_audit_passes_the_calibrated_release(monkeypatch):
    res = _km_audit(50, 1.0, monkeypatch)
    assert res.passed and res.epsilon_lower_bound < 1.0, res.summary()


def test_audit_catches_noise_for_a_quarter_of_the_bound(monkeypatch):
    """Broken variant: noise calibrated to sqrt(2)/4 on the worst pair -> refuted."""
    res = _km_audit(51, 0.25, monkeypatch)
    assert not res.passed and res.epsilon_lower_bound > 1.5, res.summary()


def test_the_ball_map_bounds_every_row_across_the_allowed_radii():
    """At the ends of INPUT_BOUND_RANGE every mapped row still has norm <= radius (float32)."""
    from privkernels.dp_ntk_regression.kernel import INPUT_BOUND_RANGE, project_to_ball

    rng = np.random.default_rng(3)
    for radius in INPUT_BOUND_RANGE:
        for scale in (1e-30, 1e-12, radius, 1e12, 1e18):
            x = (rng.normal(size=(64, 784)) * scale).astype(np.float32)
            xp = np.asarray(project_to_ball(jnp.asarray(x), radius), np.float64)
            assert np.all(np.isfinite(xp))
            assert np.linalg.norm(xp, axis=1).max() <= radius * (1 + 1e-6), (radius, scale)


def test_large_class_sums_move_by_at_most_the_sensitivity_in_float64():
    """Float32 class sums at n = 2e4 moved by sqrt(2) (1 + 2e-5) when one record changed
    class (rounding at the sums' magnitude; attack of 2026-11-29): summed in float64 the
    computed moments keep the bound to 1e-9."""
    rng = np.random.default_rng(0)
    n, d = 20_000, 5
    z = rng.normal(size=(n, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)  # every row on the boundary
    xp = input_map(jnp.asarray(z, jnp.float32), 1.0, True)
    lab = rng.integers(0, 2, n)
    worst = 0.0
    for i in range(2):
        a, b = lab.copy(), lab.copy()
        a[i], b[i] = 0, 1
        ma, mb = (km.class_moments(xp, v, 2, input_bound=1.0, chunk_size=1024) for v in (a, b))
        assert ma.dtype == np.float64
        worst = max(worst, float(np.linalg.norm(ma - mb)) / km.SENSITIVITY)
    assert worst <= 1.0 + 1e-9, worst


def test_the_host_float64_release_adds_the_float32_release_s_noise():
    key = jax.random.key(5)
    zeros = np.zeros((3, 4))
    n32 = np.asarray(privacy.gaussian_mechanism(key, zeros.astype(np.float32), sensitivity=1.5,
                                                sigma=2.0))  # fmt: skip
    n64 = privacy.gaussian_mechanism(key, zeros, sensitivity=1.5, sigma=2.0, host_float64=True)
    assert isinstance(n64, np.ndarray) and n64.dtype == np.float64
    np.testing.assert_array_equal(n64, n32.astype(np.float64))
    big = np.full((3, 4), 1e6 + 0.1)  # not a float32 number: kept exactly under the noise
    np.testing.assert_array_equal(
        privacy.gaussian_mechanism(key, big, sensitivity=1.5, sigma=2.0, host_float64=True),
        big + n32.astype(np.float64),
    )


def test_a_fit_under_vmap_of_its_key_is_refused_before_any_noise(monkeypatch):
    """Traced, the release would noise a float32 copy of the moments (attack of 2026-11-29:
    sqrt(2) (1 + 1.5e-3) at a million rows); the fit refuses instead."""
    x = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 2
    forbid_noise(monkeypatch)
    keys = jax.random.split(jax.random.key(1), 2)
    with pytest.raises(ValueError, match="jax transformation"):
        jax.vmap(lambda k: reg.fit(k, x, y, epsilon=1.0, delta=1e-5,
                                   solver="kernel-mean").alpha)(keys)  # fmt: skip
