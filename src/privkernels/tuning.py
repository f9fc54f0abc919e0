"""Hyperparameter selection inside the budget: repeat-and-select over candidates.

`select` runs Papernot & Steinke's repeat-and-select (ICLR 2022) on a private
dataset: the rows are split once (data-independent permutation) into a training
part and a validation part; a random number ``K`` of runs (truncated negative
binomial, mean ``mean``) each fit one candidate drawn uniformly from the grid on
the training part and score it on the validation part, where the score (a sum of
per-row values in ``[0, 1]``) is released with the Gaussian mechanism; the run
with the best noisy score is returned. One `PrivacyReport` covers every fit, every
score and the selection (`privkernels.privacy.selection`); only the chosen run's
model and noisy score leave the search.

A candidate is anything with the `Candidate` methods; `privkernels.sklearn.PrivateSearchCV`
wraps the estimators. Before any data is read the search is planned: each
candidate states the privacy events of its fit at a budget (`Candidate.events`),
and the per-run budget is the largest whose search spends at most the target.
After each fit, the events its report records must be the planned ones, or the
search stops with nothing released.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_fraction, check_int
from privkernels.privacy.accountant import charged_release
from privkernels.privacy.accounting import MAX_REPETITIONS, SelectionEvent, check_repetitions
from privkernels.privacy.budget import Budget
from privkernels.privacy.keys import public_key_of, release_key
from privkernels.privacy.relations import check_neighbouring
from privkernels.privacy.release import gaussian_release
from privkernels.privacy.report import PrivacyReport, with_notes
from privkernels.privacy.selection import (
    SelectionPlan,
    draw_repetitions,
    plan_selection,
    selection_report,
)

__all__ = [
    "Candidate",
    "SelectionResult",
    "select",
    "plan_search",
    "check_select_settings",
    "events_of_report",
    "same_events",
    "DEFAULT_MEAN_RUNS",
]

#: Expected number of runs per candidate when ``mean=None``.
DEFAULT_MEAN_RUNS = 2.0


class Candidate(Protocol):
    """One point of the grid, as `select` uses it; it holds the private rows itself.

    ``name``: a public description (goes into the report). ``events(budget, n_train)``:
    the privacy events its fit on ``n_train`` rows at ``budget`` will record (planning:
    no data). ``fit(key, public_key, rows, budget)``: the model fitted on the rows of
    the given indices, whose ``report`` (or ``privacy_report_``) records those events.
    ``scores(model, rows)``: one value in ``[0, 1]`` per given row (higher is better),
    computed from the model and those rows only.
    """

    @property
    def name(self) -> str: ...

    def events(self, budget: Budget, n_train: int) -> Sequence[SelectionEvent]: ...

    def fit(
        self, key: jax.Array, public_key: jax.Array | None, rows: np.ndarray, budget: Budget
    ) -> Any: ...

    def scores(self, model: Any, rows: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class SelectionResult:
    """What a search releases.

    Only the best run leaves the search: the number of runs ``K`` and the candidates the
    other runs tried are not released (Theorem 2 bounds the best run with ``K`` hidden;
    given ``K = k`` the output is a best-of-k, whose cost grows with ``k``).

    Attributes:
      index: the chosen candidate's position in the grid.
      model: its fitted model (trained on the training part only).
      noisy_score: its released score (a noisy sum over the validation rows).
      report: the search's `PrivacyReport`.
      plan: the `SelectionPlan` (budgets, noise, distribution of ``K``).
      n_validation: the size of the validation part under replace-one (n is public);
        None under add-remove, where it would tell the private n.
    """

    index: int
    model: Any
    noisy_score: float
    report: PrivacyReport
    plan: SelectionPlan
    n_validation: int | None


def events_of_report(report: PrivacyReport) -> tuple[tuple[Any, ...], ...]:
    """The `SelectionEvent` tuples a fit's report records (Gaussian and DP-SGD records; a
    DP-SGD record only under add-remove, the one relation its RDP bound covers)."""
    out = []
    for m in report.mechanisms:
        if m.name == "poisson_subsampled_gaussian" and m.param_dict.get("neighbouring") != (
            "add-remove"
        ):
            raise ValueError("a DP-SGD fit is searched under add-remove only (its RDP bound)")
        p = m.param_dict
        if m.name == "gaussian":
            out.append(tuple(SelectionEvent("gaussian", float(p["sigma"]))))
        elif m.name == "poisson_subsampled_gaussian":
            q, t = float(p["sampling_rate"]), int(p["steps"])
            out.append(tuple(SelectionEvent("dpsgd", float(p["noise_multiplier"]), q, t)))
        else:
            raise ValueError(f"a {m.name!r} release has no RDP bound: it cannot be tuned privately")
    return tuple(out)


def same_events(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]]) -> bool:
    """Whether two lists of `SelectionEvent` tuples are the same events (numbers to 1e-9)."""
    if len(a) != len(b):
        return False
    return all(
        len(x) == len(y)
        and x[0] == y[0]
        and all(
            math.isclose(float(u), float(v), rel_tol=1e-9)
            for u, v in zip(x[1:], y[1:], strict=True)
        )
        for x, y in zip(a, b, strict=True)
    )


def _n_validation(n: int, fraction: float) -> int:
    """Rows held out for the scores: ``round(fraction n)``, at least one each side."""
    return max(1, min(n - 1, int(round(fraction * n))))


def _split(
    public_key: jax.Array, n: int, n_val: int, fraction: float, relation: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(train rows, validation rows)``, from the public stream.

    Replace-one (n public): a permutation, ``n_val`` rows held out. Add-remove (n private):
    each row goes to the validation part on its own coin of probability ``fraction``
    (row ``i``'s coin is ``fold_in(key, i)``), so an added row leaves every other row's
    part as it was and no size is computed from n.
    """
    if relation == "replace-one":
        perm = np.asarray(jax.random.permutation(public_key, n))
        return np.sort(perm[n_val:]), np.sort(perm[:n_val])
    coins = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(public_key, i)))(
        jnp.arange(n, dtype=jnp.uint32)
    )
    held = np.asarray(coins) < fraction
    return np.flatnonzero(~held), np.flatnonzero(held)


