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
any noise.
``verbose=False`` silences progress bars.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from privkernels import checkpoint, dp_kip, dp_ntk
from privkernels import dp_ntk_regression as R
from privkernels._validation import check_fit_rows, check_numeric
from privkernels.data.frames import as_columns, infer_schema, to_frame
from privkernels.data.schema import TabularSchema
from privkernels.dp_kip.estimator_defaults import (
    estimator_defaults,
    public_row_count,
    warn_small_data,
)
from privkernels.privacy.accountant import default_accountant
from privkernels.privacy.accounting import SelectionEvent, gaussian_sigma
from privkernels.privacy.keys import (
    SAMPLE_TAG,
    SEEDED_KEY_NOTE,
    fresh_key,
    sample_key,
    sampling_key,
    seed_keys,
    seeded_call,
)
from privkernels.privacy.report import PrivacyReport
from privkernels.privacy.warnings import warn_privacy_leak
from privkernels.scores import binary_decision, scores_to_proba
from privkernels.search import PrivateSearchCV
from privkernels.synth import FORMAT as TABLE_FORMAT
from privkernels.synth import fit_table, load_table_synth

__all__ = [
    "DPKIPClassifier",
    "DPNTKClassifier",
    "DPNTKGenerator",
    "DPNTKRegressor",
    "PrivateSearchCV",
    "load",
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


def _checked(
    est: Any, X: Any, y: Any = "no_validation", *, reset: bool = True, **kwargs: Any
) -> Any:
    """scikit-learn's ``validate_data`` after privkernels' own refusals, whose messages hold
    no input value (scikit-learn's conversion error echoes the cell it cannot read): fewer
    than `privkernels._validation.MIN_FIT_ROWS` rows at fit (``reset``), ``X`` not 2-D, a
    non-numeric cell of ``X``, or of ``y`` when ``y_numeric``
    (`privkernels._validation.check_numeric`)."""
    check_numeric(X, "X")
    if np.ndim(X) < 2:  # scikit-learn's message would print the array
        raise ValueError(
            f"X must be 2-D (n_samples, n_features), got {np.ndim(X)}-D input. Reshape your "
            "data: X.reshape(-1, 1) for one feature, X.reshape(1, -1) for one sample"
        )
    if reset:
        check_fit_rows(X, "X")
    if kwargs.get("y_numeric"):
        check_numeric(y, "y")
    if isinstance(y, str) and y == "no_validation":  # X alone (scikit-learn's convention)
        return validate_data(est, X, reset=reset, **kwargs)
    return validate_data(est, X, y, reset=reset, **kwargs)


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


class _DPEstimator(BaseEstimator):
    """Shared fit bookkeeping, save/load."""

    _result_attr: ClassVar[str] = "result_"

    @property
    def privacy_report_(self) -> PrivacyReport:
        """The `PrivacyReport` of the fitted release."""
        check_is_fitted(self, self._result_attr)
        return getattr(self, self._result_attr).report

    def _encode_classes(self, y: Any, minimum: int = 1) -> np.ndarray:
        """Codes ``(n,)`` int32 of ``y`` in ``classes_`` (public ``classes``, else read with a warning)."""
        y = np.asarray(y)
        check_classification_targets(y)
        if self.classes is None:
            warn_privacy_leak("classes (read from y; pass classes= explicitly)", stacklevel=4)
            self.classes_ = np.unique(y)
            self._classes_inferred = True
        else:
            self.classes_ = np.asarray(self.classes)
            self._classes_inferred = False
            if len(np.unique(self.classes_)) != len(self.classes_):
                raise ValueError("classes has duplicates")
        pos = {c: i for i, c in enumerate(self.classes_.tolist())}
        try:
            codes = np.array([pos[v] for v in y.tolist()], np.int32)
        except KeyError:
            raise ValueError("y holds a label outside classes") from None
        if len(self.classes_) < minimum:
            raise ValueError(
                f"{type(self).__name__} needs at least {minimum} classes, "
                f"got {len(self.classes_)} class(es)"
            )
        return codes

    def __getstate__(self) -> dict[str, Any]:
        """Pickle / joblib / deepcopy state. A fitted estimator holds a release: its
        ``random_state`` (the noise is a function of an int seed), any key and its
        ``budget_accountant`` are left out, as `save` leaves them out (the copy has
        ``random_state=None``). An unfitted one with an accountant (its parameter, or the
        ``with`` block's kept by `__sklearn_clone__`) cannot be pickled: the accountant
        refuses (`privkernels.privacy.BudgetAccountant`), as in another process it would
        not be charged."""
        state = dict(super().__getstate__())
        if hasattr(self, self._result_attr):
            state["random_state"] = None
            state["budget_accountant"] = None  # the ledger stays in this process
            for name in (*_KEY_ATTRS, "_block_accountant"):
                state.pop(name, None)
        return state  # unfitted with an accountant: the accountant refuses to be pickled

    def __sklearn_clone__(self) -> Any:
        """``sklearn.clone``; a clone made inside a ``with BudgetAccountant(...)`` block
        without its own accountant keeps the block's (``GridSearchCV`` clones in the calling
        thread: its fits in worker threads are then charged, and a worker process, which
        would need it pickled, fails loudly)."""
        twin = super().__sklearn_clone__()
        block = default_accountant()
        if block is not None and twin.get_params().get("budget_accountant") is None:
            twin._block_accountant = block
        return twin

    def _accountant(self) -> Any:
        """The accountant of a fit: the parameter, else the ``with`` block's at clone time,
        else None (the fit then takes the default of the block it runs in, if any)."""
        given = self.budget_accountant
        return given if given is not None else self.__dict__.get("_block_accountant")

    def _keys(self) -> tuple[Any, Any]:
        """``(key, public_key)`` of a fit (`privkernels.privacy.keys.seed_keys`), or the pair
        a `PrivateSearchCV` run hands this fit (consumed once)."""
        given = self.__dict__.pop("_search_keys", None)
        return given if given is not None else seed_keys(self.random_state)

    def _relation(self) -> str:
        """The neighbouring relation of this estimator's release."""
        return str((self.fit_options or {}).get("neighbouring", "replace-one"))

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        """The `privkernels.privacy.accounting.SelectionEvent` s a fit at ``budget`` on
        ``n_train`` rows of ``row_shape`` records (planning a `PrivateSearchCV`; no data)."""
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
            arrays["estimator/classes_"] = c if c.dtype.kind in "biuf" else c.astype(str)
        meta["estimator"] = {"format": FORMAT, "class": type(self).__name__,
                             "params": _json_params(self.get_params()),
                             "n_features_in_": int(getattr(self, "n_features_in_", 0))}  # fmt: skip
        return checkpoint.save(p, arrays, meta)

    def _restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], result: Any) -> None:
        setattr(self, self._result_attr, result)
        if meta["estimator"]["n_features_in_"]:
            self.n_features_in_ = meta["estimator"]["n_features_in_"]
        if "estimator/classes_" in arrays:
            self.classes_ = arrays["estimator/classes_"]


