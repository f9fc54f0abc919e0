"""Marginal fidelity of a synthetic table: total variation of its 1-way and 2-way marginals
and the mass it puts at the public bounds of its numeric columns.

The measures are those the marginal-based synthesizers are judged by (McKenna, Miklau and
Sheldon, "Winning the NIST Contest", JPC 2021: the NIST 2018 Differential Privacy Synthetic
Data Challenge scored the L1 distance of k-way marginals, twice their total variation):
for two distributions ``p`` and ``q`` over the same finite set,
``TV(p, q) = 0.5 * sum |p - q|``, in ``[0, 1]``.

Both tables are read in the encoding of a public `TabularSchema`, and discretised with
public information only (the schema and the parameters below), never with anything read
from either table:

* a numeric column: ``bins`` equal-width bins of its scaled range ``[0, 1]`` (values
  clipped to it; 16 bins, as the MST/AIM peers encode it), plus one cell "missing" for a
  ``nullable`` column whose indicator is ``>= 0.5``;
* a categorical column: its one-hot levels (the argmax of the block when the block's
  largest entry exceeds 0.5), plus one cell "missing" for an all-zero block;
* the label: one cell per class, as one more column.

Mass at a bound (`bound_shares`): a value is *at the lower bound* of its numeric column
when its scaled value ``z`` (clipped to ``[0, 1]``) satisfies ``z <= 0.5 / bound_steps``,
and *at the upper bound* when ``z >= 1 - 0.5 / bound_steps``: ``z`` rounds to 0 or to 1
at a resolution of ``1 / bound_steps`` of the public range (default 100 steps). For an
integer-valued linear column whose public range is at most ``bound_steps`` units wide
(adult's age 17..90, hours-per-week 1..99) that is exactly "equals the bound" for integer
values (age == 17); for a rate recorded in hundredths it is "equals 0 / 1". A missing
value (nullable column, indicator ``>= 0.5``) is at neither bound; shares are over all rows.

Everything here is plain NumPy and reads both tables without noise: it is an evaluation
of a release against the data it was made from, for a report on that release, not a
release itself; `marginal_report` emits a `PrivacyLeakWarning` saying so.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from privkernels._validation import check_array, check_int, check_labels
from privkernels._warnings import warn_privacy_leak
from privkernels.data.schema import TabularSchema

__all__ = [
    "bound_shares",
    "column_codes",
    "marginal_report",
    "one_way_tv",
    "total_variation",
    "two_way_tv",
]


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """``0.5 * sum |p/sum(p) - q/sum(q)|`` of two count (or probability) vectors of one shape.

    Args:
      p, q: non-negative arrays of the same shape, each with a positive sum.

    Returns the total variation distance of the two normalised distributions, in ``[0, 1]``.
    """
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have one shape, got {p.shape} and {q.shape}")
    if p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("p and q must each have a positive total")
    return float(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())


def _check_table(x: Any, y: Any, schema: TabularSchema, n_classes: int, name: str) -> tuple:
    """``(x (n, d) float, y (n,) int64)`` validated against the schema (x keeps its float
    dtype: no copy of a large table); messages hold no value."""
    x = np.asarray(check_array(x, f"x_{name}", ndim=2))
    if x.shape[1] != schema.n_features:
        raise ValueError(
            f"x_{name} has {x.shape[1]} columns but schema {schema.name!r} encodes "
            f"{schema.n_features}"
        )
    y = np.asarray(check_labels(y, n_classes, f"y_{name}", n_rows=x.shape[0]), np.int64)
    return x, y


def column_codes(
    x: np.ndarray, y: np.ndarray, schema: TabularSchema, *, n_classes: int, bins: int = 16
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Discretise encoded rows into one integer cell per schema column, plus the label.

    Args:
      x: ``(n, schema.n_features)`` float rows in the schema's encoding.
      y: ``(n,)`` int labels in ``[0, n_classes)``.
      schema: the public schema of the table.
      n_classes: number of label classes (public).
      bins: equal-width bins of each numeric column's scaled range ``[0, 1]``.

    Returns ``(codes (k + 1, n) int64, cards (k + 1,) int64, names)``, one row of codes per
    column (column-major, so a column is contiguous): ``codes[j]`` lies in
    ``[0, cards[j])``; the last row is the label (named ``schema.label``).
    """
    bins = check_int(bins, "bins", minimum=1)
    x, y = _check_table(x, y, schema, n_classes, "table")
    return _codes(x, y, schema, n_classes, bins)


