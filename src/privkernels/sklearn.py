"""scikit-learn estimators over the three methods (``epsilon=``, ``random_state=``, ``privacy_report_``).

* `DPNTKRegressor`, `DPNTKClassifier`: DP NTK regression (Gu et al., Alg. 2)
  with its defaults (bias feature, automatic kernel shift, ``reg=0.1``).
* `DPKIPClassifier`: DP-KIP (Vinaroz & Park); the fitted support set is
  ``support_`` / ``support_labels_`` and ``predict`` is KRR on it.
* `DPNTKGenerator`: DP-NTK synthetic data (Yang et al., Alg. 1): tabular
  (a DataFrame with a public schema) or arrays in [0, 1] (images, scaled features).

Conventions shared with the function API: ``fit`` draws all randomness from
``random_state``. None (the default, for a release) draws two independent keys from OS
entropy, one for the noise and the Poisson batches and one for the data-independent
draws (weights, sketches, inits), so nothing the fitted model keeps narrows down the
noise key. An int (or a ``jax.random.key``) is for reproducing a run, not for a
release: the noise is a function of it, so whoever guesses it recomputes the noise
(an int raises a `privkernels.privacy.SeededKeyWarning` naming it, and the report
notes it). Class labels are taken from the public ``classes`` parameter when given,
else read from ``y`` with a `PrivacyLeakWarning` and a note in ``privacy_report_``.
``save(path)`` / ``load(path)`` write one ``.npz`` (no pickle) holding the release,
its report (checked on load) and the estimator's parameters except ``random_state``
(a loaded estimator has ``random_state=None``); a fitted estimator pickles without
its ``random_state`` and keys too. The default relation of every estimator is
replace-one: whole records, labels included.
Each ``fit`` is one release whose ``privacy_report_`` covers that fit alone: refitting,
cross-validation and model selection (``GridSearchCV``) on private data spend the budget
once per fit and choose by un-noised scores; no report composes them. A
`privkernels.privacy.BudgetAccountant` does: pass it as ``budget_accountant=`` (it survives
``clone``, so every fit of a ``GridSearchCV(n_jobs=1)`` is charged to it) or open it as the
default in a ``with`` block; a fit that does not fit in what remains is refused before
any noise. A plain ``Pipeline`` fits (and charges) its private scaler before the step
after it can refuse; `PrivatePipeline` (`make_private_pipeline`, `privkernels.pipeline`)
checks every step's settings and the summed budget first.
``verbose=False`` silences progress bars.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import jax
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from privkernels import checkpoint, dp_kip, dp_ntk
from privkernels import dp_ntk_regression as R
from privkernels._sklearn_accounting import AccountedMixin
from privkernels._sklearn_checks import checked_data
from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_finite,
    check_fraction,
    check_int,
    check_numeric,
    float32_finite,
)
from privkernels._warnings import user_stacklevel
from privkernels.data.frames import as_columns, infer_schema, to_frame
from privkernels.data.schema import TabularSchema
from privkernels.dp_kip.estimator_defaults import (
    estimator_defaults,
    estimator_fit_options,
    public_row_count,
    warn_small_data,
)
from privkernels.dp_kip.fitting import check_run_arguments
from privkernels.dp_kip.settings import Settings as KIPSettings
from privkernels.dp_ntk.calibrate import sample_rows
from privkernels.dp_ntk.fitting import check_generator_range, generator_range
from privkernels.dp_ntk.release import DP_NTK_RELATIONS
from privkernels.dp_ntk.settings import Settings as NTKSettings
from privkernels.dp_ntk.settings import check_settings as check_ntk_settings
from privkernels.dp_ntk_regression.kernel import check_input_bound, feature_radius
from privkernels.options import run_options
from privkernels.pipeline import PrivatePipeline, make_private_pipeline, pipeline_report
from privkernels.preprocessing import (
    N_PUBLIC,
    PrivateMinMaxScaler,
    PrivateStandardScaler,
    private_standardize,
    standardize_budgets,
)
from privkernels.privacy.accountant import charged_release
from privkernels.privacy.accounting import SelectionEvent, gaussian_sigma
from privkernels.privacy.budget import Budget, as_budget
from privkernels.privacy.keys import (
    SAMPLE_TAG,
    SEEDED_KEY_NOTE,
    check_seed,
    fresh_key,
    sample_key,
    sampling_key,
    seed_keys,
    seeded_call,
)
from privkernels.privacy.report import REPLACE_ONE, PrivacyReport, check_neighbouring, compose
from privkernels.privacy.warnings import ProjectionWarning, SmallSampleWarning, warn_privacy_leak
from privkernels.scores import binary_decision, scores_to_proba
from privkernels.search import PrivateSearchCV
from privkernels.synth import FORMAT as TABLE_FORMAT
from privkernels.synth import SCHEMA_INFERRED_NOTE, check_table, fit_table, load_table_synth

__all__ = [
    "DPKIPClassifier",
    "DPNTKClassifier",
    "DPNTKGenerator",
    "DPNTKRegressor",
    "PrivateMinMaxScaler",
    "PrivatePipeline",
    "PrivateSearchCV",
    "PrivateStandardScaler",
    "load",
    "make_private_pipeline",
    "pipeline_report",
]

#: Attributes that hold keys: never pickled with a fitted estimator.
_KEY_ATTRS = ("_search_keys", "_sample_base")

#: Format of the estimator block added to a result file by ``save``.
FORMAT = "privkernels.sklearn/1"

CLASSES_INFERRED_NOTE = (
    "classes were read from the private labels without noise (pass classes= to avoid): "
    "not covered by the (epsilon, delta) guarantee"
)


def _with_note(result: Any, note: str) -> Any:
    """``result`` (a release, or a wrapper holding one as ``result``) with ``note`` added."""
    if "report" in {f.name for f in dataclasses.fields(result)}:
        return dataclasses.replace(result, report=result.report.with_note(note))
    return dataclasses.replace(result, result=_with_note(result.result, note))


class _KernelScoresClassifier(ClassifierMixin):
    """``predict``, ``decision_function`` and ``predict_proba`` of a classifier whose release
    gives kernel scores ``(n, n_classes)`` (``_scores``): all post-processing, no privacy cost.
    Probabilities are `privkernels.scores.scores_to_proba` (a fixed softmax; see there)."""

    classes_: np.ndarray

    def _scores(self, X: Any) -> np.ndarray:
        raise NotImplementedError

    def decision_function(self, X: Any) -> np.ndarray:
        """Kernel scores ``(n, n_classes)`` float64, in ``classes_`` order; for two classes
        ``(n,)``, ``> 0`` for ``classes_[1]``, as scikit-learn expects."""
        return binary_decision(self._scores(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``(n, n_classes)`` float64 in ``classes_`` order: rows sum to 1,
        entries in (0, 1], argmax equal to ``predict`` (`privkernels.scores.scores_to_proba`)."""
        return scores_to_proba(self._scores(X))

    def predict(self, X: Any) -> np.ndarray:
        """The class of the largest score, ``(n,)`` values of ``classes_``."""
        best = np.argmax(self._scores(X), axis=1)  # fitted or not, checked first
        return self.classes_[best]


