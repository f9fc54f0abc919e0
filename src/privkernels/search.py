"""`PrivateSearchCV`: a grid search whose epsilon covers every candidate, score and choice.

A scikit-learn meta-estimator over the privkernels estimators (re-exported as
``privkernels.sklearn.PrivateSearchCV``). It runs `privkernels.tuning.select`:
repeat-and-select (Papernot & Steinke 2022) on one data-independent train /
validation split, each run a candidate drawn uniformly from the grid, fitted at the
planned per-run budget and scored on the validation rows with a noisy score. Unlike
``GridSearchCV``, whose ``best_estimator_`` reports one fit's budget while every
candidate read the data, ``privacy_report_`` here is the search's whole cost.

Per-row scores (each in ``[0, 1]``, so the noisy sum has sensitivity 1):

* classifiers: 1 when the prediction is right;
* regressors: ``1 - min(((y - y_hat) / target_bound)^2, 1)`` (``target_bound`` public);
* `privkernels.sklearn.DPNTKGenerator`: train-on-synthetic, 1 when a logistic
  regression fitted on `SYNTHETIC_ROWS` synthetic rows predicts the validation row's
  label.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from typing import Any

import jax
import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier, is_regressor
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import ParameterGrid
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from privkernels import tuning
from privkernels._validation import check_finite
from privkernels.data.frames import as_columns, split_table
from privkernels.privacy.accountant import resolve
from privkernels.privacy.accounting import check_candidate_count
from privkernels.privacy.budget import Budget
from privkernels.privacy.keys import check_seed, seed_keys, seeded_call
from privkernels.privacy.report import PrivacyReport
from privkernels.privacy.warnings import PrivacyLeakWarning, SeededKeyWarning

__all__ = ["PrivateSearchCV"]

#: Synthetic rows a generator's train-on-synthetic score trains on (a public constant: under
#: add-remove a count taken from the validation rows would be private and move every score).
SYNTHETIC_ROWS = 2000

#: Parameters the search sets itself on every candidate.
_OWNED = ("epsilon", "delta", "random_state", "budget_accountant")


def _rows(data: Any, rows: np.ndarray) -> Any:
    """The given rows of an array, a DataFrame or a mapping of columns."""
    if data is None:
        return None
    if hasattr(data, "iloc"):
        return data.iloc[rows]
    if isinstance(data, dict):
        return {k: np.asarray(v)[rows] for k, v in data.items()}
    return np.asarray(data)[rows]


def _n_rows(data: Any) -> int:
    if isinstance(data, dict):
        return len(next(iter(data.values())))
    return len(data)


@dataclasses.dataclass
class _EstimatorCandidate:
    """One grid point of an estimator, holding the private rows (`tuning.Candidate`)."""

    base: Any
    params: dict[str, Any]
    x: Any
    y: Any
    target_bound: float

    @property
    def name(self) -> str:
        return json.dumps(self.params, sort_keys=True, default=repr)

    def _estimator(self, budget: Budget) -> Any:
        est = clone(self.base).set_params(**self.params)
        if "verbose" in est.get_params():  # a progress bar per run would tell the runs apart
            est.set_params(verbose=False)
        return est.set_params(epsilon=budget.epsilon, delta=budget.delta, random_state=None)

    def events(self, budget: Budget, n_train: int) -> Any:
        shape = tuple(np.shape(self.x)[1:]) if not isinstance(self.x, dict) else ()
        return self._estimator(budget)._privacy_events(budget, n_train, shape)

    def fit(
        self, key: jax.Array, public_key: jax.Array | None, rows: np.ndarray, budget: Budget
    ) -> Any:
        """The candidate's fit; any un-noised read inside it (a `PrivacyLeakWarning`) stops
        the search with nothing released, since its report could not cover it."""
        est = self._estimator(budget)
        est._search_keys = (key, public_key)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            warnings.simplefilter("ignore", SeededKeyWarning)
            return est.fit(_rows(self.x, rows), _rows(self.y, rows))

    def scores(self, model: Any, rows: np.ndarray) -> np.ndarray:
        x, y = _rows(self.x, rows), _rows(self.y, rows)
        if is_classifier(model):
            return (np.asarray(model.predict(x)) == np.asarray(y)).astype(np.float64)
        if is_regressor(model):
            err = np.asarray(y, np.float64) - np.asarray(model.predict(x), np.float64)
            err = err.reshape(len(rows), -1) / self.target_bound
            return 1.0 - np.minimum(np.sum(err**2, axis=1), 1.0)
        return _synthetic_scores(model, x, y)


def _synthetic_scores(gen: Any, x: Any, y: Any) -> np.ndarray:
    """Train-on-synthetic: a logistic regression on synthetic rows, right (1) or not (0)."""
    n = SYNTHETIC_ROWS  # a public count: a size read from the rows would tell them apart
    schema = getattr(gen, "schema_", None)
    if schema is not None:  # tables: both sides through the public schema
        syn_feats, ys = split_table(gen.synth_.sample(gen._sample_key(None), n), schema)
        xs = schema.encode(syn_feats)[0]
        val_feats, yv = split_table(x if y is None else {**as_columns(x), schema.label: y}, schema)
        xv = schema.encode(val_feats)[0]
    else:
        xs, ys = gen.sample(n)
        xv, yv = np.asarray(x, np.float32).reshape(_n_rows(x), -1), np.asarray(y)
    ys, yv = np.asarray(ys), np.asarray(yv)
    if len(np.unique(ys)) < 2:  # one synthetic class: a constant predictor
        return (yv == ys[0]).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(max_iter=500).fit(np.asarray(xs, np.float32), ys)
    return (clf.predict(np.asarray(xv, np.float32)) == yv).astype(np.float64)


def _check_float32(data: Any, name: str) -> None:
    """Refuse numeric ``data`` with a value that float32 cannot hold (the fits and scores
    compute in float32: such a row in the validation part would fail after a release).
    A DataFrame is read through its numeric columns; column mappings, labels as strings
    and other non-numeric inputs are left to the estimators' own checks."""
    if hasattr(data, "select_dtypes"):  # pandas: its numeric columns
        data = data.select_dtypes(include="number")
    elif data is None or isinstance(data, dict) or hasattr(data, "columns"):
        return
    try:
        values = np.asarray(data, np.float64)
    except (TypeError, ValueError):
        return
    check_finite(values, name, dtype=np.float32)


