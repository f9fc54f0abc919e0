"""Tables in and out: pandas DataFrames, column dicts and CSV files against a public schema.

A table is either a pandas DataFrame or a mapping ``column name -> 1-D array``
(``read_csv`` returns one, so pandas is optional). Everything here is
per-record and data-independent given the schema, except `infer_schema`,
which reads bounds and categories from the private table and says so
(`PrivacyLeakWarning`; the schema is marked ``source="data"`` and a fit on it
notes that in its `PrivacyReport`).

* `split_table`: the schema's columns and the label column, values checked
  against the public schema (numeric values outside their bounds and
  categories outside their lists are a ``ValueError`` naming the column and the
  count, never a value; nothing is clipped silently).
* `decoded_table`: generator output (`TabularSchema.decode`) back to raw
  values with the schema's dtypes: ``"int"`` columns rounded (pandas
  ``Int64`` when missing values are possible), missing categories ``None``.
* `to_frame`, `read_csv`, `write_csv`.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from privkernels._warnings import user_stacklevel
from privkernels.data.schema import (
    MISSING_LEVEL,
    MISSING_TOKENS,
    TabularSchema,
    categorical,
    numeric,
)
from privkernels.privacy.warnings import PrivacyLeakWarning

__all__ = [
    "as_columns",
    "decoded_table",
    "infer_schema",
    "read_csv",
    "split_table",
    "to_frame",
    "write_csv",
]


def as_columns(table: Any) -> dict[str, np.ndarray]:
    """``DataFrame`` or ``Mapping[str, array-like]`` -> ``{name: 1-D array}`` (same length).

    Numeric columns become float64 (missing -> NaN); other columns object arrays of
    ``str`` (missing -> ``""``).
    """
    if hasattr(table, "columns") and hasattr(table, "to_numpy"):  # a pandas DataFrame
        items = [(str(c), table[c].to_numpy()) for c in table.columns]
    elif isinstance(table, Mapping):
        items = [(str(k), np.asarray(v)) for k, v in table.items()]
    else:
        raise TypeError(
            f"a table is a pandas DataFrame or a mapping of columns, got {type(table).__name__}"
        )
    out: dict[str, np.ndarray] = {}
    n = None
    for name, col in items:
        if col.ndim != 1:
            raise ValueError(f"column {name!r} must be 1-D, got shape {col.shape}")
        n = len(col) if n is None else n
        if len(col) != n:
            raise ValueError(f"column {name!r} has {len(col)} rows, expected {n}")
        out[name] = _normalise(col)
    if not out or n == 0:
        raise ValueError("the table is empty")
    return out


def _normalise(col: np.ndarray) -> np.ndarray:
    return col.astype(np.float64) if col.dtype.kind in "biuf" else _tokens(col)


def _tokens(col: np.ndarray) -> np.ndarray:
    """Object array of canonical string tokens (missing -> ``""``, ``1.0`` -> ``"1"``)."""
    return np.array(["" if _missing(v) else _token(v) for v in col.tolist()], dtype=object)


def _numeric_values(col: np.ndarray, name: str) -> np.ndarray:
    if col.dtype != object:
        return col
    try:
        return np.array([np.nan if v in MISSING_TOKENS else float(v) for v in col], np.float64)
    except ValueError:
        pass  # refused below, outside the handler: float's error repeats the value
    raise ValueError(f"numeric column {name!r} holds non-numeric values") from None


def split_table(
    table: Any, schema: TabularSchema, *, label: bool = True
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The schema's feature columns (checked) and the label codes ``(n,)`` int32 (or None).

    Raises ``ValueError`` (before anything is released; the message names the column,
    never a value or a count from the data) on a missing column,
    non-finite or out-of-bounds numeric values, categories outside the public list,
    missing values in a column not declared nullable, or labels outside ``schema.classes``.
    """
    cols = as_columns(table)
    absent = [c.name for c in schema.columns if c.name not in cols]
    if label and schema.label not in cols:
        absent.append(schema.label)
    if absent:
        raise ValueError(f"the table lacks column(s) {absent} of the schema")
    feats: dict[str, np.ndarray] = {}
    for c in schema.columns:
        col = cols[c.name]
        if c.kind == "numeric":
            v = _numeric_values(col, c.name)
            _check_numeric(v, c)
            feats[c.name] = v
        else:
            s = col if col.dtype == object else _tokens(col)  # as_columns tokenised text already
            _check_categorical(s, c)
            feats[c.name] = s
    return feats, (_label_codes(cols[schema.label], schema) if label else None)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() in MISSING_TOKENS


