"""Scores of the classifiers (issue 52, item 3): ``decision_function`` and ``predict_proba``
on both, post-processing of the release, so ROC-AUC and log-loss scoring work."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.metrics import get_scorer
from sklearn.model_selection import StratifiedKFold, cross_validate
from sklearn.preprocessing import Normalizer, StandardScaler

from privkernels.privacy.warnings import SeededKeyWarning
from privkernels.scores import TARGET_PROBABILITY, scores_to_proba, temperature
from privkernels.sklearn import DPKIPClassifier, DPNTKClassifier


def _scaled(x: np.ndarray) -> np.ndarray:
    """Public toy data: standardised, then each row on the unit sphere."""
    return Normalizer().fit_transform(StandardScaler().fit_transform(x)).astype(np.float32)


@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return _scaled(x[:240]), np.where(y[:240] == 1, "benign", "malignant")


@pytest.fixture(scope="module")
def iris():
    x, y = load_iris(return_X_y=True)
    return _scaled(x), y


def _clf(kind: str, classes, seed: int = 0):
    if kind == "ntk":
        return DPNTKClassifier(classes=classes, width=32, random_state=seed)
    return DPKIPClassifier(classes=classes, epochs=1, support_per_class=2, random_state=seed)


def _fit(est, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededKeyWarning)
        return est.fit(x, y)


@pytest.mark.parametrize(
    "kind, data",
    [
        ("ntk", "cancer"),
        ("kip", "iris"),
        pytest.param("ntk", "iris", marks=pytest.mark.slow),  # a fit each (compile-bound)
        pytest.param("kip", "cancer", marks=pytest.mark.slow),
    ],
)
def test_scores_and_probabilities_follow_predict(kind, data, request, monkeypatch):
    x, y = request.getfixturevalue(data)
    classes = sorted(set(y.tolist()), reverse=True)  # classes_ follows the public order
    est = _fit(_clf(kind, classes), x, y)
    report = est.privacy_report_
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "privacy"))
    from _privacy_helpers import forbid_noise

    forbid_noise(monkeypatch)  # post-processing: nothing drawn after the fit
    dec, proba, pred = est.decision_function(x), est.predict_proba(x), est.predict(x)
    c = len(classes)
    assert list(est.classes_) == sorted(classes)  # scikit-learn order, whatever was given
    assert dec.shape == ((len(x),) if c == 2 else (len(x), c))
    assert proba.shape == (len(x), c) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(proba > 0) and np.all(proba <= 1)
    np.testing.assert_array_equal(est.classes_[np.argmax(proba, axis=1)], pred)
    if c == 2:
        np.testing.assert_array_equal(est.classes_[(dec > 0).astype(int)], pred)
        # the probability of classes_[1] ranks rows as the decision does
        order = np.argsort(dec, kind="stable")
        assert np.all(np.diff(proba[order, 1]) >= 0)
    else:
        np.testing.assert_array_equal(est.classes_[np.argmax(dec, axis=1)], pred)
    assert est.privacy_report_ == report  # no extra privacy cost
    bad = x[:3].astype(object)
    bad[1, 2] = "SECRET-c91"  # scikit-learn's conversion error would quote the cell
    for method in (est.predict, est.decision_function, est.predict_proba):
        with pytest.raises(ValueError, match="column 2") as info:
            method(bad)
        assert "SECRET" not in str(info.value) and info.value.__context__ is None


@pytest.mark.slow  # eight fits (cross-validation, two data sets); CI runs -m slow
@pytest.mark.parametrize("kind", ["ntk", "kip"])
def test_roc_auc_and_log_loss_scoring_are_finite(kind, cancer, iris):
    """The scorers read ``decision_function`` (binary ROC-AUC) and ``predict_proba``
    (one-vs-rest ROC-AUC, log loss); on main they gave NaN or raised."""
    cv = StratifiedKFold(2, shuffle=True, random_state=0)
    for (x, y), auc in ((cancer, "roc_auc"), (iris, "roc_auc_ovr")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SeededKeyWarning)
            res = cross_validate(_clf(kind, sorted(set(y.tolist()))), x, y, cv=cv,
                                 scoring=[auc, "neg_log_loss"], error_score="raise")  # fmt: skip
        assert np.all(np.isfinite(res[f"test_{auc}"]))
        assert np.all(np.isfinite(res["test_neg_log_loss"]))


def test_the_probability_map_is_fixed_and_keeps_the_argmax():
    for c in (2, 3, 10):
        onehot = np.eye(c)
        np.testing.assert_allclose(np.diag(scores_to_proba(onehot)), TARGET_PROBABILITY)
        np.testing.assert_allclose(scores_to_proba(onehot - 1.0 / c), scores_to_proba(onehot))
        assert temperature(c) > 0
    # scores closer than float64 resolves after the softmax: the argmax is still the scores'
    for row in ([0.0, 1e-20], [5e-17, 0.0], [1e-300, 2e-300, 0.0], [-1.0, 3.0, 3.0 + 4e-16]):
        s = np.asarray([row], np.float64)
        assert np.argmax(scores_to_proba(s), axis=1)[0] == np.argmax(s, axis=1)[0]
    far = scores_to_proba(np.array([[0.0, 1e6, -1e6]]))
    assert np.all(far > 0) and np.isclose(far.sum(), 1.0)
    with pytest.raises(ValueError, match="n_classes"):
        scores_to_proba(np.zeros((3, 1)))


@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_classes_given_in_any_order_score_the_same(order):
    """``classes_`` is sorted whatever order ``classes`` names them in, so scikit-learn's
    roc_auc scorer (which reads ``classes_[1]`` as the positive class) is not inverted."""
    x, y = load_breast_cancer(return_X_y=True)
    x = StandardScaler().fit_transform(x)
    clf = DPNTKClassifier(epsilon=1.0, classes=order, random_state=0, preprocessing=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(x, y)
    assert list(clf.classes_) == [0, 1]
    assert get_scorer("roc_auc")(clf, x, y) > 0.9