def _json_params(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in params.items():
        if k == "random_state":
            v = None  # the seed determines the noise: a file holding it would undo the privacy
        if k == "budget_accountant":
            v = None  # a live ledger of this session, not a property of the release
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
    if not block or block.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved privkernels estimator")
    cls = {
        c.__name__: c for c in (DPNTKRegressor, DPNTKClassifier, DPKIPClassifier, DPNTKGenerator)
    }
    est = cls[block["class"]](**block["params"])
    est._restore(arrays, meta, est._load_result(path))
    return est


# --------------------------------------------------------------------------- regression


class _RegressionBase(_DPEstimator):
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
        random_state: Any = None,
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
        self.random_state = random_state
        self.fit_options = fit_options
        self.budget_accountant = budget_accountant

    def _fit(self, X: Any, y: Any, n_classes: int | None) -> None:
        key, public_key = self._keys()
        with seeded_call():
            self.model_ = R.fit(
                key, np.asarray(X, np.float32), y, epsilon=self.epsilon,
                delta=self.delta, n_classes=n_classes, width=self.width, reg=self.reg,
                fit_intercept=self.fit_intercept, kernel_shift=self.kernel_shift,  # type: ignore[arg-type]
                input_bound=self.input_bound, beta=self.beta, neighbouring=self.neighbouring,  # type: ignore[arg-type]
                public_key=public_key, budget_accountant=self._accountant(),
                **(self.fit_options or {}),
            )  # fmt: skip

    _result_attr = "model_"

    def _relation(self) -> str:
        return str(self.neighbouring)

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
        if self.neighbouring != "replace-one":
            raise ValueError(
                "a beta-close fit (Gaussian sampling, truncated Laplace) has no RDP bound and "
                "cannot be tuned privately: tune with neighbouring='replace-one'"
            )
        return [SelectionEvent("gaussian", gaussian_sigma(budget.epsilon, budget.delta))]

    @staticmethod
    def _load_result(path: Any) -> Any:
        return R.load(path)


class DPNTKRegressor(RegressorMixin, _RegressionBase):
    """Private kernel ridge regression with the quadratic NTK (DP NTK regression).

    The default guarantee is standard replace-one (epsilon, delta)-DP: replacing a
    whole record, target included (sufficient-statistics perturbation; targets
    clipped to norm ``fit_options["target_bound"]``, default 1). Inputs are mapped
    per record to the ball of radius ``input_bound`` (a bias coordinate is appended
    with ``fit_intercept``). Parameters as in `privkernels.dp_ntk_regression.fit`.
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

    def fit(self, X: Any, y: Any) -> DPNTKRegressor:
        X, y = _checked(self, X, y, dtype=np.float64, y_numeric=True, multi_output=True)
        self._fit(X, np.asarray(y, np.float64), None)
        self._note_seed()
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted targets ``(n,)`` (or ``(n, c)``), float."""
        check_is_fitted(self, "model_")
        X = _checked(self, X, reset=False, dtype=np.float32)
        return np.asarray(R.predict(self.model_, X), np.float64)


class DPNTKClassifier(_KernelScoresClassifier, _RegressionBase):
    """DP NTK regression on one-hot targets (Sec. 6.1), argmax as the class.

    ``classes``: the public label values (class ``i`` is ``classes[i]``); None reads
    them from ``y`` (`PrivacyLeakWarning`; noted in the report). Otherwise as
    `DPNTKRegressor` (replace-one by default, labels included). ``decision_function``
    gives the kernel scores and ``predict_proba`` a fixed softmax of them
    (`privkernels.scores`): post-processing, no privacy cost.
    """

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, classes: Any = None,
                 width: int = 256, reg: float = 0.1, fit_intercept: bool = True,
                 kernel_shift: float | str = "auto", input_bound: float = 1.0, beta: float = 1e-6,
                 neighbouring: str = "replace-one", random_state: Any = None,
                 fit_options: dict[str, Any] | None = None,
                 budget_accountant: Any = None) -> None:  # fmt: skip
        super().__init__(epsilon, delta, width=width, reg=reg, fit_intercept=fit_intercept,
                         kernel_shift=kernel_shift, input_bound=input_bound, beta=beta,
                         neighbouring=neighbouring, random_state=random_state,
                         fit_options=fit_options, budget_accountant=budget_accountant)  # fmt: skip
        self.classes = classes

    def fit(self, X: Any, y: Any) -> DPNTKClassifier:
        X, y = _checked(self, X, y, dtype=np.float64)
        codes = self._encode_classes(y, minimum=2)
        self._fit(X, codes, len(self.classes_))
        self._finish(self.model_)
        self._note_seed()
        return self

    def _scores(self, X: Any) -> np.ndarray:
        """Kernel scores ``(n, n_classes)`` float64 (`privkernels.dp_ntk_regression.predict`)."""
        check_is_fitted(self, "model_")
        X = _checked(self, X, reset=False, dtype=np.float32)
        return np.asarray(R.predict(self.model_, X), np.float64)


