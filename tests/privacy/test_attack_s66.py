"""The s66 attack's findings: refusals that came after noise and depended on one record.

Each case fitted on a dataset D' and was refused on its replace-one neighbour D only after
a private release (noise drawn, the accountant charged): a far outlier standardised past
float32's range, a private scaler's output outside a generator's range, and the small-data
warning raised after the private scales (an error under ``-W error``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import privkernels.preprocessing as pre
from privkernels._validation import float32_finite
from privkernels.pipeline import PrivatePipeline, _check_input_range
from privkernels.privacy import BudgetAccountant
from privkernels.privacy.warnings import SmallSampleWarning
from privkernels.sklearn import (
    CLASSIFIER_WARN_N,
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    PrivateMinMaxScaler,
    PrivateSearchCV,
    PrivateStandardScaler,
)


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scalers' and estimators' preprocessing releases, as they are drawn."""
    seen: list[str] = []
    real = pre.gaussian_release

    def spy(key, value, *, released, **kw):  # type: ignore[no-untyped-def]
        seen.append(released)
        return real(key, value, released=released, **kw)

    monkeypatch.setattr(pre, "gaussian_release", spy)
    return seen


def _neighbours(n: int, d: int, value: float) -> tuple[np.ndarray, np.ndarray]:
    """D' (tight columns) and D (one value of D' replaced by ``value``)."""
    x = 0.01 * np.random.default_rng(0).standard_normal((n, d))
    far = x.copy()
    far[0, 0] = value
    return x, far


@pytest.mark.parametrize("where", ["feature", "target"])
def test_regressor_fits_a_value_standardised_past_float32(where: str) -> None:
    # 3e38 is finite in float32; divided by a private scale near 0.01 it was inf at the
    # model's float32 cast, refused after the 4 scale releases (eps 1 spent) on 3000 rows.
    x, far = _neighbours(3000, 3, 3e38)
    y = x @ np.ones(3)
    if where == "target":
        far, y = x, y.copy()
        y[0] = 3e38
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKRegressor(1.0, width=16, random_state=0).fit(far, y)
    assert np.isfinite(est.predict(x[:5])).all()


@pytest.mark.parametrize("model", ["kip", "ntk"])
def test_pipeline_scaler_output_stays_finite_in_float32(model: str) -> None:
    x, far = _neighbours(200, 3, 3e38)
    y = (x[:, 1] > 0).astype(int)
    scaler = PrivateStandardScaler(epsilon=0.5, random_state=0)
    assert np.isfinite(scaler.fit(far).transform(far).astype(np.float32)).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = (
            DPKIPClassifier(0.5, classes=[0, 1], epochs=1, random_state=0)
            if model == "kip"
            else DPNTKClassifier(0.5, classes=[0, 1], width=32, preprocessing=None, random_state=0)
        )
        pipe = PrivatePipeline(
            [("sc", PrivateStandardScaler(epsilon=0.5, random_state=0)), ("m", step)]
        )
        pipe.fit(far, y)
    assert pipe.predict(x[:5]).shape == (5,)


@pytest.mark.parametrize("scaler", ["std", "minmax-unclipped"])
def test_generator_after_an_unbounded_scaler_is_refused_before_noise(
    scaler: str, draws: list[str]
) -> None:
    x = np.random.default_rng(1).uniform(0.1, 0.9, (60, 3))
    y = np.arange(60) % 2
    acc = BudgetAccountant(10.0, 1e-3)
    first = (
        PrivateStandardScaler(epsilon=0.5, budget_accountant=acc, random_state=0)
        if scaler == "std"
        else PrivateMinMaxScaler(epsilon=0.5, clip=False, budget_accountant=acc, random_state=0)
    )
    gen = DPNTKGenerator(0.5, classes=[0, 1], iterations=1, budget_accountant=acc, random_state=0)
    pipe = PrivatePipeline([("sc", first), ("gen", gen)])
    with pytest.raises(ValueError, match=r"needs inputs in \[0, 1\].*Nothing was fitted"):
        pipe.fit(x, y)
    assert draws == [] and acc.spent().epsilon == 0.0
    assert not hasattr(first, "scale_")


def test_generator_after_a_clipping_minmax_scaler_is_planned(draws: list[str]) -> None:
    x = np.random.default_rng(1).uniform(0.1, 0.9, (60, 3))
    y = np.arange(60) % 2
    pipe = PrivatePipeline([
        ("sc", PrivateMinMaxScaler(epsilon=0.5, random_state=0)),
        ("gen", DPNTKGenerator(0.5, classes=[0, 1], iterations=1, batch_size=20, random_state=0)),
    ])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(x, y)
    assert len(draws) >= 1 and pipe.privacy_report_.epsilon == pytest.approx(1.0)


