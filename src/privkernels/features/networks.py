"""Small flax.linen networks whose empirical NTK (e-NTK) the papers use.

Every module takes a batch ``(b, *input_shape)`` and returns ``(b, k)`` float
outputs; examples are processed independently (no batch statistics), which the
per-example e-NTK features of `privkernels.features.entk` rely on.

* `fc_1l` / `fc_2l` -- the fully connected e-NTK networks of DP-NTK
  (Yang et al., Sec. 5 and Table 5: ``fc_1l`` width 800 for MNIST/FashionMNIST,
  ``fc_2l`` for CIFAR10/CelebA/intrusion). They are made of ``nn.Dense`` layers
  and parameter-free operations only, so the structured fast path of
  `entk_mean_embedding` applies to them.
* `cnn_2l` -- the small convolutional e-NTK network of the DP-NTK
  reference code (``CNTK_1D`` for tabular data, Table 5 "cnn_2l" rows).
* `lenet` -- LeNet-5 style network used for the e-NTK kernel of DP-KIP
  (Vinaroz & Park, Sec. 2.3) on grayscale 28x28 / 32x32 images.

Initialisation (``init="torch"``, the default) mimics PyTorch's default
``nn.Linear`` / ``nn.Conv`` initialisation used by the reference
implementations: kernel and bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.
``init="flax"`` keeps flax's defaults (LeCun-normal kernel, zero bias).
`init_params` is data-independent: it only looks at ``input_shape``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from privkernels._validation import check_int, check_key

__all__ = ["fc_1l", "fc_2l", "cnn_2l", "lenet", "init_params", "FC", "CNN2L", "LeNet"]

_INITS = ("torch", "flax")


def _uniform(bound: float):
    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _dense(features: int, fan_in: int, init: str, name: str | None = None) -> nn.Dense:
    if init == "torch":
        b = 1.0 / math.sqrt(fan_in)
        return nn.Dense(features, kernel_init=_uniform(b), bias_init=_uniform(b), name=name)
    return nn.Dense(features, name=name)


def _conv(features: int, kernel: tuple[int, ...], fan_in: int, init: str, padding: Any) -> nn.Conv:
    if init == "torch":
        b = 1.0 / math.sqrt(fan_in)
        return nn.Conv(
            features, kernel, padding=padding, kernel_init=_uniform(b), bias_init=_uniform(b)
        )
    return nn.Conv(features, kernel, padding=padding)


def _layer_norm(x: jax.Array) -> jax.Array:
    """Parameter-free LayerNorm over the last axis (PyTorch ``elementwise_affine=False``)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5)


class FC(nn.Module):
    """ReLU MLP: flatten -> [Dense(w) -> ReLU]* -> Dense(out_features).

    ``layer_norm=True`` reproduces the DP-NTK reference code (``NTK`` / ``NTK_TL``):
    a parameter-free LayerNorm after the last hidden layer, and for two hidden
    layers no ReLU after the second one (Dense -> ReLU -> Dense -> LayerNorm -> Dense).

    ``centered=True`` maps inputs in ``[0, 1]`` to ``2 x - 1`` before the first
    layer. With the LayerNorm and DP-NTK's normalised gradients the e-NTK
    feature of ``x`` and of ``t x`` (``t > 0``, the same image at another
    contrast) nearly coincide (cosine 0.98 for ``t = 0.5`` on Fashion-MNIST);
    centred, a dark background no longer scales with the foreground, so the
    features see contrast (cosine 0.74).
    """

    widths: tuple[int, ...]
    out_features: int = 1
    layer_norm: bool = False
    init_scheme: str = "torch"
    centered: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.reshape(x.shape[0], -1)
        if self.centered:
            h = 2.0 * h - 1.0
        n_hidden = len(self.widths)
        for i, w in enumerate(self.widths):
            h = _dense(w, h.shape[-1], self.init_scheme)(h)
            last = i == n_hidden - 1
            if not (self.layer_norm and last and n_hidden > 1):
                h = nn.relu(h)
            if self.layer_norm and last:
                h = _layer_norm(h)
        return _dense(self.out_features, h.shape[-1], self.init_scheme)(h)


class CNN2L(nn.Module):
    """Conv -> ReLU -> flatten -> Dense(channels2) -> ReLU -> Dense(out_features).

    The DP-NTK reference ``CNTK_1D`` network ("cnn_2l" in its Table 5, e.g.
    ``30_200`` = 30 conv channels, 200 hidden units). Input ranks:

    * ``(b, d)`` tabular: a length-``d`` signal with one channel, 1-D conv;
    * ``(b, h, w)`` grayscale or ``(b, h, w, c)`` images (channels last): 2-D conv.

    ``kernel_size=None`` means 1 for tabular input (as ``CNTK_1D``) and 3 for
    images (as the reference ``CNTK``); padding is ``SAME`` so the spatial size is kept.
    """

    channels1: int = 30
    channels2: int = 200
    out_features: int = 1
    kernel_size: int | None = None
    init_scheme: str = "torch"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 2:  # tabular (b, d) -> (b, d, 1)
            h = x[..., None]
            k = 1 if self.kernel_size is None else self.kernel_size
            kernel: tuple[int, ...] = (k,)
        elif x.ndim in (3, 4):
            h = x[..., None] if x.ndim == 3 else x
            k = 3 if self.kernel_size is None else self.kernel_size
            kernel = (k, k)
        else:
            raise ValueError(
                f"cnn_2l expects (b, d), (b, h, w) or (b, h, w, c) input, got shape {x.shape}"
            )
        fan_in = h.shape[-1] * math.prod(kernel)
        h = nn.relu(_conv(self.channels1, kernel, fan_in, self.init_scheme, "SAME")(h))
        h = h.reshape(h.shape[0], -1)
        h = nn.relu(_dense(self.channels2, h.shape[-1], self.init_scheme)(h))
        return _dense(self.out_features, h.shape[-1], self.init_scheme)(h)


