"""Re-derive a stored record's epsilon from its parameters: files that cannot lie.

A report read from a file (`privkernels.privacy.report.PrivacyReport.from_dict`)
is not trusted: every `MechanismRecord` must show the epsilon that its own
noise parameters give under the accountant that made it, and the totals must
be what the report's composition rule gives. An edited epsilon, sigma,
sampling rate, step count, relation or rule is refused with a ``ValueError``.

* ``gaussian``: ``gaussian_epsilon(sigma, delta)`` (analytic Gaussian) and
  ``noise_std = sigma * sensitivity``.
* ``truncated_laplace``: ``sensitivity / scale`` and the support bound.
* ``gaussian_sampling``: Condition 5.3, ``M <= Delta(epsilon, delta, k)``.
* ``poisson_subsampled_gaussian``: ``dpsgd_epsilon`` of its sigma, q, steps,
  accountant and relation (the report's), memoized on those public numbers.
* ``repeat_and_select``: `privkernels.privacy.accounting.repeat_and_select_epsilon`
  of its candidates' events.

A record of any other mechanism cannot be checked and is refused.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from privkernels._json import loads_bounded
from privkernels.privacy.accounting import (
    dpsgd_epsilon,
    gaussian_epsilon,
    gaussian_sigma,
    gsm_epsilon,
    repeat_and_select_epsilon,
    tlap_bound,
)
from privkernels.privacy.record import MechanismRecord
from privkernels.privacy.relations import BETA_CLOSE

__all__ = ["check_record", "rederived_epsilon"]

#: Relative tolerance between a stored epsilon and the one its parameters give.
EPSILON_RTOL = 1e-6


def _num(params: dict[str, Any], name: str, record: MechanismRecord) -> float:
    try:
        value = float(params[name])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"record {record.name!r} has no numeric {name!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"record {record.name!r}: {name} must be finite, got {value!r}")
    return value


def _sens(record: MechanismRecord) -> float:
    if record.sensitivity is None or not record.sensitivity > 0:
        raise ValueError(f"record {record.name!r} needs a positive sensitivity")
    return float(record.sensitivity)


def _agree(stored: float, derived: float, what: str, record: MechanismRecord) -> None:
    if not math.isclose(stored, derived, rel_tol=EPSILON_RTOL, abs_tol=1e-12):
        raise ValueError(
            f"record {record.name!r} ({record.released}): stored {what} {stored!r} is not "
            f"the {derived!r} its parameters give"
        )


def _gaussian(record: MechanismRecord, relation: str) -> float:
    p = record.param_dict
    sigma, sens = _num(p, "sigma", record), _sens(record)
    _agree(_num(p, "noise_std", record), sigma * sens, "noise_std", record)
    if record.accountant != "analytic-gaussian":
        raise ValueError(f"record {record.name!r}: accountant must be 'analytic-gaussian'")
    return gaussian_epsilon(sigma, record.delta)


def _beta_close_only(record: MechanismRecord, relation: str) -> None:
    """The truncated Laplace and Gaussian sampling releases are accounted under beta-close
    (Gu et al., Def. 4.1) only: a file that names another relation for them is refused."""
    if relation != BETA_CLOSE:
        raise ValueError(
            f"record {record.name!r} is accounted under beta-close only; the report claims "
            f"{relation!r}"
        )


def _truncated_laplace(record: MechanismRecord, relation: str) -> float:
    _beta_close_only(record, relation)
    p = record.param_dict
    sens, scale = _sens(record), _num(p, "scale", record)
    if not scale > 0:
        raise ValueError(f"record {record.name!r}: scale must be > 0")
    eps = sens / scale
    _agree(_num(p, "bound", record), tlap_bound(sens, eps, record.delta), "bound", record)
    return eps


def _gaussian_sampling(record: MechanismRecord, relation: str) -> float:
    _beta_close_only(record, relation)
    k = _num(record.param_dict, "k", record)
    if k != int(k) or k < 1:
        raise ValueError(f"record {record.name!r}: k must be an integer >= 1")
    needed = gsm_epsilon(_sens(record), record.delta, int(k))
    if not needed <= record.epsilon * (1.0 + 1e-9):
        raise ValueError(
            f"record {record.name!r}: k={int(k)} samples at M={record.sensitivity!r} need "
            f"epsilon >= {needed!r} (Condition 5.3), the record claims {record.epsilon!r}"
        )
    return record.epsilon  # a lower bound holds: the claim stands as recorded


@functools.lru_cache(maxsize=256)
def _dpsgd_epsilon(
    sigma: float, delta: float, q: float, steps: int, accountant: str, interval: float, rel: str
) -> float:
    return dpsgd_epsilon(
        sigma, delta, sampling_rate=q, steps=steps, accountant=accountant,  # type: ignore[arg-type]
        value_discretization_interval=interval, neighbouring=rel,  # type: ignore[arg-type]
    )  # fmt: skip


def _dpsgd(record: MechanismRecord, relation: str) -> float:
    p = record.param_dict
    if p.get("neighbouring") != relation:
        raise ValueError(
            f"record {record.name!r} was accounted under {p.get('neighbouring')!r}, the report "
            f"claims {relation!r}"
        )
    steps = _num(p, "steps", record)
    if steps != int(steps) or steps < 1:
        raise ValueError(f"record {record.name!r}: steps must be an integer >= 1")
    key = "value_discretization_interval"
    interval = _num(p, key, record) if key in p else 1e-4
    return _dpsgd_epsilon(
        _num(p, "noise_multiplier", record), record.delta, _num(p, "sampling_rate", record),
        int(steps), str(record.accountant), interval, relation,
    )  # fmt: skip


def _repeat_and_select(record: MechanismRecord, relation: str) -> float:
    p = record.param_dict
    if record.accountant != "rdp":
        raise ValueError(f"record {record.name!r}: accountant must be 'rdp'")
    try:
        candidates = loads_bounded(str(p["events"]), f"record {record.name!r}'s events")
    except (KeyError, ValueError):
        raise ValueError(f"record {record.name!r} has no readable 'events'") from None
    kinds = {str(e[0]) for run in candidates for e in run}
    if "dpsgd" in kinds and relation != "add-remove":  # RDP covers Poisson under add-remove only
        raise ValueError(f"record {record.name!r}: DP-SGD runs are accounted under add-remove only")
    _check_search_plan(record, candidates)
    return repeat_and_select_epsilon(
        candidates, mean=_num(p, "mean", record), shape=_num(p, "shape", record),
        delta=record.delta,
    )  # fmt: skip


def _check_search_plan(record: MechanismRecord, candidates: Any) -> None:
    """A search record's own plan: one run per candidate, each ending with the score's
    Gaussian at the sigma its share of the run's budget gives, the chosen index in range,
    and the accounted epsilon at (within 1% below) the target it was planned for."""
    p = record.param_dict
    names = p.get("candidates", ())
    share = _num(p, "score_share", record)
    fit_eps, fit_delta = _num(p, "fit_epsilon", record), _num(p, "fit_delta", record)
    sigma = _num(p, "score_sigma", record)
    ok = len(names) == len(candidates) >= 1 and 0 < share < 1 and fit_eps > 0
    ok = ok and 0 <= int(p.get("chosen", -1)) < len(candidates)
    expected = gaussian_sigma(fit_eps * share / (1 - share), fit_delta * share / (1 - share))
    ok = ok and math.isclose(sigma, expected, rel_tol=1e-6)
    ok = ok and all(list(run[-1][:2]) == ["gaussian", sigma] for run in candidates)
    target = _num(p, "target_epsilon", record)
    ok = ok and 0.99 * target <= record.epsilon <= target * (1 + 1e-9)
    if not ok:
        raise ValueError(f"record {record.name!r}: its plan is not the one its numbers give")


_DERIVE: dict[str, Callable[[Any, str], float]] = {
    "gaussian": _gaussian,
    "truncated_laplace": _truncated_laplace,
    "gaussian_sampling": _gaussian_sampling,
    "poisson_subsampled_gaussian": _dpsgd,
    "repeat_and_select": _repeat_and_select,
}


def rederived_epsilon(record: MechanismRecord, relation: str) -> float:
    """The epsilon ``record``'s own parameters give under ``relation`` (``ValueError`` if
    they are missing, inconsistent or of an unknown mechanism)."""
    derive = _DERIVE.get(record.name)
    if derive is None:
        raise ValueError(f"record of unknown mechanism {record.name!r}: cannot be verified")
    if not 0 < record.delta < 1:
        raise ValueError(f"record {record.name!r}: delta must lie in (0, 1)")
    try:
        return derive(record, relation)
    except (TypeError, IndexError, KeyError, OverflowError) as err:  # malformed parameters
        raise ValueError(
            f"record {record.name!r}: unreadable parameters ({type(err).__name__})"
        ) from None


def check_record(record: MechanismRecord, relation: str) -> None:
    """Refuse ``record`` unless its stored epsilon is the one its parameters give."""
    _agree(record.epsilon, rederived_epsilon(record, relation), "epsilon", record)
