"""The budget-accountant bookkeeping shared by the scikit-learn estimators and scalers.

A fit is charged to ``budget_accountant``, else to the ``with BudgetAccountant(...)``
block open when the estimator was cloned (``GridSearchCV`` clones in the calling
thread and fits in workers, which do not inherit the block), else to the block the
fit runs in. Copies keep the accountant by identity (one ledger); a pickled fitted
object leaves it out (the ledger stays in this process) and remembers that it had
one: its refit with no accountant is warned as charged to no ledger.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, ClassVar

from privkernels._warnings import user_stacklevel
from privkernels.privacy.accountant import default_accountant

__all__ = ["AccountedMixin", "DetachedAccountantWarning"]

#: The attributes naming an accountant: kept by identity in copies, left out of pickles.
_ACCOUNTANT_ATTRS = ("budget_accountant", "_block_accountant", "_detached_accountant")


class DetachedAccountantWarning(UserWarning):
    """An unpickled fitted object whose accountant was left behind is refitted: the refit
    is charged to no ledger (pass ``budget_accountant=`` to charge it)."""


class AccountedMixin:
    """``__sklearn_clone__``, copies, pickling and `_accountant` for a private fit.

    Subclasses say which attributes hold keys (``_key_attrs``: never pickled with a
    fitted object) and whether they are fitted (`_released`)."""

    _key_attrs: ClassVar[tuple[str, ...]] = ()
    budget_accountant: Any  # the estimator's parameter (set by its ``__init__``)

    def _released(self) -> bool:
        """Whether this object holds a release (is fitted)."""
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """Pickle / joblib state. A fitted object holds a release: its ``random_state``
        (the noise is a function of an int seed), keys and accountant are left out, and
        ``_detached_accountant`` says an accountant was (its refit warns). An unfitted
        one with an accountant cannot be pickled: the accountant refuses, as in another
        process it would not be charged."""
        state = dict(super().__getstate__())  # type: ignore[misc, call-overload]
        if self._released():
            state["random_state"] = None
            if self._accountant_given(state):
                state["_detached_accountant"] = True
            state["budget_accountant"] = None  # the ledger stays in this process
            for name in (*self._key_attrs, "_block_accountant"):
                state.pop(name, None)
        return state

    def _accountant_given(self, state: dict[str, Any]) -> bool:
        """Whether a fit of this object would be charged to an accountant it holds."""
        return any(state.get(name) is not None for name in _ACCOUNTANT_ATTRS)

    def _copy_state(self) -> dict[str, Any]:
        """The pickle state with the accountant attributes as they are (kept by identity)."""
        state = self.__getstate__()
        for name in _ACCOUNTANT_ATTRS:
            if name in self.__dict__:
                state[name] = self.__dict__[name]
            else:
                state.pop(name, None)
        return state

    def __copy__(self) -> Any:
        """A shallow copy that keeps the accountant (one ledger: the copy's refit is charged)."""
        twin = type(self).__new__(type(self))
        twin.__setstate__(self._copy_state())  # type: ignore[attr-defined]
        return twin

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A deep copy that keeps the accountant by identity (`BudgetAccountant` copies as itself)."""
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        twin.__setstate__(copy.deepcopy(self._copy_state(), memo))  # type: ignore[attr-defined]
        return twin

    def __sklearn_clone__(self) -> Any:
        """``sklearn.clone``; a clone made inside a ``with BudgetAccountant(...)`` block
        without its own accountant keeps the block's (``GridSearchCV`` clones in the calling
        thread: its fits in worker threads are then charged, and a worker process, which
        would need it pickled, fails loudly)."""
        twin = super().__sklearn_clone__()  # type: ignore[misc]
        block = default_accountant()
        if block is not None and twin.get_params().get("budget_accountant") is None:
            twin._block_accountant = block
        return twin

    def _accountant(self) -> Any:
        """The accountant of a fit: the parameter, else the ``with`` block's at clone time,
        else None (the fit then takes the default of the block it runs in, if any). An
        unpickled object that had one, refitted with none and outside any block, warns."""
        given = self.budget_accountant
        if given is None:
            given = self.__dict__.get("_block_accountant")
        if (
            given is None
            and default_accountant() is None
            and self.__dict__.get("_detached_accountant")
        ):
            warnings.warn(
                f"this {type(self).__name__} was unpickled without its budget accountant "
                "(the ledger stays in its process): this refit is charged to no ledger; pass "
                "budget_accountant= to charge it",
                DetachedAccountantWarning,
                stacklevel=user_stacklevel(),
            )
        return given
