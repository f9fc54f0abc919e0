"""`PrivatePipeline`: a scikit-learn ``Pipeline`` whose fit is refused whole, before any noise.

A plain ``sklearn.pipeline.Pipeline`` fits its steps one after the other. A private
scaler in front of a private estimator releases first (draws its noise, is charged to
its `privkernels.privacy.BudgetAccountant`), and only then does the estimator check its
settings and the budget: a refit the estimator refuses still costs the scaler's budget
and leaves the scaler refitted beside the old model (issue #52, finding D).

`PrivatePipeline.fit` (and ``fit_transform``, ``fit_predict``) first, drawing nothing:

1. refuses a step that would fit on the data without a privacy report, by the rule of
   `pipeline_report` (``"passthrough"``/None, ``FunctionTransformer``, ``Normalizer`` and
   the steps named in ``public_steps`` are let through, unless they hold a private
   estimator or an accountant; a private step is counted even when named there);
2. runs each private step's own settings checks (``_check_fit_settings``: the checks its
   ``fit`` runs before its noise, reused, not copied) and, for a step with public
   ``classes``, its check that every label of ``y`` is one of them (``_check_fit_labels``,
   the step's own message, naming no label: ``y`` reaches every step unchanged);
3. for a classifier step that reads its classes from ``y`` (``classes=None``), runs the
   refusals its own ``fit`` makes on ``y`` before its noise (its data checks and its class
   encoding, on a clone), with the `privkernels.privacy.PrivacyLeakWarning` of that read;
4. checks on each accountant that the sum of its steps' planned ``(epsilon, delta)``
   (``_planned_charge``; basic sequential composition, Dwork & Roth 2014, Theorem 3.16)
   fits in what remains (`privkernels.privacy.BudgetAccountant.check`), refusing
   (`privkernels.privacy.BudgetExceededError`) before any step runs if it does not;
5. refuses private steps that release under different neighbouring relations, which
   `pipeline_report` could not compose after the fit (`privkernels.privacy.compose`: one
   relation, unless a step is non-private, which makes the whole non-private);
6. refuses fit parameters (``step__param``) for a step the pipeline does not have, or
   that the step's ``fit`` does not take (without metadata routing; with it,
   scikit-learn's own routing refuses them before any step fits).

Then the steps fit as in a plain ``Pipeline``, and each private step charges its own
release (one ledger entry per step). Nothing is reserved for the pipeline as a whole:
a reservation would let every release nested in it run uncharged, including a private
fit hidden in a ``FunctionTransformer``'s function, which is charged like any other
here. Another thread spending on the same accountant between the check and a step's
fit makes that step refuse itself, before its noise.

A fit that fails after a step released (a refusal that depends on the data a step
sees, e.g. an ``image_shape`` that does not match the columns a ``FunctionTransformer``
left) restores every step as it was before the fit; the steps that released stay
charged (a failure after a step's noise is charged at its plan).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn import get_config
from sklearn.base import OneToOneFeatureMixin, clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.utils.validation import check_is_fitted

from privkernels._sklearn_accounting import DetachedAccountantWarning
from privkernels.privacy.accountant import BudgetAccountant, resolve
from privkernels.privacy.report import PrivacyReport, compose

__all__ = ["PrivatePipeline", "make_private_pipeline", "pipeline_report"]

#: Pipeline steps that read no data when fitted (no report needed).
_STATELESS = ("FunctionTransformer", "Normalizer")

#: Steps that keep the number and shape of the columns (the next step's shape is known).
_SHAPE_KEEPING = ("Normalizer",)


def _fitted(step: Any) -> bool:
    """Whether a pipeline's step has been fitted ("passthrough"/None: nothing to fit)."""
    if step is None or step == "passthrough":
        return True
    try:
        check_is_fitted(step)
    except NotFittedError:
        return False
    return True


def _public(name: str, step: Any, public_steps: tuple[str, ...]) -> bool:
    """Whether a step needs no privacy report: nothing to fit, a per-row map, or vouched for."""
    if step is None or step == "passthrough" or name in public_steps:
        return True
    return type(step).__name__ in _STATELESS


