"""Spatial smoothing of support images: a post-processing prior for DP-KIP (issue 16).

The ScatterNet kernel (J = 2) averages over 4 x 4 windows, so the noisy DP-SGD
gradients put high-frequency texture into the support images that the kernel
never sees and never removes; other learners (the Table 3 ConvNet) do see it.
Both functions here act on released or noised quantities only, so they are
post-processing: no privacy cost, the report is unchanged.

* `smooth_updates` -- an optax transform that blurs the ``"x"`` update of every
  step (after the noise, e.g. ``optax.chain(optax.adam(lr), smooth_updates(1.0))``
  as ``dp_kip.fit(optimizer=...)``): the support moves only within smooth
  directions, starting from wherever ``init`` put it.
* `smooth_images` -- the same blur applied once to images ``(m, H, W[, C])``.

The blur is separable Gaussian with standard deviation ``sigma`` pixels and
reflected borders, as two small matrices (``H x H`` and ``W x W``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels._validation import check_positive

__all__ = ["blur_matrix", "smooth_images", "smooth_updates"]


def blur_matrix(size: int, sigma: float) -> np.ndarray:
    """``(size, size)`` float32 row-stochastic Gaussian blur with reflected borders."""
    sigma = check_positive(sigma, "sigma")
    radius = max(1, int(math.ceil(3.0 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    mat = np.zeros((size, size))
    for i in range(size):
        for off, w in zip(range(-radius, radius + 1), taps, strict=True):
            j = i + off
            while j < 0 or j >= size:  # reflect (edge pixel not repeated)
                j = -j if j < 0 else 2 * (size - 1) - j
            mat[i, j] += w
    return mat.astype(np.float32)


def _blur(x: jax.Array, sigma: float) -> jax.Array:
    if x.ndim not in (3, 4):
        raise ValueError(f"smoothing needs images (m, H, W[, C]), got shape {tuple(x.shape)}")
    bh = jnp.asarray(blur_matrix(x.shape[1], sigma), x.dtype)
    bw = jnp.asarray(blur_matrix(x.shape[2], sigma), x.dtype)
    return jnp.einsum("ij,mjk...,lk->mil...", bh, x, bw, precision=jax.lax.Precision.HIGHEST)


def smooth_images(x: Any, sigma: float) -> np.ndarray:
    """Blurred copy of images ``x`` ``(m, H, W[, C])`` (float32)."""
    return np.asarray(_blur(jnp.asarray(x, jnp.float32), check_positive(sigma, "sigma")))


class SmoothState(NamedTuple):
    """`smooth_updates` keeps no state."""


def smooth_updates(sigma: float) -> Any:
    """optax ``GradientTransformation`` blurring the ``"x"`` leaf of the updates.

    ``sigma``: blur standard deviation in pixels (> 0). Other leaves pass through.
    """
    sigma = check_positive(sigma, "sigma")

    def init(params: Any) -> SmoothState:
        del params
        return SmoothState()

    def update(updates: Any, state: SmoothState, params: Any = None) -> tuple[Any, SmoothState]:
        del params
        return {**updates, "x": _blur(updates["x"], sigma)}, state

    return optax.GradientTransformation(init, update)
