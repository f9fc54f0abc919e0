"""`PrivatePipeline`: a refit one step refuses costs no other step's noise or budget
(issue #52, newcomer finding D: a plain ``Pipeline`` refits and charges its private
scaler before the estimator after it refuses)."""

from __future__ import annotations

import functools
import warnings

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from privkernels.privacy import BudgetAccountant, BudgetExceededError, compose
from privkernels.privacy.warnings import ProjectionWarning, SmallSampleWarning
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKRegressor,
    PrivateMinMaxScaler,
    PrivateStandardScaler,
    make_private_pipeline,
    pipeline_report,
)

#: A small model: these tests check refusals and the ledger, not accuracy.
SMALL = {"width": 16, "preprocessing": None, "fit_options": {"features": 32}}


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    return x, x @ np.array([1.0, -0.5, 0.2]) + 0.1 * rng.normal(size=60)


def _pipeline(acc: BudgetAccountant, scaler: object) -> object:
    """A scaler -> regressor pipeline whose scaler was fitted once (0.5 of the total)."""
    scaler.fit(_data()[0])  # type: ignore[attr-defined]
    return make_private_pipeline(
        scaler, DPNTKRegressor(0.5, 1e-6, random_state=jax.random.key(1), budget_accountant=acc,
                               **SMALL),  # type: ignore[arg-type]
    )  # fmt: skip


def _scaler(acc: BudgetAccountant, cls: type = PrivateStandardScaler) -> object:
    return cls(0.5, 1e-6, random_state=jax.random.key(0), budget_accountant=acc)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"fit_options": {"solverr": "ridge"}}, TypeError),  # a typo
        ({"kernel_shift": 2.0}, ValueError),  # a beta-close setting under replace-one
        ({"reg": -1.0}, ValueError),
        ({"epsilon": -1.0}, ValueError),
        ({"neighbouring": "add-remove"}, ValueError),  # not the regressor's relation
    ],
)
def test_a_refit_the_estimator_refuses_costs_the_scaler_nothing(params, error, monkeypatch):
    acc = BudgetAccountant(3.0, 1e-4)
    pipe = _pipeline(acc, _scaler(acc))
    spent, mean = acc.spent(), pipe[0].mean_
    pipe.set_params(**{f"dpntkregressor__{k}": v for k, v in params.items()})
    forbid_noise(monkeypatch)
    with pytest.raises(error):
        pipe.fit(*_data())
    assert acc.spent() == spent
    assert pipe[0].mean_ is mean  # the scaler was not refitted


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"fit_options": {"kernel_optionz": {}}}, TypeError),  # a typo
        ({"epochs": 0}, ValueError),
        ({"image_shape": (2, 2)}, ValueError),  # 4 values per row, X has 3 columns
        ({"fit_options": {"neighbouring": "add-remove"}}, ValueError),  # no sampling_rate
    ],
)
def test_a_dp_kip_fit_refused_for_its_settings_costs_the_scaler_nothing(params, error, monkeypatch):
    """The DP-KIP step's settings are checked by `dp_kip.configure` before the scaler's noise."""
    acc = BudgetAccountant(3.0, 1e-4)
    scaler = _scaler(acc)
    scaler.fit(_data()[0])  # type: ignore[attr-defined]
    kip = DPKIPClassifier(1.0, 1e-6, classes=[0, 1], kernel="fc_ntk", budget_accountant=acc)
    pipe = make_private_pipeline(scaler, kip.set_params(**params))
    spent, mean = acc.spent(), scaler.mean_  # type: ignore[attr-defined]
    forbid_noise(monkeypatch)
    with pytest.raises(error):
        pipe.fit(_data()[0], (_data()[1] > 0).astype(int))
    assert acc.spent() == spent
    assert pipe[0].mean_ is mean


