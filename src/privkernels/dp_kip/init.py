"""Data-independent starting points of the support set (DP-KIP Alg. 1 line 1).

The released support images start from something that depends only on the
key and the public shape; labels are fixed and class-balanced. The authors'
public code starts from real training images, which is not private; nothing
here can (an initialiser sees only ``(key, m, input_shape)``).

* ``"gaussian"`` -- ``N(0, I)`` pixels (the paper's private setting).
* ``"lowpass"`` -- smooth random images (images only): ``N(0, 1)`` on a grid
  ``LOWPASS_FACTOR`` times coarser, bilinearly upsampled and standardised per
  image. A data-independent image prior: the ScatterNet kernel barely sees the
  high frequencies of an ``N(0, I)`` start, so they survive training and the
  distilled images do not transfer to other learners (issue 16). Measured on
  MNIST (ScatterNet, eps 10, quick settings): it does not fix that by itself,
  training adds the texture back (ConvNet 20.7% vs 25.3% from N(0, I); history
  cell ``benchmarks/results/history/dp-kip-t3-convnet-mnist-eps10.jsonl``).

`resolve_init` also accepts a callable ``init(key, m, input_shape) ->
(m, *input_shape)``: it must not read private data; the report records it as
a user-supplied initialiser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "INITS",
    "LOWPASS_FACTOR",
    "support_labels",
    "init_support",
    "lowpass_support",
    "corruption_mask",
    "resolve_init",
]

#: Coarsening factor of ``init="lowpass"`` (28 x 28 images start from 7 x 7 noise).
LOWPASS_FACTOR = 4

InitFn = Callable[[Any, int, tuple[int, ...]], jax.Array]


def support_labels(n_classes: int, support_per_class: int) -> np.ndarray:
    """Class-balanced support labels ``(m,)`` int32: ``[0]*spc + [1]*spc + ...`` (data independent)."""
    return np.repeat(np.arange(n_classes, dtype=np.int32), support_per_class)


def init_support(
    key: jax.Array, n_support: int, input_shape: tuple[int, ...], dtype: Any = jnp.float32
) -> jax.Array:
    """Support inputs ``(m, *input_shape)`` drawn i.i.d. from ``N(0, 1)`` (Alg. 1, step 1).

    Depends only on ``key`` and the shape: no real example is ever used.
    """
    return jax.random.normal(key, (n_support, *input_shape), dtype=dtype)


def lowpass_support(
    key: jax.Array, n_support: int, input_shape: tuple[int, ...], dtype: Any = jnp.float32
) -> jax.Array:
    """Smooth random support images ``(m, H, W[, C])``: coarse ``N(0, 1)`` noise, upsampled.

    Noise on a ``ceil(H / f) x ceil(W / f)`` grid (``f = LOWPASS_FACTOR``) is
    resized bilinearly to ``H x W`` and standardised to zero mean and unit
    variance per image. Depends only on ``key`` and the shape.
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) not in (2, 3):
        raise ValueError(f"init='lowpass' needs image inputs (H, W[, C]), got shape {shape}")
    f = LOWPASS_FACTOR
    coarse = (n_support, -(-shape[0] // f), -(-shape[1] // f), *shape[2:])
    z = jax.random.normal(key, coarse, dtype=jnp.float32)
    up = jax.image.resize(z, (n_support, *shape), method="linear")
    axes = tuple(range(1, up.ndim))
    up = (up - up.mean(axes, keepdims=True)) / (up.std(axes, keepdims=True) + 1e-6)
    return up.astype(dtype)


#: Named initialisers and what the report says about them.
INITS: dict[str, tuple[InitFn, str]] = {
    "gaussian": (init_support, "support initialisation: N(0, 1) from the key (no real example)"),
    "lowpass": (
        lowpass_support,
        "support initialisation: smooth random images (coarse N(0, 1) noise upsampled) from "
        "the key (no real example)",
    ),
}


def resolve_init(init: str | InitFn) -> tuple[str, InitFn, str]:
    """``(name, fn, report line)`` of a named or user-supplied initialiser."""
    if callable(init):
        name = getattr(init, "__name__", "custom")
        return (
            f"custom:{name}",
            init,
            f"support initialisation: user-supplied function {name!r} (the caller asserts "
            "it reads no private data)",
        )
    if init not in INITS:
        raise ValueError(f"init must be one of {sorted(INITS)} or a callable, got {init!r}")
    fn, line = INITS[init]
    return str(init), fn, line


def corruption_mask(key: jax.Array, shape: tuple[int, ...], fraction: float) -> np.ndarray:
    """Boolean mask (True = corrupted/frozen) with exactly ``round(fraction * size)`` entries.

    Drawn from ``key`` only (data independent); paper Table 4.
    """
    size = int(np.prod(shape))
    k = int(round(fraction * size))
    perm = np.asarray(jax.random.permutation(key, size))
    mask = np.zeros(size, dtype=bool)
    mask[perm[:k]] = True
    return mask.reshape(shape)