def _check_relation(events_of: Sequence[Any], budget: Budget, relation: str) -> None:
    """RDP bounds of Poisson-sampled DP-SGD exist under add-remove only (dp-accounting)."""
    kinds = {SelectionEvent(*e).kind for fn in events_of for e in fn(budget)}
    if "dpsgd" in kinds and relation != "add-remove":
        raise ValueError(
            "a search over DP-SGD fits is accounted with RDP, which covers Poisson sampling "
            "under add-remove only: run the fits and the search under neighbouring='add-remove'"
        )


def check_select_settings(
    *, mean: Any, shape: Any, score_share: Any, validation_fraction: Any
) -> float:
    """The validation fraction, once `select`'s data-free settings are checked
    (``ValueError``, no data read): ``validation_fraction`` and ``score_share`` in (0, 1),
    ``mean`` (None: the default) and ``shape`` as
    `privkernels.privacy.accounting.check_repetitions` takes them (Papernot & Steinke 2022,
    Theorem 2). `privkernels.search.PrivateSearchCV` runs it before a pipeline step in
    front of it draws noise."""
    frac = check_fraction(validation_fraction, "validation_fraction")
    check_fraction(score_share, "score_share")
    check_repetitions(DEFAULT_MEAN_RUNS if mean is None else mean, shape)
    return frac


def select(
    key: jax.Array,
    candidates: Sequence[Candidate],
    n_rows: int,
    *,
    epsilon: float,
    delta: float,
    relation: str,
    public_key: jax.Array | None = None,
    mean: float | None = None,
    shape: float = 1.0,
    score_share: float = 0.5,
    validation_fraction: float = 0.2,
    budget_accountant: Any = None,
) -> SelectionResult:
    """Choose among ``candidates`` on ``n_rows`` private rows within ``(epsilon, delta)``.

    Args:
      key: the secret key of the search's releases (fits and scores).
      candidates: the grid (`Candidate`, each holding the rows); at least one, at most
        `privkernels.privacy.accounting.MAX_SELECT_CANDIDATES` (256).
      n_rows: the number of rows (public under replace-one).
      epsilon, delta: the guarantee of the whole search.
      relation: the neighbouring relation every candidate's release is under.
      public_key: the key of the data-independent draws (the split, each fit's own
        public draws); None derives it from ``key``; ``key`` itself is refused. ``K`` and
        the candidates tried always come from ``key``, so a known public key tells
        neither.
      mean: expected number of runs (default ``DEFAULT_MEAN_RUNS`` per candidate).
      shape: of the truncated negative binomial (1: geometric, 0: logarithmic).
      score_share: the share of each run's budget spent on its noisy score.
      validation_fraction: the share of rows held out for the scores.
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged the whole
        search's ``(epsilon, delta)`` once, before any draw (None: the default accountant
        of an open ``with`` block, or none); fits inside charged to the same accountant
        are covered by that charge, not charged again.

    Returns:
      `SelectionResult`.

    Raises:
      ValueError: bad arguments or a budget no run fits in, before any noise.
    """
    key, seeded = release_key(key)
    if public_key is not None:  # not the key, nor any key the search draws secrets from
        public_key = public_key_of(public_key, key, forbidden=_secret_keys(key))
    relation = check_neighbouring(relation, ("replace-one", "add-remove"))
    plan, n, n_val, frac = plan_search(
        candidates, n_rows, epsilon=epsilon, delta=delta, relation=relation, mean=mean,
        shape=shape, score_share=score_share, validation_fraction=validation_fraction,
    )  # fmt: skip
    run = functools.partial(_search, key, candidates, n, n_val, frac, plan, relation,
                            public_key, seeded)  # fmt: skip
    return charged_release(budget_accountant, epsilon, delta, relation, run)


