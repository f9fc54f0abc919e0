"""``python -m benchmarks``: list, run a paper table, demo, perf."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    markdown_table,
    provenance,
    resolve_data_dir,
    shrink_png,
    write_results,
)
from benchmarks.merge import merge_parts
from benchmarks.registry import RunContext, load_all
from benchmarks.rerun import command_of, compare_rows, load_rerun, run_spec
from privkernels.data.base import DatasetNotFoundError


def _parse_set(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Regenerate the papers' tables, run the demo, or measure performance (run it from the repository's root: the benchmarks package is not installed).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the available tables")

    p_run = sub.add_parser("run", help="run one or more paper tables")
    p_run.add_argument("tables", nargs="+", help="table names (see the list command)")
    p_run.add_argument(
        "--profile",
        choices=("quick", "paper"),
        default="quick",
        help="quick: shorter runs for this CPU; paper: the paper's settings (default: quick)",
    )
    p_run.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="seeds to average over (default: 0)"
    )
    p_run.add_argument(
        "--data-dir", default=None, help="data directory (default: $PRIVKERNELS_DATA)"
    )
    p_run.add_argument(
        "--out",
        default="results",
        help="output directory (default: ./results; the committed tables live in benchmarks/results)",
    )
    p_run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a table option (repeatable)",
    )

    p_demo = sub.add_parser("demo", help="run all three methods on sklearn's digits (no download)")
    p_demo.add_argument(
        "--out", default="demo-output", help="output directory (default: demo-output)"
    )
    p_demo.add_argument(
        "--epsilon", type=float, default=1.0, help="each release's epsilon (default: 1)"
    )
    p_demo.add_argument(
        "--delta", type=float, default=1e-5, help="each release's delta (default: 1e-05)"
    )
    p_demo.add_argument(
        "--seed", type=int, default=0, help="int seed of the noise keys (default: 0)"
    )

    p_perf = sub.add_parser("perf", help="performance benchmarks (ratios vs in-process baselines)")
    p_perf.add_argument(
        "--quick", action="store_true", help="the short suite (default: the full one)"
    )
    p_perf.add_argument("--out", default="results", help="output directory (default ./results)")
    p_perf.add_argument(
        "--data-dir", default=None, help="data directory (default: $PRIVKERNELS_DATA)"
    )
    p_perf.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: pin JAX to the CPU (perf-quick/perf-full); gpu: require a GPU (perf-gpu) (default: cpu)",
    )
    p_perf.add_argument(
        "--paper-cells",
        action="store_true",
        help="only the paper-profile cells, each end to end in its own process "
        "({device}-paper-cells.json/md; see benchmarks/perf_gpu.py)",
    )
    p_perf.add_argument(
        "--cells",
        default="kip_feature,kip_input,dp_ntk",
        help="with --paper-cells: which cells, comma-separated (default: all three)",
    )
    p_perf.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CELL.KEY=VALUE",
        help="with --paper-cells: a table option for one cell (the row then says it is not the paper's cell)",
    )
    p_perf.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        help="with --paper-cells: seconds after which a cell is stopped (default: none)",
    )
    p_perf.add_argument(
        "--compilation-cache",
        default=None,
        metavar="DIR",
        help="with --paper-cells: a persistent compilation cache the cells read and fill "
        "(a second run then starts warm; default: none, every cell compiles cold)",
    )

    p_rerun = sub.add_parser(
        "rerun", help="re-run a results file's table for some seeds and compare its rows"
    )
    p_rerun.add_argument(
        "file", help="a results JSON written by the run command (it holds a rerun block)"
    )
    p_rerun.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="seeds to re-run (default: 0)"
    )
    p_rerun.add_argument(
        "--data-dir", default=None, help="data directory (default: $PRIVKERNELS_DATA)"
    )
    p_rerun.add_argument(
        "--out",
        default="rerun-output",
        help="where the rerun's own files go (default: rerun-output)",
    )
    p_rerun.add_argument(
        "--k", type=float, default=3.0, help="tolerance in seed spreads (default 3)"
    )
    p_rerun.add_argument("--atol", type=float, default=1e-3, help="least tolerance (default 1e-3)")

    p_merge = sub.add_parser(
        "merge", help="join per-seed results files of one table run into one file"
    )
    p_merge.add_argument("out", help="output directory of the joined JSON and Markdown")
    p_merge.add_argument("parts", nargs="+", help="results JSON files (one run each)")
    p_merge.add_argument(
        "--force", action="store_true", help="replace an existing joined file in OUT"
    )

    p_thumb = sub.add_parser(
        "thumbnails", help="rewrite PNGs as small thumbnails (committed grids: at most 60 KB)"
    )
    p_thumb.add_argument("paths", nargs="+", help="PNG files or directories holding them")

    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except DatasetNotFoundError as err:  # one clear line, no traceback
        print(f"missing data: {err}", file=sys.stderr)
        print(
            "set PRIVKERNELS_DATA or --data-dir to a directory holding the files "
            "(see the data sources page of the docs)",
            file=sys.stderr,
        )
        return 2


def _dispatch(args: argparse.Namespace) -> int:

    if args.command == "list":
        tables = load_all()
        if not tables:
            print("no tables registered")
        for name, t in sorted(tables.items()):
            print(f"{name:32s} {t.description}")
        return 0

    if args.command == "run":
        tables = load_all()
        unknown = [t for t in args.tables if t not in tables]
        if unknown:
            print(
                f"unknown table(s): {', '.join(unknown)}; available: {', '.join(sorted(tables))}",
                file=sys.stderr,
            )
            return 2
        ctx = RunContext(
            profile=args.profile,
            seeds=tuple(args.seeds),
            data_dir=resolve_data_dir(args.data_dir),
            out=Path(args.out),
            options=_parse_set(args.set),
        )
        for name in args.tables:
            tables[name].check_options(ctx.options)  # before anything runs
        for name in args.tables:
            t0, started = time.perf_counter(), provenance(command_of(run_spec(name, ctx)))
            rows = tables[name].run(ctx)
            _write_table(name, ctx, rows, time.perf_counter() - t0, started)
        return 0

    if args.command == "rerun":
        return _rerun(args)

    if args.command == "merge":
        return _merge(args)

    if args.command == "thumbnails":
        return _thumbnails(args.paths)

    if args.command == "demo":
        from benchmarks.demo import run_demo

        return run_demo(out=Path(args.out), epsilon=args.epsilon, delta=args.delta, seed=args.seed)

    if args.command == "perf":
        if args.device == "cpu" and "jax" not in sys.modules:
            os.environ["JAX_PLATFORMS"] = "cpu"  # the CPU table measures the CPU
        if args.paper_cells:
            from benchmarks.perf_gpu import parse_overrides, run_paper_cells

            overrides = parse_overrides(args.set)  # checked before anything runs
            return run_paper_cells(
                out=Path(args.out),
                data_dir=resolve_data_dir(args.data_dir),
                device=args.device,
                cells=tuple(c for c in args.cells.split(",") if c),
                overrides=overrides,
                cell_timeout=args.cell_timeout,
                cache=args.compilation_cache,
                command=shlex.join(["python", "-m", "benchmarks", *sys.argv[1:]])
                if sys.argv[1:2] == ["perf"]
                else "python -m benchmarks perf --paper-cells",
            )
        if args.set or args.cell_timeout is not None or args.compilation_cache:
            raise SystemExit(
                "--set, --cell-timeout and --compilation-cache apply to --paper-cells only"
            )
        from benchmarks.perf import run_perf

        return run_perf(
            quick=args.quick,
            out=Path(args.out),
            data_dir=resolve_data_dir(args.data_dir),
            device=args.device,
        )

    return 2


def _write_table(
    name: str, ctx: RunContext, rows: list[dict[str, Any]], seconds: float, started: dict[str, Any]
) -> Path:
    """Write a table run's JSON and Markdown (with the command that regenerates them and the
    `provenance` taken as it ``started``)."""
    meta = {"profile": ctx.profile, "seeds": list(ctx.seeds), "total_seconds": seconds,
            **ctx.options}  # fmt: skip
    spec = run_spec(name, ctx)
    jpath, mpath = write_results(ctx.out, f"{name}-{ctx.profile}", rows, meta=meta,
                                 command=command_of(spec), rerun=spec, started=started)  # fmt: skip
    print(mpath.read_text())
    print(f"wrote {jpath} and {mpath}")
    # Free this table's compiled programs: each XLA:CPU executable holds
    # memory maps, and a long run of tables can reach vm.max_map_count.
    import jax  # imported here: `perf` picks the platform before jax loads

    jax.clear_caches()
    return jpath


def _rerun(args: argparse.Namespace) -> int:
    """``python -m benchmarks rerun FILE --seeds S``: 0 when every row is within tolerance."""
    spec, _ = load_rerun(Path(args.file))
    tables = load_all()
    if spec["table"] not in tables:
        print(f"{args.file}: unknown table {spec['table']!r}", file=sys.stderr)
        return 2
    table = tables[spec["table"]]
    ctx = RunContext(profile=spec["profile"], seeds=tuple(args.seeds),
                     data_dir=resolve_data_dir(args.data_dir), out=Path(args.out),
                     options=dict(spec["options"]))  # fmt: skip
    table.check_options(ctx.options)
    t0, started = time.perf_counter(), provenance(command_of(run_spec(spec["table"], ctx)))
    rows = table.run(ctx)
    _write_table(spec["table"], ctx, rows, time.perf_counter() - t0, started)
    _, recorded = load_rerun(Path(args.file))
    comparison, ok = compare_rows(recorded, rows, ctx.seeds, k=args.k, atol=args.atol,
                                  recorded_seeds=spec.get("seeds"))  # fmt: skip
    print(markdown_table(comparison))
    print("rerun matches the file" if ok else "rerun DIFFERS from the file (rows marked False)")
    return 0 if ok else 1


def _merge(args: argparse.Namespace) -> int:
    """``python -m benchmarks merge OUT PART ...``: the joined file (`benchmarks.merge`).

    Nothing is written unless the table is registered and its ``after_merge`` hook (what
    its run writes besides the rows, e.g. a summary; written first) succeeds.
    """
    cmd = shlex.join(["python", "-m", "benchmarks", "merge", args.out, *args.parts])
    joined = merge_parts([Path(p) for p in args.parts], cmd)
    out = Path(args.out)
    if any(Path(p).resolve().parent == out.resolve() for p in args.parts):
        raise SystemExit(f"{out} holds one of the parts: write the joined file elsewhere")
    target = out / f"{joined['name']}.json"
    if target.exists() and not args.force:
        raise SystemExit(f"{target} exists: pass --force to replace it")
    table = load_all().get(joined["spec"]["table"])
    if table is None:
        raise SystemExit(f"the parts name an unknown table {joined['spec']['table']!r}")
    hook = getattr(importlib.import_module(table.module), "after_merge", None)
    if hook is not None:
        try:
            print(f"wrote {hook(out, joined['rows'], joined['spec'])}")
        except (KeyError, TypeError, ValueError) as err:
            raise SystemExit(
                f"the parts' rows do not fit {table.name}'s summary ({err!r})"
            ) from None
    meta = {**joined["meta"], "assembled_by": cmd,
            "parts": "; ".join(p["command"] for p in joined["provenance"]["assembled_from"])}  # fmt: skip
    jpath, mpath = write_results(Path(args.out), joined["name"], joined["rows"], meta=meta,
                                 command=joined["provenance"]["command"], rerun=joined["spec"],
                                 started=joined["provenance"], machine=joined["machine"],
                                 created=joined["created"])  # fmt: skip
    print(f"wrote {jpath} and {mpath}")
    return 0


def _thumbnails(paths: list[str]) -> int:
    """``python -m benchmarks thumbnails``: shrink every PNG under ``paths`` in place."""
    files = [f for p in map(Path, paths) for f in (sorted(p.rglob("*.png")) if p.is_dir() else [p])]
    for f in files:
        before = f.stat().st_size
        shrink_png(f)
        print(f"{f}: {before / 1e3:.0f} KB -> {f.stat().st_size / 1e3:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