class _DPEstimator(AccountedMixin, BaseEstimator):
    """Shared fit bookkeeping, save/load; the accountant's in `AccountedMixin`."""

    _key_attrs: ClassVar[tuple[str, ...]] = _KEY_ATTRS

    def _released(self) -> bool:
        return hasattr(self, self._result_attr)

    _result_attr: ClassVar[str] = "result_"

    @property
    def privacy_report_(self) -> PrivacyReport:
        """The `PrivacyReport` of the fitted release."""
        check_is_fitted(self, self._result_attr)
        return getattr(self, self._result_attr).report

    #: The fewest classes a fit takes.
    _min_classes: ClassVar[int] = 1

    def _encode_classes(self, y: Any) -> np.ndarray:
        """Codes ``(n,)`` int32 of ``y`` in ``classes_``: the public ``classes`` sorted (as
        scikit-learn's ``classes_`` always is), else read from ``y`` with a warning."""
        y = np.asarray(y)
        check_classification_targets(y)
        if self.classes is None:
            warn_privacy_leak("classes (read from y; pass classes= explicitly)")
            self.classes_ = np.unique(y)
            self._classes_inferred = True
        else:
            # sorted, as scikit-learn's scorers assume (roc_auc reads classes_[1] as positive)
            self.classes_ = self._public_classes()
            self._classes_inferred = False
        codes = _label_codes(y, self.classes_)
        self._check_class_count(len(self.classes_))
        return codes

    def _public_classes(self) -> np.ndarray:
        """The public ``classes`` sorted, refused (``ValueError``, no value named) when not a
        flat list, when a value repeats or when fewer than a fit takes; no data read."""
        given = np.asarray(self.classes)
        if given.ndim != 1:
            raise ValueError("classes must be a flat list of the label values")
        out = np.unique(given)
        if len(out) != len(given):
            raise ValueError("classes has duplicates")
        self._check_class_count(len(out))
        return out

    def _check_class_count(self, n: int) -> None:
        if n < self._min_classes:
            raise ValueError(
                f"{type(self).__name__} needs at least {self._min_classes} classes, "
                f"got {n} class(es)"
            )

    def _check_fit_labels(self, y: Any) -> None:
        """Refuse, before any noise, labels ``y`` outside the public ``classes`` with the
        message `_encode_classes` gives (no label value in it), and ``y`` that is missing
        or not one column of labels; nothing to check without ``classes``."""
        if getattr(self, "classes", None) is None:
            return
        if y is None:
            raise ValueError(f"{type(self).__name__} needs y, one label per row")
        y = np.asarray(y)
        y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
        if y.ndim != 1:
            raise ValueError("y must be one column of labels")
        _label_codes(y, self._public_classes())

    #: `checked_data` keywords of this estimator's fit (its compute dtype, target kind).
    _fit_data: ClassVar[dict[str, Any]] = {"dtype": np.float64}

    def _checked(self, X: Any, y: Any) -> tuple[Any, Any]:
        """``(X, y)`` as this estimator's fit reads them, refused (``ValueError``, no value
        named) where the fit would refuse them before its noise."""
        return checked_data(self, X, y, **self._fit_data)

    def _check_fit_data(self, X: Any, y: Any) -> None:
        """Every refusal `fit` makes on ``(X, y)`` before its noise, run on a clone (nothing
        is fitted or set here): `PrivateSearchCV` runs it on all rows before its first
        candidate, whose fit sees only some of them."""
        clone(self)._checked(X, y)
        self._check_fit_labels(y)

    def _keys(self) -> tuple[Any, Any]:
        """``(key, public_key)`` of a fit (`privkernels.privacy.keys.seed_keys`), or the pair
        a `PrivateSearchCV` run hands this fit (consumed once)."""
        given = self.__dict__.pop("_search_keys", None)
        return given if given is not None else seed_keys(self.random_state)

    def _relation(self) -> str:
        """The neighbouring relation of this estimator's release."""
        return str((self.fit_options or {}).get("neighbouring", "replace-one"))

    def _planned_charge(self) -> tuple[Any, float | None, float, str]:
        """``(accountant, epsilon, delta, relation)`` a fit will charge (no data read;
        `privkernels.pipeline.PrivatePipeline` sums them before any step's noise)."""
        return self._accountant(), self.epsilon, self.delta, self._relation()

    #: Keywords this estimator's ``fit`` hands its method itself (its own parameters, the
    #: budget, the keys, the accountant): refused in ``fit_options`` (`_check_owned_options`).
    _owned_options: ClassVar[frozenset[str]] = frozenset()

    def _check_owned_options(self) -> None:
        """Refuse (``ValueError``) ``fit_options`` that are not a mapping, or that name a
        keyword in `_owned_options`: the method's call would get it twice (a ``TypeError``
        after a pipeline step's or the private scales' noise), or drop it silently."""
        opts = self.fit_options
        if opts is None:
            return
        if not isinstance(opts, Mapping):
            raise ValueError("fit_options must be a dict of keyword arguments or None")
        owned = sorted(set(opts) & self._owned_options)
        if owned:
            raise ValueError(
                f"{type(self).__name__} fit_options may not set {owned}: the estimator passes "
                "them itself (set its parameters instead)"
            )

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> None:
        """Refuse, before any noise, the settings a fit refuses without reading data (here
        ``fit_options`` keywords the estimator passes itself, the budget, ``random_state``'s
        type and the public ``classes``; subclasses check more). ``shape``: the data's
        ``(n, *row)``, or None."""
        self._check_owned_options()
        if self.epsilon is not None:
            Budget(self.epsilon, self.delta)
        check_seed(self.random_state)
        if getattr(self, "classes", None) is not None:
            self._public_classes()

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        """The `privkernels.privacy.accounting.SelectionEvent` s a fit at ``budget`` on
        ``n_train`` rows of ``row_shape`` records (planning a `PrivateSearchCV`; no data)."""
        raise ValueError(f"{type(self).__name__} cannot be tuned privately")

    def _check_tunable(self) -> None:
        """Refuse, on its settings alone, an estimator `PrivateSearchCV` cannot tune (the
        refusals of `_privacy_events` that need no sizes), before any step's noise."""
        if type(self)._privacy_events is _DPEstimator._privacy_events:
            raise ValueError(f"{type(self).__name__} cannot be tuned privately")

    def _add_note(self, note: str) -> None:
        """Append ``note`` to the fitted release's report (`_with_note`)."""
        setattr(self, self._result_attr, _with_note(getattr(self, self._result_attr), note))

    def _note_seed(self) -> None:
        """An int ``random_state`` drew the noise: say so in the report, whatever the key
        looks like (a seed of 2**32 or more under x64 has a non-zero high word)."""
        seed = self.random_state
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            self._add_note(SEEDED_KEY_NOTE)

    def _finish(self, result: Any) -> None:
        if getattr(self, "_classes_inferred", False):
            result = _with_note(result, CLASSES_INFERRED_NOTE)
        setattr(self, self._result_attr, result)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted estimator: the method's release file plus an estimator block."""
        result = getattr(self, self._result_attr)
        check_is_fitted(self, self._result_attr)
        p = result.save(path)
        arrays, meta = checkpoint.load(p)
        if hasattr(self, "classes_"):
            c = np.asarray(self.classes_)
            if c.dtype.kind == "O":  # e.g. ints from a pandas object column: keep them numbers
                c = np.asarray(c.tolist())
            arrays["estimator/classes_"] = c if c.dtype.kind in "biuf" else c.astype(str)
        meta["estimator"] = {"format": FORMAT, "class": type(self).__name__,
                             "params": _json_params(self.get_params()),
                             "n_features_in_": int(getattr(self, "n_features_in_", 0))}  # fmt: skip
        return checkpoint.save(p, arrays, meta)

    def _restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], result: Any) -> None:
        setattr(self, self._result_attr, result)
        d = meta["estimator"].get("n_features_in_", 0)
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError("the file's n_features_in_ is not a count of columns")
        if d:
            self.n_features_in_ = d
        has = "estimator/classes_" in arrays
        if has != self._expects_classes(result):
            raise ValueError(
                f"the file's model and its classes_ do not make a {type(self).__name__}"
            )
        if has:
            self.classes_ = arrays["estimator/classes_"]
            self._check_restored_classes(result)
        self._check_restored_report(result.report, self._expects_classes(result))

    def _check_restored_report(self, report: PrivacyReport, has_classes: bool) -> None:
        """Refuse (``ValueError``, no value named) a file whose model report contradicts the
        file's own parameters: a seed (``save`` never writes one: it would undo the privacy),
        ``epsilon=None`` (the non-private baseline) beside a private report or the reverse,
        another neighbouring relation, or a missing caveat the fit adds whenever its
        ``classes`` is None (`CLASSES_INFERRED_NOTE`, a `PrivacyLeakWarning` at fit). A
        forger who edits the parameters as well is not caught: files carry no signature."""
        if self.random_state is not None:
            raise ValueError("the file holds a random_state: save never writes one (whoever "
                             "knows the seed recomputes the noise)")  # fmt: skip
        if (self.epsilon is None) == report.private:
            raise ValueError("the file's epsilon parameter and its model's report disagree on "
                             "whether the release is private")  # fmt: skip
        if report.private and report.neighbouring != self._relation():
            raise ValueError("the file's neighbouring parameter differs from its model's report")
        inferred = has_classes and getattr(self, "classes", None) is None
        if inferred and CLASSES_INFERRED_NOTE not in report.notes:
            raise ValueError("the file's classes parameter is None but its report lacks the "
                             "note that the classes were read from the private labels")  # fmt: skip

    def _check_restored_classes(self, result: Any) -> None:
        """Refuse (``ValueError``, no label named) a file whose ``classes_`` are not what
        ``save`` writes (a sorted list of distinct, finite numbers, booleans or text),
        differ from its public ``classes`` parameter, or are not one per class of the
        model: an edited file would otherwise map scores to the wrong labels."""
        classes = np.asarray(self.classes_)
        kind = _label_kind(classes)
        if kind is None or classes.ndim != 1 or classes.size == 0:
            raise ValueError("the file's classes_ is not a list of numbers, booleans or text")
        if kind == "number" and not np.all(np.isfinite(classes.astype(np.float64))):
            raise ValueError("the file's classes_ holds a non-finite value")
        if not np.array_equal(np.unique(classes), classes):
            raise ValueError("the file's classes_ is not a sorted list of distinct labels")
        if getattr(self, "classes", None) is not None:
            public = self._public_classes()
            if _label_kind(public) != kind or public.shape != classes.shape:
                raise ValueError("the file's classes_ differ from its classes parameter")
            same = (
                np.array_equal(public.astype(np.float64), classes.astype(np.float64))
                if kind == "number"
                else np.array_equal(public, classes)
            )
            if not same:
                raise ValueError("the file's classes_ differ from its classes parameter")
        n = _restored_n_classes(result)
        if n is None or int(n) != classes.shape[0]:
            raise ValueError(
                f"the file's classes_ name {classes.shape[0]} classes, its model "
                + ("none" if n is None else str(int(n)))
            )

    def _expects_classes(self, result: Any) -> bool:
        """Whether a file of this estimator holding ``result`` carries ``classes_``."""
        return True


def _label_kind(labels: np.ndarray) -> str | None:
    """``"bool"``, ``"number"`` or ``"text"``: the kinds of label array ``save`` writes."""
    return {"b": "bool", "i": "number", "u": "number", "f": "number", "U": "text"}.get(
        labels.dtype.kind
    )


def _restored_n_classes(result: Any) -> int | None:
    """The class count of a loaded release (``config.n_classes``; an array generator holds
    its release as ``.result``), None for a regression model or a table synthesiser."""
    for obj in (result, getattr(result, "result", None)):
        cfg = getattr(obj, "config", None)
        if cfg is not None:
            n = getattr(cfg, "n_classes", None)
            return None if n is None else int(n)
    return None


