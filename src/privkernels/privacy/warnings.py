"""Warnings raised when private data is read without noise."""

from __future__ import annotations

import warnings

__all__ = ["PrivacyLeakWarning", "SeededKeyWarning", "warn_beta_close", "warn_privacy_leak"]


class PrivacyLeakWarning(RuntimeWarning):
    """Something was computed from the private data without noise or accounting.

    Raised by opt-in conveniences (data-dependent scaling, diagnostics that read
    the true smallest eigenvalue, ...). The resulting guarantee no longer covers
    that information.
    """


class SeededKeyWarning(PrivacyLeakWarning):
    """The noise key came from an int seed: the release is reproducible, not secret.

    Whoever learns or guesses the seed recomputes the noise. Raised for an int
    ``random_state`` / ``--seed`` and for a functional key that visibly comes
    from a small int (`privkernels.privacy.keys.looks_seeded`).
    """


def warn_privacy_leak(what: str, *, stacklevel: int = 3) -> None:
    """Emit a `PrivacyLeakWarning` saying what was read without noise."""
    warnings.warn(
        f"{what} is computed from the private data without noise; the privacy "
        "guarantee does not cover it.",
        PrivacyLeakWarning,
        stacklevel=stacklevel,
    )


def warn_beta_close(*, stacklevel: int = 3) -> None:
    """The `PrivacyLeakWarning` of a fit under the beta-close relation (Gu et al. Def. 4.1)."""
    warnings.warn(
        "neighbouring='beta-close' is NOT standard differential privacy: it hides a move of "
        "at most beta in one record's features and nothing else; the labels are released "
        "without noise and the privatized inputs X~ kept by the model lie within about beta of "
        "the training rows. Use neighbouring='replace-one' (the default) to protect whole records.",
        PrivacyLeakWarning,
        stacklevel=stacklevel,
    )
