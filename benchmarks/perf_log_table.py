"""Rebuild a perf table from the ``[perf] row {...}`` lines of one or more perf logs.

A perf run stopped at a hard limit (a lent GPU's device time) writes no table, but it
prints each row as its section ends. This collects those rows, in log order, into
``NAME.md`` and ``NAME.json`` under ``--out``. The machine is not this one, so the
header is the caller's: ``--header FILE`` holds the prose (device, versions, limits).

    python -m benchmarks.perf_log_table perf.log perf2.log --name gpu-h200-perf \\
        --header header.md --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from benchmarks.common import markdown_table
from benchmarks.perf_timing import COLUMNS

_ROW = re.compile(r"^\[perf\] row (\{.*\})\s*$")
_DONE = re.compile(r"^\[perf\] (\w+) done in ([0-9.]+) s")


def read_logs(paths: list[Path]) -> tuple[list[dict], dict[str, float]]:
    """Rows (dicts, log order) and each finished section's wall seconds (last wins)."""
    rows: list[dict] = []
    seconds: dict[str, float] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if m := _ROW.match(line):
                rows.append(json.loads(m.group(1)))
            elif m := _DONE.match(line):
                seconds[m.group(1)] = float(m.group(2))
    return rows, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--header", type=Path, required=True, help="Markdown prose put above the table")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    rows, seconds = read_logs(args.logs)
    if not rows:
        raise SystemExit(f"no '[perf] row' lines in {', '.join(map(str, args.logs))}")
    args.out.mkdir(parents=True, exist_ok=True)
    sections = "".join(f"- `{k}`: {v:.1f} s\n" for k, v in seconds.items())
    md = f"# {args.name}\n\n{args.header.read_text().strip()}\n\n"
    md += f"Wall time of each finished section (compilation included):\n\n{sections}\n"
    (args.out / f"{args.name}.md").write_text(md + markdown_table(rows, COLUMNS))
    payload = {"table": args.name, "logs": [p.name for p in args.logs]}
    payload |= {"section_seconds": seconds, "rows": rows}
    (args.out / f"{args.name}.json").write_text(json.dumps(payload, indent=2))
    print(f"{len(rows)} rows from {len(seconds)} sections -> {args.out / args.name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
