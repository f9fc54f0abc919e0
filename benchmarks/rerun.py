"""``python -m benchmarks rerun FILE --seeds 0``: repeat a results file's run and compare.

A table run writes a ``rerun`` block into its JSON (table, profile, seeds, ``--set``
options). This module runs that table again for the given seeds and compares each row's
``value`` with the recorded one. Rows are matched on their identifying fields: every field
that is not a float or a list of floats (dataset, metric, seed, sizes, ...) plus
``epsilon`` and ``delta``; a list of floats (a table's per-seed means) is a measurement.
A row passes when the two values differ by at most ``max(k * spread, atol)``: ``spread``
is the standard deviation of the recorded values of that cell over its seeds (rows that
differ only in ``seed``), or the row's ``value_std`` for a row that is already a mean over
seeds, or 0 when the file has one seed. Same seed and same code give the same numbers up
to floating-point differences between machines, which ``atol`` covers.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.registry import RunContext

__all__ = ["command_of", "compare_rows", "load_rerun", "row_key", "run_spec"]

#: Float fields that identify a row (every other float is a measurement or a paper number).
_FLOAT_KEYS = ("epsilon", "delta")


def command_of(spec: dict[str, Any]) -> str:
    """The shell command of a table run described by ``spec`` (a ``rerun`` block)."""
    argv = ["python", "-m", "benchmarks", "run", spec["table"], "--profile", spec["profile"]]
    argv += ["--seeds", *(str(s) for s in spec["seeds"])]
    for k, v in sorted(spec["options"].items()):
        argv += ["--set", f"{k}={v}"]
    return shlex.join(argv)


def run_spec(table: str, ctx: RunContext) -> dict[str, Any]:
    """The ``rerun`` block a results file records for ``table`` run under ``ctx``."""
    return {
        "table": table,
        "profile": ctx.profile,
        "seeds": list(ctx.seeds),
        "options": dict(ctx.options),
    }


def load_rerun(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(rerun block, rows)`` of the results file at ``path``; a file without one is refused."""
    payload = json.loads(Path(path).read_text())
    spec = payload.get("rerun") if isinstance(payload, dict) else None
    if not spec:
        raise SystemExit(
            f"{path} records no rerun block (written before the block existed, or by another "
            "program): regenerate it with its table's command first"
        )
    return spec, list(payload["rows"])


def _measured(value: Any) -> bool:
    """A float, or a non-empty list of floats: a measurement, not part of a row's identity."""
    if isinstance(value, list) and value:
        return all(isinstance(v, float) for v in value)
    return isinstance(value, float)


def row_key(row: dict[str, Any], *, without: Sequence[str] = ()) -> tuple[Any, ...]:
    """The identifying fields of ``row`` (sorted ``(name, value)`` pairs), less ``without``."""
    keep = {
        k: v for k, v in row.items() if k not in without and (not _measured(v) or k in _FLOAT_KEYS)
    }
    return tuple(sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in keep.items()))


def _spread(recorded: list[dict[str, Any]], row: dict[str, Any]) -> float:
    """Seed spread of ``row``'s cell in ``recorded``: the standard deviation over the cell's
    other seeds (over all of them when fewer than two others), so an outlying recorded value
    does not widen its own tolerance; a mean row's ``value_std``; else 0."""
    if "seed" not in row:
        return float(row.get("value_std") or 0.0)
    cell = row_key(row, without=("seed",))
    same = [r for r in recorded if row_key(r, without=("seed",)) == cell]
    values = [float(r["value"]) for r in same if _is_number(r.get("value"))]
    others = [
        float(r["value"])
        for r in same
        if r.get("seed") != row["seed"] and _is_number(r.get("value"))
    ]
    pick = others if len(others) > 1 else values
    return float(np.std(pick, ddof=1)) if len(pick) > 1 else 0.0


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def compare_rows(
    recorded: list[dict[str, Any]],
    new: list[dict[str, Any]],
    seeds: Sequence[int],
    *,
    k: float = 3.0,
    atol: float = 1e-3,
) -> tuple[list[dict[str, Any]], bool]:
    """Each recorded row of ``seeds`` (all rows when they carry no seed) beside its rerun.

    Returns ``(comparison rows, ok)``: ``ok`` when every such row has a rerun row with the
    same key whose ``value`` is within ``max(k * spread, atol)``.
    """
    fresh = {row_key(r): r for r in new}
    out, ok = [], True
    for row in recorded:
        if "seed" in row and row["seed"] not in seeds:
            continue
        if not _is_number(row.get("value")):
            continue
        twin = fresh.get(row_key(row))
        tol = max(k * _spread(recorded, row), atol)
        value = twin.get("value") if twin is not None else None
        good = _is_number(value) and abs(float(value) - float(row["value"])) <= tol  # type: ignore[arg-type]
        ok &= good
        line: dict[str, Any] = {
            n: row[n] for n in ("dataset", "metric", "epsilon", "seed") if n in row
        }
        line.update(recorded=row["value"], rerun=value, tolerance=tol, ok=good)
        out.append(line)
    return out, ok and bool(out)
