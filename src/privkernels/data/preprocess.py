"""Per-example image preprocessing (no statistic is pooled across examples).

Dataset-wide normalisation (subtracting the training set's channel means,
dividing by its standard deviations, ZCA) reads the private data without
noise. The maps here look at one example at a time, so applying them to a
private dataset releases nothing and needs no privacy accounting; the same map
must be applied to test inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privkernels._validation import check_array

__all__ = ["standardize_per_example"]


def standardize_per_example(x: Any, *, eps: float = 1e-6) -> np.ndarray:
    """Each example shifted to mean 0 and scaled to standard deviation 1.

    Args:
      x: ``(n, ...)`` finite floats (images ``(n, h, w)`` / ``(n, h, w, c)``
        or tabular rows); statistics are over all of one example's entries.
      eps: added to each standard deviation, so constant examples map to 0.

    Returns:
      ``(n, ...)`` float32 (float64 input stays float64) array of the same shape:
      ``(x_i - mean(x_i)) / (std(x_i) + eps)``.

    This matches the scale of the ``N(0, I)`` support initialisation of
    DP-KIP. With the FC-NTK it raised DP-KIP's MNIST validation accuracy from
    78.7% (pixels in [0, 1]) to 84.1% at eps=1 (``git show b99f0d9:scripts/dp_kip_fcntk_sweep.py``).
    """
    if not (isinstance(eps, (int, float)) and np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite positive number, got {eps!r}")
    arr = np.asarray(check_array(x, "x", ndim=None))
    if arr.ndim < 2 or arr.shape[0] == 0 or arr[0].size < 2:
        raise ValueError(
            f"x must be (n, ...) with n >= 1 examples of >= 2 entries, got shape {arr.shape}"
        )
    dtype = np.float64 if arr.dtype == np.float64 else np.float32
    flat = arr.reshape(arr.shape[0], -1).astype(np.float64)
    mean = flat.mean(axis=1, keepdims=True)
    sd = flat.std(axis=1, keepdims=True)
    return ((flat - mean) / (sd + eps)).reshape(arr.shape).astype(dtype)