def _token(v: Any) -> str:
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return str(int(v))  # 1.0 -> "1" for numeric-coded categories
    return str(v).strip()


def _check_numeric(v: np.ndarray, c: Any) -> None:
    miss = np.isnan(v)
    if np.isinf(v).any():
        raise ValueError(f"numeric column {c.name!r} holds non-finite values")
    if miss.any() and not c.nullable:
        raise ValueError(
            f"numeric column {c.name!r}: missing values but the schema does not declare it nullable"
        )
    lo, hi = c.bounds
    out = (~miss) & ((v < lo) | (v > hi))
    if out.any():
        raise ValueError(
            f"numeric column {c.name!r}: values outside the public bounds "
            f"[{lo:g}, {hi:g}] (fix the data or the schema; nothing is clipped silently)"
        )


def _check_categorical(s: np.ndarray, c: Any) -> None:
    miss = s == ""
    if miss.any() and not c.nullable:
        raise ValueError(
            f"categorical column {c.name!r}: missing values but the schema "
            "does not declare it nullable"
        )
    unseen = (~miss) & ~np.isin(s, np.array(c.categories, dtype=object))
    if unseen.any():
        raise ValueError(f"categorical column {c.name!r}: values outside the public category list")


def _label_codes(col: np.ndarray, schema: TabularSchema) -> np.ndarray:
    tokens = _tokens(col).tolist()
    if any(t == "" for t in tokens):
        raise ValueError(f"label column {schema.label!r} has missing values")
    if schema.classes:
        pos = {c: i for i, c in enumerate(schema.classes)}
        bad = sum(t not in pos for t in tokens)
        if bad:
            raise ValueError(f"label column {schema.label!r}: values outside the public classes")
        return np.array([pos[t] for t in tokens], np.int32)
    try:
        codes = np.array([int(t) for t in tokens], np.int64)
    except ValueError:
        codes = None  # refused below, outside the handler: int's error repeats the value
    if codes is None:
        raise ValueError(
            f"label column {schema.label!r} is not integer-coded: give the public classes in "
            "the schema ('classes')"
        ) from None
    if codes.min() < 0 or codes.max() >= 2**31:
        raise ValueError(f"label column {schema.label!r}: codes must lie in [0, 2^31)")
    return codes.astype(np.int32)


def decoded_table(
    x: np.ndarray, y: np.ndarray | None, schema: TabularSchema
) -> dict[str, np.ndarray]:
    """Encoded rows ``(n, d)`` (+ labels) -> raw columns with the schema's dtypes.

    ``"int"`` numeric columns are rounded to int64 (float with NaN when nullable);
    missing categories are ``None``; labels map to ``schema.classes`` when given.
    """
    dec = schema.decode(x)
    out: dict[str, np.ndarray] = {}
    for c in schema.columns:
        v = dec[c.name]
        if c.kind == "numeric" and c.dtype == "int":
            r = np.round(v)
            v = r if c.nullable else r.astype(np.int64)
        elif c.kind == "categorical":
            v = np.array([None if t == MISSING_LEVEL else t for t in v.tolist()], dtype=object)
        out[c.name] = v
    if y is not None:
        y = np.asarray(y)
        if schema.classes and all(_is_int_token(c) for c in schema.classes):
            out[schema.label] = np.array([int(c) for c in schema.classes], np.int64)[y]
        elif schema.classes:
            out[schema.label] = np.array(schema.classes, dtype=object)[y]
        else:
            out[schema.label] = y
    return out


def _is_int_token(t: str) -> bool:
    return t.lstrip("-").isdigit()


def to_frame(columns: Mapping[str, np.ndarray], schema: TabularSchema | None = None) -> Any:
    """A pandas DataFrame of ``columns`` (nullable ``"int"`` columns as ``Int64``)."""
    try:
        import pandas as pd  # optional output type, heavy: loaded on first use
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("DataFrames need pandas (a dependency of privkernels)") from err
    df = pd.DataFrame(dict(columns))
    if schema is not None:
        for c in schema.columns:
            if c.kind == "numeric" and c.dtype == "int" and c.nullable:
                df[c.name] = df[c.name].astype("Int64")
    return df