def test_generator_checks_the_range_of_every_row_before_noise() -> None:
    # A search's check of all rows (training and validation) runs _checked: an outlier
    # there must be refused before any fit, not only when it lands in a training split.
    x = np.random.default_rng(2).uniform(0.0, 1.0, (20, 3))
    x[3, 1] = 5.0
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        DPNTKGenerator(1.0, classes=[0, 1])._checked(x, np.arange(20) % 2)


@pytest.mark.parametrize("cls", [DPNTKClassifier, DPNTKRegressor])
def test_small_sample_warning_comes_before_any_noise(cls: type, draws: list[str]) -> None:
    x = np.random.default_rng(3).normal(size=(300, 3))
    y = np.arange(300) % 2 if cls is DPNTKClassifier else x[:, 0]
    kw = {"classes": [0, 1]} if cls is DPNTKClassifier else {}
    acc = BudgetAccountant(5.0, 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        with pytest.raises(SmallSampleWarning):
            cls(1.0, width=32, budget_accountant=acc, random_state=0, **kw).fit(x, y)
    assert draws == [] and acc.spent().epsilon == 0.0


def test_ntk_classifier_warns_with_public_scales_too() -> None:
    x = np.random.default_rng(4).normal(size=(CLASSIFIER_WARN_N - 1, 3)) / 4
    with pytest.warns(SmallSampleWarning, match="not read"):
        DPNTKClassifier(1.0, classes=[0, 1], width=32, preprocessing=None, random_state=0).fit(
            x, np.arange(len(x)) % 2
        )


# The second attack on the mends above (s66, round 2).


def test_a_search_step_carries_its_candidates_input_range(draws: list[str]) -> None:
    x = np.random.default_rng(5).uniform(0.1, 0.9, (80, 3))
    acc = BudgetAccountant(10.0, 1e-3)
    search = PrivateSearchCV(
        DPNTKGenerator(classes=[0, 1], iterations=1), {"d_code": [2, 4]}, epsilon=2.0,
        budget_accountant=acc,
    )  # fmt: skip
    assert search._input_range() == (0.0, 1.0)
    pipe = PrivatePipeline([
        ("sc", PrivateMinMaxScaler(epsilon=1.0, clip=False, budget_accountant=acc)),
        ("search", search),
    ])  # fmt: skip
    with pytest.raises(ValueError, match=r"'search' \(PrivateSearchCV\) needs inputs"):
        pipe.fit(x, np.arange(80) % 2)
    assert draws == [] and acc.spent().epsilon == 0.0


def test_the_range_check_rounds_the_guaranteed_range_as_float32() -> None:
    class Needs:
        def __init__(self, hi: float) -> None:
            self.hi = hi

        def _input_range(self) -> tuple[float, float]:
            return (0.0, self.hi)

    _check_input_range("g", Needs(0.25), ("sc", (0.0, 0.25)))  # exact in float32: passes
    with pytest.raises(ValueError, match="in float32"):  # float32(0.3) > 0.3
        _check_input_range("g", Needs(0.3), ("sc", (0.0, 0.3)))
    _check_input_range("g", Needs(0.3), None)  # no private step before it: its own checks


def test_a_table_generator_cannot_follow_a_private_step(draws: list[str]) -> None:
    gen = DPNTKGenerator(0.5, label="y", iterations=1)
    pipe = PrivatePipeline([("sc", PrivateMinMaxScaler(epsilon=0.5)), ("g", gen)])
    with pytest.raises(ValueError, match="table fit.*Nothing was fitted"):
        pipe.fit(np.random.default_rng(6).uniform(size=(40, 2)), np.arange(40) % 2)
    assert draws == []


def test_scaled_outputs_are_never_nan_with_degenerate_public_bounds() -> None:
    assert np.array_equal(float32_finite(np.array([np.nan, -np.inf, 1.5])),
                          [0.0, -np.finfo(np.float32).max, 1.5])  # fmt: skip
    x = np.column_stack([np.r_[1.0, -np.ones(49)], np.linspace(0, 1, 50)])
    sc = PrivateMinMaxScaler(epsilon=0.5, bounds=([1e-310, 0.0], [2e-310, 1.0]), random_state=0)
    out = sc.fit(x).transform(x)
    assert np.isfinite(out).all() and out.min() >= 0.0 and out.max() <= 1.0


@pytest.mark.parametrize("bound", [1e308, 1e-320])
def test_target_bound_out_of_range_is_refused_before_the_scales(
    bound: float, draws: list[str]
) -> None:
    x = np.random.default_rng(7).normal(size=(100, 3))
    est = DPNTKRegressor(1.0, width=16, fit_options={"target_bound": bound}, random_state=0)
    with pytest.raises(ValueError, match=r"target_bound must lie in"):
        est.fit(x, x[:, 0])
    assert draws == []