def plan_search(
    candidates: Sequence[Candidate], n_rows: int, *, epsilon: float, delta: float,
    relation: str, mean: float | None = None, shape: float = 1.0, score_share: float = 0.5,
    validation_fraction: float = 0.2,
) -> tuple[SelectionPlan, int, int, float]:  # fmt: skip
    """`select`'s plan before any draw: ``(plan, n_rows, n_validation, fraction)``, or the
    ``ValueError`` `select` would raise on its settings (too many candidates, a budget no
    run fits in, a relation a candidate cannot release under). Reads no row: the
    candidates' events need only the number of training rows (`privkernels.search
    .PrivateSearchCV` runs it before a pipeline step in front of it draws noise)."""
    relation = check_neighbouring(relation, ("replace-one", "add-remove"))
    if not candidates:
        raise ValueError("select needs at least one candidate")
    frac = check_select_settings(mean=mean, shape=shape, score_share=score_share,
                                 validation_fraction=validation_fraction)  # fmt: skip
    n = check_int(n_rows, "n_rows", minimum=2)
    mean = DEFAULT_MEAN_RUNS * len(candidates) if mean is None else float(mean)
    n_val = _n_validation(n, frac)
    events_of = [functools.partial(_events_at, c, n - n_val) for c in candidates]
    _check_relation(events_of, Budget(epsilon, delta), relation)  # refusals before any draw
    plan = plan_selection(
        events_of, epsilon=epsilon, delta=delta, mean=mean, shape=shape, score_share=score_share
    )
    return plan, n, n_val, frac


def _search(
    key: jax.Array, candidates: Sequence[Candidate], n: int, n_val: int, frac: float,
    plan: SelectionPlan, relation: str, public_key: jax.Array | None, seeded: tuple[str, ...],
) -> SelectionResult:  # fmt: skip
    """`select` after its plan: split, draw ``K`` and the picks, run, keep the best.

    An error anywhere inside leaves with its traceback cut here: the frames below hold
    ``K``, the picks, the run index and the best run so far, which a traceback printer that
    shows locals would put into a log (the message and type are kept)."""
    try:
        return _search_runs(key, candidates, n, n_val, frac, plan, relation, public_key, seeded)
    except BaseException as err:
        raise err.with_traceback(None) from None


def _search_runs(
    key: jax.Array, candidates: Sequence[Candidate], n: int, n_val: int, frac: float,
    plan: SelectionPlan, relation: str, public_key: jax.Array | None, seeded: tuple[str, ...],
) -> SelectionResult:  # fmt: skip
    """`_search`'s body (see there)."""
    # K and the picks always come from ``key``'s stream (secret: a known ``public_key`` must
    # not tell them); the split and the fits' public draws from ``public_key`` when given.
    # Without one, both are the same four siblings, as before. A run's public draws (its
    # model's weights, say) are keyed by the run's index only when they are secret; from
    # a given public key, by the candidate's index (released anyway), since the run's
    # index would bound K from below.
    own = jax.random.fold_in(key, PUBLIC_TAG)
    own_pub = public_key is None
    _, k_runs, k_pick, _ = jax.random.split(own, 4)
    k_split, _, _, k_pub = jax.random.split(own if public_key is None else public_key, 4)
    train, val = _split(k_split, n, n_val, frac, relation)
    runs = draw_repetitions(k_runs, plan.mean, plan.shape)
    # one shape for every K (a shape per K would compile once per new count, a trace of K
    # in the process); the first K entries are the draw of shape (K,) (JAX's default PRNG)
    every = jax.random.randint(k_pick, (MAX_REPETITIONS,), 0, len(candidates))
    picks = [int(i) for i in np.asarray(every[:runs])]
    best: tuple[float, int, Any, list[Any]] | None = None
    for j, i in enumerate(picks):  # K and the picks stay inside: only the best run leaves
        with warnings.catch_warnings(record=True) as caught:  # one run's warnings would
            _every_run_records()  # count the runs: kept, and only the best's shown
            model, noisy = _run(candidates[i], plan, _run_key(key, j),
                                jax.random.fold_in(k_pub, j if own_pub else i), train, val,
                                relation)  # fmt: skip
        if best is None or noisy > best[0]:
            best = (noisy, i, model, caught)
    assert best is not None
    _warn_once(best[3])
    report = selection_report(
        plan, relation, candidates=[c.name for c in candidates], chosen=best[1]
    )
    return SelectionResult(
        index=best[1], model=best[2], noisy_score=best[0], report=with_notes(report, seeded),
        plan=plan, n_validation=len(val) if relation == "replace-one" else None,
    )  # fmt: skip