# --------------------------------------------------------------------------- DP-KIP


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
    (``T`` DP-SGD steps); ``clip_norm``, ``relative_reg`` (and the other kernels' settings)
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

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, classes: Any = None,
                 kernel: str = "fc_ntk", support_per_class: int | None = None, epochs: int = 10,
                 batch_size: int | None = None, learning_rate: float | None = None,
                 clip_norm: float | None = None, relative_reg: float | None = None,
                 image_shape: tuple[int, ...] | None = None, random_state: Any = None,
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

    def fit(self, X: Any, y: Any) -> DPKIPClassifier:
        X, y = _checked(self, X, y, dtype=np.float32)
        codes = self._encode_classes(y, minimum=2)
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
                budget_accountant=self._accountant(), **(self.fit_options or {}),
            )  # fmt: skip
        self._finish(res)
        self._note_seed()
        return self

    def _privacy_events(self, budget: Any, n_train: int, row_shape: tuple[int, ...]) -> Any:
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
        shape = tuple(self.image_shape) if self.image_shape is not None else tuple(row_shape)
        keep = ("neighbouring", "sampling_rate", "accountant", "kernel_options", "learn_labels",
                "clip_space", "chunk_size", "grad_method", "jitter")  # fmt: skip
        _, hp = self._defaults(n_train, len(self.classes or ()))
        _, plan, _ = dp_kip.configure(
            n=n_train, input_shape=shape, n_classes=len(self.classes or ()), epsilon=budget.epsilon,
            delta=budget.delta, kernel=self.kernel, support_per_class=hp.support_per_class,
            batch_size=self.batch_size, epochs=hp.epochs, learning_rate=hp.learning_rate,
            clip_norm=self.clip_norm, relative_reg=self.relative_reg,
            **{k: v for k, v in opts.items() if k in keep},
        )  # fmt: skip
        if plan is None:  # pragma: no cover - a search always has a budget
            raise ValueError("a search needs a private fit (epsilon is None)")
        return [SelectionEvent("dpsgd", plan.noise_multiplier, plan.sampling_rate, plan.steps)]

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
        X = _checked(self, X, reset=False, dtype=np.float32)
        return np.asarray(dp_kip.predict(self.result_, self._shape(X)), np.float64)

    @staticmethod
    def _load_result(path: Any) -> Any:
        return dp_kip.load(path)


