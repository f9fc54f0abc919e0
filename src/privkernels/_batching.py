"""One batching helper: apply a jitted function to fixed-size row chunks.

The last chunk is padded (with zeros) to the chunk length, so a function
compiles once per chunk shape whatever ``n`` is, and memory stays bounded by
the chunk. Used by every method's ``predict``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["map_row_chunks"]


def map_row_chunks(
    fn: Callable[[Any], Any], x: Any, chunk_size: int, *, pad_value: float = 0.0
) -> np.ndarray:
    """``concatenate([fn(x[i:i + c]) for i in ...])`` with equal, padded chunks, as NumPy.

    Args:
      fn: maps a ``(c, ...)`` chunk to ``(c, ...)`` rows (e.g. a jitted predictor).
      x: ``(n, ...)`` rows.
      chunk_size: rows per chunk (capped at ``n``).
      pad_value: value of the padding rows of the last chunk (discarded).

    Returns:
      ``(n, ...)`` NumPy array of ``fn``'s rows.
    """
    n = int(x.shape[0])
    chunk = max(1, min(int(chunk_size), n))
    outs = []
    for start in range(0, n, chunk):
        xb = x[start : start + chunk]
        pad = chunk - xb.shape[0]
        if pad:
            fill = jnp.full((pad, *xb.shape[1:]), pad_value, xb.dtype)
            xb = jnp.concatenate([jnp.asarray(xb), fill])
        out = np.asarray(fn(xb))
        outs.append(out[: out.shape[0] - pad])
    return np.concatenate(outs, axis=0)
