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


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes `warnings.warn` name the first line outside privkernels.

    Call it as an argument of the `warnings.warn` call itself. It counts the frames of
    privkernels' own modules above that call, so a warning points at the caller's line
    (a script, a test, scikit-learn's loop) however deep the fit path that raised it.
    """
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


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
