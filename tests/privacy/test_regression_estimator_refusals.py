"""The regression estimators refuse, before their private scaling, what the model's fit
would refuse, and a failed refit leaves them as they were (adversary findings C1, C2)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from sklearn.datasets import make_regression

from privkernels import sklearn as pk_sklearn
from privkernels.sklearn import DPNTKRegressor


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"kernel_shift": 2.0}, ValueError),  # a beta-close parameter
        ({"beta": -1.0}, ValueError),
        ({"fit_intercept": "yes"}, TypeError),
        ({"fit_options": {"solverr": "ridge"}}, TypeError),  # a typo
        ({"fit_options": {"dtype": "float16"}}, ValueError),
    ],
)
def test_settings_the_model_refuses_cost_no_scaling_noise(params, error, monkeypatch):
    """With the default private scaling, a setting the model's fit would refuse is refused
    before the scaling's releases (adversary C1): no noise, nothing charged."""
    x, y = make_regression(40, 3, random_state=0)
    forbid_noise(monkeypatch)
    with pytest.raises(error):
        DPNTKRegressor(epsilon=1.0, random_state=0, **params).fit(x, y)


def test_a_failed_refit_leaves_the_fitted_estimator_as_it_was(monkeypatch):
    """A refit that fails after its private scaling keeps the old model, scales and report
    together (adversary C2): predictions and the report are unchanged."""
    x, y = make_regression(60, 3, noise=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPNTKRegressor(epsilon=1.0, width=16, random_state=0).fit(x, y)
        before, report = reg.predict(x), reg.privacy_report_

        def broken(*args, **kwargs):
            raise RuntimeError("the model's solve failed")

        monkeypatch.setattr(pk_sklearn.R, "fit", broken)
        with pytest.raises(RuntimeError):
            reg.set_params(random_state=1).fit(x * 100, y * 100)
    np.testing.assert_array_equal(reg.predict(x), before)
    assert reg.privacy_report_ == report
