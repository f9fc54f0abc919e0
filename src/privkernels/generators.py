"""Generator networks for private data generation (flax.linen).

Two families, both conditioned on a one-hot label that is concatenated to a
standard-normal code ``z`` (DP-NTK Sec. 3: ``G(z_i, y'_i) -> x'_i``):

* `ConvCondGenerator` -- the conditional CNN generator used for
  MNIST / Fashion-MNIST (two dense layers, two x2 bilinear upsamplings, two
  convolutions, sigmoid output in ``[0, 1]``). It generalises by output shape:
  any ``(h, w)`` or ``(h, w, c)`` with ``h`` and ``w`` divisible by 4 (e.g.
  28x28 MNIST, 8x8 sklearn digits); other shapes fall back to a dense head.
* `TabularGenerator` -- a fully connected generator for tabular data
  with one output head per column group: numeric columns through a sigmoid
  into ``[0, 1]`` and each categorical one-hot slice through its own softmax.

``n_classes=1`` gives the unconditional (one-class) mode: the label input is
a constant 1.

Generators contain no batch-statistics layers (LayerNorm instead of the
reference code's BatchNorm), so a sample never depends on the other samples
in its batch and ``apply`` is a pure function of ``(params, z, onehot)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ColumnGroup",
    "ConvCondGenerator",
    "TabularGenerator",
    "column_groups_from_schema",
    "make_code",
    "discretize",
    "check_groups",
]


@dataclass(frozen=True)
class ColumnGroup:
    """A contiguous slice ``[start, stop)`` of output columns of one kind.

    ``kind`` is ``"numeric"`` (each column independently through the numeric
    activation) or ``"categorical"`` (the slice is one one-hot encoded
    categorical variable: softmax over the slice).
    """

    kind: str
    start: int
    stop: int

    def __post_init__(self) -> None:
        if self.kind not in ("numeric", "categorical"):
            raise ValueError(
                f"ColumnGroup.kind must be 'numeric' or 'categorical', got {self.kind!r}"
            )
        bounds = (self.start, self.stop)
        if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in bounds):
            raise TypeError("ColumnGroup start and stop must be ints")
        if not (0 <= self.start < self.stop):
            raise ValueError(
                f"ColumnGroup needs 0 <= start < stop, got [{self.start}, {self.stop})"
            )


def check_groups(groups: Any, width: int) -> tuple[ColumnGroup, ...]:
    """``groups`` as a tuple of `ColumnGroup` s that lie inside a row of ``width`` columns
    and do not overlap (``ValueError``/``TypeError`` otherwise; public numbers only). The
    default table network gathers its numeric columns from them, and a saved model's
    groups must lie inside one row to load."""
    try:
        groups = tuple(groups)
    except TypeError:
        raise TypeError(
            f"groups must be a sequence of ColumnGroup, got {type(groups).__name__}"
        ) from None
    if not all(isinstance(g, ColumnGroup) for g in groups):
        raise TypeError("groups must be a sequence of ColumnGroup")
    last = 0
    for g in sorted(groups, key=lambda g: g.start):
        if g.start < last or g.stop > width:
            raise ValueError(
                f"groups must lie inside a row of {width} columns without overlapping; "
                f"[{g.start}, {g.stop}) does not"
            )
        last = g.stop
    return groups


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def column_groups_from_schema(schema: Any, n_features: int) -> tuple[ColumnGroup, ...]:
    """Build output heads from a tabular data schema.

    Accepts the schema of `privkernels.data.load` in any of these forms:
    an object/dict with ``categorical_slices`` (sequence of ``slice`` or
    ``(start, stop)``) and optionally ``numeric_slices`` / ``numeric_columns``;
    or a sequence of column specs each having ``kind`` (``"numeric"`` /
    ``"categorical"``) and a ``slice`` (or ``start``/``stop``). Columns not
    covered by a categorical slice are numeric. ``None`` -> all numeric.
    """
    if schema is None:
        return (ColumnGroup("numeric", 0, n_features),)
    cat: list[tuple[int, int]] = []

    def _bounds(s: Any) -> tuple[int, int]:
        if isinstance(s, slice):
            return int(s.start or 0), int(s.stop)
        if isinstance(s, (tuple, list)) and len(s) == 2:
            return int(s[0]), int(s[1])
        start, stop = _get(s, "start"), _get(s, "stop")
        if start is None or stop is None:
            sl = _get(s, "slice")
            if sl is None:
                raise TypeError(f"cannot read column bounds from {s!r}")
            return _bounds(sl)
        return int(start), int(stop)

    cat_slices = _get(schema, "categorical_slices")
    if cat_slices is not None:
        cat = [_bounds(s) for s in cat_slices]
    else:
        cols = _get(schema, "columns", schema)
        if not isinstance(cols, (list, tuple)):
            raise TypeError(f"unsupported schema of type {type(schema).__name__}")
        for c in cols:
            if _get(c, "kind") == "categorical":
                cat.append(_bounds(c))
    cat.sort()
    groups: list[ColumnGroup] = []
    pos = 0
    for start, stop in cat:
        if start < pos or stop > n_features:
            raise ValueError(
                f"categorical slice [{start}, {stop}) overlaps or exceeds {n_features} columns"
            )
        if start > pos:
            groups.append(ColumnGroup("numeric", pos, start))
        groups.append(ColumnGroup("categorical", start, stop))
        pos = stop
    if pos < n_features:
        groups.append(ColumnGroup("numeric", pos, n_features))
    return tuple(groups)


class ConvCondGenerator(nn.Module):
    """Conditional CNN generator, ``(z (b, d_code), onehot (b, C)) -> (b, *output_shape)``.

    Architecture (DP-NTK Sec. 5 "Conditional CNN", as in DP-MERF): dense
    ``d_code + C -> hidden[0]`` (ReLU, LayerNorm), dense ``-> channels[0] *
    (h/4) * (w/4)`` (ReLU, LayerNorm), reshape, x2 bilinear upsample, conv
    ``channels[1]`` (ReLU), x2 upsample, conv to the output channels, sigmoid.
    Outputs lie in ``[0, 1]`` (`output_range`).
    """

    n_classes: int
    output_shape: tuple[int, ...] = (28, 28)
    hidden: tuple[int, ...] = (200,)
    channels: tuple[int, int] = (16, 8)
    kernel_size: int = 5

    @nn.compact
    def __call__(self, z: jax.Array, onehot: jax.Array) -> jax.Array:
        shape = tuple(self.output_shape)
        if len(shape) not in (2, 3):
            raise ValueError(f"output_shape must be (h, w) or (h, w, c), got {shape}")
        h, w = shape[0], shape[1]
        c_out = shape[2] if len(shape) == 3 else 1
        b = z.shape[0]
        x = jnp.concatenate([z, onehot.astype(z.dtype)], axis=-1)
        for width in self.hidden:
            x = nn.LayerNorm()(nn.relu(nn.Dense(width)(x)))
        if h % 4 == 0 and w % 4 == 0:
            h0, w0 = h // 4, w // 4
            c0, c1 = self.channels
            x = nn.LayerNorm()(nn.relu(nn.Dense(c0 * h0 * w0)(x)))
            x = x.reshape(b, h0, w0, c0)
            x = jax.image.resize(x, (b, 2 * h0, 2 * w0, c0), method="bilinear")
            x = nn.relu(nn.Conv(c1, (self.kernel_size, self.kernel_size), padding="SAME")(x))
            x = jax.image.resize(x, (b, h, w, c1), method="bilinear")
            x = nn.Conv(c_out, (self.kernel_size, self.kernel_size), padding="SAME")(x)
        else:  # shapes not divisible by 4: dense head
            x = nn.Dense(h * w * c_out)(x).reshape(b, h, w, c_out)
        x = nn.sigmoid(x)
        return x.reshape((b, *shape))

    def output_range(self) -> tuple[float, float]:
        """``(0, 1)``: the sigmoid's range (data to match must lie in it)."""
        return (0.0, 1.0)


