"""Warnings raised when private data is read without noise.

`PrivacyLeakWarning` and `warn_privacy_leak` live in ``privkernels._warnings``
(below the argument checks, which warn too) and are exported here.
"""

from __future__ import annotations

import warnings

from privkernels._warnings import (
    PrivacyLeakWarning,
    ProjectionWarning,
    SmallDataWarning,
    SmallSampleWarning,
    user_stacklevel,
    warn_privacy_leak,
)

__all__ = [
    "PrivacyLeakWarning",
    "ProjectionWarning",
    "SeededKeyWarning",
    "SmallDataWarning",
    "SmallSampleWarning",
    "warn_beta_close",
    "warn_privacy_leak",
]


class SeededKeyWarning(PrivacyLeakWarning):
    """The noise key came from an int seed: the release is reproducible, not secret.

    Whoever learns or guesses the seed recomputes the noise. Raised for an int
    ``random_state`` / ``--seed`` and for a functional key that visibly comes
    from a small int (`privkernels.privacy.keys.looks_seeded`).
    """


def warn_beta_close() -> None:
    """The `PrivacyLeakWarning` of a fit under the beta-close relation (Gu et al. Def. 4.1)."""
    warnings.warn(
        "neighbouring='beta-close' is NOT standard differential privacy: it hides a move of "
        "at most beta in one record's features and nothing else; the labels are released "
        "without noise and the privatized inputs X~ kept by the model lie within about beta of "
        "the training rows. Use neighbouring='replace-one' (the default) to protect whole records.",
        PrivacyLeakWarning,
        stacklevel=user_stacklevel(),
    )
