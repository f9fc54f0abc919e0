"""ScatterNet features (Oyallon & Mallat 2015) via kymatio's JAX backend.

DP-KIP-ScatterNet (Vinaroz & Park, Sec. 2.4) uses the kernel
``k(x, x') = <phi(x), phi(x')>`` where ``phi`` is an untrained 2-D scattering
network of depth 2 with ``J = 2`` scales and ``L = 8`` angles: for an image of
size ``h x w`` each channel gives ``K = 1 + J L + L^2 J (J - 1) / 2`` maps (81
for J=2, L=8) of size ``(h / 2^J, w / 2^J)``; RGB images give ``3 K = 243`` maps.

The wavelet filter bank is fixed and data-independent, so these features
release nothing about the data by themselves.

``group_norm=G`` optionally standardises each example's maps in ``G`` groups of
consecutive scattering channels, separately at every spatial position (zero
mean and unit variance over the ``K / G`` channels of a group, ``eps = 1e-5``).
The raw order-0 map (a local average of the image) is about 8x larger than
the order-1 and 100x larger than the order-2 modulus maps (mean absolute value
on uniform random images), so a linear kernel of raw features is dominated by
a blurred copy of the image; the standardisation gives every scale and angle a
say. It is a fixed per-example map (no statistic is pooled across examples),
so it is free privacy-wise. The DP-KIP authors' MNIST/FMNIST encoder uses
``G = 27`` (groups of 3 of the 81 channels).

The filter bank for a given ``(h, w, J, L)`` is built once and memoized (a
pure cache of constants).
"""

from __future__ import annotations

import functools
import warnings
from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp

from privkernels._validation import check_array, check_int

__all__ = ["scatternet_features", "scatternet_num_features"]

_COLOR_CHANNELS = (1, 3, 4)