class LeNet(nn.Module):
    """LeNet-5 style: [conv5x5 -> ReLU -> maxpool2] x2 -> Dense 120 -> Dense 84 -> Dense out.

    Accepts ``(b, h, w)`` or ``(b, h, w, c)``. The first conv pads (``SAME``)
    when ``h < 32`` (the classic 28x28 -> 32x32 padding), otherwise ``VALID``;
    28x28 and 32x32 inputs both reach the classic 5x5x16 feature map.
    """

    out_features: int = 10
    channels: tuple[int, int] = (6, 16)
    hidden: tuple[int, ...] = (120, 84)
    init_scheme: str = "torch"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 3:
            x = x[..., None]
        if x.ndim != 4:
            raise ValueError(f"lenet expects (b, h, w) or (b, h, w, c) input, got shape {x.shape}")
        pad = "SAME" if x.shape[1] < 32 else "VALID"
        h = x
        for i, c in enumerate(self.channels):
            h = _conv(c, (5, 5), h.shape[-1] * 25, self.init_scheme, pad if i == 0 else "VALID")(h)
            h = nn.max_pool(nn.relu(h), (2, 2), strides=(2, 2))
        h = h.reshape(h.shape[0], -1)
        for w in self.hidden:
            h = nn.relu(_dense(w, h.shape[-1], self.init_scheme)(h))
        return _dense(self.out_features, h.shape[-1], self.init_scheme)(h)


def _check_init(init: str) -> str:
    if init not in _INITS:
        raise ValueError(f"init must be one of {_INITS}, got {init!r}")
    return init


def fc_1l(
    width: int,
    *,
    out_features: int = 1,
    layer_norm: bool = False,
    init: str = "torch",
    centered: bool = False,
) -> FC:
    """One-hidden-layer ReLU MLP (DP-NTK ``fc_1l``): ``(b, *s) -> (b, out_features)``.

    ``centered``: inputs in ``[0, 1]`` enter as ``2 x - 1`` (`FC`)."""
    return FC(
        widths=(check_int(width, "width"),),
        out_features=check_int(out_features, "out_features"),
        layer_norm=bool(layer_norm),
        init_scheme=_check_init(init),
        centered=bool(centered),
    )


def fc_2l(
    width1: int,
    width2: int,
    *,
    out_features: int = 1,
    layer_norm: bool = False,
    init: str = "torch",
    centered: bool = False,
) -> FC:
    """Two-hidden-layer ReLU MLP (DP-NTK ``fc_2l``): ``(b, *s) -> (b, out_features)``.

    ``centered``: inputs in ``[0, 1]`` enter as ``2 x - 1`` (`FC`)."""
    return FC(
        widths=(check_int(width1, "width1"), check_int(width2, "width2")),
        out_features=check_int(out_features, "out_features"),
        layer_norm=bool(layer_norm),
        init_scheme=_check_init(init),
        centered=bool(centered),
    )


def cnn_2l(
    channels1: int = 30,
    channels2: int = 200,
    *,
    out_features: int = 1,
    kernel_size: int | None = None,
    init: str = "torch",
) -> CNN2L:
    """DP-NTK ``cnn_2l``: conv(channels1) -> ReLU -> Dense(channels2) -> ReLU -> Dense(out).

    Defaults ``30, 200`` are the adult setting of DP-NTK Table 5. See `CNN2L`.
    """
    return CNN2L(
        channels1=check_int(channels1, "channels1"),
        channels2=check_int(channels2, "channels2"),
        out_features=check_int(out_features, "out_features"),
        kernel_size=None if kernel_size is None else check_int(kernel_size, "kernel_size"),
        init_scheme=_check_init(init),
    )


def lenet(
    *,
    out_features: int = 10,
    channels: tuple[int, int] = (6, 16),
    hidden: tuple[int, ...] = (120, 84),
    init: str = "torch",
) -> LeNet:
    """LeNet-5 style network for DP-KIP's e-NTK kernel: ``(b, h, w[, c]) -> (b, out_features)``."""
    chans = tuple(check_int(c, "channels") for c in channels)
    if len(chans) != 2:
        raise ValueError(f"channels must have 2 entries, got {channels!r}")
    return LeNet(
        out_features=check_int(out_features, "out_features"),
        channels=chans,  # type: ignore[arg-type]
        hidden=tuple(check_int(h, "hidden") for h in hidden),
        init_scheme=_check_init(init),
    )


def init_params(key: jax.Array, module: nn.Module, input_shape: Sequence[int]) -> Any:
    """Initialise ``module`` for examples of shape ``input_shape`` (data-independent).

    Args:
        key: ``jax.random.key``.
        module: a flax.linen module taking ``(b, *input_shape)``.
        input_shape: shape of ONE example, e.g. ``(28, 28)`` or ``(d,)``.

    Returns:
        The variables pytree ``{"params": ...}``, usable as ``module.apply(params, x)``.
        Only the shape of the input is used; no data is read.
    """
    key = check_key(key)
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a flax.linen Module, got {type(module).__name__}")
    if isinstance(input_shape, (int,)) or not isinstance(input_shape, Sequence):
        raise TypeError(
            f"input_shape must be a tuple of ints (one example's shape), got {input_shape!r}"
        )
    shape = tuple(check_int(s, "input_shape entries") for s in input_shape)
    if len(shape) == 0:
        raise ValueError("input_shape must have at least one dimension")
    return module.init(key, jnp.zeros((1, *shape), jnp.float32))
