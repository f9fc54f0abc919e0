"""Private hyperparameter selection: repeat-and-select, planned and accounted.

Papernot & Steinke (ICLR 2022), "Hyperparameter tuning with Renyi differential
privacy": run a randomized algorithm a random number ``K`` of times, each time on
a candidate drawn uniformly from the grid, and output only the best run (by a
noisy score). With ``K`` from a truncated negative binomial of shape ``eta``
(1: geometric, 0: logarithmic) and mean ``mu``, the whole search is RDP with the
bound of their Theorem 2 (`privkernels.privacy.accounting.repeat_and_select_epsilon`),
and its cost grows with ``log(mu)``, not with the number of runs.

This module is the privacy side of `privkernels.tuning`:

* `plan_selection` splits a per-run budget between the fit and its noisy score and
  finds the largest per-run epsilon whose search stays within the target
  (epsilon, delta) (bisection on the monotone RDP bound);
* `draw_repetitions` draws ``K`` exactly from the distribution the accountant
  assumes (inverse CDF in float64, from the search's key);
* `selection_report` records the whole search as one `MechanismRecord` whose
  epsilon a loader re-derives from its events (`privkernels.privacy.verify`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from privkernels._validation import check_delta, check_epsilon, check_fraction
from privkernels.privacy.accounting import (
    MAX_REPETITIONS,
    SelectionEvent,
    check_repetitions,
    gaussian_sigma,
    repeat_and_select_epsilon,
    tnb_gamma,
    tnb_log_mass,
)
from privkernels.privacy.budget import Budget
from privkernels.privacy.report import MechanismRecord, PrivacyReport

__all__ = [
    "SelectionPlan",
    "plan_selection",
    "draw_repetitions",
    "selection_record",
    "selection_report",
]

#: A candidate's privacy events as a function of its fit's budget (planning, no data).
EventsOf = Callable[[Budget], Sequence[SelectionEvent]]


class SelectionPlan(NamedTuple):
    """A calibrated search (public numbers only).

    Attributes:
      epsilon, delta: the target guarantee of the whole search.
      spent: the epsilon the accountant gives the planned search (``<= epsilon``).
      fit_budget: the budget each candidate's fit is given.
      score_budget: the budget of each run's noisy score (a Gaussian release of a sum of
        per-row scores in ``[0, 1]``: sensitivity 1 under replace-one and add-remove).
      score_sigma: the score's noise multiplier.
      mean, shape: the distribution of the number of runs.
      events: per candidate, the events of one run (fit, then score), as JSON-able tuples.
      score_share: the share of a run's budget its score spends.
    """

    epsilon: float
    delta: float
    spent: float
    fit_budget: Budget
    score_budget: Budget
    score_sigma: float
    mean: float
    shape: float
    events: tuple[tuple[tuple[Any, ...], ...], ...]
    score_share: float


def _run_events(
    events_of: Sequence[EventsOf], run: Budget, score_share: float
) -> tuple[Budget, Budget, float, tuple[tuple[tuple[Any, ...], ...], ...]]:
    fit, score = run.split(1.0 - score_share, score_share)
    sigma = gaussian_sigma(score.epsilon, score.delta)
    events = tuple(
        tuple(tuple(e) for e in fn(fit)) + (tuple(SelectionEvent("gaussian", sigma)),)
        for fn in events_of
    )
    return fit, score, sigma, events


def plan_selection(
    events_of: Sequence[EventsOf],
    *,
    epsilon: float,
    delta: float,
    mean: float,
    shape: float = 1.0,
    score_share: float = 0.2,
    tol: float = 1e-4,
) -> SelectionPlan:
    """The largest per-run budget whose repeat-and-select spends at most ``(epsilon, delta)``.

    Args:
      events_of: one function per candidate: its fit's `SelectionEvent` s at a budget.
      epsilon, delta: the target guarantee of the whole search.
      mean: expected number of runs (>= 1); shape: of the truncated negative binomial.
      score_share: the share of each run's budget spent on its noisy score, in (0, 1).
      tol: relative precision of the per-run epsilon (bisection), in (0, 1).

    Returns:
      `SelectionPlan`. ``ValueError`` (before any data is read) when no per-run budget
      fits, e.g. a target too small for the number of runs.
    """
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    share = check_fraction(score_share, "score_share")
    mean, shape = check_repetitions(mean, shape)
    tol = check_fraction(tol, "tol")
    if not events_of:
        raise ValueError("a search needs at least one candidate")

    def spent(run_eps: float) -> tuple[float, Any]:
        parts = _run_events(events_of, Budget(run_eps, dlt), share)
        return repeat_and_select_epsilon(parts[3], mean=mean, shape=shape, delta=dlt), parts

    lo, hi = eps * 1e-4, eps
    if spent(lo)[0] > eps:
        raise ValueError(
            f"no per-run budget keeps {len(events_of)} candidate(s) with {mean:g} runs on "
            f"average within epsilon={eps:g}: raise epsilon or lower the mean number of runs"
        )
    while spent(hi)[0] <= eps:  # a run may use more than the total (RDP of a few runs)
        lo, hi = hi, 2.0 * hi
    while hi - lo > tol * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if spent(mid)[0] <= eps else (lo, mid)
    total, (fit, score, sigma, events) = spent(lo)
    return SelectionPlan(
        eps, dlt, total, fit, score, sigma, float(mean), float(shape), events, share
    )


def draw_repetitions(key: jax.Array, mean: float, shape: float) -> int:
    """The number of runs ``1 <= K <= MAX_REPETITIONS``, drawn from the truncated negative
    binomial the accountant assumes: inverse CDF in float64 on one 53-bit uniform from
    ``key``, summing the masses of `tnb_log_mass` (Papernot & Steinke, Def. 1) in order,
    with ``gamma`` the halting probability of ``mean``. ``(mean, shape)`` is checked first
    (`check_repetitions`: a ``ValueError`` before ``key`` is used), so the cap is reached
    with probability at most `MAX_REPETITION_TAIL`.
    """
    mean, shape = check_repetitions(mean, shape)
    gamma = tnb_gamma(mean, shape)
    hi, lo = (int(w) for w in np.asarray(jax.random.bits(key, (2,), jax.numpy.uint32)))
    u = ((hi >> 5) * 2.0**26 + (lo >> 6)) / 2.0**53  # uniform on [0, 1), 53 bits
    if gamma >= 1.0:
        return 1
    cdf, k = 0.0, 0
    while cdf <= u and k < MAX_REPETITIONS:
        k += 1
        cdf += math.exp(float(tnb_log_mass(k, gamma, shape)))
    return k


def selection_record(
    plan: SelectionPlan, *, candidates: Sequence[str], chosen: int
) -> MechanismRecord:
    """The search as one record: its epsilon is the accountant's for its events. The number
    of runs is not recorded: the guarantee holds with it hidden."""
    return MechanismRecord.make(
        "repeat_and_select",
        f"the best run over {len(candidates)} candidate(s) (its model and noisy score)",
        plan.spent,
        plan.delta,
        sensitivity=1.0,
        accountant="rdp",
        events=json.dumps([[list(e) for e in run] for run in plan.events]),
        mean=plan.mean,
        shape=plan.shape,
        candidates=tuple(str(c) for c in candidates),
        chosen=int(chosen),
        score_share=plan.score_share,
        fit_epsilon=plan.fit_budget.epsilon,
        fit_delta=plan.fit_budget.delta,
        score_sigma=plan.score_sigma,
        target_epsilon=plan.epsilon,
    )


def selection_report(
    plan: SelectionPlan,
    relation: str,
    *,
    candidates: Sequence[str],
    chosen: int,
    notes: tuple[str, ...] = (),
) -> PrivacyReport:
    """The report of a whole search: one repeat-and-select record under ``relation``."""
    return PrivacyReport.from_mechanisms(
        [selection_record(plan, candidates=candidates, chosen=chosen)],
        relation,
        data_independent=(
            "the train/validation split: drawn from the search's key, independent of the data",
        ),
        notes=(
            "repeat-and-select (Papernot & Steinke 2022, Thm. 2), accounted with RDP: every "
            "candidate's fit, every noisy score and the selection are inside this epsilon",
            "the number of runs and the candidates of the runs not chosen are not released: "
            "the bound holds with them hidden (the search's running time reflects them, and "
            "timing is not covered)",
            *notes,
        ),
    )