def pipeline_report(pipeline: Any, *, public_steps: tuple[str, ...] = ()) -> PrivacyReport:
    """The composed `PrivacyReport` of every private step of a fitted ``Pipeline``.

    Basic sequential composition (`privkernels.privacy.compose`) of the steps'
    ``privacy_report_`` in order: each step reads the same private rows (transformed by
    the steps before it, post-processing of their releases). A step that fitted on the
    data without a report is refused (``ValueError``, naming the step), unless it is
    ``"passthrough"``/None, a stateless ``FunctionTransformer`` or ``Normalizer`` (a per-row
    map that learns nothing), or named in
    ``public_steps`` (the caller vouches it read nothing private). A private step is
    counted even when ``public_steps`` names it.
    """
    steps = getattr(pipeline, "steps", None)
    if steps is None:
        raise TypeError("pipeline_report takes a fitted sklearn.pipeline.Pipeline")
    if not _fitted(steps[-1][1]):
        raise ValueError("the pipeline is not fitted: fit it first, then ask for its report")
    reports = []
    for name, step in steps:
        if _public(name, step, public_steps) and not hasattr(step, "_planned_charge"):
            continue  # a private step counts even when public_steps names it
        try:
            reports.append(step.privacy_report_)
        except AttributeError:
            raise ValueError(
                f"pipeline step {name!r} ({type(step).__name__}) fitted on the data without a "
                "privacy report: use a private step (e.g. PrivateStandardScaler) or name it in "
                "public_steps if it read nothing private"
            ) from None
    if not reports:
        raise ValueError("the pipeline has no private step: nothing to report")
    return compose(*reports)


def _private_value(v: Any, depth: int = 0) -> bool:
    """Whether ``v`` is, or holds, a private estimator or an accountant: looked for inside
    containers, ``functools.partial`` arguments and a bound method's object (a closure's
    cells are not searched: its fits are charged when they run)."""
    if hasattr(v, "_planned_charge") or isinstance(v, BudgetAccountant):
        return True
    if depth > 4:
        return False
    if isinstance(v, dict):
        inner: list[Any] = list(v.values())
    elif isinstance(v, (list, tuple, set)):
        inner = list(v)
    elif isinstance(v, functools.partial):
        inner = [v.func, *v.args, *v.keywords.values()]
    elif hasattr(v, "__self__") and not isinstance(v, type):
        inner = [v.__self__]
    else:
        return False
    return any(_private_value(e, depth + 1) for e in inner)


def _holds_private(step: Any) -> bool:
    """Whether a step's parameters hold a private estimator or a budget accountant."""
    params = step.get_params(deep=True) if hasattr(step, "get_params") else {}
    return any(_private_value(v) for v in params.values())


def _rows(data: Any) -> int | None:
    """The number of rows of an array, a frame, a series or a list (None: a mapping of
    columns, or no data)."""
    if data is None or isinstance(data, dict):
        return None
    shape = getattr(data, "shape", None) or np.shape(data)  # a sparse matrix: its own shape
    return int(shape[0]) if len(shape) else None


def _data_shape(X: Any) -> tuple[int, ...] | None:
    """``(n, *row)``, the shape of ``X`` (None when it has no array shape: a mapping)."""
    shape = getattr(X, "shape", None)
    return None if shape is None or len(shape) < 2 else tuple(int(s) for s in shape)


def _check_labels_read(step: Any, y: Any, n: int | None) -> None:
    """For a classifier step that reads its classes from ``y`` (``classes=None``): the
    refusals its own ``fit`` makes on ``y`` before its noise, run on a clone (nothing is set
    on the step), with the `privkernels.privacy.PrivacyLeakWarning` its fit gives for the
    same read. ``y`` reaches every step unchanged, but the columns a step sees are not known
    before the fit: a stand-in ``X`` of zeros, ``(n, 1)``, lets the step's data checks
    (``_checked``) run on ``y`` alone. ``n``: the rows of ``y`` (of ``X`` without ``y``)."""
    if getattr(step, "classes", 0) is not None or not is_classifier(step) or n is None:
        return
    probe = clone(step)
    _, y_checked = probe._checked(np.zeros((n, 1)), y)
    probe._encode_classes(y_checked)