def _check_no_leak(est: Any, table: bool) -> None:
    """Refuse a candidate that would read the private data without noise (its search
    report could not cover it): labels or a schema read from the data, diagnostics."""
    table = table and hasattr(est, "schema")  # only a generator reads a table's schema
    if table and est.schema is None:
        raise ValueError("pass the public schema= to the generator: a search infers none")
    if not table and not is_regressor(est) and getattr(est, "classes", None) is None:
        raise ValueError(
            "pass the public classes= to the estimator (every grid point): a search reads no "
            "label without noise"
        )
    if (getattr(est, "fit_options", None) or {}).get("diagnostics"):
        raise ValueError("diagnostics=True reads the data without noise: not in a search")


def _check_no_files(est: Any) -> None:
    """Refuse a candidate whose ``fit_options`` name a checkpoint (or a resume): each run
    would write its release to disk, where the unchosen runs must stay hidden (the
    guarantee of repeat-and-select, Papernot & Steinke 2022, holds only with them
    unseen), and the second run would find the first one's file after the charge."""
    opts = getattr(est, "fit_options", None) or {}
    if opts.get("checkpoint_path") is not None or opts.get("resume"):
        raise ValueError(
            "fit_options checkpoint_path / resume are not supported in a search: each run "
            "would keep its release on disk (fit the chosen settings alone to checkpoint)"
        )


def _best_has(name: str) -> Any:
    """`available_if` check: the searched estimator has ``name``."""

    def check(self: Any) -> bool:
        return hasattr(self.estimator, name)

    return check


class PrivateSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Choose an estimator's hyperparameters privately; one report covers the whole search.

    Args:
      estimator: a privkernels estimator (`privkernels.sklearn`) whose release has an RDP
        bound: DP NTK regression under replace-one, DP-NTK generators, DP-KIP under
        add-remove. Classifiers and array generators need public ``classes``.
      param_grid: a dict (or list of dicts) of lists, as ``GridSearchCV``'s; it may not set
        ``epsilon``, ``delta`` or ``random_state`` (the search sets them).
      epsilon, delta: the guarantee of the whole search (every fit, score and the choice).
      mean_runs: expected number of runs (default 2 per candidate); the cost grows with
        its logarithm. A mean whose runs could pass
        `privkernels.privacy.accounting.MAX_REPETITIONS` with probability above 1e-12 is
        refused (about 3,500 for the geometric). The warnings the search shows are the
        chosen run's, each once: a count per run would tell the hidden number of runs.
      shape: of the truncated negative binomial of the number of runs (1: geometric,
        0: logarithmic).
      score_share: the share of each run's budget spent on its noisy score.
      validation_fraction: the share of rows held out for the scores.
      target_bound: regressors' public bound on ``|y - y_hat|`` in the score.
      random_state: None (fresh OS entropy, for a release) or an int / key (reproducible,
        not secret: `privkernels.privacy.SeededKeyWarning`).
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged the whole
        search's ``(epsilon, delta)`` once, before any data is read (None: the estimator's
        own ``budget_accountant``, else the default accountant of an open ``with`` block,
        else none); the candidates' fits are covered by that charge.

    Attributes after ``fit``: ``best_estimator_`` (fitted on the training part),
    ``best_params_``, ``best_index_``, ``best_score_`` (its noisy validation score: a mean
    over the validation rows under replace-one, the noisy sum under add-remove, where the
    number of rows is private), ``privacy_report_``, ``plan_`` (the per-run budgets and the
    distribution of the number of runs), ``candidates_``. The number of runs and the
    candidates the other runs tried are not kept: the guarantee holds with them hidden.
    """

    def __init__(
        self,
        estimator: Any,
        param_grid: Any,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        mean_runs: float | None = None,
        shape: float = 1.0,
        score_share: float = 0.5,
        validation_fraction: float = 0.2,
        target_bound: float = 1.0,
        random_state: jax.Array | int | None = None,
        budget_accountant: Any = None,
    ) -> None:
        self.estimator = estimator
        self.param_grid = param_grid
        self.epsilon = epsilon
        self.delta = delta
        self.mean_runs = mean_runs
        self.shape = shape
        self.score_share = score_share
        self.validation_fraction = validation_fraction
        self.target_bound = target_bound
        self.random_state = random_state
        self.budget_accountant = budget_accountant

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state: a fitted search holds a release, so its ``random_state`` (the noise
        is a function of an int seed, or is the key itself) is left out."""
        state = dict(super().__getstate__())
        if hasattr(self, "best_estimator_"):
            state["random_state"] = None
            state["budget_accountant"] = None  # the ledger stays in this process
        return state

    def _candidates(self, X: Any, y: Any) -> list[_EstimatorCandidate]:
        grid = list(ParameterGrid(self.param_grid))
        if not grid:
            raise ValueError("param_grid holds no candidate")
        owned = sorted({k for p in grid for k in p if k in _OWNED})
        if owned:
            raise ValueError(f"param_grid may not set {owned}: the search sets them")
        base = clone(self.estimator)
        if not hasattr(base, "_privacy_events"):
            raise ValueError(f"{type(base).__name__} is not a privkernels estimator")
        base.set_params(budget_accountant=self._accountant())  # covered by the search's charge
        table = isinstance(X, dict) or hasattr(X, "columns")
        for params in grid:  # every grid point, before any data is read or noise drawn
            cand = clone(base).set_params(**params)
            _check_no_leak(cand, table)
            _check_no_files(cand)
            # its own data-free settings checks; the search sets the budget and the key
            cand.set_params(epsilon=1.0, delta=0.5, random_state=None)._check_fit_settings(None)
            cand._check_tunable()
        bound = float(self.target_bound)
        if not (math.isfinite(bound) and bound > 0):
            raise ValueError(f"target_bound must be a finite number > 0, got {self.target_bound!r}")
        return [_EstimatorCandidate(base, dict(p), X, y, bound) for p in grid]

    def _accountant(self) -> Any:
        """The accountant the search charges: its own, the estimator's, or the default.
        Two different ones are refused (before any data): one would be silently dropped."""
        given = self.budget_accountant
        inner = getattr(self.estimator, "budget_accountant", None)
        if given is not None and inner is not None and given is not inner:
            raise ValueError(
                "PrivateSearchCV and its estimator name two different budget accountants: "
                "the search charges one ledger; pass the accountant to one of them"
            )
        return resolve(given if given is not None else inner)

    @staticmethod
    def _relation(cands: list[_EstimatorCandidate]) -> str:
        """The one relation every candidate releases under (else ``ValueError``)."""
        relations = {clone(c.base).set_params(**c.params)._relation() for c in cands}
        if len(relations) != 1:
            raise ValueError(f"every candidate must release under one relation, got {relations}")
        return str(relations.pop())

    def _planned_charge(self) -> tuple[Any, float, float, str]:
        """``(accountant, epsilon, delta, relation)`` the search will charge (no data read;
        `privkernels.pipeline.PrivatePipeline` sums them before any step's noise)."""
        return (
            self._accountant(),
            self.epsilon,
            self.delta,
            self._relation(self._candidates(None, None)),
        )

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> None:
        """Refuse, before any data is read, what `fit` refuses on its settings alone (the
        budget, ``random_state``'s type, the candidates' relation and
        `privkernels.tuning.check_select_settings`); with the input's ``shape`` known (a
        `privkernels.pipeline.PrivatePipeline` step), also the search's plan
        (`privkernels.tuning.plan_search`: too many candidates, a budget no run fits in)."""
        Budget(self.epsilon, self.delta)
        check_seed(self.random_state)
        known = shape if shape is not None and len(shape) >= 2 else None
        rows = None if known is None else np.zeros((0, *known[1:]), np.float32)  # width only
        cands = self._candidates(rows, None)
        relation = self._relation(cands)
        check_candidate_count(len(cands))  # the plan would refuse it: no shape needed
        tuning.check_select_settings(
            mean=self.mean_runs, shape=self.shape, score_share=self.score_share,
            validation_fraction=self.validation_fraction,
        )  # fmt: skip
        if known is not None:  # no row is read: the candidates' events need only the width
            tuning.plan_search(
                cands, known[0], epsilon=self.epsilon,
                delta=self.delta, relation=relation, mean=self.mean_runs, shape=self.shape,
                score_share=self.score_share, validation_fraction=self.validation_fraction,
            )  # fmt: skip

    def _input_range(self) -> tuple[float, float] | None:
        """The range every candidate's inputs must lie in (the intersection of the
        candidates' `_input_range`; None: any), for `privkernels.pipeline.PrivatePipeline`'s
        check before any noise."""
        out: tuple[float, float] | None = None
        for cand in self._candidates(None, None):
            need = getattr(clone(cand.base).set_params(**cand.params), "_input_range", None)
            r = need() if callable(need) else None
            if r is not None:
                out = r if out is None else (max(out[0], r[0]), min(out[1], r[1]))
        return out

    def _check_fit_labels(self, y: Any) -> None:
        """Every candidate's own check that the labels ``y`` lie in its public ``classes``
        (`privkernels.pipeline.PrivatePipeline` runs it before any step's noise)."""
        for cand in self._candidates(None, None):
            est = clone(cand.base).set_params(**cand.params)
            if hasattr(est, "_check_fit_labels"):
                est._check_fit_labels(y)

    def _check_fit_data(self, X: Any, y: Any, cands: list[_EstimatorCandidate]) -> None:
        """Every candidate's own data checks on ALL rows, before the first candidate's
        noise: a fit sees only its training rows, so a bad validation row (a label outside
        ``classes``, a NaN target, a value outside the schema) would otherwise be found
        after a release, or scored."""
        for cand in cands:
            clone(cand.base).set_params(**cand.params)._check_fit_data(X, y)
        _check_float32(X, "X")
        _check_float32(y, "y")

    def fit(self, X: Any, y: Any = None) -> PrivateSearchCV:
        """Run the search on the private ``(X, y)``; see the class docstring."""
        Budget(self.epsilon, self.delta)  # a bad budget fails first, before any data
        cands = self._candidates(X, y)
        relation = self._relation(cands)
        self._check_fit_data(X, y, cands)
        n = _n_rows(X)
        key, public_key = seed_keys(self.random_state)
        with seeded_call():
            res = tuning.select(
                key, cands, n, epsilon=self.epsilon, delta=self.delta, relation=relation,
                public_key=public_key, mean=self.mean_runs, shape=self.shape,
                score_share=self.score_share, validation_fraction=self.validation_fraction,
                budget_accountant=self._accountant(),
            )  # fmt: skip
        self.candidates_ = [c.params for c in cands]
        self.best_index_ = res.index
        self.best_params_ = dict(cands[res.index].params)
        self.best_estimator_ = res.model
        n_val = res.n_validation  # None under add-remove: the size would tell the private n
        self.best_score_ = res.noisy_score / n_val if n_val else res.noisy_score
        self.privacy_report_: PrivacyReport = res.report
        self.plan_ = res.plan
        _note_search(res.model, res.report)
        if hasattr(res.model, "classes_"):
            self.classes_ = res.model.classes_
        return self

    @available_if(_best_has("predict"))
    def predict(self, X: Any) -> Any:
        """The chosen estimator's predictions (post-processing: no further cost)."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    @available_if(_best_has("predict_proba"))
    def predict_proba(self, X: Any) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict_proba(X)

    @available_if(_best_has("decision_function"))
    def decision_function(self, X: Any) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.decision_function(X)

    @available_if(_best_has("score"))
    def score(self, X: Any, y: Any = None) -> float:
        check_is_fitted(self, "best_estimator_")
        return float(self.best_estimator_.score(X, y))

    @available_if(_best_has("sample"))
    def sample(self, n: int, **kw: Any) -> Any:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.sample(n, **kw)


def _note_search(model: Any, report: PrivacyReport) -> None:
    """Tell the chosen fit's own report that a search chose it, and what the search cost."""
    model._add_note(
        f"chosen by PrivateSearchCV: this report covers this fit alone; the search that chose "
        f"it (every candidate, score and the choice) is ({report.epsilon:.4g}, "
        f"{report.delta:.3g})-DP: publish that report"
    )
