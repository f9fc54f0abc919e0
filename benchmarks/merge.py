"""``python -m benchmarks merge OUT PART.json ...``: one results file from per-seed runs.

A table run with ``--seeds 0``, another with ``--seeds 1`` ... (one process each, side by
side to use more cores or one after another) give one file each. `merge_parts` joins them
into the file that ``--seeds 0 1 ...`` in one process would have written, and refuses
anything else: every part must record a ``rerun`` block for the same table, profile and
``--set`` options, the same clean git commit and package versions, and seeds no other part
has. The joined file's ``command`` is the one-process command over all the seeds (it
regenerates the file; ``rerun`` repeats it), ``assembled_from`` lists each part's command
and time, and ``assembled_by`` the merge command; its machine is the parts' (which must
agree) and its ``created`` the span of theirs. Rows keep their order within a run; runs
(a part, or each run a merged part lists) are taken in the order of their first seed, so a table that loops over epsilon outside its
seeds has the same rows as one process but grouped by seed. A part must name its seeds
consistently (command, rerun block, rows), give every row a seed (tables that average over
seeds cannot be merged). A part may itself be a merged file: it joins as the runs it was
made of, whose ``assembled_from`` entries are carried over (each marked ``merged_by`` with
the merge that made it), so a committed file can gain seeds without re-running its own.
Parts from a copy without ``.git`` (a lent GPU machine: ``git_dirty`` unknown) are refused
too.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.rerun import command_of

__all__ = ["merge_parts"]

#: A seed as ``--seeds`` takes it.
SEED = re.compile(r"-?[0-9]+")
#: A table or profile name: it becomes part of the joined file's name, so no path parts.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")


def _part(path: Path) -> tuple[dict[str, Any], list[tuple[dict[str, Any], list[int]]]]:
    """One part and the runs it stands for (`_runs_of`), refused (``SystemExit``, one line)
    unless it is one per-seed table run or a merged file whose runs make it up."""
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"{path}: cannot read a results file ({type(err).__name__})") from None
    if not isinstance(payload, dict) or not payload.get("rerun") or not payload.get("provenance"):
        raise SystemExit(f"{path}: not a table run's results file (no rerun block or provenance)")
    spec = payload["rerun"]
    names = (spec.get("table"), spec.get("profile"))
    if not all(isinstance(n, str) and NAME.fullmatch(n) for n in names) or payload.get(
        "table"
    ) != "-".join(names):
        raise SystemExit(f"{path}: its table and profile are not one run's names")
    if not isinstance(spec.get("seeds"), list) or payload["provenance"].get(
        "command"
    ) != command_of(spec):
        raise SystemExit(f"{path}: its command and its rerun block disagree")
    if not isinstance(payload.get("machine"), dict) or not payload["machine"]:
        raise SystemExit(f"{path}: no machine block (where it ran is unknown)")
    rows = payload.get("rows") or []
    if not rows or any("seed" not in r for r in rows):
        raise SystemExit(
            f"{path}: a row without a seed (a table that averages over seeds cannot be merged)"
        )
    if {r["seed"] for r in rows} != set(spec["seeds"]):
        raise SystemExit(f"{path}: its rows' seeds are not the seeds its run names")
    runs = _runs_of(payload)
    if not runs:
        raise SystemExit(f"{path}: a merged file whose runs (assembled_from) do not make it up")
    return payload, runs


def _runs_of(payload: dict[str, Any]) -> list[tuple[dict[str, Any], list[int]]]:
    """The runs a part stands for, each ``(entry, seeds)``: a merged file's
    ``assembled_from`` entries (marked with the merge that made them), or the part's own
    command and time. ``[]`` for a merged file whose entries do not add up to its command:
    each must be a ``--seeds`` command of the file's table and options with at least one
    seed and a ``created`` time, and together they name the file's seeds once each."""
    prov, spec = payload["provenance"], payload["rerun"]
    if "assembled_by" not in prov:
        total = payload.get("meta", {}).get("total_seconds")
        entry = {"command": prov.get("command"), "created": payload.get("created"),
                 "total_seconds": total}  # fmt: skip
        return [(entry, list(spec["seeds"]))]
    runs = prov.get("assembled_from")
    if not isinstance(runs, list) or not runs:
        return []
    if not all(isinstance(r, dict) and isinstance(r.get("command"), str) for r in runs):
        return []
    if not all(isinstance(r.get("created"), str) for r in runs):
        return []
    seeds = [_seeds_of(r["command"]) for r in runs]
    if not all(seeds) or sorted(s for ss in seeds for s in ss) != sorted(spec["seeds"]):
        return []
    pairs = list(zip(runs, seeds, strict=True))
    if any(r["command"] != command_of({**spec, "seeds": ss}) for r, ss in pairs):
        return []  # its runs' commands do not add up to its own
    merged_by = prov["assembled_by"]
    return [({**r, "merged_by": r.get("merged_by", merged_by)}, ss) for r, ss in pairs]