def infer_schema(
    table: Any, *, label: str, name: str = "table", max_categories: int = 50
) -> TabularSchema:
    """A schema read from the PRIVATE table: min/max bounds, observed categories, classes.

    Not differentially private: emits `PrivacyLeakWarning`, and the schema is
    marked ``source="data"`` so that a fit on it records that in its report.
    Write a public schema (``schema.save`` then edit) for a real release.
    Columns whose values all parse as numbers are numeric (``"int"`` when all are
    whole), unless they have at most 2 distinct values; others categorical (at most
    ``max_categories`` levels).
    """
    warnings.warn(
        "infer_schema reads bounds, categories and classes from the private data without "
        "noise; the release is not differentially private with respect to them",
        PrivacyLeakWarning,
        stacklevel=user_stacklevel(),
    )
    cols = as_columns(table)
    if label not in cols:
        raise ValueError(f"the table has no label column {label!r}")
    specs = []
    for cname, col in cols.items():
        if cname == label:
            continue
        tokens = _tokens(col)
        missing = tokens == ""
        present = tokens[~missing]
        try:
            vals = np.array([float(v) for v in present.tolist()], np.float64)
        except ValueError:
            vals = None
        if vals is not None and vals.size and np.unique(vals).size > 2:
            lo, hi = float(vals.min()), float(vals.max())
            hi = hi if hi > lo else lo + 1.0
            dtype: Literal["float", "int"] = "int" if np.all(vals == np.round(vals)) else "float"
            specs.append(numeric(cname, lo, hi, nullable=bool(missing.any()), dtype=dtype,
                                 note="inferred from the private data"))  # fmt: skip
            continue
        cats = sorted(set(present.tolist()))
        if len(cats) > max_categories:
            raise ValueError(
                f"column {cname!r} has more than {max_categories} categories; give a schema"
            )
        specs.append(categorical(cname, cats or ["?"], nullable=bool(missing.any()),
                                 note="inferred from the private data"))  # fmt: skip
    classes = sorted(set(_tokens(cols[label]).tolist()) - {""})
    return TabularSchema.from_columns(name, specs, label=label, classes=classes, source="data")


def read_csv(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """A UTF-8 CSV file with a header row -> ``{column: object array of str}`` (no pandas).

    A UTF-8 byte-order mark is dropped. Every refusal is a ``ValueError`` that names the
    file and the kind of problem, never a byte, a cell, a row number or a row count (the
    count is private under add-remove neighbours): text that is not UTF-8, a field over
    `csv.field_size_limit`, a header repeating a column name (refused before any data row
    is read), rows of the wrong length.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            _check_header(path, header)
            body = [r for r in reader if r]
    except UnicodeDecodeError:  # its message holds a byte of the file and its offset
        raise ValueError(f"{path} is not UTF-8 text (save the CSV as UTF-8)") from None
    except csv.Error as err:  # a field over the limit, or a NUL byte; the message is dropped
        what = "a field is longer than csv's field size limit" if "limit" in str(err) else (
            "csv cannot parse it")  # fmt: skip
        raise ValueError(f"{path} is not a readable CSV: {what}") from None
    if not body:
        raise ValueError(f"{path}: no data rows")
    if any(len(r) != len(header) for r in body):
        raise ValueError(f"{path}: some rows do not have {len(header)} fields")
    return {h: np.array([r[j].strip() for r in body], dtype=object) for j, h in enumerate(header)}


def _check_header(path: str | os.PathLike[str], header: list[str]) -> None:
    """A header row that names each column once (a dict of columns keeps one of each)."""
    if not header:
        raise ValueError(f"{path}: no header row")
    if len(set(header)) != len(header):
        raise ValueError(f"{path}: the header repeats a column name (each column needs its own)")


def write_csv(columns: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write columns as CSV (missing values -> empty fields)."""
    names = list(columns)
    n = len(columns[names[0]]) if names else 0
    p = Path(path)
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for i in range(n):
            w.writerow([_cell(columns[k][i]) for k in names])
    return p


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)
