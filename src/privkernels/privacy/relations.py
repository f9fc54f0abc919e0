"""Neighbouring relations: the names a guarantee refers to, and their one check.

A relation says which two datasets a guarantee cannot tell apart. Every
`privkernels.privacy.report.PrivacyReport` names one; every mechanism
calibrates its noise for the sensitivity under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["REPLACE_ONE", "ADD_REMOVE", "BETA_CLOSE", "RELATIONS", "check_neighbouring"]

#: Neighbouring datasets differ by replacing one example (same n).
REPLACE_ONE = "replace-one"
#: Neighbouring datasets differ by adding or removing one example.
ADD_REMOVE = "add-remove"
#: Neighbouring datasets differ in one example, moved by at most beta in L2
#: (Gu et al., DP NTK regression, Def. 3.8). Not standard DP: weaker than replace-one.
BETA_CLOSE = "beta-close"

#: Every relation a private report may name.
RELATIONS = (REPLACE_ONE, ADD_REMOVE, BETA_CLOSE)


def check_neighbouring(neighbouring: Any, allowed: Sequence[str]) -> str:
    """``neighbouring`` if it is one of ``allowed``; anything else is a ValueError.

    The one check of a relation name. Each method passes the relations it supports,
    spelled out where it calibrates its noise (a relation added elsewhere is never
    accepted silently), and calls it before any noise is drawn.
    """
    if isinstance(allowed, str) or not all(isinstance(a, str) for a in allowed):
        raise TypeError(f"allowed must be a sequence of relation names, got {allowed!r}")
    if not isinstance(neighbouring, str) or neighbouring not in tuple(allowed):
        raise ValueError(f"neighbouring must be one of {tuple(allowed)}, got {neighbouring!r}")
    return str(neighbouring)
