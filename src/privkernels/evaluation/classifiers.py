"""Train-on-synthetic / test-on-real evaluation (shared by DP-NTK and DP-KIP).

A private generator (or distilled dataset) is judged by training ordinary
classifiers on its synthetic data and measuring them on held-out *real* test
data (DP-NTK Sec. 5.1 and 5.3, following DP-MERF / DP-HP).

* Images (`evaluate_images`): logistic regression and an MLP
  (scikit-learn) -> accuracy.
* Tabular (`evaluate_tabular`): the paper's 12 classifiers -> ROC-AUC
  and PR-AUC (average precision) from predicted scores for binary labels,
  weighted F1 for multi-class labels. sklearn's ``HistGradientBoostingClassifier``
  stands in for XGBoost (no extra dependency).

Every hyperparameter is fixed in advance in `IMAGE_CLASSIFIERS` /
`TABULAR_CLASSIFIERS` (library defaults, with more iterations where the
default does not converge). Nothing is tuned on the test set. Results are
deterministic given ``seed`` (every stochastic classifier gets
``random_state=seed``; subsampling uses ``numpy.random.default_rng(seed)``).

The synthetic training data is public by construction (post-processing of a
DP release), so nothing here touches the privacy budget; the real test set is
assumed to be a separate, non-private evaluation split.
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privkernels._validation import check_array

__all__ = [
    "IMAGE_CLASSIFIERS",
    "TABULAR_CLASSIFIERS",
    "make_classifier",
    "evaluate_images",
    "evaluate_tabular",
    "subsample",
]

#: name -> (sklearn class path, fixed keyword arguments) for image data.
IMAGE_CLASSIFIERS: dict[str, tuple[str, dict[str, Any]]] = {
    "logreg": ("sklearn.linear_model.LogisticRegression", {"max_iter": 1000, "C": 1.0}),
    "mlp": (
        "sklearn.neural_network.MLPClassifier",
        {"hidden_layer_sizes": (100,), "max_iter": 100},
    ),
}

#: The paper's 12 tabular classifiers (DP-NTK Table 4 / DP-MERF Sec. 5.3).
TABULAR_CLASSIFIERS: dict[str, tuple[str, dict[str, Any]]] = {
    "logreg": ("sklearn.linear_model.LogisticRegression", {"max_iter": 1000, "solver": "lbfgs"}),
    "gaussian_nb": ("sklearn.naive_bayes.GaussianNB", {}),
    "bernoulli_nb": ("sklearn.naive_bayes.BernoulliNB", {"binarize": 0.5}),
    "linear_svm": ("sklearn.svm.LinearSVC", {"max_iter": 5000}),
    "decision_tree": ("sklearn.tree.DecisionTreeClassifier", {}),
    "lda": ("sklearn.discriminant_analysis.LinearDiscriminantAnalysis", {}),
    "adaboost": ("sklearn.ensemble.AdaBoostClassifier", {"n_estimators": 100}),
    "bagging": ("sklearn.ensemble.BaggingClassifier", {"n_estimators": 10}),
    "random_forest": ("sklearn.ensemble.RandomForestClassifier", {"n_estimators": 100}),
    "gradient_boosting": ("sklearn.ensemble.GradientBoostingClassifier", {"n_estimators": 100}),
    "mlp": (
        "sklearn.neural_network.MLPClassifier",
        {"hidden_layer_sizes": (100,), "max_iter": 300},
    ),
    "hist_gradient_boosting": ("sklearn.ensemble.HistGradientBoostingClassifier", {}),
}

_NO_RANDOM_STATE = {"gaussian_nb", "bernoulli_nb", "lda"}


def make_classifier(
    name: str,
    *,
    seed: int = 0,
    table: dict[str, tuple[str, dict[str, Any]]] | None = None,
    **overrides: Any,
) -> Any:
    """Instantiate classifier ``name`` with its fixed hyperparameters (+ ``overrides``)."""
    table = TABULAR_CLASSIFIERS if table is None else table
    if name not in table:
        raise ValueError(f"unknown classifier {name!r}; known: {sorted(table)}")
    path, kwargs = table[name]
    mod, cls = path.rsplit(".", 1)
    klass = getattr(importlib.import_module(mod), cls)
    kw = dict(kwargs)
    kw.update(overrides)
    if name not in _NO_RANDOM_STATE:
        kw.setdefault("random_state", seed)
    return klass(**kw)


def subsample(
    x: np.ndarray, y: np.ndarray, max_rows: int | None, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_rows`` rows drawn without replacement (deterministic in ``seed``)."""
    if max_rows is None or len(x) <= max_rows:
        return x, y
    idx = np.sort(np.random.default_rng(seed).choice(len(x), size=int(max_rows), replace=False))
    return x[idx], y[idx]


