"""The method contract: what `privkernels.dp_ntk.fit`, `privkernels.dp_kip.fit` and
`privkernels.dp_ntk_regression.fit` share.

`CONTRACT` lists the keywords every method's ``fit`` accepts, with their defaults and
annotations (each fit adds its own settings as further keyword-only arguments with
defaults, the fields of one frozen ``Settings`` in the method's ``settings`` module, from
which the fit is planned); `Release` is the protocol of what it returns. The signature is
written once, in each fit: ``tests/test_contract.py`` holds every fit's signature to
`CONTRACT` and checks the results at run time, and the type checker holds the three fits
to `MethodFit` (calls returning a `Release`; the assignment under ``TYPE_CHECKING`` below).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from privkernels.privacy.report import PrivacyReport

__all__ = ["CONTRACT", "REQUIRED", "Keyword", "MethodFit", "Release", "SHARED_KEYWORDS"]


@runtime_checkable
class Release(Protocol):
    """A method's result: its privacy report, its typed config, and a file form."""

    @property
    def report(self) -> PrivacyReport: ...

    @property
    def config(self) -> Any: ...

    def save(self, path: str | os.PathLike[str]) -> Path: ...


#: A method's ``fit``, as the type checker sees it: any call that returns a `Release`
#: (its keywords are `CONTRACT`, checked at run time by ``tests/test_contract.py``).
MethodFit = Callable[..., Release]

#: ``CONTRACT`` default of a keyword that has none (``epsilon``: every call states it).
REQUIRED = inspect.Parameter.empty


class Keyword(NamedTuple):
    """One keyword-only argument of the contract: its ``name``, its ``default``
    (`REQUIRED`: none) and the ``annotation`` every fit writes for it, as the source
    text (None: each fit states its own type, as for the relations it supports)."""

    name: str
    default: Any
    annotation: str | None


#: ``fit(key: jax.Array, x: Any, y: Any, *, <these>, <the method's settings>)``: one release
#: of ``(x, y)`` at ``(epsilon, delta)`` under ``neighbouring`` (default replace-one,
#: standard DP of whole records), with the shared run options
#: (`privkernels.options.RunOptions`: ``mesh`` ... ``progress``), a separate key for the
#: data-independent draws and the `privkernels.privacy.BudgetAccountant` charged (None: the
#: default accountant of an open ``with`` block, or none), which refuses the fit before any
#: noise when its budget does not fit in what remains. The one statement of these keywords:
#: each fit writes them in its own signature, and ``tests/test_contract.py`` holds every
#: signature to this table.
CONTRACT: tuple[Keyword, ...] = (
    Keyword("epsilon", REQUIRED, "float | None"),
    Keyword("delta", 1e-5, "float"),
    Keyword("n_classes", None, "int | None"),
    Keyword("mesh", None, "Any"),
    Keyword("checkpoint_path", None, "str | os.PathLike[str] | None"),
    Keyword("resume", False, "bool"),
    Keyword("progress", True, "bool"),
    Keyword("neighbouring", "replace-one", None),
    Keyword("public_key", None, "jax.Array | None"),
    Keyword("budget_accountant", None, "Any"),
)

#: The keyword-only arguments of `CONTRACT` that have defaults, with them (``epsilon``:
#: required, left out).
SHARED_KEYWORDS: dict[str, Any] = {k.name: k.default for k in CONTRACT if k.default is not REQUIRED}

if TYPE_CHECKING:  # the type checker holds each method's fit to the contract
    from privkernels.dp_kip.fitting import fit as _dp_kip_fit
    from privkernels.dp_ntk.fitting import fit as _dp_ntk_fit
    from privkernels.dp_ntk_regression.fitting import fit as _regression_fit

    _FITS: tuple[MethodFit, ...] = (_dp_ntk_fit, _dp_kip_fit, _regression_fit)
