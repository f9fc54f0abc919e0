"""Downstream evaluation of distilled data: the ConvNet of DP-KIP Table 3.

The classifier (paper Sec. 5.1, Table 3; the standard dataset-condensation
ConvNet) has 3 blocks of ``Conv(width=128, 3x3) -> InstanceNorm -> ReLU ->
AvgPool(2x2)`` followed by one linear layer. It is trained on the (small,
already private) distilled set and tested on real test data; training on a DP
release is post-processing and costs no privacy.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels._validation import (
    check_array,
    check_int,
    check_key,
    check_labels,
    check_nonnegative,
    check_positive,
)

__all__ = [
    "Augment",
    "ConvNet",
    "augment_images",
    "check_augment",
    "train_convnet",
    "convnet_accuracy",
]


@functools.cache
def _flax_module() -> Any:
    """The ConvNet class, made once: modules with the same fields are then equal and hash
    alike, so the jitted training step and forward pass are compiled once per config."""

    class _ConvNet(nn.Module):
        """``(b, h, w[, ch]) -> (b, n_classes)`` logits."""

        n_classes: int
        width: int = 128
        depth: int = 3

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            if x.ndim == 3:
                x = x[..., None]
            for _ in range(self.depth):
                x = nn.Conv(self.width, (3, 3), padding="SAME")(x)
                x = nn.InstanceNorm()(x)
                x = nn.relu(x)
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape(x.shape[0], -1)
            return nn.Dense(self.n_classes)(x)

    return _ConvNet


class Augment(NamedTuple):
    """Random affine augmentation of the ConvNet's training images.

    Every training step draws, per image, a translation of up to ``shift``
    pixels on each axis, a rotation of up to ``rotate`` degrees and a scale
    factor in ``[1 - scale, 1 + scale]`` (all uniform), and resamples the image
    bilinearly, border pixels extended; with probability ``flip`` (in
    ``[0, 1]``) the image is mirrored left-right first. ``Augment()`` is the
    identity. ``flip=0`` draws exactly the random numbers it drew before the
    field existed, so earlier protocols keep their results for the same key.
    """

    shift: float = 0.0
    rotate: float = 0.0
    scale: float = 0.0
    flip: float = 0.0


def check_augment(aug: Augment) -> Augment:
    """``aug`` with every field a finite float ``>= 0`` (ValueError otherwise)."""
    if not isinstance(aug, Augment):
        raise TypeError(f"augment must be an evaluation.Augment, got {type(aug).__name__}")
    aug = Augment(**{f: check_nonnegative(v, f"augment.{f}") for f, v in aug._asdict().items()})
    if aug.flip > 1.0:
        raise ValueError(f"augment.flip is a probability in [0, 1], got {aug.flip}")
    return aug


def _affine_one(key: jax.Array, img: jax.Array, aug: Augment) -> jax.Array:
    """One ``(h, w, ch)`` image through one random affine map (inverse mapping)."""
    h, w = img.shape[0], img.shape[1]
    k_s, k_r, k_z = jax.random.split(key, 3)
    t = jax.random.uniform(k_s, (2,), minval=-aug.shift, maxval=aug.shift)
    a = jnp.deg2rad(jax.random.uniform(k_r, (), minval=-aug.rotate, maxval=aug.rotate))
    z = 1.0 + jax.random.uniform(k_z, (), minval=-aug.scale, maxval=aug.scale)
    rows, cols = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32), jnp.arange(w, dtype=jnp.float32),
                              indexing="ij")  # fmt: skip
    cr, cc = (h - 1) / 2.0, (w - 1) / 2.0
    dr, dc = rows - cr - t[0], cols - cc - t[1]
    if aug.flip > 0:  # static: flip=0 leaves the draws above as they were
        mirror = jax.random.bernoulli(jax.random.fold_in(key, 3), aug.flip)
        dc = jnp.where(mirror, -dc, dc)
    src_r = (jnp.cos(a) * dr + jnp.sin(a) * dc) / z + cr
    src_c = (-jnp.sin(a) * dr + jnp.cos(a) * dc) / z + cc

    def channel(c: jax.Array) -> jax.Array:
        return jax.scipy.ndimage.map_coordinates(c, [src_r, src_c], order=1, mode="nearest")

    return jax.vmap(channel, in_axes=-1, out_axes=-1)(img)


def augment_images(key: jax.Array, x: Any, aug: Augment) -> jax.Array:
    """``x`` ``(b, h, w[, ch])`` float32, each image through its own random affine map."""
    aug = check_augment(aug)
    x = jnp.asarray(x, jnp.float32)
    flat = x[..., None] if x.ndim == 3 else x
    keys = jax.random.split(key, flat.shape[0])
    out = jax.vmap(_affine_one, in_axes=(0, 0, None))(keys, flat, aug)
    return out[..., 0] if x.ndim == 3 else out


def ConvNet(n_classes: int, *, width: int = 128, depth: int = 3) -> Any:  # noqa: N802
    """The Table-3 ConvNet as a ``flax.linen`` module."""
    return _flax_module()(n_classes=n_classes, width=width, depth=depth)


def train_convnet(
    key: jax.Array,
    x: Any,
    y: Any,
    n_classes: int,
    *,
    steps: int = 300,
    learning_rate: float = 1e-3,
    batch_size: int = 256,
    width: int = 128,
    depth: int = 3,
    augment: Augment | None = None,
    weight_decay: float = 0.0,
) -> tuple[Any, Any]:
    """Train the ConvNet on ``x`` ``(n, h, w[, ch])`` and ``y`` with Adam (cross-entropy).

    ``y`` is ``(n,)`` integer class labels, or ``(n, n_classes)`` float soft
    targets whose rows are probability vectors (as from a teacher,
    `privkernels.evaluation.train_convnet_from_teacher`). Minibatches of
    ``batch_size`` drawn without replacement from ``key`` (full batch when
    ``n <= batch_size``), each through ``augment`` (random affine maps,
    `Augment`) when given; ``weight_decay > 0`` uses AdamW. The defaults
    are the protocol of the Table 3 results measured before issue 16's
    protocol choice. Returns ``(module, params)``.
    """
    key = check_key(key)
    x = np.asarray(check_array(x, "x", ndim=(3, 4)), np.float32)
    n_classes = check_int(n_classes, "n_classes", minimum=2)
    y, soft = _check_targets(y, n_classes, x.shape[0])
    steps = check_int(steps, "steps")
    batch_size = check_int(batch_size, "batch_size")
    learning_rate = check_positive(learning_rate, "learning_rate")
    weight_decay = check_nonnegative(weight_decay, "weight_decay")
    augment = None if augment is None else check_augment(augment)
    cfg = _StepConfig(n_classes, int(width), int(depth), learning_rate, weight_decay,
                      augment, soft, min(batch_size, x.shape[0]))  # fmt: skip
    module = ConvNet(n_classes, width=cfg.width, depth=cfg.depth)
    k_init, k_data = jax.random.split(key)
    params = module.init(k_init, jnp.asarray(x[:1]))
    opt_state = _optimizer(cfg).init(params)
    xd, yd = jnp.asarray(x), jnp.asarray(y)
    for t in range(steps):
        params, opt_state = _train_step(
            params, opt_state, jax.random.fold_in(k_data, t), xd, yd, cfg=cfg
        )
    return module, params


class _StepConfig(NamedTuple):
    """The static (hashable) settings of one training step: the jit cache key of
    `_train_step`, so a second `train_convnet` with the same settings compiles nothing."""

    n_classes: int
    width: int
    depth: int
    learning_rate: float
    weight_decay: float
    augment: Augment | None
    soft: bool
    batch_size: int


def _optimizer(cfg: _StepConfig) -> Any:
    """Adam, or AdamW when ``weight_decay > 0`` (Kingma & Ba 2015; Loshchilov & Hutter 2019)."""
    if cfg.weight_decay:
        return optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)
    return optax.adam(cfg.learning_rate)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _train_step(
    p: Any, s: Any, k: jax.Array, xd: jax.Array, yd: jax.Array, *, cfg: _StepConfig
) -> tuple[Any, Any]:
    """One minibatch step (cross-entropy, Adam/AdamW) on ``xd (n, h, w[, ch])``, ``yd``."""
    module = ConvNet(cfg.n_classes, width=cfg.width, depth=cfg.depth)
    n = xd.shape[0]
    if cfg.augment is None:
        idx = jax.random.permutation(k, n)[: cfg.batch_size]
        xb = xd[idx]
    else:
        k_idx, k_aug = jax.random.split(k)
        idx = jax.random.permutation(k_idx, n)[: cfg.batch_size]
        xb = augment_images(k_aug, xd[idx], cfg.augment)

    def loss_fn(q: Any) -> jax.Array:
        logits = module.apply(q, xb)
        if cfg.soft:  # static: integer labels keep the loss they always had
            return jnp.mean(optax.softmax_cross_entropy(logits, yd[idx]))
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yd[idx]))

    upd, s = _optimizer(cfg).update(jax.grad(loss_fn)(p), s, p)
    return jax.tree_util.tree_map(jnp.add, p, upd), s


def _check_targets(y: Any, n_classes: int, n: int) -> tuple[Any, bool]:
    """``(labels (n,) int32, False)`` (`check_labels`, as before soft targets existed) or
    ``(soft targets (n, c) float32, True)``.

    ValueError for anything else (messages name shapes, never values).
    """
    if np.ndim(y) != 2:
        return check_labels(y, n_classes, "y", n_rows=n), False
    arr = np.asarray(y)
    if arr.shape != (n, n_classes):
        raise ValueError(f"soft targets y must have shape ({n}, {n_classes}), got {arr.shape}")
    arr = np.asarray(check_array(arr, "y", ndim=2), np.float32)
    if np.any(arr < 0) or not np.allclose(arr.sum(axis=1), 1.0, atol=1e-4):
        raise ValueError("soft targets y must be rows of probabilities (>= 0, sum 1)")
    return arr, True


def convnet_accuracy(module: Any, params: Any, x: Any, y: Any, *, chunk_size: int = 1000) -> float:
    """Accuracy of a trained ConvNet on ``(x, y)`` (chunked)."""
    x = np.asarray(check_array(x, "x", ndim=(3, 4)), np.float32)
    y = np.asarray(y)
    correct = 0
    for s in range(0, x.shape[0], chunk_size):
        logits = _logits(module, params, jnp.asarray(x[s : s + chunk_size]))
        correct += int(np.sum(np.argmax(np.asarray(logits), -1) == y[s : s + chunk_size]))
    return correct / x.shape[0]


@functools.partial(jax.jit, static_argnums=0)
def _logits(module: Any, params: Any, x: jax.Array) -> jax.Array:
    """``module.apply(params, x)``, compiled once per (module, shapes): a module is a static
    argument, hashed by its fields (`_flax_module`)."""
    return module.apply(params, x)