def _label_codes(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Codes ``(n,)`` int32 of the labels ``y (n,)`` in ``classes``; a label outside them is
    refused without naming it (it is private)."""
    pos = {c: i for i, c in enumerate(classes.tolist())}
    try:
        return np.array([pos[v] for v in y.tolist()], np.int32)
    except (KeyError, TypeError):
        raise ValueError("y holds a label outside classes") from None


def _json_params(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in params.items():
        if k == "random_state":
            v = None  # the seed determines the noise: a file holding it would undo the privacy
        if k == "budget_accountant":
            v = None  # a live ledger of this session, not a property of the release
        if k == "fit_options" and isinstance(v, dict) and "mesh" in v:
            v = {o: w for o, w in v.items() if o != "mesh"}  # this session's devices, likewise
        if k == "schema" and v is not None and not isinstance(v, (dict, str)):
            v = v.to_dict()
        if isinstance(v, np.ndarray):
            v = v.tolist()
        json.dumps(v, default=checkpoint.jsonable)  # refuse what cannot be restored
        out[k] = v
    return out


def load(path: str | os.PathLike[str]) -> Any:
    """Read an estimator written by its ``save`` (format and privacy report checked)."""
    arrays, meta = checkpoint.load(path)
    block = meta.get("estimator")
    if not isinstance(block, dict) or block.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved privkernels estimator")
    cls = {
        c.__name__: c for c in (DPNTKRegressor, DPNTKClassifier, DPKIPClassifier, DPNTKGenerator)
    }
    make, params = cls.get(str(block.get("class"))), block.get("params")
    if make is None or not isinstance(params, dict):
        raise ValueError(f"{path} names no privkernels estimator and its parameters")
    try:  # the estimator's own settings checks hold the file's parameters
        est = make(**params)
        est._check_fit_settings(None)
    except TypeError as err:
        raise ValueError(f"{path} holds parameters the estimator refuses ({err})") from None
    est._restore(arrays, meta, est._load_result(path))
    return est


# --------------------------------------------------------------------------- regression


#: Share of the budget ``preprocessing="auto"`` spends on private scales in
#: `DPNTKRegressor` and in `DPNTKClassifier`: each estimator's winner under
#: ``benchmarks/results/defaults-regression-rule.md`` (best worst-set ratio to a non-private
#: ridge / logistic regression; table: ``benchmarks/results/defaults-regression.md``).
AUTO_SHARE = 0.3
CLASSIFIER_AUTO_SHARE = 0.1
#: Of that share, the part a regressor spends on its targets' scale (the rest: features).
TARGET_SHARE = 0.5
#: Targets are fitted as ``(y - mean) / (TARGET_CLIP std sqrt(c))`` times ``target_bound``.
TARGET_CLIP = 3.0
#: Smallest training n from which on the default met issue 52's target in that run
#: (regressor: R^2 >= 60% of a ridge's, make_regression n=20000, 15000 training rows;
#: classifier: ROC-AUC lift >= 80% of a logistic regression's, make_classification
#: n=5000, 3750 training rows; the same with the classifier's row map of
#: ``benchmarks/results/defaults-ntk-clip-rule.md``). A fit on fewer rows raises a
#: `privkernels.privacy.SmallSampleWarning` naming it.
MIN_VALIDATED_N = 15000
CLASSIFIER_MIN_VALIDATED_N = 3750
#: The classifier's target on ``make_classification`` with one class at 10% or 5% of the
#: rows held from these training row counts on (``benchmarks/results/
#: defaults-rare-class-rule.md``). Class counts are private, so the classifier warns below
#: the larger of the two validated counts, `CLASSIFIER_WARN_N`.
CLASSIFIER_RARE_VALIDATED_N: Mapping[float, int] = MappingProxyType({0.10: 7000, 0.05: 7000})
CLASSIFIER_WARN_N = max(CLASSIFIER_MIN_VALIDATED_N, CLASSIFIER_RARE_VALIDATED_N[0.05])


#: What a regression fit sets: restored together when a fit fails.
_FITTED_STATE = ("model_", "_scaling", "_pre_report", "_row_map")


#: `privkernels.dp_ntk_regression.fit` keywords a regression estimator passes itself: its
#: parameters (`_RegressionBase._settings`), the budget, the class count, the keys, the accountant.
_REGRESSION_OWNS = frozenset(
    {"epsilon", "delta", "n_classes", "public_key", "budget_accountant", "width", "reg",
     "fit_intercept", "kernel_shift", "input_bound", "beta", "neighbouring"}
)  # fmt: skip


#: What ``_restore_row_map`` is given for a file that names no row map.
_NO_ROW_MAP = object()

#: The maps `row_map` applies to standardised rows.
ROW_MAPS = ("ball", "sphere", "lift", "ball-clip3", "sphere-clip3")
#: The bound of each unit-variance coordinate under the ``-clip3`` maps.
ROW_CLIP = 3.0


def row_map(z: np.ndarray, kind: str, radius: float) -> np.ndarray:
    """A fixed map of each standardised row of ``z (n, d)`` float64 (mean squared norm
    ``radius^2``) into the model's ball of ``radius`` (post-processing of the public
    scales, one row at a time: no privacy cost).

    ``"ball"``: unchanged (the model projects rows beyond the ball onto it); ``"sphere"``:
    ``radius z / ||z||`` (a zero row stays 0); ``"lift"``: ``radius [z, radius] /
    sqrt(||z||^2 + radius^2)``, ``(n, d + 1)``, the norm kept as an angle (as
    `privkernels.dp_kip.kernels.sphere_lift`); ``"ball-clip3"``, ``"sphere-clip3"``: each
    coordinate first clipped to ``ROW_CLIP`` unit-variance deviations, ``3 radius /
    sqrt(d)``. ``benchmarks/results/defaults-ntk-rows-rule.md``, ``defaults-ntk-clip-rule.md``.
    """
    if kind not in ROW_MAPS:
        raise ValueError(f"row map must be one of {ROW_MAPS}")
    if kind.endswith("-clip3"):
        bound = ROW_CLIP * radius / math.sqrt(z.shape[1])
        z, kind = np.clip(z, -bound, bound), kind.removesuffix("-clip3")
    if kind == "ball":
        return z
    if kind == "lift":
        z = np.concatenate([z, np.full((z.shape[0], 1), radius)], axis=1)
    big = np.max(np.abs(z), axis=1, keepdims=True)  # scaled first: no overflow in the norm
    u = z / np.where(big > 0, big, 1.0)
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    return radius * u / np.where(norms > 0, norms, 1.0)


class _RegressionBase(_DPEstimator):
    _auto_share: ClassVar[float] = AUTO_SHARE
    #: `row_map`'s map of the standardised rows (``preprocessing`` on).
    _row_map: str = "ball"  # each fit and each loaded file set it on the instance too
    #: a private fit warns (`SmallSampleWarning`) below this many rows (public: n)
    _warn_n: ClassVar[int] = MIN_VALIDATED_N
    _owned_options = _REGRESSION_OWNS

    def __init__(
        self,
        epsilon: float | None = 1.0,
        delta: float = 1e-5,
        *,
        width: int = 256,
        reg: float = 0.1,
        fit_intercept: bool = True,
        kernel_shift: float | str = "auto",
        input_bound: float = 1.0,
        beta: float = 1e-6,
        neighbouring: str = "replace-one",
        preprocessing: str | float | None = "auto",
        random_state: jax.Array | int | None = None,
        fit_options: dict[str, Any] | None = None,
        budget_accountant: Any = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.width = width
        self.reg = reg
        self.fit_intercept = fit_intercept
        self.kernel_shift = kernel_shift
        self.input_bound = input_bound
        self.beta = beta
        self.neighbouring = neighbouring
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.fit_options = fit_options
        self.budget_accountant = budget_accountant

    @property
    def privacy_report_(self) -> PrivacyReport:
        """The fit's `PrivacyReport`: the preprocessing releases composed with the model's."""
        check_is_fitted(self, "model_")
        pre = getattr(self, "_pre_report", None)
        return self.model_.report if pre is None else compose(pre, self.model_.report)

    def _share(self) -> float | None:
        """The budget share of private scaling; None when the fit uses the raw data.

        ``"auto"`` is the estimator's validated share (`AUTO_SHARE`,
        `CLASSIFIER_AUTO_SHARE`) under replace-one and None under beta-close (a
        data-dependent rescaling would change what beta means)."""
        p = self.preprocessing
        if p is None or (p == "auto" and self.neighbouring != "replace-one"):
            return None
        if p == "auto":
            return self._auto_share
        if isinstance(p, (str, bool)) or not isinstance(p, (int, float)):
            raise ValueError("preprocessing must be 'auto', None or a budget share in (0, 1)")
        if self.neighbouring != "replace-one":
            raise ValueError("preprocessing applies to neighbouring='replace-one' only")
        return check_fraction(p, "preprocessing")

    def _settings(self) -> dict[str, Any]:
        """The keywords this estimator hands `privkernels.dp_ntk_regression.fit` (all but
        the key, the data, the budget and the keys of the data-independent draws)."""
        return dict(width=self.width, reg=self.reg, fit_intercept=self.fit_intercept,
                    kernel_shift=self.kernel_shift, input_bound=self.input_bound,
                    beta=self.beta, neighbouring=self.neighbouring,
                    **(self.fit_options or {}))  # fmt: skip

    def _check_settings(self, share: float | None, *, whole: bool = False) -> None:
        """Every setting the model's fit would refuse, checked before the preprocessing's
        noise (`privkernels.dp_ntk_regression.check_replace_one_settings`): a typo must
        not cost the scaling's budget. ``whole``: check them even when this fit releases
        nothing before the model's (a pipeline step released before it)."""
        self._check_owned_options()  # before `_settings` merges fit_options in
        self._check_solver()
        if self.epsilon is not None:
            Budget(self.epsilon, self.delta)
        if share is None and not whole:  # nothing is released before the model's fit
            return
        if share is None and self.neighbouring == "beta-close":
            return  # beta-close settings are checked by its fit (refused by accountants)
        check_input_bound(self.input_bound, self.fit_intercept is True)
        R.check_replace_one_settings(epsilon=self.epsilon, delta=self.delta, **self._settings())

    def _check_solver(self) -> None:
        """Refuse a ``fit_options["solver"]`` this estimator cannot fit (none here)."""

    def _check_checkpoint(self) -> None:
        """Refuse ``fit_options`` ``resume=True`` (it returns a saved model and never reads
        data, while this estimator always passes its data) and a ``checkpoint_path`` that
        exists or cannot be written, as `privkernels.dp_ntk_regression.fit` refuses them
        before its own noise: called when something is released before that fit."""
        opts = self.fit_options or {}
        if opts.get("resume"):
            raise ValueError(
                f"{type(self).__name__} cannot resume (fit_options resume=True): a resumed "
                "model reads no data; load it with privkernels.dp_ntk_regression.load"
            )
        path = opts.get("checkpoint_path")
        if path is not None and checkpoint.check_writable(path).exists():
            raise ValueError(
                f"checkpoint {path} exists: a fit would overwrite it; delete it or choose "
                "another checkpoint_path"
            )

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> None:
        super()._check_fit_settings(shape)
        self._check_settings(self._share(), whole=True)
        if shape is not None:  # not for `load`: the fitted model's checkpoint exists by then
            self._check_checkpoint()

    def _fit(self, X: Any, y: Any, n_classes: int | None) -> None:
        """One fit, charged whole (the private scales and the model) to the accountant
        before any noise (`privkernels.privacy.accountant.charged_release`)."""
        share = self._share()
        self._check_settings(share)
        if share is not None:  # the private scales read X in float32: refuse it first
            self._check_checkpoint()  # and what the model's fit refuses after them
            check_finite(np.asarray(X, np.float64), "X", dtype=np.float32)
        if self.epsilon is not None and np.shape(X)[0] < self._warn_n:  # n public: before noise
            warnings.warn(
                self._small_sample_message(), SmallSampleWarning, stacklevel=user_stacklevel()
            )
        acc = self._accountant()
        charged_release(
            acc, self.epsilon, self.delta, str(self.neighbouring),
            lambda: self._fit_released(X, y, n_classes, share, acc),
            report_of=lambda _: self.privacy_report_,
        )  # fmt: skip

    def _fit_released(
        self, X: Any, y: Any, n_classes: int | None, share: float | None, acc: Any
    ) -> None:
        """`_fit_model`, all or nothing: a fit that fails leaves the estimator as it was (no
        new scales beside an old model)."""
        before = {k: self.__dict__[k] for k in _FITTED_STATE if k in self.__dict__}
        try:
            self._fit_model(X, y, n_classes, share, acc)
        except BaseException:
            for k in _FITTED_STATE:
                self.__dict__.pop(k, None)
            self.__dict__.update(before)
            raise

    def _fit_model(
        self, X: Any, y: Any, n_classes: int | None, share: float | None, acc: Any
    ) -> None:
        """`_fit`'s releases: the private scales at ``share`` of the budget, then the model."""
        key, public_key = self._keys()
        eps, delta = self.epsilon, self.delta
        self._row_map = type(self)._row_map  # on the instance: a pickle keeps the fit's map
        self._scaling: dict[str, np.ndarray] | None = None
        self._pre_report: PrivacyReport | None = None
        if share is not None:
            key, k_pre = jax.random.split(key)
            eps, delta = self._preprocess(k_pre, X, y if n_classes is None else None, share, acc)
            X, y = self._scaled(X), self._scaled_y(y)
        with seeded_call(), warnings.catch_warnings():
            if share is not None:  # rows beyond the ball after private scaling: by design
                warnings.filterwarnings("ignore", category=ProjectionWarning)
            self.model_ = R.fit(
                key, np.asarray(X, np.float32), y, epsilon=eps, delta=delta,
                n_classes=n_classes, public_key=public_key,
                budget_accountant=acc, **self._settings(),
            )  # fmt: skip

    def _small_sample_message(self) -> str:
        """The `SmallSampleWarning` of a fit below `_warn_n` rows (no count of the data)."""
        return (
            f"{type(self).__name__}'s defaults were validated at epsilon 1 from n >= "
            f"{MIN_VALIDATED_N} training rows (benchmarks/results/defaults-regression.md); "
            "this fit has fewer: expect a weak model at this epsilon (public scales, "
            "preprocessing=None, were not validated either). Use more rows or a larger "
            "epsilon, or check the result on public data."
        )

    def _budgets(self, budget: Budget, share: float, regression: bool) -> list[Budget]:
        """``[model, features (, targets)]``: the split of a fit's budget (each scale's part
        is split again by `privkernels.preprocessing.standardize_budgets`)."""
        main, pre = budget.split(1.0 - share, share)
        return [main, *(pre.split(1.0 - TARGET_SHARE, TARGET_SHARE) if regression else (pre,))]

    def _preprocess(
        self, key: jax.Array, X: Any, y: Any, share: float, acc: Any
    ) -> tuple[Any, Any]:
        """Learn the feature (and target) scales; return the model's (epsilon, delta).

        Private fit: `privkernels.preprocessing.private_standardize` on the features
        (and the targets) at their share of the budget, one report of those releases.
        ``epsilon=None`` (the non-private baseline): the exact scales."""
        x = np.asarray(X, np.float64)
        y2 = None if y is None else np.asarray(y, np.float64).reshape(x.shape[0], -1)
        if self.epsilon is None:
            stats = [(v.mean(0), np.maximum(v.std(0), 1e-12)) for v in (x, y2) if v is not None]
            self._set_scaling(x.shape[1], *stats)
            return None, self.delta
        parts = self._budgets(Budget(self.epsilon, self.delta), share, y2 is not None)
        k_x, k_y = jax.random.split(key)
        mx, sx, records = private_standardize(k_x, x, parts[1], what="feature",
                                              budget_accountant=acc)  # fmt: skip
        stats = [(mx, sx)]
        if y2 is not None:
            my, sy, rec_y = private_standardize(k_y, y2, parts[2], what="target",
                                                budget_accountant=acc)  # fmt: skip
            stats.append((my, sy))
            records = (*records, *rec_y)
        self._set_scaling(x.shape[1], *stats)
        self._pre_report = PrivacyReport.from_mechanisms(
            records, REPLACE_ONE, data_independent=(N_PUBLIC,)
        )
        return parts[0].epsilon, parts[0].delta

    def _set_scaling(self, d: int, xs: Any, ys: Any = None) -> None:
        r = self._row_radius()
        sc = {"x_mean": xs[0], "x_scale": xs[1] * math.sqrt(d) / r}
        if ys is not None:
            tb = float((self.fit_options or {}).get("target_bound", 1.0))
            sc["y_mean"] = ys[0]
            sc["y_scale"] = ys[1] * TARGET_CLIP * math.sqrt(ys[0].size) / tb
        self._scaling = {k: np.asarray(v, np.float64) for k, v in sc.items()}

    def _scaled(self, X: Any) -> Any:
        """``X (n, d)`` as the model reads it: standardised by the learned scales (rows of mean
        squared norm ``r^2``), then `row_map`'s ``_row_map``; unchanged without scales."""
        sc = getattr(self, "_scaling", None)
        if sc is None:
            return X
        z = (np.asarray(X, np.float64) - sc["x_mean"]) / sc["x_scale"]
        return float32_finite(row_map(z, self._row_map, self._row_radius()))

    def _row_radius(self) -> float:
        """``r``: the radius of the model's ball once the intercept column is added."""
        return feature_radius(self.input_bound, bool(self.fit_intercept))

    def _scaled_y(self, y: Any) -> Any:
        sc = self._scaling
        if sc is None or "y_mean" not in sc:
            return y
        return float32_finite(
            (np.asarray(y, np.float64) - _shaped(sc["y_mean"], y)) / _shaped(sc["y_scale"], y)
        )

    def _scores(self, X: Any) -> np.ndarray:
        """Model outputs on ``X`` (scaled as at fit), back in the targets' units."""
        out = np.asarray(
            R.predict(self.model_, np.asarray(self._scaled(X), np.float32)), np.float64
        )
        sc = getattr(self, "_scaling", None)
        if sc is None or "y_mean" not in sc:
            return out
        return out * _shaped(sc["y_scale"], out) + _shaped(sc["y_mean"], out)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """As `_DPEstimator.save`, plus the learned scales and the preprocessing report."""
        p = super().save(path)
        if getattr(self, "_scaling", None) is None:
            return p
        arrays, meta = checkpoint.load(p)
        arrays.update({f"estimator/scaling/{k}": v for k, v in (self._scaling or {}).items()})
        meta["estimator"]["row_map"] = self._row_map
        if self._pre_report is not None:
            meta["estimator"]["preprocessing_report"] = self._pre_report.to_dict()
        return checkpoint.save(p, arrays, meta)

    def _restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], result: Any) -> None:
        super()._restore(arrays, meta, result)
        prefix = "estimator/scaling/"
        sc = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        self._scaling = sc or None
        pre = meta["estimator"].get("preprocessing_report")
        if pre is not None and not isinstance(pre, dict):
            raise ValueError("the file's preprocessing_report is not a report")
        self._pre_report = None if pre is None else PrivacyReport.from_dict(pre)  # re-verified
        self._check_restored_scaling(result)
        _check_config_against_records(result)
        self._check_config_against_params(result.config)
        self._restore_row_map(meta["estimator"].get("row_map", _NO_ROW_MAP))

    def _restore_row_map(self, kind: Any) -> None:
        """The file's map of the standardised rows: this class's (`_row_map`), the one ``save``
        writes with the scales; a file without one (written before the map was saved, or
        without scales) reads as ``"ball"``; anything else is refused (``ValueError``).
        Post-processing of the released scales: it moves predictions, not the privacy cost."""
        if kind is _NO_ROW_MAP:
            self._row_map = "ball"
        elif self._scaling is not None and kind == type(self)._row_map:
            self._row_map = type(self)._row_map
        else:
            raise ValueError("the file's row_map is not one a fit of this class writes")

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A pickle from before the map was kept on the instance was fitted on ``"ball"``."""
        if state.get("_scaling") is not None and "_row_map" not in state:
            state = {**state, "_row_map": "ball"}
        super().__setstate__(state)

    def _check_config_against_params(self, config: Any) -> None:
        """Refuse (``ValueError``) a model config whose kernel settings differ from the file's
        parameters that a fit hands `privkernels.dp_ntk_regression.fit` unchanged (`_settings`):
        `predict` reads them from the config (an ``input_bound`` edit maps every test row
        elsewhere), and under replace-one the report's records do not name them."""
        for name in ("width", "reg", "fit_intercept", "input_bound", "neighbouring"):
            if not _same_value(getattr(config, name), getattr(self, name)):
                raise ValueError(f"the file's model config {name} differs from its {name} "
                                 "parameter")  # fmt: skip

    def _check_restored_scaling(self, result: Any) -> None:
        """Refuse (``ValueError``) a file whose scales or preprocessing report are not what
        a fit with its parameters writes: an edit dropping the report would understate the
        cost, one dropping or changing the scales would change every prediction."""
        private = self.epsilon is not None and self._share() is not None
        scaled = self._share() is not None
        if (self._scaling is not None) != scaled or (self._pre_report is not None) != private:
            raise ValueError("the file's scales or preprocessing report do not match its "
                             "preprocessing parameter")  # fmt: skip
        if scaled:
            d = int(getattr(self, "n_features_in_", 0))
            targets = _restored_n_classes(result) is None
            names = {"x_mean", "x_scale", *(("y_mean", "y_scale") if targets else ())}
            sc = self._scaling or {}
            if set(sc) != names or any(
                v.dtype.kind != "f" or not np.all(np.isfinite(v)) for v in sc.values()
            ):
                raise ValueError("the file's scales are not the ones a fit writes")
            if sc["x_mean"].shape != (d,) or sc["x_scale"].shape != (d,):
                raise ValueError("the file's feature scales do not match its n_features_in_")
            if any(np.any(sc[k] <= 0) for k in names if k.endswith("_scale")):
                raise ValueError("the file's scales must be > 0")
        self._check_restored_budgets(result.report, _restored_n_classes(result) is None)

    def _check_restored_budgets(self, model: PrivacyReport, targets: bool) -> None:
        """Refuse (``ValueError``) a file whose model report or preprocessing records are not
        the budgets its own parameters plan: the model gets ``epsilon * (1 - share)`` (all of
        it without private scales), and each scale's release its part by `_budgets` and
        `privkernels.preprocessing.standardize_budgets`, in the order `_preprocess` draws
        them (as `_privacy_events` plans a search). Records are re-derived from their noise
        by ``PrivacyReport.from_dict``, so this binds the noise to the plan; a total alone
        would let a forger move budget between the releases. ``epsilon=None`` writes no
        preprocessing records (checked with the scales)."""
        if self.epsilon is None:
            return
        whole, share = Budget(float(self.epsilon), float(self.delta)), self._share()
        planned: list[Budget] = []
        if share is None:
            main = whole
        else:
            main, *pre = self._budgets(whole, share, targets)
            planned = [b for p in pre for b in standardize_budgets(p)]
        if not main.matches(model):
            raise ValueError("the file's model report is not the part of its epsilon and delta "
                             "that its preprocessing parameter leaves to the model")  # fmt: skip
        pre_report = getattr(self, "_pre_report", None)
        records = () if pre_report is None else pre_report.mechanisms
        if pre_report is not None and pre_report.neighbouring != REPLACE_ONE:
            raise ValueError("the file's preprocessing report is not under replace-one")
        if len(records) != len(planned) or not all(
            p.matches(r) for r, p in zip(records, planned, strict=True)
        ):
            raise ValueError("the file's preprocessing records are not the budgets its "
                             "preprocessing parameter plans")  # fmt: skip

    _result_attr = "model_"

    def _relation(self) -> str:
        return str(self.neighbouring)

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        if self.neighbouring != "replace-one":
            raise ValueError(
                "a beta-close fit (Gaussian sampling, truncated Laplace) has no RDP bound and "
                "cannot be tuned privately: tune with neighbouring='replace-one'"
            )
        share = self._share()
        parts = [budget]
        if share is not None:
            main, *pre = self._budgets(budget, share, isinstance(self, RegressorMixin))
            parts = [*(b for p in pre for b in standardize_budgets(p)), main]  # report order
        return [SelectionEvent("gaussian", gaussian_sigma(b.epsilon, b.delta)) for b in parts]

    @staticmethod
    def _load_result(path: Any) -> Any:
        return R.load(path)


