"""Class probabilities from kernel scores: a fixed map, post-processing of a release.

Both classifiers regress one-hot targets: DP NTK regression's classifier fits one-hot
labels (Gu et al., Sec. 6.1) and DP-KIP's prediction is kernel ridge regression on the
released support set with centred one-hot targets (Vinaroz & Park). Their scores
``s(x)`` in ``R^c`` estimate the target vector of the class, so a score margin of 1 is
the gap between a perfectly fitted "yes" and "no" in either.

`scores_to_proba` is the softmax of ``s / T`` with a temperature fixed by the number
of classes alone, ``T = 1 / log(9 (c - 1))``: a row whose scores equal a one-hot target
gets probability `TARGET_PROBABILITY` (0.9) for its class and the rest shared evenly.
The rule was written down from the target scale before any run; no data, validation
set or test set chose it. A softmax rather than clipping the scores to a floor and
normalizing: it is strictly monotone, so the ranking of each column (what ROC-AUC
reads) and the argmax (what ``predict`` returns) are those of the scores, where a floor
would tie every score below it. Scores far below the best are floored at
``exp(-LOG_FLOOR)`` before normalizing, so every probability is in (0, 1] and a log
loss stays finite. Being a fixed function of the release, the probabilities cost no
privacy (post-processing: Dwork & Roth 2014, Prop. 2.1). They are not calibrated to
any data: calibrate on public data (e.g. ``CalibratedClassifierCV`` on a public set)
when calibrated probabilities matter.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LOG_FLOOR", "TARGET_PROBABILITY", "binary_decision", "scores_to_proba", "temperature"]

#: The probability a row whose scores equal a one-hot target gets for its class.
TARGET_PROBABILITY = 0.9

#: Log-ratio below the best class at which a probability is floored (exp(-30) ~ 1e-13).
LOG_FLOOR = 30.0


def temperature(n_classes: int) -> float:
    """``T = 1 / log(p (c - 1) / (1 - p))`` with ``p = TARGET_PROBABILITY``: the softmax
    temperature that maps scores equal to a one-hot target of ``c >= 2`` classes to ``p``."""
    if n_classes < 2:
        raise ValueError(f"probabilities need at least 2 classes, got {n_classes}")
    p = TARGET_PROBABILITY
    return 1.0 / math.log(p * (n_classes - 1) / (1.0 - p))


def scores_to_proba(scores: Any) -> np.ndarray:
    """Class probabilities ``(n, c)`` float64 from kernel scores ``(n, c)`` (module docstring).

    Rows sum to 1, entries lie in (0, 1], and ``argmax`` of each row is exactly
    ``argmax`` of its scores (the first of tied scores): where rounding ties the best
    probability with an earlier one, the best is moved up by one unit in the last place.
    """
    s = np.asarray(scores, np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"scores must have shape (n, n_classes >= 2), got {s.shape}")
    z = (s - s.max(axis=1, keepdims=True)) / temperature(s.shape[1])
    e = np.exp(np.maximum(z, -LOG_FLOOR))
    p = e / e.sum(axis=1, keepdims=True)
    best, top = np.argmax(s, axis=1), np.argmax(p, axis=1)
    rows = np.flatnonzero(best != top)
    p[rows, best[rows]] = np.nextafter(p[rows, top[rows]], 1.0)
    return p


def binary_decision(scores: Any) -> np.ndarray:
    """scikit-learn's two-class decision ``(n,)``: ``s[:, 1] - s[:, 0]`` (> 0 for class 1,
    exactly where ``argmax`` picks class 1); more classes: the scores ``(n, c)`` as they are."""
    s = np.asarray(scores, np.float64)
    return s[:, 1] - s[:, 0] if s.shape[1] == 2 else s
