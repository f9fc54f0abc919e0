"""`BudgetAccountant`: one total (epsilon, delta) that every release on a dataset draws from.

A privacy report covers one call. A user who fits several models on the same rows
(a grid search, a second try with other settings, a CLI run a day later) spends the
sum of their budgets: under basic sequential composition (Dwork & Roth 2014,
Theorem 3.16) mechanisms that are ``(eps_i, delta_i)``-DP on the same dataset are
jointly ``(sum eps_i, sum delta_i)``-DP. The accountant holds a total under one
neighbouring relation, a ledger of what was charged, and refuses *before any noise*
a release that would take the ledger past its total.

How fits use it (`charged_release`): each method's ``fit`` names its planned
``(epsilon, delta)`` and relation; the accountant reserves it (or raises
`BudgetExceededError`, a ``ValueError``, naming the asked and remaining budgets:
public numbers), the release runs, and the reservation is settled with the fit's
report (its totals, which never exceed the plan). A fit that fails *after* its first
private release began (`note_release`, called where noise is drawn) is charged its
planned budget: some of its noise may be out, and over-counting is safe where
under-counting is not. A fit that fails before (bad input) is charged nothing.

The default accountant: ``with BudgetAccountant(3.0, 1e-5) as acc:`` makes ``acc``
the accountant of every fit given none, in this context (a `contextvars.ContextVar`;
nested blocks see their own, the outer one comes back on exit). A new thread does
not inherit the block: a fit given no accountant in a thread with no block of its
own, while a block is open in another thread, is refused before any noise (pass
``budget_accountant=`` explicitly), since it would otherwise be charged nowhere.
Outside any block, a fit with ``budget_accountant=None`` charges nothing. A release
run inside another release charged to the same accountant (the fits of a private
search) is covered by the outer charge and not charged again; user code called
from inside a release (a training callback) runs `outside_release`, so a fit it
makes is charged on its own.

Relations: one accountant, one relation (``replace-one`` or ``add-remove``); a charge
under another relation is refused, since the two guarantees do not add. Beta-close
(Gu et al., Def. 3.8) is refused: it is not standard DP of whole records, and a sum
of beta-close and standard guarantees would name no meaningful relation.

An accountant is one ledger: ``copy.copy``/``copy.deepcopy`` (so ``sklearn.clone``)
return it unchanged, and pickling it raises ``TypeError`` (a copy in a worker
process would charge a ledger nobody reads: use ``n_jobs=1``). ``save``/``load``
keep the ledger as JSON (written atomically, through a symlink to the file it
names), for the CLI's ``--budget FILE``; `ledger_lock` serialises the runs that
share one ledger file.

The ledger file is not tamper-evident: whoever can write it can rewrite it (delete
entries, raise the total). `from_dict` refuses what is cheaply refutable (an entry
that disagrees with its report, a bare entry of zero cost, a missing field), not
a consistent rewrite.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import fcntl
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from privkernels._json import loads_bounded
from privkernels._validation import check_epsilon
from privkernels.privacy.budget import Budget
from privkernels.privacy.relations import ADD_REMOVE, REPLACE_ONE, check_neighbouring
from privkernels.privacy.report import PrivacyReport, compose

__all__ = [
    "ACCOUNTANT_RELATIONS",
    "BudgetAccountant",
    "BudgetExceededError",
    "Cost",
    "LEDGER_FORMAT",
    "charged_release",
    "default_accountant",
    "ledger_lock",
    "note_release",
    "outside_release",
]

#: The relations an accountant may total (beta-close is not standard DP: refused).
ACCOUNTANT_RELATIONS = (REPLACE_ONE, ADD_REMOVE)

#: The ``format`` field of a saved ledger.
LEDGER_FORMAT = "privkernels-budget-ledger/1"

#: Relative slack of the comparison with the total: budgets split by `Budget.split`
#: add up to their total within an ulp, and a report file is checked to 1e-9.
RELATIVE_SLACK = 1e-9

#: The note of a ledger entry charged at its plan because its fit failed mid-release.
FAILED_NOTE = "the fit failed after its release began: charged its planned budget"

R = TypeVar("R")


class BudgetExceededError(ValueError):
    """A release would take an accountant past its total; nothing was drawn."""


@dataclasses.dataclass(frozen=True)
class Cost:
    """An amount of privacy budget, possibly zero (``spent()``, ``remaining()``).

    Attributes:
      epsilon: float, finite, >= 0.
      delta: float in [0, 1].
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        eps, delta = float(self.epsilon), float(self.delta)
        if not (math.isfinite(eps) and eps >= 0 and 0 <= delta <= 1):
            raise ValueError(f"a cost needs finite epsilon >= 0 and delta in [0, 1], got "
                             f"({self.epsilon!r}, {self.delta!r})")  # fmt: skip
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One charge: its cost, the report behind it (None: a bare budget) and a note."""

    cost: Cost
    report: PrivacyReport | None
    note: str = ""


@dataclasses.dataclass
class _Ticket:
    """A reservation of a planned budget while its release runs."""

    accountant: BudgetAccountant
    cost: Cost
    released: bool = False


_DEFAULT: contextvars.ContextVar[BudgetAccountant | None] = contextvars.ContextVar(
    "privkernels_default_accountant", default=None
)
_OPEN: contextvars.ContextVar[tuple[_Ticket, ...]] = contextvars.ContextVar(
    "privkernels_open_charges", default=()
)


#: The accountants of open ``with`` blocks, per thread id (threads do not inherit them).
_BLOCKS: dict[int, list[BudgetAccountant]] = {}
_BLOCKS_LOCK = threading.Lock()


def _check_total_delta(delta: Any) -> float:
    if (
        isinstance(delta, bool)
        or not isinstance(delta, (int, float))
        and not hasattr(delta, "__float__")
    ):
        raise TypeError(f"delta must be a number, got {type(delta).__name__}")
    d = float(delta)
    if not (0.0 <= d < 1.0):
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    return d


class BudgetAccountant:
    """A total ``(epsilon, delta)`` under one relation, charged by releases (basic composition).

    Args:
      epsilon: the total epsilon, finite and > 0.
      delta: the total delta, in [0, 1).
      neighbouring: ``"replace-one"`` (default: standard DP of whole records) or
        ``"add-remove"``; every charge must be under it.

    ``spent()`` and ``remaining()`` are `Cost` values (epsilons and deltas add, as
    `privkernels.privacy.compose` adds them; an open reservation counts as spent);
    ``reports`` is the ledger and ``report`` its composition. Use it as the default
    accountant of a ``with`` block, or pass it as ``budget_accountant=`` to a fit,
    estimator or search (see the module docstring).
    """

    def __init__(self, epsilon: float, delta: float, *, neighbouring: str = REPLACE_ONE) -> None:
        self._epsilon = check_epsilon(epsilon)
        self._delta = _check_total_delta(delta)
        self._neighbouring = check_neighbouring(neighbouring, ACCOUNTANT_RELATIONS)
        self._entries: list[_Entry] = []
        self._open: list[_Ticket] = []
        # the tokens of open ``with`` blocks, per thread (each thread has its own context)
        self._tokens: dict[int, list[contextvars.Token[BudgetAccountant | None]]] = {}
        self._lock = threading.RLock()  # check-and-reserve is one step across threads

    @property
    def epsilon(self) -> float:
        """The total epsilon."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The total delta."""
        return self._delta

    @property
    def neighbouring(self) -> str:
        """The relation of the total and of every charge."""
        return self._neighbouring

    @property
    def total(self) -> Cost:
        return Cost(self._epsilon, self._delta)

    @property
    def reports(self) -> tuple[PrivacyReport, ...]:
        """The reports charged so far, in order (bare budgets charged are not among them)."""
        return tuple(e.report for e in self._entries if e.report is not None)

    @property
    def report(self) -> PrivacyReport | None:
        """`compose` of the charged reports (None when none was charged); a note lists the
        budgets charged without a report (a bare ``charge(Budget)`` or a failed fit)."""
        if not self._entries:
            return None
        bare = [e for e in self._entries if e.report is None]
        reports = self.reports
        if not reports:
            return None
        out = compose(*reports)
        for e in bare:
            out = out.with_note(f"also charged to the accountant, without a report: "
                                f"({e.cost.epsilon:.6g}, {e.cost.delta:.3g})"
                                + (f" ({e.note})" if e.note else ""))  # fmt: skip
        return out

    def spent(self) -> Cost:
        """Everything charged plus the open reservations (basic composition)."""
        eps = delta = 0.0
        with self._lock:
            costs = [e.cost for e in self._entries] + [t.cost for t in self._open]
        for c in costs:
            eps += c.epsilon
            delta += c.delta
        return Cost(eps, min(delta, 1.0))

    def remaining(self) -> Cost:
        """The total less `spent` (each part at least 0)."""
        s = self.spent()
        return Cost(max(self._epsilon - s.epsilon, 0.0), max(self._delta - s.delta, 0.0))

    def check(self, epsilon: float | None, delta: float, neighbouring: str | None = None) -> Cost:
        """The cost ``(epsilon, delta)`` if it fits in `remaining` under this accountant's
        relation (None: this one); `BudgetExceededError` otherwise. Charges nothing."""
        self._check_relation(neighbouring)
        if epsilon is None:
            raise BudgetExceededError(
                "a non-private fit (epsilon=None) reads the data without noise: it cannot be "
                "charged to a BudgetAccountant (its cost is unbounded)"
            )
        cost = Cost(check_epsilon(epsilon), _check_total_delta(delta))
        s = self.spent()
        if not (_within(s.epsilon + cost.epsilon, self._epsilon)
                and _within(s.delta + cost.delta, self._delta)):  # fmt: skip
            left = self.remaining()
            raise BudgetExceededError(
                f"the budget accountant refuses this release: it asks for "
                f"({cost.epsilon:.6g}, {cost.delta:.3g}), and only ({left.epsilon:.6g}, "
                f"{left.delta:.3g}) of the total ({self._epsilon:.6g}, {self._delta:.3g}) "
                f"under {self._neighbouring} remains; nothing was drawn"
            )
        return cost

    def charge(self, spend: PrivacyReport | Budget, neighbouring: str | None = None) -> Cost:
        """Charge a release's report (its totals, under its relation) or a bare `Budget`
        (under ``neighbouring``, default this accountant's): `BudgetExceededError` if it
        does not fit, and then nothing is charged. Returns the cost charged."""
        entry: tuple[float | None, float, str | None, PrivacyReport | None, str]
        if isinstance(spend, PrivacyReport):
            eps = spend.epsilon if spend.private else None  # non-private: refused, unbounded
            entry = (eps, spend.delta, spend.neighbouring, spend, "")
        elif isinstance(spend, Budget):
            entry = (spend.epsilon, spend.delta, neighbouring, None, "a budget charged by hand")
        else:
            raise TypeError(f"charge takes a PrivacyReport or a Budget, got {type(spend).__name__}")
        with self._lock:
            cost = self.check(entry[0], entry[1], entry[2])
            self._entries.append(_Entry(cost, entry[3], entry[4]))
        return cost

    spend = charge

    def _check_relation(self, neighbouring: str | None) -> None:
        if neighbouring is not None and neighbouring != self._neighbouring:
            raise ValueError(
                f"the accountant totals {self._neighbouring} guarantees; a release under "
                f"{neighbouring!r} cannot be charged to it (the two do not add)"
            )

    # -- reservations (`charged_release`)

    def _reserve(self, epsilon: Any, delta: Any, neighbouring: str) -> _Ticket:
        with self._lock:
            ticket = _Ticket(self, self.check(epsilon, delta, neighbouring))
            self._open.append(ticket)
        return ticket

    def _settle(self, ticket: _Ticket, report: PrivacyReport | None) -> None:
        """Close a reservation: charge the report, or (failed) the plan if noise began."""
        with self._lock:
            self._open.remove(ticket)
            if report is not None and report.private:
                self._entries.append(_Entry(Cost(report.epsilon, report.delta), report))
            elif ticket.released or report is not None:  # failed mid-release (or no report)
                self._entries.append(_Entry(ticket.cost, None, FAILED_NOTE))

    # -- the default accountant of a ``with`` block

    def __enter__(self) -> BudgetAccountant:
        me = threading.get_ident()
        self._tokens.setdefault(me, []).append(_DEFAULT.set(self))
        with _BLOCKS_LOCK:
            _BLOCKS.setdefault(me, []).append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        me = threading.get_ident()
        _DEFAULT.reset(self._tokens[me].pop())
        with _BLOCKS_LOCK:
            _BLOCKS[me].pop()
            if not _BLOCKS[me]:
                del _BLOCKS[me]

    # -- one ledger: never copied, never pickled

    def __copy__(self) -> BudgetAccountant:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetAccountant:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "a BudgetAccountant cannot be pickled: a copy in another process (joblib "
            "n_jobs > 1) would be charged where nobody reads it. Use n_jobs=1, or save the "
            "ledger with BudgetAccountant.save(path)"
        )

    def __repr__(self) -> str:
        s = self.spent()
        return (f"BudgetAccountant(epsilon={self._epsilon!r}, delta={self._delta!r}, "
                f"neighbouring={self._neighbouring!r}; spent=({s.epsilon:.6g}, "
                f"{s.delta:.3g}))")  # fmt: skip

    # -- the ledger as a file

    def to_dict(self) -> dict[str, Any]:
        """The ledger as JSON-friendly data (`LEDGER_FORMAT`)."""
        return {
            "format": LEDGER_FORMAT,
            "epsilon": self._epsilon,
            "delta": self._delta,
            "neighbouring": self._neighbouring,
            "entries": [
                {
                    "epsilon": e.cost.epsilon,
                    "delta": e.cost.delta,
                    "note": e.note,
                    "report": None if e.report is None else e.report.to_dict(),
                }  # fmt: skip
                for e in self._entries
            ],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the ledger to ``path`` atomically (a temporary file, then a rename)."""
        if self._open:
            raise ValueError("a release charged to this accountant is still running")
        p = Path(path).resolve()  # through a symlink: replace the file, not the link
        text = json.dumps(self.to_dict(), indent=2, default=float) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent or ".")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    @classmethod
    def from_dict(cls, data: Any) -> BudgetAccountant:
        """Inverse of `to_dict`; every stored report is re-verified (`PrivacyReport.from_dict`)
        and every entry's cost must be its report's totals."""
        if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"not a privkernels budget ledger (format {LEDGER_FORMAT!r})")
        acc = cls(_field(data, "epsilon"), _field(data, "delta"),
                  neighbouring=_field(data, "neighbouring"))  # fmt: skip
        for item in data.get("entries", ()):
            if not isinstance(item, dict):
                raise ValueError("a budget ledger entry is not a JSON object")
            cost = Cost(_field(item, "epsilon"), _field(item, "delta"))
            report = None if item.get("report") is None else PrivacyReport.from_dict(item["report"])
            if report is not None and (
                report.neighbouring != acc.neighbouring
                or (report.epsilon, report.delta) != (cost.epsilon, cost.delta)
            ):
                raise ValueError("a ledger entry does not match its report")
            if report is None and cost.epsilon <= 0:  # every bare charge has epsilon > 0
                raise ValueError("a ledger entry without a report has zero epsilon")
            acc._entries.append(_Entry(cost, report, str(item.get("note", ""))))
        return acc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BudgetAccountant:
        """Read a ledger written by `save`."""
        try:
            data = loads_bounded(Path(path).read_text(), str(path))
        except ValueError:
            raise ValueError(f"{path} is not a JSON budget ledger") from None
        return cls.from_dict(data)


def _field(data: dict[str, Any], name: str) -> Any:
    """``data[name]``, or a ``ValueError`` naming the missing field (no traceback in the CLI)."""
    if name not in data:
        raise ValueError(f"the budget ledger lacks the field {name!r}")
    return data[name]


@contextlib.contextmanager
def ledger_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``<ledger>.lock`` beside the ledger file.

    Runs that charge one ledger file (the CLI's ``--budget``) hold it from loading the
    ledger through saving it: a second run waits, then checks the updated ledger,
    and no run saves a stale copy over another's charge."""
    lock = Path(path).resolve()
    with open(lock.with_name(lock.name + ".lock"), "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def outside_release() -> Iterator[None]:
    """Run user code (a callback) called from inside a release as if outside it.

    A release nested in another charged to the same accountant is not charged again
    (`charged_release`); a fit the user's callback makes is not part of the outer
    release, so it must be charged on its own."""
    token = _OPEN.set(())
    try:
        yield
    finally:
        _OPEN.reset(token)


def _foreign_block() -> bool:
    """Whether a ``with`` block is open in another thread while this one has none."""
    me = threading.get_ident()
    with _BLOCKS_LOCK:
        return me not in _BLOCKS and any(_BLOCKS.values())


def _any(value: Any) -> Any:
    return value


def _within(value: float, total: float) -> bool:
    return value <= total * (1.0 + RELATIVE_SLACK) + 1e-300


def default_accountant() -> BudgetAccountant | None:
    """The accountant of the innermost open ``with`` block of this context (or None)."""
    return _DEFAULT.get()


def resolve(accountant: Any) -> BudgetAccountant | None:
    """``accountant`` if given (a `BudgetAccountant`), else the default (or None)."""
    if accountant is None:
        return _DEFAULT.get()
    if not isinstance(accountant, BudgetAccountant):
        raise TypeError(
            f"budget_accountant must be a BudgetAccountant or None, got {type(accountant).__name__}"
        )
    return accountant


def note_release() -> None:
    """Mark every open charge as released: from here, a failure is charged its plan.

    Called where private noise is about to be drawn (`privkernels.privacy.release`,
    DP-KIP's training); a no-op outside a charged release."""
    for ticket in _OPEN.get():
        ticket.released = True


def charged_release(
    accountant: Any,
    epsilon: float | None,
    delta: float,
    neighbouring: str,
    release: Callable[[], R],
    *,
    report_of: Callable[[R], PrivacyReport] | None = None,
) -> R:
    """Run ``release()`` charged to ``accountant`` (None: the default accountant).

    Before ``release`` runs (and so before any noise) the planned ``(epsilon, delta)``
    under ``neighbouring`` is reserved, or `BudgetExceededError` / ``ValueError`` (another
    relation, or ``epsilon=None``) is raised. After it returns, the reservation is settled
    with its report (``result.report``, or ``report_of(result)``); if it raises after
    `note_release`, the plan stays charged. With no accountant, or inside a release already
    charged to the same accountant, ``release()`` just runs.
    """
    acc = resolve(accountant)
    if acc is None and _foreign_block():
        raise ValueError(
            "a private fit given no budget_accountant runs in a thread without a `with "
            "BudgetAccountant(...)` block while one is open in another thread: threads do "
            "not inherit the block; pass budget_accountant= explicitly. Nothing was drawn"
        )
    if acc is None or any(t.accountant is acc for t in _OPEN.get()):
        return release()
    ticket = acc._reserve(epsilon, delta, neighbouring)
    token = _OPEN.set((*_OPEN.get(), ticket))
    try:
        result = release()
    except BaseException:
        _OPEN.reset(token)
        acc._settle(ticket, None)
        raise
    _OPEN.reset(token)
    report = report_of(result) if report_of is not None else _any(result).report
    acc._settle(ticket, report)
    return result