def _every_run_records() -> None:
    """Inside a run's ``catch_warnings(record=True)``: the caller's "error" and "ignore"
    filters kept as they are (an error still stops the run where it is raised), every other
    action turned to "always", so each run records its warnings whatever the registries of
    earlier runs hold (what the chosen run shows must not depend on its place among them)."""
    filters: Any = warnings.filters  # this catch_warnings block's own copy
    filters[:] = [f if f[0] in ("error", "ignore") else ("always", *f[1:]) for f in filters]
    warnings.simplefilter("always", append=True)  # anything else records; marks the change


def _module_of(filename: str) -> str | None:
    """The dotted module name of a privkernels source file (so a caller's filter by
    module still matches a shown warning); None for other files (Python derives one)."""
    parts = Path(filename).with_suffix("").parts
    if "privkernels" not in parts:
        return None
    return ".".join(parts[len(parts) - 1 - parts[::-1].index("privkernels") :])


def _warn_once(caught: list[Any]) -> None:
    """Show the chosen run's warnings, each distinct one once (as its own fit would have)."""
    seen = set()
    for w in caught:
        if (w.category, str(w.message)) not in seen:
            seen.add((w.category, str(w.message)))
            module = _module_of(w.filename)  # None: left out, so Python derives one
            if module is None:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, module)


#: Folded into the search's key to derive the stream of ``K`` and the picks (and the
#: public stream when none is given).
PUBLIC_TAG = 0x7475


def _secret_keys(key: jax.Array) -> jax.Array:
    """``(m,)`` keys a search draws secrets from: every run's root ``fold_in(key, j)`` and its
    fit and score keys (`_run`'s split), ``j <= MAX_REPETITIONS`` (the root of ``K``'s stream,
    ``j = PUBLIC_TAG``, among them), and that stream's four children."""
    roots = jax.vmap(lambda j: jax.random.fold_in(key, j))(
        np.arange(MAX_REPETITIONS + 1, dtype=np.uint32)
    )
    kids = jax.vmap(lambda k: jax.random.split(k))(roots)
    kids = kids.reshape((-1, *roots.shape[1:]))  # a raw uint32 key keeps its last axis
    stream = jax.random.split(jax.random.fold_in(key, PUBLIC_TAG), 4)
    return jax.numpy.concatenate([roots, kids, stream])


def _run_key(key: jax.Array, j: int) -> jax.Array:
    """The secret key of run ``j``: ``fold_in(key, j)``, skipping `PUBLIC_TAG`, so that no
    run's key is the root of ``K``'s stream (run indices below the tag are unchanged)."""
    return jax.random.fold_in(key, j if j < PUBLIC_TAG else j + 1)


def _events_at(cand: Candidate, n_train: int, budget: Budget) -> Sequence[SelectionEvent]:
    return cand.events(budget, n_train)


def _report_of(model: Any) -> PrivacyReport:
    report = getattr(model, "privacy_report_", None)
    return report if report is not None else model.report


def _run(
    cand: Candidate, plan: SelectionPlan, key: jax.Array, public_key: jax.Array | None, train: np.ndarray,
    val: np.ndarray, relation: str,
) -> tuple[Any, float]:  # fmt: skip
    """One run: fit on the training rows, check its events, release its noisy score."""
    k_fit, k_score = jax.random.split(key)
    model = cand.fit(k_fit, public_key, train, plan.fit_budget)
    planned = tuple(tuple(e) for e in cand.events(plan.fit_budget, len(train)))
    report = _report_of(model)
    if report.neighbouring != relation:  # a sensitivity is only right under its relation
        raise RuntimeError(
            f"candidate {cand.name!r} released under {report.neighbouring}, the search is under "
            f"{relation}: the search stops and releases nothing"
        )
    if not same_events(events_of_report(report), planned):
        raise RuntimeError(
            f"candidate {cand.name!r} released other events than planned: the search stops "
            "and releases nothing"
        )
    values = np.clip(np.asarray(cand.scores(model, val), np.float64), 0.0, 1.0)
    if values.shape != (len(val),) or not np.all(np.isfinite(values)):
        raise RuntimeError(f"candidate {cand.name!r} gave no finite score per validation row")
    noisy, _ = gaussian_release(
        k_score, np.float32(values.sum()), budget=plan.score_budget, sensitivity=1.0,
        released="validation score: sum over the validation rows of per-row values in [0, 1]",
    )  # fmt: skip
    return model, float(noisy)