def _codes(
    x: np.ndarray, y: np.ndarray, schema: TabularSchema, n_classes: int, bins: int
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """`column_codes` of rows already validated."""
    codes = np.empty((len(schema.columns) + 1, x.shape[0]), np.int64)
    cards = []
    for j, c in enumerate(schema.columns):
        if c.kind == "numeric":
            z = np.clip(x[:, c.start], 0.0, 1.0)
            codes[j] = np.minimum(np.floor(z * bins), bins - 1)
            if c.nullable:
                codes[j, x[:, c.start + 1] >= 0.5] = bins
            cards.append(bins + (1 if c.nullable else 0))
        else:
            block = x[:, c.slice]
            width = c.stop - c.start
            codes[j] = np.where(block.max(axis=1) > 0.5, block.argmax(axis=1), width)
            cards.append(width + 1)
    codes[-1] = y
    cards.append(int(n_classes))
    return codes, np.asarray(cards, np.int64), (*schema.column_names, schema.label)


def one_way_tv(real: np.ndarray, synth: np.ndarray, cards: np.ndarray) -> np.ndarray:
    """Total variation of each column's marginal: ``(k,)`` float64.

    ``real`` ``(k, n)`` and ``synth`` ``(k, m)`` are cell codes from `column_codes` (the
    same ``cards`` ``(k,)``).
    """
    return np.array(
        [
            total_variation(
                np.bincount(real[j], minlength=card), np.bincount(synth[j], minlength=card)
            )
            for j, card in enumerate(cards.tolist())
        ]
    )


def two_way_tv(real: np.ndarray, synth: np.ndarray, cards: np.ndarray) -> np.ndarray:
    """Total variation of the joint marginal of every pair of columns ``i < j``.

    Same inputs as `one_way_tv`; returns ``(k * (k - 1) / 2,)`` float64 in the order of
    ``itertools.combinations(range(k), 2)``.
    """
    real, synth = np.ascontiguousarray(real), np.ascontiguousarray(synth)
    out = []
    for i, j in combinations(range(len(cards)), 2):
        size = int(cards[i] * cards[j])
        cell_r = real[i] * cards[j] + real[j]
        cell_s = synth[i] * cards[j] + synth[j]
        out.append(
            total_variation(
                np.bincount(cell_r, minlength=size), np.bincount(cell_s, minlength=size)
            )
        )
    return np.asarray(out, np.float64)


def bound_shares(
    x: np.ndarray, schema: TabularSchema, *, bound_steps: int = 100
) -> dict[str, tuple[float, float]]:
    """Share of rows at the lower and at the upper public bound of each numeric column.

    Args:
      x: ``(n, schema.n_features)`` float rows in the schema's encoding.
      schema: the public schema.
      bound_steps: resolution of the test: at the lower bound when the scaled value is
        ``<= 0.5 / bound_steps``, at the upper when ``>= 1 - 0.5 / bound_steps`` (the
        module docstring gives the definition; missing values are at neither).

    Returns ``{column name: (share at lower, share at upper)}``, shares in ``[0, 1]``.
    """
    steps = check_int(bound_steps, "bound_steps", minimum=1)
    x = np.asarray(check_array(x, "x", ndim=2))
    if x.shape[1] != schema.n_features:
        raise ValueError(f"x has {x.shape[1]} columns but the schema encodes {schema.n_features}")
    return _shares(x, schema, 0.5 / steps)


def _shares(x: np.ndarray, schema: TabularSchema, tol: float) -> dict[str, tuple[float, float]]:
    """`bound_shares` of rows already validated, with the tolerance ``tol`` on the scaled axis."""
    out = {}
    for c in schema.numeric_columns:
        z = x[:, c.start]
        present = x[:, c.start + 1] < 0.5 if c.nullable else np.ones(len(z), bool)
        out[c.name] = (
            float(np.mean(present & (z <= tol))),
            float(np.mean(present & (z >= 1.0 - tol))),
        )
    return out


def _bound_excess(real: dict, synth: dict) -> dict[str, Any]:
    """Per column and side, synthetic minus real share in percentage points; and the largest."""
    rows = {
        name: {
            "real_lower": real[name][0], "real_upper": real[name][1],
            "synth_lower": synth[name][0], "synth_upper": synth[name][1],
            "excess_lower_pp": 100.0 * (synth[name][0] - real[name][0]),
            "excess_upper_pp": 100.0 * (synth[name][1] - real[name][1]),
        }
        for name in real
    }  # fmt: skip
    worst: dict[str, Any] = {"max_bound_excess_pp": None, "max_bound_column": None}
    for name, r in rows.items():
        for side in ("lower", "upper"):
            v = r[f"excess_{side}_pp"]
            if worst["max_bound_excess_pp"] is None or v > worst["max_bound_excess_pp"]:
                worst = {"max_bound_excess_pp": v, "max_bound_column": f"{name} ({side})"}
    if worst["max_bound_excess_pp"] is not None and worst["max_bound_excess_pp"] <= 0:
        worst["max_bound_column"] = None  # no column has more mass at a bound than the real
    return {"bounds": rows, **worst}


def _mean_or_nan(v: np.ndarray) -> float:
    return float(v.mean()) if v.size else float("nan")


def marginal_report(
    x_real: Any,
    y_real: Any,
    x_synth: Any,
    y_synth: Any,
    schema: TabularSchema,
    *,
    n_classes: int,
    bins: int = 16,
    bound_steps: int = 100,
) -> dict[str, Any]:
    """1-way and 2-way marginal total variation and bound mass of a synthetic table.

    Args:
      x_real, y_real: ``(n, d)`` float and ``(n,)`` int: the real rows (schema encoding).
      x_synth, y_synth: ``(m, d)`` float and ``(m,)`` int: the synthetic rows.
      schema: the public schema (``d == schema.n_features``).
      n_classes: number of label classes (public).
      bins: equal-width bins per numeric column (see `column_codes`).
      bound_steps: resolution of the at-a-bound test (see `bound_shares`).

    Returns a dict: ``tv1`` ``{column: TV}`` (label included, under ``schema.label``),
    ``tv1_mean`` (over all columns and the label), ``tv1_categorical_mean`` and
    ``tv1_numeric_mean`` (over the columns of that kind; nan when there are none),
    ``tv2_mean`` (mean over all pairs of columns, label included), ``bounds``
    ``{numeric column: real/synth shares at each bound and the excess in percentage
    points}``, ``max_bound_excess_pp`` and ``max_bound_column`` (``"name (side)"``; None
    when no column has more mass at a bound than the real table; both None when the schema
    has no numeric column). Mismatched widths or lengths, non-finite
    values or labels outside ``[0, n_classes)`` raise ValueError naming no value.

    The real table is read without noise, so a `PrivacyLeakWarning` is emitted: the report
    judges a release, it is not one (publish it only where the real data may be shown).
    """
    x_real, y_real = _check_table(x_real, y_real, schema, n_classes, "real")
    x_synth, y_synth = _check_table(x_synth, y_synth, schema, n_classes, "synth")
    warn_privacy_leak("marginal_report: the real table's marginals and shares at its bounds")
    bins = check_int(bins, "bins", minimum=1)
    tol = 0.5 / check_int(bound_steps, "bound_steps", minimum=1)
    real, cards, names = _codes(x_real, y_real, schema, n_classes, bins)
    synth, _, _ = _codes(x_synth, y_synth, schema, n_classes, bins)
    tv1 = one_way_tv(real, synth, cards)
    tv2 = two_way_tv(real, synth, cards)
    shares_r, shares_s = _shares(x_real, schema, tol), _shares(x_synth, schema, tol)
    kinds = np.array([c.kind for c in schema.columns] + ["label"])
    return {
        "tv1": dict(zip(names, tv1.tolist(), strict=True)),
        "tv1_mean": float(tv1.mean()),
        "tv1_categorical_mean": _mean_or_nan(tv1[kinds == "categorical"]),
        "tv1_numeric_mean": _mean_or_nan(tv1[kinds == "numeric"]),
        "tv2_mean": _mean_or_nan(tv2),
        **_bound_excess(shares_r, shares_s),
    }