def _check_relations(charges: list[tuple[str, float | None, str]]) -> None:
    """Refuse private steps ``(name, epsilon, relation)`` under different neighbouring
    relations: basic composition (Dwork & Roth 2014, Theorem 3.16;
    `privkernels.privacy.compose`) holds under one relation, and a non-private step
    (``epsilon=None``) makes the whole non-private, whatever the relations."""
    if any(eps is None for _, eps, _ in charges) or len({r for *_, r in charges}) < 2:
        return
    named = ", ".join(f"{name!r} {relation}" for name, _, relation in charges)
    raise ValueError(
        f"PrivatePipeline steps release under different neighbouring relations ({named}), "
        "whose reports cannot be composed into one guarantee: give every private step the "
        "same relation. Nothing was fitted"
    )


def _fit_takes(step: Any, param: str) -> bool:
    """Whether ``step.fit(X, y, **{param: ...})`` takes ``param`` (its signature: a name
    after ``X`` and ``y``, or ``**kwargs``)."""
    if step is None or step == "passthrough":
        return False
    try:
        params = list(inspect.signature(step.fit).parameters.values())
    except (TypeError, ValueError):  # no signature to read: the call decides
        return True
    kinds = inspect.Parameter
    if any(p.kind is kinds.VAR_KEYWORD for p in params):
        return True
    positional = [
        p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    named = [p.name for p in positional[2:] if p.kind is kinds.POSITIONAL_OR_KEYWORD]
    return param in named + [p.name for p in params if p.kind is kinds.KEYWORD_ONLY]


def _check_fit_params(steps: list[tuple[str, Any]], params: dict[str, Any]) -> None:
    """Refuse, before any step fits, a fit parameter ``step__param`` whose step the pipeline
    does not have, or whose step's ``fit`` does not take it: a step after a private one
    would fail after that step's noise (a parameter without ``__`` scikit-learn refuses
    before any step fits; with metadata routing, so does its ``process_routing``)."""
    if get_config().get("enable_metadata_routing", False):
        return
    by_name = dict(steps)
    for key in params:
        name, sep, param = key.partition("__")
        if not sep:
            continue
        if name not in by_name:
            raise ValueError(
                f"PrivatePipeline has no step {name!r} for the fit parameter {key!r}. "
                "Nothing was fitted"
            )
        step = by_name[name]
        if not _fit_takes(step, param):
            kind = "passthrough" if step is None or step == "passthrough" else type(step).__name__
            raise ValueError(
                f"PrivatePipeline step {name!r} ({kind}) does not take the fit parameter "
                f"{param!r}. Nothing was fitted"
            )


def _passes(step: Any) -> bool:
    """Whether ``step`` hands its input on unchanged."""
    return step is None or (isinstance(step, str) and step == "passthrough")


def _check_input_range(
    name: str, step: Any, ranged: tuple[str, tuple[float, float] | None] | None
) -> None:
    """Refuse, before any noise, a step whose inputs must lie in a range (a generator's
    outputs) placed after a private release whose outputs are not guaranteed to lie in it:
    a value outside would be refused only after that release, and whether it is depends on
    one record. ``ranged``: ``(name, guaranteed range or None)`` of the last step that
    changes values after a private one (None: no private step before ``step``)."""
    if ranged is None:
        return
    need = getattr(step, "_input_range", None)
    need = need() if callable(need) else None
    if need is None:
        return
    before, have = ranged
    # the step reads float32: the guaranteed range as float32 rounds it
    if (
        have is None
        or not need[0] <= float(np.float32(have[0])) <= float(np.float32(have[1])) <= need[1]
    ):
        raise ValueError(
            f"PrivatePipeline step {name!r} ({type(step).__name__}) needs inputs in "
            f"[{need[0]:g}, {need[1]:g}], and step {before!r} before it does not guarantee "
            "that (in float32) after a private release: a value outside would be refused "
            "only after that release. Put PrivateMinMaxScaler(clip=True) with a "
            "feature_range inside it, exact in float32, right before it. Nothing was fitted"
        )


class PrivatePipeline(Pipeline):
    """A ``Pipeline`` whose fit is checked whole before any step draws noise.

    Args:
      steps: as ``sklearn.pipeline.Pipeline``; every step that fits on the data must be a
        private privkernels step (a scaler, an estimator, a `PrivateSearchCV`), a per-row
        map (``FunctionTransformer``, ``Normalizer``), ``"passthrough"``, or named in
        ``public_steps``.
      public_steps: names of steps the caller vouches read nothing private.
      transform_input, verbose: as ``Pipeline``.
      memory: must be None (a cached private step would be reused uncharged: refused).

    Guarantee (module docstring): a fit refused for a step's settings, for a label outside
    a step's public ``classes`` (or labels its fit refuses when it reads ``classes`` from
    ``y``), for a step that would read the data without noise, for steps under different
    neighbouring relations, for a fit parameter no step takes, for a step whose inputs must
    lie in a range (`DPNTKGenerator`) after a private step that does not guarantee it, or
    for the accountants' budgets draws no noise, charges nothing and leaves every step as
    it was. Not covered: a public step after a private one (``FunctionTransformer``,
    ``public_steps``) runs the caller's code on released-and-transformed values; if it can
    turn finite values into NaN or inf, a later step refuses them after the release, and
    whether it does depends on the data. Keep such steps finite on every input. ``privacy_report_`` is
    `pipeline_report` of the fitted pipeline.
    """

    def __init__(self, steps: Any, *, public_steps: tuple[str, ...] = (),
                 transform_input: Any = None, memory: Any = None, verbose: bool = False) -> None:  # fmt: skip
        super().__init__(steps, transform_input=transform_input, memory=memory, verbose=verbose)
        self.public_steps = public_steps

    @property
    def privacy_report_(self) -> PrivacyReport:
        """The composed report of the fitted private steps (`pipeline_report`; a private
        step is counted even when ``public_steps`` names it)."""
        return pipeline_report(self, public_steps=tuple(self.public_steps))

    def fit(self, X: Any, y: Any = None, **params: Any) -> PrivatePipeline:
        """``Pipeline.fit`` after the checks of the class docstring."""
        self._guarded(super().fit, X, y, **params)
        return self

    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
        """``Pipeline.fit_transform`` after the checks of the class docstring."""
        return self._guarded(super().fit_transform, X, y, **params)

    def fit_predict(self, X: Any, y: Any = None, **params: Any) -> Any:
        """``Pipeline.fit_predict`` after the checks of the class docstring."""
        return self._guarded(super().fit_predict, X, y, **params)

    def _guarded(self, fit: Callable[..., Any], X: Any, y: Any, **params: Any) -> Any:
        """``fit(X, y, **params)`` once `_plan`'s sums fit every accountant; on failure every
        step is put back as it was."""
        if self.memory is not None:  # a cached private step would be reused uncharged
            raise ValueError(
                "PrivatePipeline does not cache its steps (memory=): a private step taken "
                "from the cache would hold a release no accountant was charged for. Nothing "
                "was fitted"
            )
        _check_fit_params(list(self.steps), params)
        for acc, (eps, delta) in self._plan(X, y).items():
            acc.check(eps, delta, acc.neighbouring)
        before = (list(self.steps), [dict(getattr(s, "__dict__", {})) for _, s in self.steps])
        try:
            return fit(X, y, **params)
        except BaseException:
            self._restore(before)
            raise

    def _restore(self, before: tuple[list[Any], list[dict[str, Any]]]) -> None:
        """Put the steps (and their fitted state) back as `_guarded` found them."""
        self.steps = before[0]
        for (_, step), state in zip(self.steps, before[1], strict=True):
            if hasattr(step, "__dict__"):
                step.__dict__.clear()
                step.__dict__.update(state)

    def _private_steps(self) -> list[tuple[str, Any]]:
        """The private steps, each counted whether or not ``public_steps`` names it. A step
        that would read the data without noise and is not named in ``public_steps`` is
        refused (`pipeline_report`'s rule), and so is a named one holding a private
        estimator or an accountant (its fits cannot be planned before the fit)."""
        out = []
        for name, step in self.steps:
            if hasattr(step, "_planned_charge"):
                out.append((name, step))
            elif not _public(name, step, tuple(self.public_steps)):
                raise ValueError(
                    f"PrivatePipeline step {name!r} ({type(step).__name__}) would fit on the "
                    "data without a privacy report: use a private step (e.g. "
                    "PrivateStandardScaler) or name it in public_steps if it reads nothing "
                    "private. Nothing was fitted"
                )
            elif _holds_private(step):
                raise ValueError(
                    f"PrivatePipeline step {name!r} ({type(step).__name__}) holds a private "
                    "estimator or a budget accountant: its fits cannot be planned (use "
                    "PrivateSearchCV for a search). Nothing was fitted"
                )
        return out

    def _plan(self, X: Any, y: Any) -> dict[Any, tuple[float, float]]:
        """Check every step's settings (and ``y`` against its public ``classes``, or by its
        own fit's checks when it reads them from ``y``) and that the steps' relations compose,
        and return ``{accountant: (epsilon, delta)}``, the sums each accountant must still
        hold (each step's charge checked by `privkernels.privacy.BudgetAccountant.check`:
        relation, ``epsilon=None``)."""
        private = dict(self._private_steps())  # a step without a report: refused first
        shape = _data_shape(X)
        n_x, n_y = _rows(X), _rows(y)
        if n_x is not None and n_y is not None and n_x != n_y:
            raise ValueError("X and y hold different numbers of rows")  # no count named
        totals: dict[Any, tuple[float, float]] = {}
        charges: list[tuple[str, float | None, str]] = []
        ranged: tuple[str, tuple[float, float] | None] | None = None  # after a private step
        for name, step in self.steps:
            if name in private:
                step._check_fit_settings(shape)
                _check_input_range(name, step, ranged)
                if hasattr(step, "_check_fit_labels"):
                    step._check_fit_labels(y)
                _check_labels_read(step, y, n_y if n_y is not None else n_x)
                acc, eps, delta, relation = self._charge_of(step)
                charges.append((name, eps, str(relation)))
                if acc is not None:
                    cost = acc.check(eps, delta, relation)
                    e0, d0 = totals.get(acc, (0.0, 0.0))
                    totals[acc] = (e0 + cost.epsilon, d0 + cost.delta)
            keeps = _passes(step) or isinstance(step, OneToOneFeatureMixin)
            if not (keeps or type(step).__name__ in _SHAPE_KEEPING):
                shape = None  # the next step's columns are not known before the fit
            if name in private or (ranged is not None and not _passes(step)):
                out = getattr(step, "_output_range", None)
                ranged = (name, out() if callable(out) else None)
        _check_relations(charges)
        return totals

    @staticmethod
    def _charge_of(step: Any) -> tuple[Any, Any, Any, str]:
        """``(accountant or None, epsilon, delta, relation)`` of a private step's fit."""
        with warnings.catch_warnings():  # the step's own fit warns, once
            warnings.simplefilter("ignore", DetachedAccountantWarning)
            given, eps, delta, relation = step._planned_charge()
        return resolve(given), eps, delta, relation


def make_private_pipeline(*steps: Any, public_steps: tuple[str, ...] = (),
                          transform_input: Any = None, memory: Any = None,
                          verbose: bool = False) -> PrivatePipeline:  # fmt: skip
    """`PrivatePipeline` with step names made as ``sklearn.pipeline.make_pipeline`` makes them
    (the lowercased class name)."""
    named = make_pipeline(*steps).steps
    return PrivatePipeline(named, public_steps=public_steps, transform_input=transform_input,
                           memory=memory, verbose=verbose)  # fmt: skip