# --------------------------------------------------------------------------- DP-NTK


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

    def __init__(self, epsilon: float | None = 1.0, delta: float = 1e-5, *, schema: Any = None,
                 label: str | None = None, classes: Any = None, label_mode: str = "released",
                 iterations: int | None = None, batch_size: int | None = None,
                 d_code: int | None = None, image_shape: tuple[int, ...] | None = None,
                 random_state: Any = None, verbose: bool = False,
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

    def _fit_arrays(self, key: Any, X: Any, y: Any, opts: dict[str, Any]) -> None:
        if y is None:
            raise ValueError("array input needs y (class labels)")
        X, y = _checked(self, X, y, dtype=np.float32)
        codes = self._encode_classes(y)
        shape = tuple(self.image_shape) if self.image_shape is not None else (X.shape[1],)
        if int(np.prod(shape)) != X.shape[1]:  # before numpy's reshape error, which names n
            raise ValueError(
                f"image_shape {shape} holds {int(np.prod(shape))} values per row; X has "
                f"{X.shape[1]} columns"
            )
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

    def _sample_key(self, random_state: Any) -> Any:
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

    def sample(self, n: int, *, random_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``n`` synthetic rows ``(X, y)``: X ``(n, n_features)`` (tabular: raw values, object)."""
        check_is_fitted(self, "synth_")
        cols = self.synth_.sample(self._sample_key(random_state), n)
        if isinstance(self.synth_, _ArraySynth):
            return cols["x"], cols["y"]
        label = self.synth_.schema.label
        feats = [c for c in cols if c != label]
        return np.column_stack([cols[c] for c in feats]).astype(object), cols[label]

    def sample_df(self, n: int, *, random_state: Any = None) -> Any:
        """``n`` synthetic rows as a pandas DataFrame (tabular: the schema's columns and dtypes)."""
        check_is_fitted(self, "synth_")
        if isinstance(self.synth_, _ArraySynth):
            x, y = self.sample(n, random_state=random_state)
            cols = {f"x{i}": x[:, i] for i in range(x.shape[1])}
            cols[self.label or "label"] = y
            return to_frame(cols)
        return self.synth_.sample_df(self._sample_key(random_state), n)

    def _load_result(self, path: Any) -> Any:
        _, meta = checkpoint.load(path)
        if meta.get("format") == TABLE_FORMAT:
            return load_table_synth(path)
        return _ArraySynth(dp_ntk.load(path))

    def _restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], result: Any) -> None:
        super()._restore(arrays, meta, result)
        if not isinstance(result, _ArraySynth):
            self.schema_ = result.schema


@dataclasses.dataclass(frozen=True)
class _ArraySynth:
    """A DP-NTK result on arrays, with the `privkernels.synth.TableSynth` sampling interface."""

    result: Any

    @property
    def report(self) -> PrivacyReport:
        return self.result.report

    def sample(self, key: Any, n: int) -> dict[str, np.ndarray]:
        x, y = dp_ntk.sample(key, self.result, n)
        return {"x": x.reshape(n, -1), "y": y}

    def save(self, path: Any) -> Path:
        return self.result.save(path)


def _with_label(X: Any, y: Any, label: str) -> Any:
    cols = as_columns(X)
    cols[label] = np.asarray(y)
    return cols