def _check_config_against_records(model: Any) -> None:
    """Refuse (``ValueError``) a regression model whose config contradicts its own report:
    every record parameter that names a config field must hold the config's value.
    `privkernels.dp_ntk_regression.predict` reads the config (beta-close: ``eta_min``,
    ``kernel_shift``, ``input_bound``, the M of the guarantee rests on them), so an edit
    there would predict with another kernel than the one released."""
    fields = {f.name for f in dataclasses.fields(model.config)}
    for record in model.report.mechanisms:
        for name, value in record.param_dict.items():
            if name in fields and not _same_value(getattr(model.config, name), value):
                raise ValueError(f"the file's model config {name} differs from the one its "
                                 "report's records were derived with")  # fmt: skip


def _same_value(a: Any, b: Any) -> bool:
    """Equal, numbers up to the rounding of a JSON round trip (booleans and text exactly)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return math.isclose(a, b, rel_tol=1e-9) if numbers else bool(a == b)


def _shaped(v: np.ndarray, like: Any) -> np.ndarray:
    """Per-target ``v (c,)`` shaped to broadcast against ``like`` (``(n,)`` or ``(n, c)``)."""
    return v.reshape(-1)[0] if np.ndim(like) == 1 else v.reshape(1, -1)


class DPNTKRegressor(RegressorMixin, _RegressionBase):
    """Private kernel ridge regression with the quadratic NTK (DP NTK regression).

    The default guarantee is standard replace-one (epsilon, delta)-DP: replacing a
    whole record, target included (sufficient-statistics perturbation; targets
    clipped to norm ``fit_options["target_bound"]``, default 1). Inputs are mapped
    per record to the ball of radius ``input_bound`` (a bias coordinate is appended
    with ``fit_intercept``). Parameters as in `privkernels.dp_ntk_regression.fit`.

    ``preprocessing="auto"`` (the default, replace-one only) spends `AUTO_SHARE` of
    (epsilon, delta) on private scales (`privkernels.preprocessing.private_standardize`):
    `TARGET_SHARE` of it on the targets' mean and std, the rest on the features'. The
    features are standardized and divided by ``sqrt(d)`` (typical rows reach the ball's
    radius; outliers are projected), the targets mapped to ``(y - mean) / (3 std)``;
    predictions are mapped back. The model gets the remaining budget, and
    ``privacy_report_`` composes all releases into the user's (epsilon, delta). A float
    in (0, 1) is another share; None fits the raw data (public scales: rescale the data
    yourself, or a `ProjectionWarning` says rows were projected onto the ball). A fit on
    fewer than `MIN_VALIDATED_N` rows raises a `SmallSampleWarning`. Under beta-close
    ``"auto"`` means None.
    ``neighbouring="beta-close"`` is the paper's relation (Def. 4.1), asked for
    explicitly: it hides a feature change of at most ``beta`` in one record, the
    targets are not protected, and the fitted model keeps the privatized inputs
    ``model_.x_tilde``, each within about ``beta`` (1e-6 by default) of its training
    row, so it raises a `PrivacyLeakWarning` at fit and its report says so first.
    Attributes after ``fit``: ``model_``, ``privacy_report_``, ``n_features_in_``.
    """

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # (n, c) real targets are supported
        return tags

    _fit_data: ClassVar[dict[str, Any]] = dict(dtype=np.float64, y_numeric=True, multi_output=True)

    def _checked(self, X: Any, y: Any) -> tuple[Any, Any]:
        """As `_DPEstimator._checked`, and targets finite in float32 when the private scales
        read them (they compute in float32)."""
        X, y = super()._checked(X, y)
        y = np.asarray(y, np.float64)
        check_finite(y, "y", dtype=self._target_dtype())
        return X, y

    def _target_dtype(self) -> Any:
        """The dtype the targets are computed in: float32 (the private scales, and the
        model unless ``fit_options`` asks for float64 without them)."""
        wide = (self.fit_options or {}).get("dtype") in ("float64", np.float64)
        return np.float64 if wide and self._share() is None else np.float32

    def _check_solver(self) -> None:
        """``solver='kernel-mean'`` releases class means of one-hot labels; a regressor's real
        targets (they are converted to floats) are refused by it after the private scales:
        refused here, before any noise."""
        if (self.fit_options or {}).get("solver") == "kernel-mean":
            raise ValueError(
                "DPNTKRegressor fits real targets: fit_options solver='kernel-mean' needs class "
                "labels (use DPNTKClassifier)"
            )

    def _check_fit_labels(self, y: Any) -> None:
        """A regressor's labels are its targets: numeric and finite in the dtype they are
        computed in, checked before any step's noise (`privkernels.pipeline.PrivatePipeline`
        runs this on ``y``)."""
        if y is None:
            raise ValueError("DPNTKRegressor needs y, one target (row) per row of X")
        check_numeric(y, "y")
        check_finite(np.asarray(y, np.float64), "y", dtype=self._target_dtype())

    def _expects_classes(self, result: Any) -> bool:
        """A model with classes is a classifier's: its file would need ``classes_``."""
        return _restored_n_classes(result) is not None

    def fit(self, X: Any, y: Any) -> DPNTKRegressor:
        X, y = self._checked(X, y)
        self._fit(X, y, None)
        self._note_seed()
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted targets ``(n,)`` (or ``(n, c)``), float."""
        check_is_fitted(self, "model_")
        X = checked_data(self, X, reset=False, dtype=np.float64)
        return self._scores(X)


class DPNTKClassifier(_KernelScoresClassifier, _RegressionBase):
    """DP NTK regression on one-hot targets (Sec. 6.1), argmax as the class.

    ``classes``: the public label values (``classes_`` holds them sorted, as scikit-learn
    expects); None reads them from ``y`` (`PrivacyLeakWarning`; noted in the report). Otherwise as
    `DPNTKRegressor` (replace-one by default, labels included); ``preprocessing="auto"``
    scales the features only, at `CLASSIFIER_AUTO_SHARE` of the budget, clips each
    standardised value at 3 and puts each row on the sphere of the model's ball (`row_map`
    ``"sphere-clip3"``: a fixed map of one row, no privacy cost), and warns below
    `CLASSIFIER_WARN_N` rows (validated from `CLASSIFIER_MIN_VALIDATED_N` with balanced
    classes, `CLASSIFIER_RARE_VALIDATED_N` with a rare one; the class counts are private
    and not read). Pass ``preprocessing=None`` after a private scaler.
    ``decision_function`` gives the kernel scores and ``predict_proba`` a fixed softmax of
    them (`privkernels.scores`): post-processing, no privacy cost.
    """

    _auto_share = CLASSIFIER_AUTO_SHARE
    _warn_n = CLASSIFIER_WARN_N
    _min_classes = 2
    #: each standardised coordinate clipped at 3, each row then on the sphere
    #: (``benchmarks/results/defaults-ntk-clip-rule.md``; `row_map`)
    _row_map = "sphere-clip3"

    def _small_sample_message(self) -> str:
        rare = CLASSIFIER_RARE_VALIDATED_N
        return (
            f"DPNTKClassifier's defaults were validated at epsilon 1 from n >= "
            f"{CLASSIFIER_MIN_VALIDATED_N} training rows with balanced classes "
            f"(benchmarks/results/defaults-regression.md) and from n >= {rare[0.05]} when "
            f"one class has 5% of the rows (n >= {rare[0.10]} at 10%; "
            "defaults-rare-class.md); no rarer class was validated. This fit has fewer than "
            "the 5% figure, and its class counts are private, so they were not read: expect "
            "a weak model at this epsilon; with a rare class, predict() gives the majority "
            "class even when the scores rank well (use decision_function or predict_proba). "
            "Use more rows or a larger epsilon, or check the result on public data."
        )

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, classes: Any = None,
                 width: int = 256, reg: float = 0.1, fit_intercept: bool = True,
                 kernel_shift: float | str = "auto", input_bound: float = 1.0, beta: float = 1e-6,
                 neighbouring: str = "replace-one", preprocessing: str | float | None = "auto",
                 random_state: jax.Array | int | None = None, fit_options: dict[str, Any] | None = None,
                 budget_accountant: Any = None) -> None:  # fmt: skip
        super().__init__(epsilon, delta, width=width, reg=reg, fit_intercept=fit_intercept,
                         kernel_shift=kernel_shift, input_bound=input_bound, beta=beta,
                         neighbouring=neighbouring, preprocessing=preprocessing,
                         random_state=random_state, fit_options=fit_options,
                         budget_accountant=budget_accountant)  # fmt: skip
        self.classes = classes

    def fit(self, X: Any, y: Any) -> DPNTKClassifier:
        X, y = self._checked(X, y)
        codes = self._encode_classes(y)
        self._fit(X, codes, len(self.classes_))
        self._finish(self.model_)
        self._note_seed()
        return self

    def _scores(self, X: Any) -> np.ndarray:
        """Kernel scores ``(n, n_classes)`` float64 (`privkernels.dp_ntk_regression.predict`)."""
        check_is_fitted(self, "model_")
        X = checked_data(self, X, reset=False, dtype=np.float64)
        return _RegressionBase._scores(self, X)


# --------------------------------------------------------------------------- DP-KIP


#: `dp_kip.fit` keywords `DPKIPClassifier.fit` passes itself: its parameters, the budget, the
#: class count, the progress flag, the keys and the accountant.
_KIP_OWNS = frozenset(
    {"epsilon", "delta", "n_classes", "kernel", "support_per_class", "epochs", "batch_size",
     "learning_rate", "clip_norm", "relative_reg", "progress", "public_key", "budget_accountant"}
)  # fmt: skip


class DPKIPClassifier(_KernelScoresClassifier, _DPEstimator):
    """Private distilled support set (DP-KIP) and kernel ridge regression on it.

    Rows of ``X`` are flattened examples; ``image_shape`` (e.g. ``(28, 28)``) restores
    images for the ScatterNet / e-NTK kernels. Guarantee: replace-one (epsilon, delta)-DP
    of the support set, accounted by PLD over the DP-SGD steps. Inputs: features on a unit
    scale (zero mean, unit variance from public statistics or a private scaler), the scale
    the defaults were chosen at. Unset settings are functions of public numbers only
    (`privkernels.dp_kip.estimator_defaults`; chosen on public tabular data,
    ``benchmarks/results/defaults-dp-kip.md``): with the ``fc_ntk`` kernel,
    ``support_per_class = clip(n // (200 c), 1, 10)`` and ``learning_rate = 1 / sqrt(T)``
    (``T`` DP-SGD steps), and the FC-NTK on sphere-lifted rows
    (``kernel_options={"sphere_lift": True}`` beneath any ``kernel_options`` given in
    ``fit_options``; `privkernels.dp_kip.kernels.sphere_lift`), so that a row's norm does
    not scale its scores; ``clip_norm``, ``relative_reg`` (and the other kernels' settings)
    from `privkernels.dp_kip.KERNEL_DEFAULTS`. ``n`` is the training row count, public under
    replace-one (``batch_size / sampling_rate`` under add-remove). A private fit with
    ``n * min(epsilon, 1)`` below the validated n (`privkernels.dp_kip.VALIDATED_N`) warns
    with a `privkernels.dp_kip.SmallDataWarning`: DP-SGD noise can dominate there.
    Attributes after ``fit``: ``result_``, ``support_`` ``(m, d)``, ``support_labels_``,
    ``classes_``, ``privacy_report_``. ``decision_function`` gives the KRR scores on the
    support set and ``predict_proba`` a fixed softmax of them (`privkernels.scores`):
    post-processing, no privacy cost.
    """

    _result_attr = "result_"
    _min_classes = 2
    _owned_options = _KIP_OWNS

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, classes: Any = None,
                 kernel: str = "fc_ntk", support_per_class: int | None = None, epochs: int = 10,
                 batch_size: int | None = None, learning_rate: float | None = None,
                 clip_norm: float | None = None, relative_reg: float | None = None,
                 image_shape: tuple[int, ...] | None = None, random_state: jax.Array | int | None = None,
                 verbose: bool = False, fit_options: dict[str, Any] | None = None,
                 budget_accountant: Any = None) -> None:  # fmt: skip
        self.epsilon = epsilon
        self.delta = delta
        self.classes = classes
        self.kernel = kernel
        self.support_per_class = support_per_class
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.relative_reg = relative_reg
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose
        self.fit_options = fit_options
        self.budget_accountant = budget_accountant

    def _shape(self, X: np.ndarray) -> np.ndarray:
        if self.image_shape is None:
            return X
        shape = tuple(int(s) for s in self.image_shape)
        if int(np.prod(shape)) != X.shape[1]:
            raise ValueError(f"image_shape {shape} does not match {X.shape[1]} features")
        return X.reshape((X.shape[0], *shape))

    _fit_data: ClassVar[dict[str, Any]] = {"dtype": np.float32}

    def fit(self, X: Any, y: Any) -> DPKIPClassifier:
        self._check_owned_options()  # before any key or data
        X, y = self._checked(X, y)
        codes = self._encode_classes(y)
        n_public, hp = self._defaults(X.shape[0], len(self.classes_))
        warn_small_data(n_public, self.epsilon)
        key, public_key = self._keys()
        with seeded_call():
            res = dp_kip.fit(
                key, self._shape(X), codes, epsilon=self.epsilon, delta=self.delta,
                n_classes=len(self.classes_), kernel=self.kernel,  # type: ignore[arg-type]
                support_per_class=hp.support_per_class, epochs=hp.epochs,
                batch_size=self.batch_size, learning_rate=hp.learning_rate,
                clip_norm=self.clip_norm, relative_reg=self.relative_reg,
                progress=bool(self.verbose), public_key=public_key,
                budget_accountant=self._accountant(), **self._kip_options(),
            )  # fmt: skip
        self._finish(res)
        self._note_seed()
        return self

    def _kip_options(self) -> dict[str, Any]:
        """``fit_options`` with the kernel's default ``kernel_options`` beneath the caller's
        (`privkernels.dp_kip.estimator_defaults.estimator_fit_options`)."""
        return estimator_fit_options(self.kernel, self.fit_options)

    def _check_tunable(self) -> None:
        opts = dict(self.fit_options or {})
        if opts.get("neighbouring", "replace-one") != "add-remove":
            raise ValueError(
                "DP-KIP is tuned under add-remove only (dp-accounting's RDP accountant, which "
                "repeat-and-select needs, supports Poisson-sampled DP-SGD under add-remove): "
                "pass fit_options={'neighbouring': 'add-remove', 'sampling_rate': q} and a "
                "batch_size"
            )
        if str(opts.get("init", "gaussian")).startswith("dp_ntk"):
            raise ValueError("init='dp_ntk' (a second release) is not supported in a search")

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        self._check_tunable()
        opts = self._kip_options()
        shape = tuple(self.image_shape) if self.image_shape is not None else tuple(row_shape)
        keep = ("neighbouring", "sampling_rate", "accountant", "kernel_options", "learn_labels",
                "clip_space", "chunk_size", "grad_method", "jitter")  # fmt: skip
        _, plan, _ = self._configure(
            n_train, shape, len(self.classes or ()), budget.epsilon, budget.delta,
            {k: v for k, v in opts.items() if k in keep},
        )  # fmt: skip
        if plan is None:  # pragma: no cover - a search always has a budget
            raise ValueError("a search needs a private fit (epsilon is None)")
        return [SelectionEvent("dpsgd", plan.noise_multiplier, plan.sampling_rate, plan.steps)]

    def _configure(self, n: int, shape: tuple[int, ...], n_classes: int, epsilon: float | None,
                   delta: float, opts: dict[str, Any]) -> Any:  # fmt: skip
        """`privkernels.dp_kip.configure` of a fit at ``(epsilon, delta)`` on ``n`` records
        of ``shape``: this estimator's settings and its defaults, plus ``opts`` (no data)."""
        _, hp = self._defaults(n, n_classes)
        return dp_kip.configure(
            n=n, input_shape=shape, n_classes=n_classes, epsilon=epsilon, delta=delta,
            kernel=self.kernel, support_per_class=hp.support_per_class,
            batch_size=self.batch_size, epochs=hp.epochs, learning_rate=hp.learning_rate,
            clip_norm=self.clip_norm, relative_reg=self.relative_reg, **opts,
        )  # fmt: skip

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> None:
        """The settings `dp_kip.fit` refuses before its noise, run by `dp_kip.configure`
        and `privkernels.dp_kip.fitting.check_run_arguments` (an unknown ``fit_options`` key
        is the ``TypeError`` the call would raise). Without ``classes`` the class count is
        read from ``y`` at fit: 2, the least a fit takes, stands in (the settings checks do
        not depend on it; the public test labels are then checked by the fit). Without
        ``shape`` (a search, or `load` checking a saved file's parameters, whose checkpoint
        exists by then) the checkpoint and the test set are not checked."""
        super()._check_fit_settings(shape)
        opts = self._kip_options()
        unknown = sorted(set(opts) - set(inspect.signature(dp_kip.fit).parameters))
        if unknown:
            raise TypeError(f"fit() got unexpected keyword argument(s) {unknown}")
        loop = {k: opts[k] for k in ("eval_every", "max_steps", "diagnostics") if k in opts}
        if shape is None:
            check_run_arguments(input_shape=None, n_classes=None, **loop)
            return
        row = self._shape(np.zeros((1, int(np.prod(shape[1:]))), np.float32)).shape[1:]
        c = 2 if self.classes is None else len(np.unique(np.asarray(self.classes)))
        fields = {f.name for f in dataclasses.fields(KIPSettings)} | {"chunk_size"}
        self._configure(shape[0], tuple(row), c, self.epsilon, self.delta,
                        {k: v for k, v in opts.items() if k in fields})  # fmt: skip
        run = ("checkpoint_path", "resume", "x_test", "y_test")
        check_run_arguments(input_shape=tuple(row), n_classes=None if self.classes is None else c,
                            **loop, **{k: opts[k] for k in run if k in opts})  # fmt: skip

    def _defaults(self, n: int, n_classes: int) -> tuple[float | None, Any]:
        """``(public row count, EstimatorDefaults)`` of a fit on ``n`` rows (public numbers
        only: `privkernels.dp_kip.estimator_defaults`)."""
        opts = self.fit_options or {}
        rate = opts.get("sampling_rate")
        n_public = public_row_count(n, neighbouring=self._relation(),
                                    batch_size=self.batch_size, sampling_rate=rate)  # fmt: skip
        hp = estimator_defaults(
            n_public, n_classes, kernel=self.kernel, support_per_class=self.support_per_class,
            epochs=self.epochs, learning_rate=self.learning_rate, batch_size=self.batch_size,
            sampling_rate=rate if self._relation() == "add-remove" else None,
        )  # fmt: skip
        return n_public, hp

    @property
    def support_(self) -> np.ndarray:
        """The released support inputs, flattened: ``(m, n_features)`` float32."""
        check_is_fitted(self, "result_")
        s = np.asarray(self.result_.support_x, np.float32)
        return s.reshape(s.shape[0], -1)

    @property
    def support_labels_(self) -> np.ndarray:
        """Class of each support row (values of ``classes_``)."""
        check_is_fitted(self, "result_")
        return self.classes_[np.asarray(self.result_.support_y)]

    def _scores(self, X: Any) -> np.ndarray:
        """KRR scores on the support set ``(n, n_classes)`` float64 (`privkernels.dp_kip.predict`)."""
        check_is_fitted(self, "result_")
        X = checked_data(self, X, reset=False, dtype=np.float32)
        return np.asarray(dp_kip.predict(self.result_, self._shape(X)), np.float64)

    @staticmethod
    def _load_result(path: Any) -> Any:
        return dp_kip.load(path)


# --------------------------------------------------------------------------- DP-NTK


#: `dp_ntk.fit` / `fit_table` keywords `DPNTKGenerator.fit` passes itself (its own
#: parameters, the budget, the keys and the accountant), refused in ``fit_options``; ``groups``
#: too: a table's come from its schema, an array's generator has none.
_GENERATOR_OWNS = frozenset(
    {
        "epsilon",
        "delta",
        "n_classes",
        "label_mode",
        "iterations",
        "d_code",
        "batch_size",
        "progress",
        "public_key",
        "budget_accountant",
        "groups",
    }
)


class DPNTKGenerator(_DPEstimator):
    """Private synthetic data (DP-NTK): ``fit(X, y)``, then ``sample(n)`` / ``sample_df(n)``.

    Tabular: ``X`` a DataFrame (or column mapping) holding ``label`` unless ``y`` is
    given; ``schema`` a public `privkernels.data.TabularSchema` (or its dict / a JSON
    path). Without a schema one is inferred from the data (`PrivacyLeakWarning`, noted
    in the report). Arrays: ``X`` ``(n, d)`` in [0, 1] (``image_shape`` for images) and
    integer-coded or ``classes``-listed ``y``. Class proportions are released with
    noise by default (``label_mode="released"``), so imbalanced data stay imbalanced.
    Guarantee: replace-one (epsilon, delta)-DP (one Gaussian release, or two composed).
    """

    _result_attr = "synth_"
    _owned_options = _GENERATOR_OWNS

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, schema: Any = None,
                 label: str | None = None, classes: Any = None, label_mode: str = "released",
                 iterations: int | None = None, batch_size: int | None = None,
                 d_code: int | None = None, image_shape: tuple[int, ...] | None = None,
                 random_state: jax.Array | int | None = None, verbose: bool = False,
                 fit_options: dict[str, Any] | None = None,
                 budget_accountant: Any = None) -> None:  # fmt: skip
        self.epsilon = epsilon
        self.delta = delta
        self.schema = schema
        self.label = label
        self.classes = classes
        self.label_mode = label_mode
        self.iterations = iterations
        self.batch_size = batch_size
        self.d_code = d_code
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose
        self.fit_options = fit_options
        self.budget_accountant = budget_accountant

    def _schema(self, table: Any) -> Any:
        s = self.schema
        if s is None:
            if self.label is None:
                raise ValueError("tabular fit without a schema needs label= (the label column)")
            return infer_schema(table, label=self.label)
        if isinstance(s, (str, os.PathLike)):
            return TabularSchema.load(s)
        if isinstance(s, dict):
            return TabularSchema.from_dict(s)
        if not isinstance(s, TabularSchema):
            raise TypeError(f"schema must be a TabularSchema, dict or path, got {type(s).__name__}")
        return s

    def fit(self, X: Any, y: Any = None) -> DPNTKGenerator:
        self._check_owned_options()  # before any key or data
        key, public_key = self._keys()
        self._sample_base = sampling_key(key, public_key)
        opts: dict[str, Any] = dict(label_mode=self.label_mode, iterations=self.iterations,
                                    d_code=self.d_code, batch_size=self.batch_size,
                                    progress=bool(self.verbose), public_key=public_key,
                                    budget_accountant=self._accountant())  # fmt: skip
        if hasattr(X, "columns") or isinstance(X, dict):
            table = X
            schema = self._schema(X if y is None else _with_label(X, y, self.label or "label"))
            if y is not None:
                table = _with_label(X, y, schema.label)
            with seeded_call():
                self.synth_: Any = fit_table(key, table, schema, epsilon=self.epsilon,
                                             delta=self.delta, **opts, **(self.fit_options or {}))  # fmt: skip
            self.schema_ = schema
        else:
            with seeded_call():
                self._fit_arrays(key, X, y, opts)
        self._n_sampled = 0
        self._note_seed()
        return self

    _fit_data: ClassVar[dict[str, Any]] = {"dtype": np.float32}

    def _checked(self, X: Any, y: Any) -> tuple[Any, Any]:
        """Arrays: as `_DPEstimator._checked` (``y`` required); a table: the checks of
        `privkernels.synth.fit_table` against the schema (``schema`` required: without it
        the schema is read from the data at fit, with a warning)."""
        if not (hasattr(X, "columns") or isinstance(X, dict)):
            if y is None:
                raise ValueError("array input needs y (class labels)")
            X, y = super()._checked(X, y)
            check_generator_range(X, self._generator(X.shape[1]))  # also a search's all rows
            return X, y
        if self.schema is None:
            return X, y
        schema = self._schema(X)
        check_table(X if y is None else _with_label(X, y, schema.label), schema)
        return X, y

    def _generator(self, d: int) -> Any:
        """The generator an array fit of ``d`` columns uses (``fit_options``'s, else
        `dp_ntk.default_generator`; 2 classes stand in: the range does not depend on them)."""
        given = (self.fit_options or {}).get("generator")
        return given if given is not None else dp_ntk.default_generator(self._row_shape(d), 2)

    def _input_range(self) -> tuple[float, float] | None:
        """The range an array fit's inputs must lie in (the generator's outputs; None:
        any), for `privkernels.pipeline.PrivatePipeline`'s check, before any noise, of a
        generator placed after a private step. A table fit (``schema`` or ``label``) there
        is refused: its schema's checks would run after that step's release."""
        if not self._arrays_only():
            raise ValueError(
                "DPNTKGenerator with a schema or label (a table fit) cannot follow a private "
                "step in a PrivatePipeline: the schema's checks of the transformed values "
                "would run after that step's release. Fit it on the table itself. Nothing "
                "was fitted"
            )
        d = 1 if self.image_shape is None else int(np.prod(self.image_shape))
        return generator_range(self._generator(d))

    def _row_shape(self, d: int) -> tuple[int, ...]:
        """One example's shape for rows of ``d`` columns: ``image_shape``, or ``(d,)``."""
        shape = tuple(int(s) for s in self.image_shape) if self.image_shape is not None else (d,)
        if int(np.prod(shape)) != d:  # before numpy's reshape error, which names n
            raise ValueError(
                f"image_shape {shape} holds {int(np.prod(shape))} values per row; X has {d} columns"
            )
        return shape

    def _arrays_only(self) -> bool:
        """Whether this generator can fit arrays only (no schema and no label column)."""
        return self.schema is None and self.label is None

    def _check_fit_labels(self, y: Any) -> None:
        if self._arrays_only():  # a table's labels are checked against its schema
            super()._check_fit_labels(y)

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> None:
        """The settings `dp_ntk.fit` refuses before its noise, checked on public numbers
        only by `privkernels.dp_ntk.settings.check_settings` (an unknown ``fit_options``
        key is the ``TypeError`` the call would raise; ``image_shape`` is checked against
        the columns when ``shape`` is known). Without ``classes`` the class count is read at
        fit: 2 stands in (the checks do not depend on it beyond one class)."""
        super()._check_fit_settings(shape)
        opts = dict(self.fit_options or {})
        unknown = sorted(set(opts) - set(inspect.signature(dp_ntk.fit).parameters))
        if unknown:
            raise TypeError(f"fit() got unexpected keyword argument(s) {unknown}")
        runs = run_options(**{k: opts[k] for k in ("mesh", "resume", "chunk_size",
                                                   "checkpoint_path") if k in opts})  # fmt: skip
        if shape is not None and runs.checkpoint_path is not None and not runs.resume:
            # as `dp_ntk.fit` refuses it before its noise (not checked for `load`: it exists)
            checkpoint.check_new(runs.checkpoint_path, "continue it (nothing is released again)")
        if opts.get("checkpoint_every") is not None:
            check_int(opts["checkpoint_every"], "checkpoint_every", minimum=1)
        own = dict(label_mode=self.label_mode, iterations=self.iterations,
                   batch_size=self.batch_size, d_code=self.d_code)  # fmt: skip
        fields = {f.name for f in dataclasses.fields(NTKSettings)} - {"budget"}
        kw = {k: v for k, v in {**own, **opts}.items() if k in fields and v is not None}
        kw["neighbouring"] = check_neighbouring(kw.get("neighbouring", REPLACE_ONE),
                                                DP_NTK_RELATIONS)  # fmt: skip
        budget = as_budget(self.epsilon, self.delta)
        row = (1,) if shape is None else self._row_shape(int(np.prod(shape[1:])))
        n_classes = 2 if self.classes is None else len(self._public_classes())
        check_ntk_settings(NTKSettings(budget=budget, **kw), data_shape=row,
                           n_classes=n_classes, chunk_size=runs.chunk_size)  # fmt: skip

    def _fit_arrays(self, key: jax.Array, X: Any, y: Any, opts: dict[str, Any]) -> None:
        X, y = self._checked(X, y)
        codes = self._encode_classes(y)
        shape = self._row_shape(X.shape[1])
        opts = {k: v for k, v in opts.items() if v is not None}
        res = dp_ntk.fit(key, X.reshape((X.shape[0], *shape)), codes, epsilon=self.epsilon,
                         delta=self.delta, n_classes=len(self.classes_), **opts,
                         **(self.fit_options or {}))  # fmt: skip
        self._finish(res)
        self.synth_ = _ArraySynth(self.synth_)

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        opts = dict(self.fit_options or {})
        two = self.label_mode == "released" or opts.get("neighbouring") == "add-remove"
        if self.classes is not None and len(self.classes) == 1:
            two = opts.get("neighbouring") == "add-remove"
        parts = budget.split(*opts.get("split", (0.9, 0.1))) if two else (budget,)
        return [SelectionEvent("gaussian", gaussian_sigma(p.epsilon, p.delta)) for p in parts]

    def _sample_key(self, random_state: jax.Array | int | None) -> jax.Array:
        """The key of one ``sample`` call: sampling is post-processing, drawn from a stream
        apart from the fit's noise keys. A given ``random_state`` is folded with
        `SAMPLE_TAG`; otherwise the fit's sampling stream (`_sample_base`) with a counter,
        or fresh entropy for a loaded or unpickled copy."""
        if random_state is not None:
            return jax.random.fold_in(sample_key(random_state), SAMPLE_TAG)
        self._n_sampled = getattr(self, "_n_sampled", 0) + 1
        base = getattr(self, "_sample_base", None)
        return jax.random.fold_in(
            base if base is not None else fresh_key(), 10_000 + self._n_sampled
        )

    def sample(
        self, n: int, *, random_state: jax.Array | int | None = None, calibrate: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` synthetic rows ``(X, y)``: X ``(n, n_features)`` (tabular: raw values, object),
        y ``(n,)`` label values (arrays: values of ``classes_``, not their codes).

        ``calibrate``: tabular only, rows drawn from generated pools tilted towards the
        released marginal code (`privkernels.dp_ntk.calibrate`; post-processing; releases
        with released class proportions, the default ``label_mode``)."""
        check_is_fitted(self, "synth_")
        cols = self.synth_.sample(self._sample_key(random_state), n, calibrate=calibrate)
        if isinstance(self.synth_, _ArraySynth):
            return cols["x"], np.asarray(self.classes_)[np.asarray(cols["y"])]
        label = self.synth_.schema.label
        feats = [c for c in cols if c != label]
        return np.column_stack([cols[c] for c in feats]).astype(object), cols[label]

    def sample_df(
        self, n: int, *, random_state: jax.Array | int | None = None, calibrate: bool = False
    ) -> Any:
        """``n`` synthetic rows as a pandas DataFrame (tabular: the schema's columns and dtypes;
        ``calibrate`` as in `sample`)."""
        check_is_fitted(self, "synth_")
        if isinstance(self.synth_, _ArraySynth):
            x, y = self.sample(n, random_state=random_state, calibrate=calibrate)
            cols = {f"x{i}": x[:, i] for i in range(x.shape[1])}
            cols[self.label or "label"] = y
            return to_frame(cols)
        return self.synth_.sample_df(self._sample_key(random_state), n, calibrate=calibrate)

    def _load_result(self, path: Any) -> Any:
        _, meta = checkpoint.load(path)
        if meta.get("format") == TABLE_FORMAT:
            return load_table_synth(path)
        return _ArraySynth(dp_ntk.load(path))

    def _restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], result: Any) -> None:
        super()._restore(arrays, meta, result)
        if not isinstance(result, _ArraySynth):
            self.schema_ = result.schema
            _check_table_notes(result)

    def _expects_classes(self, result: Any) -> bool:
        """Array releases carry ``classes_``; a table's classes are in its schema."""
        return isinstance(result, _ArraySynth)


def _check_table_notes(synth: Any) -> None:
    """Refuse (``ValueError``) a table synthesiser file whose report lacks a caveat its own
    schema shows `privkernels.synth.fit_table` added: a schema read from the data
    (`SCHEMA_INFERRED_NOTE`), or no classes in it, so the class count was read from the
    labels (`N_CLASSES_INFERRED_NOTE`)."""
    notes = synth.report.notes
    if synth.schema.source == "data" and SCHEMA_INFERRED_NOTE not in notes:
        raise ValueError("the file's schema was read from the data but its report lacks "
                         "the note saying so")  # fmt: skip
    if not synth.schema.classes and N_CLASSES_INFERRED_NOTE not in notes:
        raise ValueError("the file's schema lists no classes but its report lacks the note "
                         "that the class count was read from the labels")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _ArraySynth:
    """A DP-NTK result on arrays, with the `privkernels.synth.TableSynth` sampling interface."""

    result: Any

    @property
    def report(self) -> PrivacyReport:
        return self.result.report

    def sample(self, key: jax.Array, n: int, *, calibrate: bool = False) -> dict[str, np.ndarray]:
        # calibrate=True is refused (`code_block`): an array fit has no marginal code
        x, y = sample_rows(key, self.result, n, calibrate=calibrate)
        return {"x": x.reshape(n, -1), "y": y}

    def save(self, path: Any) -> Path:
        return self.result.save(path)


def _with_label(X: Any, y: Any, label: str) -> Any:
    cols = as_columns(X)
    cols[label] = np.asarray(y)
    return cols
