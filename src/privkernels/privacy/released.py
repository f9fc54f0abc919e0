"""Names of released quantities, as records spell them.

A record's ``released`` field starts with one of these names (a shape may
follow). The method that writes a record and the loader that checks a saved
report against its configuration both read them from here, so neither has to
import the other for a string.
"""

from __future__ import annotations

__all__ = [
    "RELEASED_MEAN",
    "RELEASED_SUMS",
    "RELEASED_N",
    "RELEASED_COUNTS",
    "RELEASED_PROPORTIONS",
]

#: DP-NTK's class-conditional mean embedding of e-NTK features (replace-one).
RELEASED_MEAN = "e-NTK mean embedding"
#: DP-NTK's class sums of e-NTK features (add-remove).
RELEASED_SUMS = "e-NTK class sums"
#: A noisy dataset size (add-remove, labels not released).
RELEASED_N = "dataset size n"
#: Noisy class counts (add-remove, labels released).
RELEASED_COUNTS = "class counts"
#: Noisy class proportions (replace-one, labels released).
RELEASED_PROPORTIONS = "class proportions"
