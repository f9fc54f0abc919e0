"""The s63 pipeline attacks (repros b3, b6 and b8 in /work/adv10/repro): a `PrivatePipeline`
that released a private scaler's noise (and charged it) before a refusal the pre-check can
make. Each test marked "fails on 595b388" pins a finding; the others guard what still fits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from sklearn.base import BaseEstimator, TransformerMixin

from privkernels.pipeline import make_private_pipeline
from privkernels.preprocessing import PrivateStandardScaler
from privkernels.privacy import BudgetAccountant, PrivacyLeakWarning
from privkernels.sklearn import DPKIPClassifier, DPNTKClassifier, PrivateSearchCV

N = 40


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(1).uniform(size=(N, 4))
    return x, np.arange(N) % 2


def _scaler(acc=None) -> PrivateStandardScaler:
    return PrivateStandardScaler(0.3, 5e-6, bounds=(0, 1), budget_accountant=acc)


_ADD_REMOVE = dict(batch_size=10, fit_options={"neighbouring": "add-remove", "sampling_rate": 0.25})


def _other_relation(which: str):
    if which == "kip-add-remove":
        return DPKIPClassifier(
            0.7, 5e-6, classes=[0, 1], epochs=1, support_per_class=2, **_ADD_REMOVE
        )
    if which == "search-kip":
        kip = DPKIPClassifier(classes=[0, 1], epochs=1, support_per_class=2, **_ADD_REMOVE)
        return PrivateSearchCV(kip, {"epochs": [1]}, epsilon=1.0)
    return DPNTKClassifier(0.7, 5e-6, classes=[0, 1], width=16, neighbouring="beta-close")


@pytest.mark.parametrize("which", ["kip-add-remove", "search-kip", "ntk-beta-close"])
def test_b3_steps_under_different_relations_are_refused_before_any_noise(monkeypatch, which):
    """b3, fails on 595b388: a replace-one scaler before an add-remove or beta-close step
    released both, and only privacy_report_ then refused to compose them."""
    x, y = _data()
    pipe = make_private_pipeline(_scaler(), _other_relation(which))
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="different neighbouring relations") as err:
        pipe.fit(x, y)
    assert "'privatestandardscaler' replace-one" in str(err.value)
    assert pipe.steps[-1][0] in str(err.value)
    assert not hasattr(pipe.steps[0][1], "mean_")


def _bad_labels(which: str) -> np.ndarray:
    return {
        "one-label": np.zeros(N, int),
        "continuous": np.linspace(0.0, 1.0, N),
        "nan-label": np.r_[np.nan, np.arange(N - 1) % 2.0],
        "two-columns": np.c_[np.arange(N) % 2, np.arange(N) % 2],
    }[which]


def _inferring(which: str, acc: BudgetAccountant):
    if which == "kip":
        return DPKIPClassifier(0.7, 5e-6, epochs=1, support_per_class=2, budget_accountant=acc)
    return DPNTKClassifier(0.7, 5e-6, width=16, preprocessing=None, budget_accountant=acc)


def _standalone_refusal(est, x, y) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError) as err:
            est.fit(x, y)
    return str(err.value)


@pytest.mark.parametrize("labels", ["one-label", "continuous", "nan-label", "two-columns"])
@pytest.mark.parametrize("clf", ["kip", "ntk"])
def test_b6_labels_an_inferring_classifier_refuses_are_refused_before_the_scaler(
    monkeypatch, clf, labels
):
    """b6, fails on 595b388: with classes=None the pre-check skipped the classifier's label
    checks, so the scaler drew its noise and was charged 0.3 before the classifier's own
    refusal. Now the pipeline refuses with the standalone classifier's message, at charge 0,
    warning that it read the labels."""
    x, y = _data()[0], _bad_labels(labels)
    forbid_noise(monkeypatch)
    alone = _standalone_refusal(_inferring(clf, BudgetAccountant(3.0, 3e-5)), x, y)
    acc = BudgetAccountant(3.0, 3e-5)
    pipe = make_private_pipeline(_scaler(acc), _inferring(clf, acc))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ValueError) as err:
            pipe.fit(x, y)
    assert str(err.value) == alone
    assert acc.spent().epsilon == 0.0 and not acc.reports
    assert not hasattr(pipe.steps[0][1], "mean_")
    if labels == "one-label":  # the labels were read (the classes counted) before refusing
        assert any(issubclass(w.category, PrivacyLeakWarning) for w in seen)


def _pipe_with_accountant() -> tuple[object, BudgetAccountant]:
    acc = BudgetAccountant(3.0, 3e-5)
    kip = DPKIPClassifier(0.7, 5e-6, classes=[0, 1], epochs=1, support_per_class=2,
                          budget_accountant=acc)  # fmt: skip
    return make_private_pipeline(_scaler(acc), kip), acc


def test_b8_a_fit_param_the_classifier_does_not_take_is_refused_before_the_scaler(monkeypatch):
    """b8, fails on 595b388: the scaler drew its noise (0.3 charged), then the classifier's
    fit raised TypeError on the unexpected keyword."""
    x, y = _data()
    pipe, acc = _pipe_with_accountant()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="'dpkipclassifier'.*'sample_weight'"):
        pipe.fit(x, y, dpkipclassifier__sample_weight=np.ones(N))
    assert acc.spent().epsilon == 0.0 and not acc.reports


def test_b8_a_fit_param_for_an_unknown_step_is_a_value_error(monkeypatch):
    """b8 (C), fails on 595b388: a bare KeyError naming only the step."""
    x, y = _data()
    pipe, acc = _pipe_with_accountant()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="no step 'nosuchstep'"):
        pipe.fit(x, y, nosuchstep__x=1)
    assert acc.spent().epsilon == 0.0


class _Weighted(TransformerMixin, BaseEstimator):
    """A public per-row map whose fit takes a keyword (records what it was given)."""

    def fit(self, X, y=None, *, sample_weight=None):
        self.got_ = sample_weight
        return self

    def transform(self, X):
        return np.asarray(X)


def test_a_fit_param_a_step_takes_still_reaches_it():
    """Guard: a parameter the step's fit names is passed on as before."""
    x, _ = _data()
    w = np.ones(N)
    pipe = make_private_pipeline(_Weighted(), _scaler(), public_steps=("_weighted",))
    pipe.fit(x, _weighted__sample_weight=w)
    assert pipe.steps[0][1].got_ is w
    assert hasattr(pipe.steps[1][1], "mean_")


@pytest.mark.slow  # a real (non-private) NTK fit: about 2.5 s on one core
def test_a_non_private_step_under_another_relation_still_fits():
    """Guard: compose() makes a pipeline with a non-private step non-private whatever the
    relations, so the pre-check refuses no more than the report would."""
    x, y = _data()
    clf = DPNTKClassifier(None, classes=[0, 1], width=16, neighbouring="beta-close")
    pipe = make_private_pipeline(_scaler(), clf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the non-private fit's leak and projection warnings
        pipe.fit(x, y)
    assert not pipe.privacy_report_.private
