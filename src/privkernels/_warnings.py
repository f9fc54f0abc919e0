"""The warning of a read of private data without noise, below every other module.

`PrivacyLeakWarning` and `warn_privacy_leak` are public as
`privkernels.privacy.warnings` (and ``privkernels.PrivacyLeakWarning``); they
live here so that the argument checks (``privkernels._validation``), which sit
below the privacy core, can warn without importing it.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

__all__ = [
    "PrivacyLeakWarning",
    "ProjectionWarning",
    "SmallDataWarning",
    "SmallSampleWarning",
    "user_stacklevel",
    "warn_privacy_leak",
]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Libraries that call a privkernels fit for the user (cross-validation, pipelines, searches).
_CALLERS = ("sklearn", "joblib")


def _library_roots() -> tuple[str, ...]:
    """The folders of `_CALLERS` already imported (a library not imported has no frame)."""
    roots = []
    for name in _CALLERS:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            roots.append(os.path.dirname(os.path.abspath(file)) + os.sep)
    return tuple(roots)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes `warnings.warn` name the user's line.

    Call it as an argument of the `warnings.warn` call itself. It skips the frames of
    privkernels' own modules and of scikit-learn and joblib, so a warning
    points at the line that started the fit (a script's ``cross_validate(...)``, not
    scikit-learn's loop) however deep the path that raised it, and a filter such as
    ``filterwarnings("ignore", module="sklearn")`` does not hide a privacy warning. With
    no such line on the stack (a joblib worker), it names the first frame outside
    privkernels.
    """
    frame: FrameType | None = sys._getframe(1)
    level, outside = 1, None
    roots = (_PACKAGE, *_library_roots())
    while frame is not None and frame.f_code.co_filename.startswith(roots):
        if outside is None and not frame.f_code.co_filename.startswith(_PACKAGE):
            outside = level  # the first frame outside privkernels: the fallback
        frame, level = frame.f_back, level + 1
    return level if frame is not None or outside is None else outside


class PrivacyLeakWarning(RuntimeWarning):
    """Something was computed from the private data without noise or accounting.

    Raised by opt-in conveniences (data-dependent scaling, diagnostics that read
    the true smallest eigenvalue, ...). The resulting guarantee no longer covers
    that information.
    """


def warn_privacy_leak(what: str) -> None:
    """Emit a `PrivacyLeakWarning` saying what was read without noise."""
    warnings.warn(
        f"{what} is computed from the private data without noise; the privacy "
        "guarantee does not cover it.",
        PrivacyLeakWarning,
        stacklevel=user_stacklevel(),
    )


class ProjectionWarning(UserWarning):
    """Training rows lay outside the public ball of radius ``input_bound`` and were projected.

    The projection is a fixed map (no privacy cost), but rows far outside the ball lose
    their scale; rescale the features by public constants or with a private scaler
    (`privkernels.sklearn.PrivateStandardScaler` / ``PrivateMinMaxScaler``). The warning
    goes to the caller only: nothing of it enters a report or a saved file.
    """


class SmallSampleWarning(UserWarning):
    """A fit on fewer rows than its defaults were validated at (the message names that n).

    `SmallDataWarning` (DP-KIP's) is a subclass: a filter on this class covers both."""


class SmallDataWarning(SmallSampleWarning):
    """A DP-KIP fit with fewer (public) rows than its defaults were validated at."""
