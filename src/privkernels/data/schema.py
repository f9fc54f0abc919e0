"""Public schemas for tabular data and the data-independent encoding they define.

A `TabularSchema` is written by hand from a dataset's public
documentation (column names, kinds, category lists from the ``.names`` files,
public numeric bounds). Encoding a table with it reads nothing from the data
beyond the values being encoded:

* numeric column: ``v -> (clip(v, lo, hi) - lo) / (hi - lo)`` (``transform="linear"``)
  or ``log1p(clip(v, lo, hi) - lo) / log1p(hi - lo)`` (``transform="log"``, for
  heavy-tailed counts/amounts), with the public bounds ``(lo, hi)``; result in [0, 1].
* categorical column: one-hot over the public category list. A value that is not
  in the list (an *unseen* category) encodes as the all-zero vector
  (``unknown="zero"``, default) or raises (``unknown="error"``).
* missing values (``?`` or empty): for a ``nullable`` numeric column the value is
  set to 0 and an extra indicator column is 1; for a ``nullable`` categorical
  column an explicit extra level ``"<missing>"`` (the last one-hot entry) is 1.
  In a column not declared nullable a missing value encodes as 0 / all-zero and
  is counted in ``info["missing_in_non_nullable"]``.

``scale="data"`` replaces the public bounds by the per-column min/max of the
(training split of the) private data; it is opt-in and emits
`PrivacyLeakWarning`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from privkernels._json import loads_bounded

__all__ = [
    "MISSING_LEVEL",
    "MISSING_TOKENS",
    "ColumnSpec",
    "TabularSchema",
    "numeric",
    "categorical",
]

MISSING_LEVEL = "<missing>"
MISSING_TOKENS = frozenset({"?", ""})


@dataclass(frozen=True)
class ColumnSpec:
    """One raw column of a tabular dataset and where it lives in the encoded ``x``.

    Attributes:
      name: raw column name.
      kind: ``"numeric"`` or ``"categorical"``.
      bounds: public ``(lo, hi)`` of a numeric column (domain knowledge, see ``note``).
      transform: ``"linear"`` or ``"log"`` (numeric only).
      categories: public category list (categorical only), in one-hot order.
      nullable: the column may be missing; adds an indicator column (numeric) or
        a ``"<missing>"`` level (categorical).
      note: where the bounds / categories come from.
      dtype: ``"float"`` or ``"int"`` (numeric only): decoded values of an
        ``"int"`` column are rounded (`privkernels.data.frames` restores integer dtypes).
      start, stop: the slice ``x[:, start:stop]`` holding this column (set by
        `TabularSchema`).
    """

    name: str
    kind: Literal["numeric", "categorical"]
    bounds: tuple[float, float] | None = None
    transform: Literal["linear", "log"] = "linear"
    categories: tuple[str, ...] = ()
    nullable: bool = False
    note: str = ""
    start: int = -1
    stop: int = -1
    dtype: Literal["float", "int"] = "float"

    def __post_init__(self) -> None:
        if self.kind == "numeric":
            if self.bounds is None:
                raise ValueError(f"numeric column {self.name!r} needs public bounds")
            lo, hi = self.bounds
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
                raise ValueError(
                    f"column {self.name!r}: bounds must be finite with hi > lo, got {self.bounds}"
                )
            if self.transform not in ("linear", "log"):
                raise ValueError(f"column {self.name!r}: unknown transform {self.transform!r}")
            if self.dtype not in ("float", "int"):
                raise ValueError(f"column {self.name!r}: dtype must be 'float' or 'int'")
        elif self.kind == "categorical":
            if len(self.categories) == 0:
                raise ValueError(f"categorical column {self.name!r} needs a category list")
            if len(set(self.categories)) != len(self.categories):
                raise ValueError(f"categorical column {self.name!r} has duplicate categories")
        else:
            raise ValueError(f"column {self.name!r}: kind must be 'numeric' or 'categorical'")

    @property
    def width(self) -> int:
        """Number of encoded columns."""
        if self.kind == "numeric":
            return 2 if self.nullable else 1
        return len(self.categories) + (1 if self.nullable else 0)

    @property
    def slice(self) -> slice:
        """``slice(start, stop)`` of this column in ``x``."""
        return slice(self.start, self.stop)

    @property
    def levels(self) -> tuple[str, ...]:
        """Categorical one-hot levels (categories plus ``"<missing>"`` if nullable)."""
        return self.categories + ((MISSING_LEVEL,) if self.nullable else ())

    @property
    def value_index(self) -> int:
        """Numeric: the column of ``x`` holding the scaled value."""
        return self.start

    @property
    def missing_index(self) -> int | None:
        """Numeric nullable: indicator column; categorical nullable: the missing level."""
        if not self.nullable:
            return None
        return self.stop - 1


def numeric(
    name: str,
    lo: float,
    hi: float,
    *,
    transform: Literal["linear", "log"] = "linear",
    nullable: bool = False,
    note: str = "",
    dtype: Literal["float", "int"] = "float",
) -> ColumnSpec:
    """Shorthand for a numeric `ColumnSpec` with public bounds ``[lo, hi]``."""
    return ColumnSpec(
        name,
        "numeric",
        bounds=(float(lo), float(hi)),
        transform=transform,
        nullable=nullable,
        note=note,
        dtype=dtype,
    )


def categorical(
    name: str, categories: Sequence[str], *, nullable: bool = False, note: str = ""
) -> ColumnSpec:
    """Shorthand for a categorical `ColumnSpec` over a public category list."""
    return ColumnSpec(
        name, "categorical", categories=tuple(categories), nullable=nullable, note=note
    )


def _canonical_token(tok: str) -> str | None:
    """'1.0' -> '1' (numeric-coded categories written as floats), else None."""
    try:
        v = float(tok)
    except ValueError:
        return None
    if math.isfinite(v) and v == int(v):
        return str(int(v))
    return None


@dataclass(frozen=True)
class TabularSchema:
    """Ordered public column specs of a tabular dataset and their layout in ``x``.

    Build with `from_columns`; ``columns[i].slice`` is the block of ``x``
    encoding raw column ``i``; ``n_features`` is ``x.shape[1]``. ``classes``
    is the public list of label values (class ``i`` is ``classes[i]``); empty
    when the labels are already integers ``0..C-1``. ``source`` is
    ``"public"`` for a hand-written schema and ``"data"`` for one inferred from
    the private table (`privkernels.data.frames.infer_schema`).
    """

    name: str
    columns: tuple[ColumnSpec, ...]
    label: str = "label"
    description: str = ""
    classes: tuple[str, ...] = ()
    source: Literal["public", "data"] = "public"

    @classmethod
    def from_columns(
        cls,
        name: str,
        columns: Sequence[ColumnSpec],
        *,
        label: str = "label",
        description: str = "",
        classes: Sequence[str] = (),
        source: Literal["public", "data"] = "public",
    ) -> TabularSchema:
        """Assign consecutive slices to ``columns`` (in order)."""
        placed = []
        pos = 0
        seen = set()
        for c in columns:
            if c.name in seen:
                raise ValueError(f"duplicate column name {c.name!r}")
            seen.add(c.name)
            placed.append(dataclasses.replace(c, start=pos, stop=pos + c.width))
            pos += c.width
        if len(set(classes)) != len(tuple(classes)):
            raise ValueError("duplicate label classes")
        if source not in ("public", "data"):
            raise ValueError(f"source must be 'public' or 'data', got {source!r}")
        return cls(
            name=name,
            columns=tuple(placed),
            label=label,
            description=description,
            classes=tuple(str(c) for c in classes),
            source=source,
        )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the format `from_dict` and the CLI's ``--schema`` read)."""
        cols: list[dict[str, Any]] = []
        for c in self.columns:
            d: dict[str, Any] = {"name": c.name, "kind": c.kind}
            if c.kind == "numeric":
                d.update(bounds=list(c.bounds or ()), transform=c.transform, dtype=c.dtype)
            else:
                d["categories"] = list(c.categories)
            d.update(nullable=c.nullable, note=c.note)
            cols.append(d)
        return {
            "name": self.name,
            "label": self.label,
            "classes": list(self.classes),
            "description": self.description,
            "source": self.source,
            "columns": cols,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TabularSchema:
        """Inverse of `to_dict`; unknown keys are an error (a typo is not ignored)."""
        top = {"name", "label", "classes", "description", "source", "columns"}
        col_keys = {
            "name",
            "kind",
            "bounds",
            "transform",
            "dtype",
            "categories",
            "nullable",
            "note",
        }
        extra = set(data) - top
        if extra:
            raise ValueError(f"unknown schema key(s) {sorted(extra)}; allowed {sorted(top)}")
        if not isinstance(data.get("columns"), Sequence) or not data["columns"]:
            raise ValueError("a schema needs a non-empty 'columns' list")
        label = str(data.get("label", "label"))
        classes = tuple(data.get("classes", ()))
        cols = []
        for c in data["columns"]:
            if (
                c.get("name") == label
            ):  # the label listed as a column: its categories are the classes
                if c.get("kind") != "categorical" or (
                    classes and tuple(c["categories"]) != classes
                ):
                    raise ValueError(f"label column {label!r} must be categorical (its categories "
                                     "are the public classes)")  # fmt: skip
                classes = tuple(c["categories"])
                continue
            bad = set(c) - col_keys
            if bad:
                raise ValueError(f"column {c.get('name')!r}: unknown key(s) {sorted(bad)}")
            if c.get("kind") == "numeric":
                b = c.get("bounds")
                if b is None or len(b) != 2:
                    raise ValueError(f"numeric column {c.get('name')!r} needs bounds [lo, hi]")
                cols.append(numeric(str(c["name"]), b[0], b[1], transform=c.get("transform", "linear"),
                                    nullable=bool(c.get("nullable", False)), note=c.get("note", ""),
                                    dtype=c.get("dtype", "float")))  # fmt: skip
            else:
                cols.append(ColumnSpec(str(c["name"]), c.get("kind"),  # type: ignore[arg-type]
                                       categories=tuple(str(v) for v in c.get("categories", ())),
                                       nullable=bool(c.get("nullable", False)),
                                       note=c.get("note", "")))  # fmt: skip
        return cls.from_columns(
            str(data.get("name", "table")),
            cols,
            label=label,
            description=str(data.get("description", "")),
            classes=classes,
            source=data.get("source", "public"),
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write `to_dict` as JSON."""
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TabularSchema:
        """Read a schema written by `save` (or by hand in that format)."""
        return cls.from_dict(loads_bounded(Path(path).read_text(), f"the schema {path}"))

    # ------------------------------------------------------------------ queries
    @property
    def n_features(self) -> int:
        """Encoded dimension ``d``."""
        return self.columns[-1].stop if self.columns else 0

    @property
    def numeric_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.kind == "numeric")

    @property
    def categorical_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.kind == "categorical")

    @property
    def categorical_slices(self) -> tuple[slice, ...]:
        """One-hot block of every categorical column (``<missing>`` level included)."""
        return tuple(c.slice for c in self.categorical_columns)

    @property
    def numeric_slices(self) -> tuple[slice, ...]:
        """Block of every numeric column (value, plus the missing indicator if nullable)."""
        return tuple(c.slice for c in self.numeric_columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"schema {self.name!r} has no column {name!r}")

    def feature_names(self) -> list[str]:
        """Name of each encoded column of ``x`` (``"age"``, ``"age[missing]"``, ``"sex=Male"``)."""
        out: list[str] = []
        for c in self.columns:
            if c.kind == "numeric":
                out.append(c.name)
                if c.nullable:
                    out.append(f"{c.name}[missing]")
            else:
                out.extend(f"{c.name}={lv}" for lv in c.levels)
        return out

    def numeric_value_indices(self) -> np.ndarray:
        """Columns of ``x`` holding scaled numeric values (excluding missing indicators)."""
        return np.array([c.value_index for c in self.numeric_columns], dtype=np.int64)

    def describe(self) -> str:
        """Human-readable table of the schema."""
        lines = [f"{self.name}: d={self.n_features}, label={self.label!r}"]
        for c in self.columns:
            if c.kind == "numeric":
                extra = f"bounds={c.bounds} {c.transform}"
            else:
                extra = f"{len(c.categories)} categories"
            lines.append(
                f"  [{c.start}:{c.stop}] {c.name} ({c.kind}{', nullable' if c.nullable else ''}) {extra}"
            )
        return "\n".join(lines)

    # ------------------------------------------------------------------ encode
    def encode(
        self,
        table: Mapping[str, np.ndarray],
        *,
        scale: Literal["public", "data", "none"] = "public",
        data_bounds: Mapping[str, tuple[float, float]] | None = None,
        unknown: Literal["zero", "error"] = "zero",
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Encode raw columns into ``x`` ``(n, n_features)`` float32.

        Args:
          table: raw column name -> 1-D array; numeric columns float (NaN = missing),
            categorical columns strings (``"?"``/``""`` = missing).
          scale: ``"public"`` (clip to the schema bounds and map to [0, 1]),
            ``"data"`` (use ``data_bounds``, which the caller computed from private
            data and warned about), ``"none"`` (raw numeric values, unclipped).
          unknown: what to do with a categorical value not in the public list.

        Returns ``(x, info)`` with counts of unseen categories and of missing
        values in columns not declared nullable (local diagnostics).
        """
        if scale not in ("public", "data", "none"):
            raise ValueError(f"scale must be 'public', 'data' or 'none', got {scale!r}")
        if unknown not in ("zero", "error"):
            raise ValueError(f"unknown must be 'zero' or 'error', got {unknown!r}")
        absent = [c.name for c in self.columns if c.name not in table]
        if absent:
            raise ValueError(f"table lacks column(s) {absent} of schema {self.name!r}")
        n = len(table[self.columns[0].name]) if self.columns else 0
        # built feature-major (contiguous column writes), transposed once at the end
        xt = np.zeros((self.n_features, n), dtype=np.float32)
        unseen: dict[str, dict[str, int]] = {}
        missing_bad: dict[str, int] = {}
        for c in self.columns:
            col = np.asarray(table[c.name])
            if col.shape != (n,):
                raise ValueError(f"column {c.name!r} has shape {col.shape}, expected ({n},)")
            if c.kind == "numeric":
                v = col.astype(np.float64, copy=False)
                miss = np.isnan(v)
                if scale == "none":
                    z = np.where(miss, 0.0, v)
                else:
                    if scale == "public":
                        lo, hi = c.bounds  # type: ignore[misc]
                    else:
                        if data_bounds is None or c.name not in data_bounds:
                            raise ValueError(
                                f"scale='data' needs data_bounds for column {c.name!r}"
                            )
                        lo, hi = data_bounds[c.name]
                    z = _scale(np.where(miss, lo, v), lo, hi, c.transform)
                    z[miss] = 0.0
                xt[c.start] = z
                if c.nullable:
                    xt[c.start + 1] = miss
                elif miss.any():
                    missing_bad[c.name] = int(miss.sum())
            else:
                idx = self._category_codes(c, col, unknown, unseen, missing_bad)
                ok = idx >= 0
                block = xt[c.start : c.stop]
                block[idx[ok], np.flatnonzero(ok)] = 1.0
        x = np.ascontiguousarray(xt.T)
        info = {"unseen_categories": unseen, "missing_in_non_nullable": missing_bad, "scale": scale}
        return x, info

    @staticmethod
    def _category_codes(
        c: ColumnSpec,
        col: np.ndarray,
        unknown: str,
        unseen: dict[str, dict[str, int]],
        missing_bad: dict[str, int],
    ) -> np.ndarray:
        """Level index per row (``-1`` = all-zero block)."""
        levels = {lv: i for i, lv in enumerate(c.categories)}
        if np.issubdtype(col.dtype, np.number):  # numeric-coded categories (e.g. 0/1 flags)
            uniq_num, inv = np.unique(col, return_inverse=True)
            uniq = [
                "?" if np.isnan(u) else (str(int(u)) if float(u) == int(u) else repr(float(u)))
                for u in uniq_num.astype(np.float64).tolist()
            ]
        elif col.dtype.kind == "S":  # fixed-width bytes: vectorised factorisation
            uniq_b, inv = np.unique(col, return_inverse=True)
            uniq = [u.decode("latin-1") for u in uniq_b.tolist()]
        else:
            values = col.tolist()
            uniq = sorted(set(values))
            pos = {u: j for j, u in enumerate(uniq)}
            inv = np.fromiter((pos[v] for v in values), dtype=np.int64, count=len(values))
        inv = np.asarray(inv).reshape(-1)
        codes = np.full(len(uniq), -1, dtype=np.int64)
        counts = (
            np.bincount(inv, minlength=len(uniq)) if inv.size else np.zeros(len(uniq), np.int64)
        )
        for j, tok in enumerate(uniq):
            t = str(tok).strip()
            if t in levels:
                codes[j] = levels[t]
            elif t in MISSING_TOKENS:
                if c.nullable:
                    codes[j] = len(c.categories)
                else:
                    missing_bad[c.name] = missing_bad.get(c.name, 0) + int(counts[j])
            else:
                canon = _canonical_token(t)
                if canon is not None and canon in levels:
                    codes[j] = levels[canon]
                elif unknown == "error":
                    raise ValueError(  # the column only: no private value, no count
                        f"column {c.name!r}: a value is not in the public category list "
                        f"{list(c.categories)[:10]}...; fix the schema or pass unknown='zero'"
                    )
                else:
                    unseen.setdefault(c.name, {})[t] = int(counts[j])
        return codes[inv] if inv.size else np.zeros(0, np.int64)

    # ------------------------------------------------------------------ generated data helpers
    def project(self, x: np.ndarray) -> np.ndarray:
        """Snap arbitrary rows (e.g. generator output) to valid encodings.

        Numeric values are clipped to [0, 1], missing indicators rounded (value set
        to 0 where the indicator is on), and each
        categorical block replaced by the one-hot of its argmax. ``(n, d)`` -> ``(n, d)`` float32.
        """
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"x must have shape (n, {self.n_features}), got {x.shape}")
        out = np.zeros_like(x)
        for c in self.columns:
            if c.kind == "numeric":
                out[:, c.start] = np.clip(x[:, c.start], 0.0, 1.0)
                if c.nullable:
                    miss = x[:, c.start + 1] >= 0.5
                    out[:, c.start + 1] = miss
                    out[miss, c.start] = 0.0  # a missing value encodes as 0
            else:
                k = np.argmax(x[:, c.slice], axis=1)
                out[np.arange(x.shape[0]), c.start + k] = 1.0
        return out

    def decode(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Map encoded rows back to raw units under the public bounds.

        Numeric -> float64 (NaN where the missing indicator is set); categorical
        -> object array of category names (argmax level; ``None`` for an all-zero block).
        """
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"x must have shape (n, {self.n_features}), got {x.shape}")
        out: dict[str, np.ndarray] = {}
        for c in self.columns:
            if c.kind == "numeric":
                lo, hi = c.bounds  # type: ignore[misc]
                z = np.clip(x[:, c.start], 0.0, 1.0)
                v = (
                    lo + z * (hi - lo)
                    if c.transform == "linear"
                    else lo + np.expm1(z * math.log1p(hi - lo))
                )
                if c.nullable:
                    v = np.where(x[:, c.start + 1] >= 0.5, np.nan, v)
                out[c.name] = v
            else:
                block = x[:, c.slice]
                k = np.argmax(block, axis=1)
                names = np.array(c.levels, dtype=object)[k]
                names[block.max(axis=1) <= 0] = None
                out[c.name] = names
        return out


def _scale(v: np.ndarray, lo: float, hi: float, transform: str) -> np.ndarray:
    v = np.clip(v, lo, hi)
    if hi <= lo:
        return np.zeros_like(v)
    if transform == "log":
        return np.log1p(v - lo) / math.log1p(hi - lo)
    return (v - lo) / (hi - lo)
