"""``python -m benchmarks rerun FILE --seeds 0``: repeat a results file's run and compare.

A table run writes a ``rerun`` block into its JSON (table, profile, seeds, ``--set``
options). This module runs that table again for the given seeds and compares each row's
``value`` with the recorded one. Rows are matched on their identifying fields: every field
that is not a float or a list of floats (dataset, metric, seed, sizes, ...) plus the float
settings (``epsilon``, ``delta``, ``corrupt_fraction`` and every ``hp_*``); any other float
or list of floats (a table's per-seed means) is a measurement. Two rows of one file with
the same identifying fields are refused, not matched arbitrarily.
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

from benchmarks.common import is_float_list
from benchmarks.registry import RunContext

__all__ = ["command_of", "compare_rows", "load_rerun", "row_key", "run_spec"]

#: Float fields that identify a row, besides every ``hp_*`` setting (every other float is a
#: measurement or a paper number). Table 4's rows differ only in ``corrupt_fraction``.
_FLOAT_KEYS = ("epsilon", "delta", "corrupt_fraction")
#: Fields of a row averaged over seeds that summarise those seeds (the number of fits, the
#: least sample count of Fig. 1's beta-close mechanism): left out when a subset is rerun.
_OVER_SEEDS = ("runs", "k")


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
    return isinstance(value, float) or is_float_list(value)


def row_key(row: dict[str, Any], *, without: Sequence[str] = ()) -> tuple[Any, ...]:
    """The identifying fields of ``row`` (sorted ``(name, value)`` pairs), less ``without``."""
    keep = {k: v for k, v in row.items() if k not in without and _identifies(k, v)}
    return tuple(sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in keep.items()))


def _identifies(name: str, value: Any) -> bool:
    return not _measured(value) or name in _FLOAT_KEYS or name.startswith("hp_")


def _unique_keys(rows: list[dict[str, Any]], what: str) -> None:
    """Refuse ``rows`` in which two share their identifying fields (`row_key`), or two
    seedless rows share them less `_OVER_SEEDS` (the key a subset rerun matches on): a match
    between files would then pick one of them arbitrarily."""
    keys = [row_key(r) for r in rows]
    loose = [row_key(r, without=_OVER_SEEDS) for r in rows if "seed" not in r]
    if len(set(keys)) != len(keys) or len(set(loose)) != len(loose):
        raise SystemExit(
            f"two {what} rows share every identifying field, so rows cannot be matched: "
            "give the table a field that tells them apart"
        )


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


def _subset_target(
    row: dict[str, Any], seeds: Sequence[int], recorded_seeds: Sequence[int] | None
) -> tuple[float, float] | None:
    """For a row that averages over seeds and gives ``seed_values`` (one per recorded seed):
    the mean of the rerun seeds' recorded values and the spread of all of them; else None."""
    per_seed = row.get("seed_values")
    if "seed" in row or recorded_seeds is None or not isinstance(per_seed, list):
        return None
    if len(per_seed) != len(recorded_seeds) or not set(seeds) <= set(recorded_seeds):
        return None
    picked = [float(per_seed[list(recorded_seeds).index(s)]) for s in seeds]
    spread = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
    return float(np.mean(picked)), spread


def compare_rows(
    recorded: list[dict[str, Any]],
    new: list[dict[str, Any]],
    seeds: Sequence[int],
    *,
    k: float = 3.0,
    atol: float = 1e-3,
    recorded_seeds: Sequence[int] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Each recorded row of ``seeds`` (all rows when they carry no seed) beside its rerun.

    Returns ``(comparison rows, ok)``: ``ok`` when every such row has a rerun row with the
    same key whose ``value`` is within ``max(k * spread, atol)``. A row that averages over
    the file's seeds (``recorded_seeds``) and gives ``seed_values`` is compared, for a
    subset of those seeds, with the mean of their recorded values (fields that summarise the
    seeds, ``_OVER_SEEDS``, are left out of the match).
    """
    _unique_keys(recorded, "recorded")
    _unique_keys(new, "rerun")
    fresh = {row_key(r): r for r in new}
    loose = {row_key(r, without=_OVER_SEEDS): r for r in new if "seed" not in r}
    out, ok = [], True
    for row in recorded:
        if "seed" in row and row["seed"] not in seeds:
            continue
        if not _is_number(row.get("value")):
            continue
        subset = _subset_target(row, seeds, recorded_seeds)
        if subset is None:
            twin = fresh.get(row_key(row))
            target, tol = float(row["value"]), max(k * _spread(recorded, row), atol)
        else:
            twin = loose.get(row_key(row, without=_OVER_SEEDS))
            target, tol = subset[0], max(k * subset[1], atol)
        value = twin.get("value") if twin is not None else None
        good = _is_number(value) and abs(float(value) - target) <= tol  # type: ignore[arg-type]
        ok &= good
        line: dict[str, Any] = {
            n: row[n]
            for n in ("dataset", "metric", "epsilon", "corrupt_fraction", "seed")
            if n in row
        }
        line.update(recorded=target, rerun=value, tolerance=tol, ok=good)
        out.append(line)
    return out, ok and bool(out)