def _seeds_of(command: str) -> list[int]:
    """The seeds a ``python -m benchmarks run`` command names after ``--seeds`` (``[]``
    when it names none or cannot be read)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    if "--seeds" not in words:
        return []
    rest = words[words.index("--seeds") + 1 :]
    taken = rest[: next((i for i, w in enumerate(rest) if w.startswith("--")), len(rest))]
    if not all(SEED.fullmatch(w) for w in taken):
        return []
    return [int(w) for w in taken]


def _same(parts: list[dict[str, Any]], paths: Sequence[Path]) -> None:
    """Refuse parts of different runs (``SystemExit`` naming the field)."""
    first = parts[0]
    for p, path in zip(parts[1:], paths[1:], strict=True):
        for field in ("table", "profile", "options"):
            if p["rerun"][field] != first["rerun"][field]:
                raise SystemExit(f"{path}: its {field} differs from {paths[0]}'s")
        for field in ("git_commit", "versions"):
            if p["provenance"].get(field) != first["provenance"].get(field):
                raise SystemExit(f"{path}: its {field} differs from {paths[0]}'s")
        if p.get("machine") != first.get("machine"):
            raise SystemExit(f"{path}: it ran on another machine than {paths[0]}")
    for p, path in zip(parts, paths, strict=True):
        if p["provenance"].get("git_dirty") is not False:
            raise SystemExit(f"{path}: ran on uncommitted or unknown code (git_dirty is not false)")


def merge_parts(paths: Sequence[Path], merge_command: str) -> dict[str, Any]:
    """The joined payload of the per-seed results files at ``paths`` (at least two).

    Returns ``{"name", "rows", "meta", "spec", "provenance", "machine", "created"}`` for
    `write_results`: the parts' machine, and the span of their ``created`` times.
    """
    if len(paths) < 2:
        raise SystemExit("merge needs at least two results files")
    read = [_part(Path(p)) for p in paths]
    parts = [payload for payload, _ in read]
    _same(parts, paths)
    runs = [
        (entry, seeds, [r for r in part["rows"] if r["seed"] in seeds])
        for part, part_runs in read
        for entry, seeds in part_runs
    ]
    flat = [s for _, seeds, _ in runs for s in seeds]
    if len(set(flat)) != len(flat):
        raise SystemExit(f"the parts share seeds: {flat}")
    runs.sort(key=lambda run: min(run[1]))  # a merged part's runs interleave with the others
    spec = {**parts[0]["rerun"], "seeds": [s for _, seeds, _ in runs for s in seeds]}
    provenance = {
        **parts[0]["provenance"],
        "command": command_of(spec),
        "assembled_by": merge_command,
        "assembled_from": [entry for entry, _, _ in runs],
    }
    meta = {**parts[0].get("meta", {}), "seeds": spec["seeds"],
            "total_seconds": "per part: see provenance.assembled_from (one process each)"}  # fmt: skip
    rows = [r for _, _, rows in runs for r in rows]
    created = sorted(str(r.get("created")) for r in provenance["assembled_from"])
    return {"name": parts[0]["table"], "rows": rows, "meta": meta, "spec": spec,
            "provenance": provenance, "machine": parts[0].get("machine"),
            "created": f"{created[0]} to {created[-1]} (parts)"}  # fmt: skip
