"""DPNTKRegressor / DPNTKClassifier preprocessing="auto": private scales inside one report."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from sklearn.datasets import make_regression

from privkernels.privacy.accounting import gaussian_sigma
from privkernels.privacy.warnings import SmallSampleWarning
from privkernels.sklearn import MIN_VALIDATED_N, DPNTKClassifier, DPNTKRegressor, load

#: A small model: these tests check scales, reports and files, not accuracy.
SMALL = {"width": 32, "fit_options": {"features": 64}}


def test_the_default_scales_targets_in_the_hundreds():
    """Issue 52's cause, without noise: main clips unscaled targets to norm 1 (R^2 ~ 0)."""
    x, y = make_regression(1000, 20, n_informative=10, noise=10, random_state=0)
    est = DPNTKRegressor(epsilon=None, width=32, fit_options={"features": 128})
    assert est.fit(x[:750], y[:750]).score(x[750:], y[750:]) > 0.6


@pytest.mark.slow  # one default-size fit on 3750 rows (~5-20 s)
def test_default_regressor_learns_targets_in_the_hundreds():
    """Issue 52: on main the default clips targets to norm 1 and gets R^2 ~ 0 at every n."""
    x, y = make_regression(5000, 20, n_informative=10, noise=10, random_state=0)
    assert np.std(y) > 50  # targets far outside the default target_bound
    with pytest.warns(SmallSampleWarning, match=str(MIN_VALIDATED_N)):  # 3750 < validated n
        est = DPNTKRegressor(epsilon=1.0, random_state=jax.random.key(0)).fit(x[:3750], y[:3750])
    assert est.score(x[3750:], y[3750:]) > 0.15
    rep = est.privacy_report_
    assert (rep.epsilon, rep.delta) == pytest.approx((1.0, 1e-5))
    assert [m.released.split()[0] for m in rep.mechanisms] == [
        "feature", "clipped", "target", "clipped", "sufficient"
    ]  # fmt: skip


def test_search_events_are_the_fit_releases():
    x, y = make_regression(300, 4, random_state=1)
    est = DPNTKRegressor(epsilon=2.0, random_state=jax.random.key(1), **SMALL)
    with pytest.warns(SmallSampleWarning, match=str(MIN_VALIDATED_N)):
        est.fit(x, y)
    sigmas = [m.param_dict["sigma"] for m in est.privacy_report_.mechanisms]
    events = est._privacy_events(__import__("privkernels").privacy.Budget(2.0, 1e-5), 300, (4,))
    assert [e.sigma for e in events] == pytest.approx(sigmas)
    parts = [m for m in est.privacy_report_.mechanisms]
    assert all(gaussian_sigma(m.epsilon, m.delta) == pytest.approx(m.param_dict["sigma"])
               for m in parts)  # fmt: skip


def test_save_load_keeps_scales_and_the_composed_report(tmp_path):
    x, y = make_regression(400, 3, noise=5, random_state=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)
        est = DPNTKRegressor(random_state=jax.random.key(2), **SMALL).fit(x, y)
    back = load(est.save(tmp_path / "reg.npz"))
    np.testing.assert_allclose(back.predict(x[:5]), est.predict(x[:5]), rtol=1e-6)
    assert back.privacy_report_ == est.privacy_report_
    assert len(back.privacy_report_.mechanisms) == 5


def test_classifier_auto_scales_features_only():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 4)) * 100
    y = (x[:, 0] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)
        est = DPNTKClassifier(classes=[0, 1], preprocessing="auto",
                              random_state=jax.random.key(3), **SMALL).fit(x, y)  # fmt: skip
    names = [m.released.split()[0] for m in est.privacy_report_.mechanisms]
    assert names == ["feature", "clipped", "sufficient"]
    assert est.privacy_report_.epsilon == pytest.approx(1.0)


@pytest.mark.parametrize("bad", ["yes", 0.0, 1.0, True])
def test_bad_preprocessing_is_refused(bad):
    x, y = make_regression(50, 3, random_state=0)
    with pytest.raises(ValueError, match="preprocessing"):
        DPNTKRegressor(preprocessing=bad, random_state=jax.random.key(0)).fit(x, y)