@functools.lru_cache(maxsize=8)
def _scattering(h: int, w: int, J: int, L: int) -> Any:
    """Memoized kymatio ``Scattering2D`` (only the data-independent filter bank)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        # The 2-D frontend only: ``kymatio.jax`` also imports the 3-D filter bank, which
        # needs scipy.special.sph_harm (removed in scipy 1.17).
        # heavy, only the ScatterNet kernel needs it
        from kymatio.scattering2d.frontend.jax_frontend import ScatteringJax2D  # noqa: PLC0415

        return ScatteringJax2D(J=J, shape=(h, w), L=L)


def num_scattering_maps(J: int, L: int) -> int:
    """Maps per input channel, ``K = 1 + J L + L^2 J (J - 1) / 2`` (81 for J=2, L=8)."""
    return 1 + J * L + L * L * J * (J - 1) // 2


def check_group_norm(group_norm: int, *, J: int, L: int) -> int:
    """``group_norm`` if it splits the ``K`` maps into equal groups of >= 2, else ValueError."""
    k = num_scattering_maps(J, L)
    if group_norm < 1 or k % group_norm or k // group_norm < 2:
        raise ValueError(
            f"group_norm={group_norm} must split the {k} scattering maps into equal "
            "groups of at least 2"
        )
    return group_norm


def scatternet_num_features(image_shape: tuple[int, ...], *, J: int = 2, L: int = 8) -> int:
    """Feature dimension for one image of shape ``(h, w)`` or ``(C, h, w)``.

    ``C * (1 + J L + L^2 J (J - 1) / 2) * ceil(h / 2^J) * ceil(w / 2^J)``; e.g.
    ``(28, 28) -> 81 * 7 * 7 = 3969`` and ``(3, 32, 32) -> 3 * 81 * 8 * 8``.
    """
    *c, h, w = image_shape
    channels = c[0] if c else 1
    s = 2**J
    return channels * num_scattering_maps(J, L) * (-(-h // s)) * (-(-w // s))


GROUP_NORM_EPS = 1e-5


def _group_standardize(maps: jax.Array, groups: int) -> jax.Array:
    """``(b, C, K, h', w')`` -> same shape, standardised over each group of ``K / groups`` channels.

    Computed on a 3-D view ``(b C groups, K / groups, h' w')``. The 6-D view
    ``(b, C, groups, K / groups, h', w')`` makes the same reductions, but jaxlib 0.10.2's
    CPU compiler crashes (segmentation fault) on ``vmap`` of its VJP on some x86 CPUs
    (seen on an AMD EPYC without AVX-512), which is how input-space clipping batches
    per-example gradients through this map. The two views agree to float32 rounding
    (inside a whole DP-KIP step XLA may order the sums differently).
    """
    b, c, k, hh, ww = maps.shape
    g = maps.reshape(b * c * groups, k // groups, hh * ww)
    mean = jnp.mean(g, axis=1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=1, keepdims=True)
    return ((g - mean) * jax.lax.rsqrt(var + GROUP_NORM_EPS)).reshape(maps.shape)


@partial(jax.jit, static_argnames=("J", "L", "chunk_size", "group_norm"))
def _scatter_jit(
    x: jax.Array, *, J: int, L: int, chunk_size: int | None, group_norm: int | None = None
) -> jax.Array:
    """``x`` (n, C, h, w) -> (n, C * K * h' * w')."""
    n, _, h, w = x.shape
    scattering = _scattering(h, w, J, L)

    def block(xb: jax.Array) -> jax.Array:
        maps = scattering(xb)  # (b, C, K, h', w')
        if group_norm is not None:
            maps = _group_standardize(maps, group_norm)
        return maps.reshape(xb.shape[0], -1)

    if chunk_size is None or chunk_size >= n:
        return block(x)
    n_chunks = -(-n // chunk_size)
    pad = n_chunks * chunk_size - n
    xp = jnp.concatenate([x, jnp.zeros((pad, *x.shape[1:]), x.dtype)], axis=0)
    out = jax.lax.map(block, xp.reshape(n_chunks, chunk_size, *x.shape[1:]))
    return out.reshape(n_chunks * chunk_size, -1)[:n]


def _to_channels_first(arr: Any, layout: str) -> Any:
    if arr.ndim == 3:
        return arr[:, None]
    first, last = arr.shape[1] in _COLOR_CHANNELS, arr.shape[-1] in _COLOR_CHANNELS
    if layout == "auto":
        if first and not last:
            layout = "channels_first"
        elif last and not first:
            layout = "channels_last"
        else:
            raise ValueError(
                f"x has ambiguous shape {tuple(arr.shape)}: pass layout='channels_first' "
                "(n, C, h, w) or layout='channels_last' (n, h, w, C)"
            )
    if layout == "channels_last":
        return jnp.moveaxis(arr, -1, 1)
    return arr


def scatternet_features(
    x: Any,
    *,
    J: int = 2,
    L: int = 8,
    chunk_size: int | None = 64,
    layout: Literal["auto", "channels_first", "channels_last"] = "auto",
    group_norm: int | None = None,
) -> jax.Array:
    """Flattened ScatterNet features (DP-KIP-ScatterNet Sec. 2.4).

    Args:
      x: images, either ``(n, h, w)`` grayscale, ``(n, C, h, w)`` channels-first
        or ``(n, h, w, C)`` channels-last (as ``privkernels.data`` returns
        CIFAR-10). With ``layout="auto"`` a rank-4 input is channels-first when
        ``shape[1]`` is 1, 3 or 4 and ``shape[-1]`` is not, channels-last in the
        mirrored case; anything else must name ``layout`` explicitly.
      J: number of scales (``2**J`` must not exceed ``h`` or ``w``).
      L: number of wavelet angles.
      chunk_size: examples per forward pass (last chunk zero-padded; compiled
        once) to bound memory. The default 64 is also faster than one large
        batch on CPU (the transform is FFT- and memory-bound; measured about
        1.6x in ``benchmarks/perf.py``). ``None`` processes all at once.
      layout: ``"auto"``, ``"channels_first"`` or ``"channels_last"`` (rank 4).
      group_norm: None (raw features) or a number of groups ``G`` dividing
        ``K = 1 + J L + L^2 J (J - 1) / 2``: per-example, per-position
        standardisation of each group of ``K / G`` consecutive channels (see the
        module docstring; 27 in the DP-KIP reference encoder).

    Returns:
      ``(n, f)`` features in the dtype of ``x`` (float32 by default), ordered
      ``(C, K, h / 2^J, w / 2^J)`` per example whatever the input layout;
      ``f = scatternet_num_features(...)``, e.g. ``(n, 28, 28) -> (n, 3969)``.
      jit-compiled; differentiable w.r.t. ``x``.
    """
    J = check_int(J, "J", minimum=1)
    L = check_int(L, "L", minimum=1)
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    if layout not in ("auto", "channels_first", "channels_last"):
        raise ValueError(
            f"layout must be 'auto', 'channels_first' or 'channels_last', got {layout!r}"
        )
    if group_norm is not None:
        group_norm = check_group_norm(check_int(group_norm, "group_norm"), J=J, L=L)
    arr = check_array(x, "x", ndim=(3, 4))
    if arr.size == 0:
        raise ValueError(f"x is empty (shape {tuple(arr.shape)})")
    arr = jnp.asarray(arr)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    arr = _to_channels_first(arr, layout)
    h, w = arr.shape[-2:]
    if 2**J > min(h, w):
        raise ValueError(
            f"J={J} is too large for images of size {h}x{w} (need 2**J <= {min(h, w)})"
        )
    return _scatter_jit(arr, J=J, L=L, chunk_size=chunk_size, group_norm=group_norm)
