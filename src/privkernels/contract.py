"""The method contract: what `privkernels.dp_ntk.fit`, `privkernels.dp_kip.fit` and
`privkernels.dp_ntk_regression.fit` share, stated as two protocols.

`MethodFit` is the call every method's ``fit`` accepts (each adds its own settings as
further keyword-only arguments with defaults, the fields of one frozen ``Settings`` in the
method's ``settings`` module, from which the fit is planned); `Release` is what it returns. The type
checker holds the three fits to `MethodFit` (the assignment under ``TYPE_CHECKING``
below), and ``tests/test_contract.py`` checks the signatures and results at run time
from these protocols.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import jax

from privkernels.privacy.report import PrivacyReport

__all__ = ["MethodFit", "Release", "SHARED_KEYWORDS"]


@runtime_checkable
class Release(Protocol):
    """A method's result: its privacy report, its typed config, and a file form."""

    @property
    def report(self) -> PrivacyReport: ...

    @property
    def config(self) -> Any: ...

    def save(self, path: str | os.PathLike[str]) -> Path: ...


class MethodFit(Protocol):
    """``fit(key, x, y, *, epsilon, ...)``: one release of ``(x, y)`` at ``(epsilon, delta)``
    under ``neighbouring`` (default replace-one, standard DP of whole records), with the
    shared run options (`privkernels.options.RunOptions`), a separate key for the
    data-independent draws and the `privkernels.privacy.BudgetAccountant` charged (None:
    the default accountant of an open ``with`` block, or none), which refuses the fit
    before any noise when its budget does not fit in what remains."""

    def __call__(
        self,
        key: jax.Array,
        x: Any,
        y: Any,
        *,
        epsilon: float | None,
        delta: float = 1e-5,
        n_classes: int | None = None,
        mesh: Any = None,
        checkpoint_path: str | os.PathLike[str] | None = None,
        resume: bool = False,
        progress: bool = True,
        neighbouring: Any = "replace-one",
        public_key: jax.Array | None = None,
        budget_accountant: Any = None,
    ) -> Release: ...


#: The keyword-only arguments of `MethodFit` with their defaults (``epsilon``: required,
#: left out), read from its signature.
SHARED_KEYWORDS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(MethodFit.__call__).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
}

if TYPE_CHECKING:  # the type checker holds each method's fit to the contract
    from privkernels.dp_kip.fitting import fit as _dp_kip_fit
    from privkernels.dp_ntk.fitting import fit as _dp_ntk_fit
    from privkernels.dp_ntk_regression.fitting import fit as _regression_fit

    _FITS: tuple[MethodFit, ...] = (_dp_ntk_fit, _dp_kip_fit, _regression_fit)
