"""Core types of `privkernels.data`: the ``Dataset`` record, the data-directory
resolution and the error raised when a dataset's files are absent.

Nothing in this package downloads anything. Every loader reads files that the
user has placed under one root directory (``data_dir`` or the environment
variable ``PRIVKERNELS_DATA``) with the layout documented in
`privkernels.data.registry.LAYOUT` (see `privkernels.data.required_files`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privkernels.data.schema import TabularSchema

__all__ = [
    "DATA_ENV_VAR",
    "Dataset",
    "DatasetNotFoundError",
    "resolve_data_dir",
    "require_files",
    "stratified_split_indices",
    "take_rows",
]

DATA_ENV_VAR = "PRIVKERNELS_DATA"


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a dataset, ready for the methods of this toolkit.

    Attributes:
      x: float32 array. Images: ``(n, H, W)`` (grey) or ``(n, H, W, C)`` (colour),
        values in [0, 1]. Tabular: ``(n, d)`` after the data-independent encoding
        described by ``schema`` (numeric columns in [0, 1], categorical columns
        one-hot).
      y: int32 array ``(n,)`` of labels in ``[0, n_classes)``.
      n_classes: number of classes (fixed by the dataset definition, never by the
        labels present in a split).
      name: dataset name as passed to `privkernels.data.load`.
      split: ``"train"``, ``"test"`` or ``"all"``.
      schema: `TabularSchema` for tabular data,
        ``None`` for images.
      class_names: human-readable name of each class (length ``n_classes``).
      info: free-form provenance: files read, preprocessing, split rule, and a
        ``data_dependent`` list naming every step that read the private data
        without noise (empty unless an opt-in such as ``scale="data"`` was used).
    """

    x: np.ndarray
    y: np.ndarray
    n_classes: int
    name: str
    split: str
    schema: TabularSchema | None = None
    class_names: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"x has {self.x.shape[0]} rows but y has {self.y.shape[0]} labels")
        if self.class_names and len(self.class_names) != self.n_classes:
            raise ValueError(
                f"class_names has {len(self.class_names)} entries, n_classes={self.n_classes}"
            )

    @property
    def n(self) -> int:
        """Number of examples."""
        return int(self.x.shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one example (``x.shape[1:]``)."""
        return tuple(self.x.shape[1:])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, split={self.split!r}, x={self.x.dtype}{list(self.x.shape)}, "
            f"y={self.y.dtype}{list(self.y.shape)}, n_classes={self.n_classes}, "
            f"tabular={self.schema is not None})"
        )

    def counts(self) -> np.ndarray:
        """Examples per class, ``(n_classes,)`` int64 (reads labels; local use only)."""
        return np.bincount(self.y, minlength=self.n_classes)


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where `privkernels.data.load` looks for them.

    The message lists every expected file (relative to the data root) and how to
    point the loader at the root (``data_dir=...`` or ``PRIVKERNELS_DATA``).
    Nothing is ever downloaded.
    """


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """Return the data root: ``data_dir`` if given, else ``$PRIVKERNELS_DATA``, else None."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return None


def _missing_message(
    name: str,
    root: Path | None,
    missing: Sequence[str],
    expected: Sequence[str],
    note: str = "",
) -> str:
    where = (
        f"under the data root {str(root)!r}"
        if root is not None
        else f"because no data root is set (pass data_dir=... or set the environment variable {DATA_ENV_VAR})"
    )
    lines = [f"Dataset {name!r} not found {where}."]
    lines.append("Missing: " + ", ".join(repr(m) for m in missing) + ".")
    lines.append("Expected layout (relative to the data root):")
    lines.extend(f"    <root>/{p}" for p in expected)
    lines.append(
        f"Put the files there and pass data_dir=<root> or set {DATA_ENV_VAR}=<root>. "
        "privkernels never downloads data."
    )
    if note:
        lines.append(note)
    return "\n".join(lines)


def require_files(
    name: str,
    root: Path | None,
    relpaths: Sequence[str | Sequence[str]],
    *,
    note: str = "",
) -> list[Path]:
    """Locate every file of a dataset or raise `DatasetNotFoundError`.

    Each entry of ``relpaths`` is a path relative to ``root``, or a sequence of
    alternatives (e.g. ``("x.data", "x.data.gz")``); the first that exists wins.
    """
    expected = [p if isinstance(p, str) else " or ".join(p) for p in relpaths]
    if root is None:
        raise DatasetNotFoundError(_missing_message(name, None, expected, expected, note))
    found: list[Path] = []
    missing: list[str] = []
    for entry in relpaths:
        options = [entry] if isinstance(entry, str) else list(entry)
        hit = next((root / o for o in options if (root / o).is_file()), None)
        if hit is None:
            missing.append(" or ".join(options))
        else:
            found.append(hit)
    if missing:
        raise DatasetNotFoundError(_missing_message(name, root, missing, expected, note))
    return found


def stratified_split_indices(
    y: np.ndarray, *, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic stratified train/test split of row indices.

    For each class ``c`` (in increasing order) the rows with label ``c`` are
    permuted by ``numpy.random.default_rng([seed, c])`` and the first
    ``round(test_fraction * n_c)`` go to the test split. The permutation depends
    only on the seed and the class sizes, never on feature values. Both index
    arrays are returned sorted (file order is kept).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    y = np.asarray(y)
    test_parts = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        perm = np.random.default_rng([int(seed), int(c)]).permutation(idx.size)
        n_test = int(round(test_fraction * idx.size))
        test_parts.append(idx[perm[:n_test]])
    test = np.sort(np.concatenate(test_parts)) if test_parts else np.zeros(0, np.int64)
    mask = np.ones(y.shape[0], bool)
    mask[test] = False
    return np.flatnonzero(mask), test


def _check_count(value: Any, name: str) -> None:
    """Refuse a row count that is not a positive integer (``bool`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def take_rows(
    x: np.ndarray,
    y: np.ndarray,
    *,
    max_rows: int | None = None,
    subsample: int | None = None,
    subsample_seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Apply the generic ``max_rows`` (first rows) and ``subsample`` (uniform
    without replacement, ``numpy.random.default_rng(subsample_seed)``, rows kept
    in file order) options."""
    info: dict[str, Any] = {}
    if max_rows is not None:
        _check_count(max_rows, "max_rows")
        x, y = x[:max_rows], y[:max_rows]
        info["max_rows"] = int(max_rows)
    if subsample is not None:
        _check_count(subsample, "subsample")
        if subsample < x.shape[0]:
            keep = np.sort(
                np.random.default_rng(subsample_seed).choice(
                    x.shape[0], size=subsample, replace=False
                )
            )
            x, y = x[keep], y[keep]
        info["subsample"] = int(subsample)
        info["subsample_seed"] = int(subsample_seed)
    return x, y, info