class TabularGenerator(nn.Module):
    """Fully connected tabular generator, ``(z, onehot) -> (b, n_features)``.

    Hidden layers: Dense + ReLU + LayerNorm (the paper uses 2-3 hidden layers
    with batch norm). Output heads per `ColumnGroup`: numeric columns
    through ``numeric_activation`` (``"sigmoid"`` into ``[0, 1]`` or
    ``"linear"``), each categorical slice through a softmax, so a generated
    one-hot block is a probability vector (see `discretize`).
    """

    n_classes: int
    n_features: int
    groups: tuple[ColumnGroup, ...] = ()
    hidden: tuple[int, ...] = (64, 64)
    numeric_activation: str = "sigmoid"

    @nn.compact
    def __call__(self, z: jax.Array, onehot: jax.Array) -> jax.Array:
        groups = self.groups or (ColumnGroup("numeric", 0, self.n_features),)
        x = jnp.concatenate([z, onehot.astype(z.dtype)], axis=-1)
        for width in self.hidden:
            x = nn.LayerNorm()(nn.relu(nn.Dense(width)(x)))
        logits = nn.Dense(self.n_features)(x)
        parts = []
        for g in groups:
            block = logits[:, g.start : g.stop]
            if g.kind == "categorical":
                parts.append(jax.nn.softmax(block, axis=-1))
            elif self.numeric_activation == "sigmoid":
                parts.append(nn.sigmoid(block))
            elif self.numeric_activation == "linear":
                parts.append(block)
            else:
                raise ValueError(f"unknown numeric_activation {self.numeric_activation!r}")
        return jnp.concatenate(parts, axis=-1)

    def output_range(self) -> tuple[float, float] | None:
        """``(0, 1)`` with sigmoid numeric heads (softmax blocks lie in it too); None if linear."""
        return (0.0, 1.0) if self.numeric_activation == "sigmoid" else None


def make_code(
    key: jax.Array, labels: jax.Array, *, d_code: int, n_classes: int
) -> tuple[jax.Array, jax.Array]:
    """Generator input for given labels: ``z ~ N(0, I_{d_code})`` and one-hot labels.

    Returns ``(z (b, d_code) float32, onehot (b, n_classes) float32)``.
    """
    z = jax.random.normal(key, (labels.shape[0], d_code), dtype=jnp.float32)
    return z, jax.nn.one_hot(labels, n_classes, dtype=jnp.float32)


def discretize(x: np.ndarray | jax.Array, groups: Sequence[ColumnGroup]) -> np.ndarray:
    """Turn each categorical softmax block into an exact one-hot (argmax); numeric unchanged."""
    out = np.array(x, dtype=np.float32, copy=True)
    for g in groups:
        if g.kind == "categorical":
            block = out[:, g.start : g.stop]
            hot = np.zeros_like(block)
            hot[np.arange(block.shape[0]), np.argmax(block, axis=1)] = 1.0
            out[:, g.start : g.stop] = hot
    return out