@pytest.mark.parametrize("cls", [PrivateStandardScaler, PrivateMinMaxScaler])
def test_a_refit_past_the_budget_is_refused_before_the_scaler(cls, monkeypatch):
    acc = BudgetAccountant(1.5, 1e-4)
    pipe = _pipeline(acc, _scaler(acc, cls))
    spent, state = acc.spent(), dict(pipe[0].__dict__)
    pipe.set_params(dpntkregressor__epsilon=0.6)  # 0.5 + 0.6 > the 1.0 left
    forbid_noise(monkeypatch)
    with pytest.raises(BudgetExceededError, match="nothing was drawn"):
        pipe.fit(*_data())
    assert acc.spent() == spent
    assert pipe[0].__dict__ == state


def test_the_block_accountant_is_checked_for_the_whole_pipeline(monkeypatch):
    """Steps given no accountant, fitted in a ``with`` block: the sum is checked first."""
    pipe = make_private_pipeline(
        PrivateStandardScaler(0.5, 1e-6, random_state=jax.random.key(0)),
        DPNTKRegressor(0.6, 1e-6, random_state=jax.random.key(1), **SMALL),  # type: ignore[arg-type]
    )  # fmt: skip
    forbid_noise(monkeypatch)
    with BudgetAccountant(1.0, 1e-4) as acc, pytest.raises(BudgetExceededError):
        pipe.fit(*_data())
    assert acc.spent().epsilon == 0.0


def test_a_step_without_a_report_is_refused_before_any_fit(monkeypatch):
    acc = BudgetAccountant(3.0, 1e-4)
    pipe = make_private_pipeline(
        StandardScaler(), DPNTKRegressor(0.5, 1e-6, budget_accountant=acc, **SMALL),  # type: ignore[arg-type]
    )  # fmt: skip
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="standardscaler"):
        pipe.fit(*_data())
    assert acc.spent().epsilon == 0.0
    assert not hasattr(pipe[0], "mean_")


def test_a_private_step_named_in_public_steps_is_still_charged():
    """Naming a private step in public_steps does not take it out of the ledger (its fit
    runs inside the pipeline's reservation, which must count it)."""
    acc = BudgetAccountant(3.0, 1e-4)
    pipe = make_private_pipeline(
        _scaler(acc), _scaler(acc, PrivateMinMaxScaler), public_steps=("privatestandardscaler",)
    )
    pipe.fit(_data()[0])
    assert acc.spent().epsilon == pytest.approx(1.0)
    assert pipe.privacy_report_.epsilon == pytest.approx(1.0)


def test_a_public_step_holding_a_private_estimator_is_refused(monkeypatch):
    acc = BudgetAccountant(3.0, 1e-4)
    search = GridSearchCV(DPNTKRegressor(0.5, budget_accountant=acc, **SMALL), {"reg": [0.1, 1.0]})  # type: ignore[arg-type]
    pipe = make_private_pipeline(_scaler(acc), search, public_steps=("gridsearchcv",))
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="holds a private estimator"):
        pipe.fit(*_data())
    assert acc.spent().epsilon == 0.0


