"""Private scalers (privkernels.preprocessing): sensitivity, noise scale, refusals, reports."""

from __future__ import annotations

import math
import warnings

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from sklearn.datasets import load_breast_cancer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from privkernels.preprocessing import (
    LOG_GRID,
    PrivateMinMaxScaler,
    PrivateStandardScaler,
    _counts,
    _edges,
    column_bounds,
    column_moments,
)
from privkernels.privacy import Budget, gaussian_sigma
from privkernels.privacy.keys import SEEDED_KEY_NOTE
from privkernels.privacy.warnings import ProjectionWarning, SeededKeyWarning
from privkernels.sklearn import DPNTKClassifier, DPNTKRegressor, pipeline_report

#: A small model: these tests check reports and warnings, not accuracy.
SMALL = {"width": 32, "fit_options": {"features": 64}}


def _moment_stats(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The vector `column_moments` releases (before noise)."""
    u = (np.clip(x, lo, hi) - (lo + hi) / 2) / (hi - lo)
    return np.concatenate([u.sum(0), 2 * (u * u).sum(0)])


def test_replace_one_sensitivities_are_attained_and_not_exceeded():
    rng = np.random.default_rng(0)
    d = 7
    x = rng.normal(size=(50, d)) * 10
    worst_hist, worst_mom = 0.0, 0.0
    for _ in range(200):
        x2 = x.copy()
        x2[rng.integers(50)] = rng.normal(size=d) * 10 ** rng.uniform(-3, 5)
        e = _edges(None, d)
        worst_hist = max(
            worst_hist, float(np.linalg.norm(_counts(x, e).astype(float) - _counts(x2, e)))
        )
        diff = _moment_stats(x, -5, 5) - _moment_stats(x2, -5, 5)
        worst_mom = max(worst_mom, float(np.linalg.norm(diff)))
    assert worst_hist <= math.sqrt(2 * d) + 1e-9
    assert worst_hist == pytest.approx(math.sqrt(2 * d))  # moving every column's bin
    assert worst_mom <= math.sqrt(1.25 * d) + 1e-9
    # a row at one bound replaced by one at the other attains the bound exactly
    x3 = np.full((3, d), -5.0)
    x4 = x3.copy()
    x4[0] = 0.0  # u: -1/2 -> 0: sum moves by 1/2, 2 * sum u^2 by 1/2
    assert np.linalg.norm(_moment_stats(x3, -5, 5) - _moment_stats(x4, -5, 5)) == pytest.approx(
        math.sqrt(0.5 * d)
    )


def test_moment_noise_has_the_recorded_std():
    n, d = 20000, 100
    budget = Budget(1.0, 1e-5)
    mean, _, rec = column_moments(jax.random.key(3), np.zeros((n, d)), np.array([[-1.0, 1.0]] * d),
                                  budget)  # fmt: skip
    expected = gaussian_sigma(1.0, 1e-5) * math.sqrt(1.25 * d)
    assert rec.param_dict["noise_std"] == pytest.approx(expected)
    assert rec.sensitivity == pytest.approx(math.sqrt(1.25 * d))
    noise = mean * n / 2.0  # mean = width * S1 / n with width 2, S1 pure noise here
    assert np.std(noise, ddof=1) == pytest.approx(expected, rel=0.25)
    assert abs(np.mean(noise)) < 4 * expected / math.sqrt(d)


def test_standard_scaler_recovers_scales_and_reports_the_budget():
    rng = np.random.default_rng(1)
    x = rng.normal([3.0, -200.0, 0.05], [2.0, 50.0, 0.01], size=(20000, 3))
    s = PrivateStandardScaler(epsilon=1.0, delta=1e-5, random_state=jax.random.key(5)).fit(x)
    np.testing.assert_allclose(s.mean_, x.mean(0), rtol=0.1)
    np.testing.assert_allclose(s.scale_, x.std(0), rtol=0.35)
    rep = s.privacy_report_
    assert (rep.epsilon, rep.delta) == pytest.approx((1.0, 1e-5))
    assert rep.neighbouring == "replace-one" and len(rep.mechanisms) == 2
    assert [m.sensitivity for m in rep.mechanisms] == pytest.approx([math.sqrt(6), math.sqrt(3.75)])
    assert s.transform(x).shape == x.shape


def test_minmax_within_public_bounds():
    rng = np.random.default_rng(2)
    x = rng.uniform(10, 20, size=(5000, 2))
    m = PrivateMinMaxScaler(epsilon=1.0, bounds=(0, 100), random_state=jax.random.key(1)).fit(x)
    assert np.all(m.data_min_ >= 0) and np.all(m.data_max_ <= 100)
    assert np.all(np.abs(m.data_min_ - 10) <= 100 / 32 + 1e-9)
    assert np.all(np.abs(m.data_max_ - 20) <= 100 / 32 + 1e-9)
    out = m.transform(x)
    assert out.min() >= 0 and out.max() <= 1
    assert len(m.privacy_report_.mechanisms) == 1


def test_log_grid_is_public_and_sorted():
    assert np.all(np.diff(LOG_GRID) > 0) and 0.0 in LOG_GRID


def test_same_key_same_output_other_key_other_output():
    x = load_breast_cancer().data
    a = PrivateStandardScaler(random_state=jax.random.key(7)).fit(x)
    b = PrivateStandardScaler(random_state=jax.random.key(7)).fit(x)
    c = PrivateStandardScaler(random_state=jax.random.key(8)).fit(x)
    np.testing.assert_array_equal(a.mean_, b.mean_)
    np.testing.assert_array_equal(a.scale_, b.scale_)
    assert not np.array_equal(a.mean_, c.mean_)


@pytest.mark.parametrize("cls", [PrivateStandardScaler, PrivateMinMaxScaler])
@pytest.mark.parametrize(
    "kwargs, bad",
    [
        ({}, "nan"),
        ({}, "inf"),
        ({"epsilon": 0.0}, None),
        ({"epsilon": -1.0}, None),
        ({"delta": 1.0}, None),
        ({"bounds": (5.0, 1.0)}, None),
        ({}, "one-row"),
    ],
)
def test_refusals_before_noise_name_no_value(monkeypatch, cls, kwargs, bad):
    x = np.full((20, 3), 12345.678)
    if bad == "nan":
        x[4, 1] = np.nan
    elif bad == "inf":
        x[2, 0] = np.inf
    elif bad == "one-row":
        x = x[:1]
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError) as err:
        cls(random_state=jax.random.key(0), **kwargs).fit(x)
    assert "12345" not in str(err.value)


def test_column_bounds_refuses_bad_rows_before_noise(monkeypatch):
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError):
        column_bounds(jax.random.key(0), np.array([[1.0], [np.nan]]), Budget(1.0, 1e-5))


def test_pipeline_report_composes_every_private_step():
    x, y = load_breast_cancer(return_X_y=True)
    pipe = make_pipeline(
        PrivateStandardScaler(epsilon=0.3, random_state=jax.random.key(0)),
        DPNTKClassifier(epsilon=0.7, classes=[0, 1], preprocessing=None, **SMALL,
                        random_state=jax.random.key(1)),
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProjectionWarning)
        pipe.fit(x, y)
    rep = pipeline_report(pipe)
    assert rep.epsilon == pytest.approx(1.0) and rep.delta == pytest.approx(2e-5)
    steps = [s.privacy_report_ for _, s in pipe.steps]
    assert rep.mechanisms == steps[0].mechanisms + steps[1].mechanisms


def test_pipeline_report_refuses_a_step_without_a_report():
    x, y = load_breast_cancer(return_X_y=True)
    pipe = make_pipeline(
        StandardScaler(),
        DPNTKClassifier(classes=[0, 1], random_state=jax.random.key(1), **SMALL),
    )
    pipe.fit(x, y)
    with pytest.raises(ValueError, match="standardscaler"):
        pipeline_report(pipe)
    assert pipeline_report(pipe, public_steps=("standardscaler",)).epsilon == pytest.approx(1.0)


def test_projection_warning_on_unscaled_rows_only():
    x, y = load_breast_cancer(return_X_y=True)
    est = DPNTKRegressor(preprocessing=None, random_state=jax.random.key(0), **SMALL)
    with pytest.warns(ProjectionWarning, match="PrivateStandardScaler"):
        est.fit(x, y.astype(float))
    inside = x / (2 * np.linalg.norm(x, axis=1).max())  # a public constant in a real use
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProjectionWarning)
        est.fit(inside, y.astype(float))
    assert "projected onto it" not in est.privacy_report_.to_json()
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)  # the documented unit-norm recipe:
    with warnings.catch_warnings():  # one common rescale onto the ball, nothing lost
        warnings.simplefilter("error", ProjectionWarning)
        est.fit(unit, y.astype(float))


@pytest.mark.parametrize("kwargs", [{"width": 0}, {"reg": -1.0}, {"input_bound": 0.0},
                                    {"fit_options": {"target_bound": -1.0}}])  # fmt: skip
def test_auto_preprocessing_refuses_bad_settings_before_its_noise(monkeypatch, kwargs):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 3)), rng.normal(size=50)
    forbid_noise(monkeypatch)
    with pytest.raises((ValueError, TypeError)):
        DPNTKRegressor(random_state=jax.random.key(0), **kwargs).fit(x, y)


def test_a_seeded_key_is_warned_and_noted():
    x = np.random.default_rng(0).normal(size=(100, 2))
    with pytest.warns(SeededKeyWarning):
        s = PrivateStandardScaler(random_state=jax.random.key(0)).fit(x)
    assert SEEDED_KEY_NOTE in s.privacy_report_.notes
    with pytest.warns(SeededKeyWarning, match="random_state=3"):
        s = PrivateMinMaxScaler(random_state=3).fit(x)
    assert SEEDED_KEY_NOTE in s.privacy_report_.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededKeyWarning)
        s = PrivateStandardScaler().fit(x)  # OS entropy: nothing to warn about
    assert SEEDED_KEY_NOTE not in s.privacy_report_.notes


def test_pipeline_report_of_an_unfitted_pipeline_says_so():
    pipe = make_pipeline(PrivateStandardScaler(epsilon=0.3), DPNTKClassifier(classes=[0, 1]))
    with pytest.raises(ValueError, match="not fitted"):
        pipeline_report(pipe)
