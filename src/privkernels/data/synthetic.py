"""Small deterministic synthetic datasets for fast tests and examples.

Every generator takes ``seed_or_key``: a Python int (NumPy ``default_rng(seed)``)
or a ``jax.random`` key (typed or raw), from which a NumPy seed is derived with
``jax.random.bits``; the same seed/key always gives the same data. Outputs are
`Dataset` records with NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from privkernels._validation import check_int, check_key, check_positive
from privkernels.data.base import Dataset
from privkernels.data.schema import TabularSchema, categorical, numeric

__all__ = ["gaussian_blobs", "synthetic_images", "synthetic_tabular", "rng_from"]


def rng_from(seed_or_key: int | jax.Array) -> np.random.Generator:
    """NumPy Generator from an int seed or a ``jax.random`` key."""
    if isinstance(seed_or_key, bool):
        raise TypeError("seed_or_key must be an int or a jax.random key, got a bool")
    if isinstance(seed_or_key, (int, np.integer)):
        if seed_or_key < 0:
            raise ValueError(f"seed must be >= 0, got {seed_or_key}")
        return np.random.default_rng(int(seed_or_key))

    key = check_key(seed_or_key, "seed_or_key")
    words = np.asarray(jax.random.bits(key, (4,), dtype=np.uint32)).tolist()
    return np.random.default_rng(words)


def _synthetic(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    name: str,
    schema: TabularSchema | None = None,
    **info: Any,
) -> Dataset:
    """A generator's training `Dataset`: ``x (n, ...)``, ``y (n,)`` int32, classes named
    ``"0" .. "c-1"``; nothing in it is read from private data."""
    return Dataset(
        x=x,
        y=y,
        n_classes=n_classes,
        name=name,
        split="train",
        schema=schema,
        class_names=tuple(str(c) for c in range(n_classes)),
        info={"synthetic": True, **info, "data_dependent": []},
    )


def _check_sizes(n: int, n_classes: int) -> None:
    check_int(n, "n", minimum=1)
    check_int(n_classes, "n_classes", minimum=1)


def _balanced_labels(rng: np.random.Generator, n: int, n_classes: int) -> np.ndarray:
    y = np.arange(n) % n_classes
    return rng.permutation(y).astype(np.int32)


def gaussian_blobs(
    seed_or_key: int | jax.Array,
    n: int,
    d: int,
    n_classes: int,
    *,
    separation: float = 3.0,
    scale: float = 1.0,
) -> Dataset:
    """Isotropic Gaussian classes: ``x_i ~ N(mu_{y_i}, scale^2 I_d)``.

    Class means are ``separation * u_c`` with ``u_c`` uniform on the unit sphere
    (drawn from the seed). Labels are balanced (``i mod n_classes``, shuffled).
    Returns ``x`` ``(n, d)`` float32 (unbounded), ``y`` ``(n,)`` int32.
    """
    _check_sizes(n, n_classes)
    check_int(d, "d", minimum=1)
    check_positive(scale, "scale")
    rng = rng_from(seed_or_key)
    u = rng.standard_normal((n_classes, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    means = float(separation) * u
    y = _balanced_labels(rng, n, n_classes)
    x = means[y] + float(scale) * rng.standard_normal((n, d))
    return _synthetic(
        x.astype(np.float32), y, n_classes, "gaussian_blobs", means=means.astype(np.float32)
    )


def _prototypes(shape2d: tuple[int, int], n_classes: int) -> np.ndarray:
    """Deterministic class patterns in [0, 1]: a Gaussian blob on a circle plus
    stripes whose orientation depends on the class. ``(n_classes, H, W)``."""
    h, w = shape2d
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    protos = np.empty((n_classes, h, w))
    for c in range(n_classes):
        ang = 2 * np.pi * c / n_classes
        cy, cx = 0.5 * np.sin(ang), 0.5 * np.cos(ang)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 0.18**2))
        theta = np.pi * c / n_classes
        stripes = 0.5 + 0.5 * np.cos(6 * (np.cos(theta) * xx + np.sin(theta) * yy))
        protos[c] = np.clip(0.75 * blob + 0.25 * stripes, 0.0, 1.0)
    return protos


def synthetic_images(
    seed_or_key: int | jax.Array,
    n: int,
    shape: Sequence[int] = (28, 28),
    n_classes: int = 10,
    *,
    noise: float = 0.1,
    max_shift: int = 1,
) -> Dataset:
    """Class-dependent images in [0, 1] that a linear classifier can learn.

    Each class has a fixed prototype (blob at angle ``2 pi c / n_classes`` plus
    class-oriented stripes); an example is its prototype shifted by up to
    ``max_shift`` pixels, plus ``N(0, noise^2)`` pixel noise, clipped to [0, 1].
    ``shape`` is ``(H, W)`` (grey, ``x`` ``(n, H, W)``) or ``(H, W, C)`` (colour:
    channel ``k`` is the grey image times a class-dependent tint).
    """
    _check_sizes(n, n_classes)
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise ValueError(f"shape must be (H, W) or (H, W, C), got {shape}")
    rng = rng_from(seed_or_key)
    protos = _prototypes((shape[0], shape[1]), n_classes)
    y = _balanced_labels(rng, n, n_classes)
    shifts = (
        rng.integers(-max_shift, max_shift + 1, size=(n, 2))
        if max_shift > 0
        else np.zeros((n, 2), int)
    )
    x = np.empty((n, *shape[:2]))
    for i in range(n):
        x[i] = np.roll(protos[y[i]], tuple(shifts[i]), axis=(0, 1))
    if len(shape) == 3:
        tint = 0.5 + 0.5 * np.cos(
            2
            * np.pi
            * (
                np.arange(n_classes)[:, None] / n_classes
                + np.arange(shape[2])[None, :] / max(shape[2], 1)
            )
        )
        x = x[..., None] * tint[y][:, None, None, :]
    x = np.clip(x + float(noise) * rng.standard_normal(x.shape), 0.0, 1.0)
    return _synthetic(x.astype(np.float32), y, n_classes, "synthetic_images")


def synthetic_tabular(
    seed_or_key: int | jax.Array,
    n: int,
    *,
    n_numeric: int = 4,
    categorical_sizes: Sequence[int] = (3, 5),
    n_classes: int = 2,
    missing_rate: float = 0.0,
) -> Dataset:
    """Mixed numeric/categorical table with a schema, encoded like the real loaders.

    Raw numerics ``num{j}`` are uniform on public bounds ``[0, 10 (j + 1)]``;
    categoricals ``cat{k}`` are uniform over ``c0..c{size-1}``. The label is the
    argmax of a random linear score of the encoded features (so it is learnable).
    ``missing_rate > 0`` blanks that fraction of raw values; all columns are
    nullable so they get an indicator / ``<missing>`` level.
    """
    _check_sizes(n, n_classes)
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must lie in [0, 1), got {missing_rate!r}")
    rng = rng_from(seed_or_key)
    nullable = missing_rate > 0
    cols = [numeric(f"num{j}", 0, 10 * (j + 1), nullable=nullable) for j in range(n_numeric)]
    cols += [
        categorical(f"cat{k}", [f"c{i}" for i in range(int(s))], nullable=nullable)
        for k, s in enumerate(categorical_sizes)
    ]
    schema = TabularSchema.from_columns("synthetic_tabular", cols, label="label")
    table: dict[str, np.ndarray] = {}
    for j in range(n_numeric):
        v = rng.uniform(0, 10 * (j + 1), size=n)
        if nullable:
            v[rng.random(n) < missing_rate] = np.nan
        table[f"num{j}"] = v
    for k, s in enumerate(categorical_sizes):
        tok = np.array([f"c{i}" for i in rng.integers(0, int(s), size=n)], dtype=object)
        if nullable:
            tok[rng.random(n) < missing_rate] = "?"
        table[f"cat{k}"] = tok.astype(str)
    x, _ = schema.encode(table)
    w = rng.standard_normal((schema.n_features, n_classes)) * 2.0
    y = np.argmax((x - x.mean(axis=0)) @ w, axis=1).astype(np.int32)
    return _synthetic(x, y, n_classes, "synthetic_tabular", schema=schema)