@pytest.mark.slow
def test_each_private_step_charges_its_own_release():
    acc = BudgetAccountant(3.0, 1e-4)
    pipe = make_private_pipeline(
        _scaler(acc), DPNTKRegressor(0.5, 1e-6, random_state=jax.random.key(1),
                                     budget_accountant=acc, **SMALL),  # type: ignore[arg-type]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProjectionWarning)
        pipe.fit(*_data())
    assert acc.spent().epsilon == pytest.approx(1.0)
    assert acc.spent().delta == pytest.approx(2e-6)
    assert acc.reports == (pipe[0].privacy_report_, pipe[1].privacy_report_)
    assert pipe.privacy_report_ == compose(*acc.reports)
    assert len(pipe.privacy_report_.mechanisms) == 3  # bounds, moments, the model


def _not_finite(z: np.ndarray) -> np.ndarray:
    return np.full_like(z, np.nan)


@pytest.mark.slow
def test_a_refusal_after_the_scaler_released_restores_the_steps_and_charges_the_scaler():
    """The classifier refuses what a FunctionTransformer made of the scaled rows (NaN),
    seen only after the scaler's noise: the pipeline is put back as it was; the scaler,
    which released, stays charged, and the classifier, which refused before its noise,
    is not. (A label outside ``classes`` is refused before the scaler: test_pipeline_
    settings_first.py.)"""
    acc = BudgetAccountant(3.0, 1e-4)
    x, _ = _data()
    y = (x[:, 0] > 0).astype(int)
    pipe = make_private_pipeline(
        _scaler(acc), FunctionTransformer(None),
        DPNTKClassifier(0.5, 1e-6, classes=[0, 1], random_state=jax.random.key(1),
                        budget_accountant=acc, **SMALL),  # type: ignore[arg-type]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ProjectionWarning, SmallSampleWarning))
        pipe.fit(x, y)
        before, mean = pipe.predict(x), pipe[0].mean_
        pipe.set_params(functiontransformer__func=_not_finite)
        with pytest.raises(ValueError, match="NaN"):
            pipe.fit(x, y)
        pipe.set_params(functiontransformer__func=None)
    assert pipe[0].mean_ is mean
    np.testing.assert_array_equal(pipe.predict(x), before)
    assert acc.spent().epsilon == pytest.approx(1.5)  # the first fit, then the scaler


def test_a_private_fit_hidden_in_a_function_transformer_is_charged():
    """A FunctionTransformer is let through as a per-row map; a private fit its function
    makes is charged like any other (it once ran uncharged inside a pipeline-wide
    reservation), and refused when it does not fit in what remains."""
    x = _data()[0]
    acc = BudgetAccountant(10.0, 1e-3)
    inner = _scaler(acc)
    inner.set_params(epsilon=4.0)  # type: ignore[attr-defined]
    hidden = FunctionTransformer(lambda X: inner.fit_transform(X))  # type: ignore[attr-defined]
    make_private_pipeline(hidden, _scaler(acc)).fit(x)
    assert acc.spent().epsilon == pytest.approx(4.5)
    small = BudgetAccountant(1.0, 1e-3)
    inner = _scaler(small)
    inner.set_params(epsilon=4.0)  # type: ignore[attr-defined]
    hidden = FunctionTransformer(lambda X: inner.fit_transform(X))  # type: ignore[attr-defined]
    with pytest.raises(BudgetExceededError):
        make_private_pipeline(hidden, _scaler(small)).fit(x)
    assert small.spent().epsilon <= 1.0


def test_pipeline_report_counts_a_private_step_named_in_public_steps():
    acc = BudgetAccountant(10.0, 1e-3)
    first, second = _scaler(acc), _scaler(acc, PrivateMinMaxScaler)
    pipe = make_pipeline(first, second).fit(_data()[0])
    report = pipeline_report(pipe, public_steps=("privatestandardscaler",))
    assert report.epsilon == pytest.approx(1.0)


def _identity(X, est=None):  # noqa: ANN001, ANN202 - a FunctionTransformer's function
    return X


@pytest.mark.parametrize("how", ["kw_args", "partial", "bound method"])
def test_a_private_estimator_passed_to_a_function_transformer_is_refused_first(how, monkeypatch):
    """A private fit reachable through a FunctionTransformer's parameters (kw_args, a
    functools.partial, a bound method) cannot be planned: refused before any noise."""
    acc = BudgetAccountant(2.0, 1e-3)
    hidden = _scaler(acc, PrivateMinMaxScaler)
    step = {
        "kw_args": FunctionTransformer(_identity, kw_args={"est": hidden}),
        "partial": FunctionTransformer(functools.partial(_identity, est=hidden)),
        "bound method": FunctionTransformer(hidden.fit_transform),  # type: ignore[attr-defined]
    }[how]
    pipe = make_private_pipeline(_scaler(acc), step)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="holds a private"):
        pipe.fit(_data()[0])
    assert acc.spent().epsilon == 0.0


def test_a_cached_pipeline_is_refused(tmp_path, monkeypatch):
    acc = BudgetAccountant(2.0, 1e-3)
    pipe = make_private_pipeline(_scaler(acc), memory=str(tmp_path))
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="does not cache"):
        pipe.fit(_data()[0])
    assert acc.spent().epsilon == 0.0