def _prepare(
    x_train: Any, y_train: Any, x_test: Any, y_test: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    xtr = np.asarray(check_array(x_train, "x_train"), dtype=np.float32)
    xte = np.asarray(check_array(x_test, "x_test"), dtype=np.float32)
    xtr = xtr.reshape(len(xtr), -1)
    xte = xte.reshape(len(xte), -1)
    ytr = np.asarray(y_train).astype(np.int64).reshape(-1)
    yte = np.asarray(y_test).astype(np.int64).reshape(-1)
    if len(ytr) != len(xtr):
        raise ValueError(f"y_train has {len(ytr)} labels but x_train has {len(xtr)} rows")
    if len(yte) != len(xte):
        raise ValueError(f"y_test has {len(yte)} labels but x_test has {len(xte)} rows")
    if xtr.shape[1] != xte.shape[1]:
        raise ValueError(f"x_train has {xtr.shape[1]} features but x_test has {xte.shape[1]}")
    return xtr, ytr, xte, yte


def _fit_quietly(clf: Any, x: np.ndarray, y: np.ndarray) -> Any:
    # heavy (seconds to import): loaded on first use
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return clf.fit(x, y)


def evaluate_images(
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    *,
    classifiers: Sequence[str] = ("logreg", "mlp"),
    seed: int = 0,
    max_train: int | None = None,
    max_test: int | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Accuracy on real test images of classifiers trained on (synthetic) images.

    Args:
      x_train: ``(n, ...)`` synthetic images (flattened internally), labels ``y_train (n,)``.
      x_test, y_test: real test images and labels.
      classifiers: names in `IMAGE_CLASSIFIERS`.
      seed: random_state for the classifiers and the subsampling.
      max_train, max_test: optional row caps (uniform subsample) for quick runs.
      overrides: per-classifier keyword overrides, e.g. ``{"mlp": {"max_iter": 30}}``.

    Returns:
      ``{name: accuracy}``. If the training labels contain a single class the
      classifier predicts that class (accuracy = its frequency in the test set).
    """
    xtr, ytr, xte, yte = _prepare(x_train, y_train, x_test, y_test)
    xtr, ytr = subsample(xtr, ytr, max_train, seed=seed)
    xte, yte = subsample(xte, yte, max_test, seed=seed + 1)
    out: dict[str, float] = {}
    for name in classifiers:
        if len(np.unique(ytr)) < 2:
            out[name] = float(np.mean(yte == ytr[0]))
            continue
        clf = make_classifier(
            name, seed=seed, table=IMAGE_CLASSIFIERS, **(overrides or {}).get(name, {})
        )
        _fit_quietly(clf, xtr, ytr)
        out[name] = float(np.mean(clf.predict(xte) == yte))
    return out


def _scores(clf: Any, x: np.ndarray) -> np.ndarray:
    """Score of the positive class (column for classes_[1])."""
    if hasattr(clf, "predict_proba"):
        try:
            return np.asarray(clf.predict_proba(x))[:, 1]
        except (AttributeError, NotImplementedError):
            pass
    return np.asarray(clf.decision_function(x)).reshape(-1)


def evaluate_tabular(
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    *,
    classifiers: Sequence[str] | None = None,
    seed: int = 0,
    max_train: int | None = None,
    max_test: int | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The paper's tabular protocol: 12 classifiers trained on synthetic rows.

    Binary test labels (2 classes): ROC-AUC and PR-AUC (average precision)
    from each classifier's positive-class score; multi-class: weighted F1 of
    the predictions (DP-NTK Table 4). Both also report the accuracy of the
    predictions (the share of test rows classified right).

    Returns:
      ``{"task": "binary"|"multiclass", "per_classifier": {name: {metric: value}},
      "mean": {metric: mean over classifiers}}``, metrics ``roc_auc``, ``pr_auc``,
      ``accuracy`` (binary) or ``f1``, ``accuracy`` (multi-class). A classifier whose
      training data hold a single class scores as a constant predictor (ROC-AUC 0.5,
      PR-AUC = positive rate, F1 and accuracy of predicting that class).
    """
    # heavy (seconds to import): loaded on first use
    from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

    xtr, ytr, xte, yte = _prepare(x_train, y_train, x_test, y_test)
    xtr, ytr = subsample(xtr, ytr, max_train, seed=seed)
    xte, yte = subsample(xte, yte, max_test, seed=seed + 1)
    names = list(TABULAR_CLASSIFIERS) if classifiers is None else list(classifiers)
    labels_all = np.union1d(np.unique(yte), np.unique(ytr))
    binary = len(np.unique(yte)) <= 2 and labels_all.max() <= 1
    per: dict[str, dict[str, float]] = {}
    for name in names:
        if progress is not None:
            progress(name)
        if len(np.unique(ytr)) < 2:
            clf = None
            pred, s = np.full(len(yte), ytr[0]), np.full(len(yte), float(ytr[0]))
        else:
            clf = make_classifier(name, seed=seed, **(overrides or {}).get(name, {}))
            _fit_quietly(clf, xtr, ytr)
            pred = clf.predict(xte)
        accuracy = float(np.mean(pred == yte))
        if binary:
            s = s if clf is None else _scores(clf, xte)
            roc = math.nan if len(np.unique(yte)) < 2 else float(roc_auc_score(yte, s))
            per[name] = {"roc_auc": roc, "pr_auc": float(average_precision_score(yte, s)),
                         "accuracy": accuracy}  # fmt: skip
        else:
            f1 = float(f1_score(yte, pred, average="weighted", zero_division=0))
            per[name] = {"f1": f1, "accuracy": accuracy}
    metrics = ("roc_auc", "pr_auc", "accuracy") if binary else ("f1", "accuracy")
    mean = {m: float(np.nanmean([per[n][m] for n in names])) for m in metrics}
    return {"task": "binary" if binary else "multiclass", "per_classifier": per, "mean": mean}
