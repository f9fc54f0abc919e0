"""``python -m benchmarks perf --device gpu``: the GPU table and its paper-profile cells.

The GPU run times the same sections as the CPU one (every figure a ratio against
a baseline in the same process) and adds ``paper_cells``: whole benchmark-table
cells at the papers' settings and delta 1e-5, end to end (data loading,
compilation, training, evaluation). ``perf --paper-cells`` runs only those:

* ``kip_feature``: DP-KIP-ScatterNet, MNIST, 10 images/class, eps=1 (Appendix D:
  30 epochs of batch 500, 3600 steps), clipped in feature space (target 30 s);
* ``kip_input``: the same clipped in the paper's input space (target 90 s);
* ``dp_ntk``: DP-NTK Table 2, MNIST, eps=1 (Appendix A: fc_1l width 800, 2000
  iterations of batch 5000), LogReg and MLP accuracy (target 60 s).

Each cell runs in its own process (``python -m benchmarks.perf_gpu --cell``), so
its compilations are its own and its peak device memory is its own; a cell that
passes ``cell_timeout`` is stopped and its row says so. A row holds the wall time,
split into compilation (JAX's tracing, lowering and backend-compile events, summed
by `CompileClock`) and the rest; the peak device memory (``peak_bytes_in_use``);
``nvidia-smi``'s ``utilization.gpu`` over the cell (the fraction of each 200 ms
period in which at least one kernel ran, not SM occupancy); and the accuracy beside
the paper's. A cell with ``--set`` overrides is not the paper's cell: its row says
so and claims no target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax

from benchmarks.common import resolve_data_dir, write_results
from benchmarks.perf_timing import make_row
from benchmarks.registry import RunContext, load_all
from privkernels import enable_compilation_cache


def require_gpu() -> str:
    """The GPU's name; ``SystemExit`` with the reason when JAX sees no GPU."""
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        raise SystemExit(
            "perf --device gpu: JAX sees no GPU (default backend "
            f"{jax.default_backend()!r}, devices {[str(d) for d in jax.devices()]}). "
            "Install a CUDA JAX (pip install 'privkernels[cuda]') on a machine with a GPU, "
            "or run `python -m benchmarks perf` for the CPU table."
        )
    return f"{len(gpus)} x {gpus[0].device_kind}"


class UtilSampler:
    """Samples ``nvidia-smi`` GPU utilisation (%) in the background while a block runs."""

    def __init__(self, period_ms: int = 200) -> None:
        self.period_ms = period_ms
        self.samples: list[float] = []
        self._proc: subprocess.Popen[str] | None = None
        self._log: Any = None

    def __enter__(self) -> UtilSampler:
        exe = shutil.which("nvidia-smi")
        if exe is not None:
            self._log = tempfile.TemporaryFile("w+")
            self._proc = subprocess.Popen(
                [exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", str(self.period_ms)],
                stdout=self._log, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._log.seek(0)
        for line in self._log.read().splitlines():
            try:
                self.samples.append(float(line.split(",")[0]))
            except ValueError:
                continue
        self._log.close()

    def summary(self) -> str:
        if self._proc is None:
            return "utilisation: nvidia-smi not found"
        if not self.samples:
            return "utilisation: no nvidia-smi samples"
        s = sorted(self.samples)
        mean = sum(s) / len(s)
        return f"GPU utilisation mean {mean:.0f}%, median {s[len(s) // 2]:.0f}% ({len(s)} samples)"

    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


class CompileClock:
    """Sums JAX's compilation events while a block runs: seconds per phase and a count.

    Phases: ``trace`` (Python to jaxpr), ``lower`` (jaxpr to MLIR), ``compile`` (the
    backend's compiler, or the read of a program found in a persistent compilation cache:
    ``cache_hits`` counts those). The listeners are removed on exit.
    """

    _PHASES = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def __init__(self) -> None:
        self.seconds = {"trace": 0.0, "lower": 0.0, "compile": 0.0}
        self.compiles = 0
        self.cache_hits = 0

    def _hit(self, event: str, **_: str | int) -> None:
        self.cache_hits += event == "/jax/compilation_cache/cache_hits"

    def _listen(self, event: str, duration_secs: float, **_: str | int) -> None:
        phase = self._PHASES.get(event)
        if phase is not None:
            self.seconds[phase] += float(duration_secs)
            self.compiles += phase == "compile"

    def __enter__(self) -> CompileClock:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        jax.monitoring.register_event_listener(self._hit)
        return self

    def __exit__(self, *exc: Any) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)
        jax.monitoring.unregister_event_listener(self._hit)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


class Cell(NamedTuple):
    """One paper-profile table cell: the table, its ``--set`` options, the time target."""

    table: str
    options: dict[str, str]
    target_s: float
    title: str


_KIP = {"datasets": "mnist", "kernels": "scatternet", "epsilons": "1", "spc": "10"}
CELLS: dict[str, Cell] = {
    "kip_feature": Cell(
        "dp-kip-table2", {**_KIP, "clip_space": "feature"}, 30.0,
        "DP-KIP-ScatterNet MNIST 10/class eps=1, feature space",
    ),
    "kip_input": Cell(
        "dp-kip-table2", {**_KIP, "clip_space": "input"}, 90.0,
        "DP-KIP-ScatterNet MNIST 10/class eps=1, input space",
    ),
    "dp_ntk": Cell(
        "dp-ntk-table2", {"datasets": "mnist", "epsilons": "1"}, 60.0,
        "DP-NTK Table 2 MNIST eps=1",
    ),
}  # fmt: skip


def parse_overrides(items: list[str]) -> dict[str, dict[str, str]]:
    """``["kip_input.epochs=2", ...]`` -> ``{"kip_input": {"epochs": "2"}}``, each key checked
    against its cell's table (``SystemExit`` before anything runs)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        cell, dot, option = key.strip().partition(".")
        if not sep or not dot or cell not in CELLS or not option:
            raise SystemExit(
                f"--set for --paper-cells expects CELL.option=value with CELL one of "
                f"{', '.join(CELLS)}, got {item!r}"
            )
        out.setdefault(cell, {})[option] = value.strip()
        if option in PERF_ONLY and not (value.strip().isdigit() and int(value) >= 1):
            raise SystemExit(f"--set {cell}.{option} must be an integer >= 1")
    tables = load_all()
    for cell, opts in out.items():
        tables[CELLS[cell].table].check_options({**CELLS[cell].options, **opts})
    return out


def _peak_device_mb() -> float | None:
    stats = jax.local_devices()[0].memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


def _accuracy(cell: Cell, rows: list[dict[str, Any]]) -> tuple[str, int, float]:
    """(accuracy beside the paper's, steps or iterations, seconds the table timed)."""
    r = rows[0]
    if cell.table == "dp-ntk-table2":
        acc = {x["metric"]: (x["value"], x["paper_value"]) for x in rows}
        (lr, plr), (mlp, pmlp) = acc["logreg_accuracy"], acc["mlp_accuracy"]
        text = f"LogReg {lr:.3f} / MLP {mlp:.3f} (paper {plr} / {pmlp})"
        return text, int(r["iterations"]), float(r["seconds"])
    text = f"KRR test accuracy {r['value']:.2f}% (paper {r['paper_value']}), eps spent {r['eps_spent']:.4f}"
    return text, int(r["steps"]), float(r["seconds"])


def measure_cell(
    name: str, data_dir: str | None, overrides: dict[str, str], cache: str | None = None
) -> dict[str, Any]:
    """Run one cell in this process and return its row (see the module docstring).

    ``cache``: a persistent compilation cache directory (`privkernels.enable_compilation_cache`)
    the cell reads and fills; a second run of the same cell then reads its programs.
    """
    if cache is not None:
        enable_compilation_cache(cache)
    cell = CELLS[name]
    opts = {**cell.options, **overrides}
    table = load_all()[cell.table]
    table.check_options(opts)
    ctx = RunContext(
        profile="paper", seeds=(0,), data_dir=resolve_data_dir(data_dir),
        out=Path(tempfile.mkdtemp(prefix="paper-cell-")), options=opts,
    )  # fmt: skip
    with UtilSampler() as util, CompileClock() as clock:
        t0 = time.perf_counter()
        rows = table.run(ctx)
        wall = time.perf_counter() - t0
    text, steps, timed = _accuracy(cell, rows)
    variant, paper = _variant(overrides)
    variant += f"; compilation cache ({clock.cache_hits} programs read)" if cache else ""
    util_mean = util.mean()
    return make_row(
        "paper_cells", cell.title, variant,
        n=steps, median_s=wall, compile_s=clock.total, run_s=wall - clock.total,
        compile_phases={k: round(v, 2) for k, v in clock.seconds.items()},
        compiles=clock.compiles, cache_hits=clock.cache_hits, setup_s=wall - timed, throughput=steps / wall,
        busy_s=None if util_mean is None else wall * util_mean / 100.0,
        peak_mb=_peak_device_mb(), gpu_util_mean=util_mean,
        target=cell.target_s if paper else None, meets=(wall <= cell.target_s) if paper else None,
        note=f"{text}; compile {clock.total:.1f} s in {clock.compiles} programs, "
        f"data loading and setup {wall - timed:.1f} s; {util.summary()}",
    )  # fmt: skip


PROTOCOL = (
    "one run per cell, each in its own process (cold compilation); median_s = wall time of the "
    "table's run (data loading, compilation, training, evaluation); compile_s = JAX trace + "
    "lowering + backend-compile events; run_s = the rest; setup_s = what the table did not time "
    "(data loading, preprocessing); peak_mb = the device's peak_bytes_in_use; gpu_util_mean = "
    "nvidia-smi utilization.gpu every 200 ms over the whole cell; busy_s = median_s x "
    "gpu_util_mean / 100, an estimate of the seconds a kernel ran (the rest of run_s is host "
    "work, transfers and waiting)"
)

#: ``--set`` keys that change how a cell is computed, not what: the row stays the paper's cell.
PERF_ONLY = frozenset({"chunk_size"})


def _variant(overrides: dict[str, str]) -> tuple[str, bool]:
    """(the row's variant text, whether it is still the paper's cell)."""
    changed = {k: v for k, v in overrides.items() if k not in PERF_ONLY}
    text = ", ".join(f"{k}={v}" for k, v in overrides.items())
    if changed:
        return f"NOT the paper cell: {text}", False
    return f"paper settings{'; ' + text if text else ''}", True


def _stopped_row(name: str, overrides: dict[str, str], why: str) -> dict[str, Any]:
    cell = CELLS[name]
    variant, paper = _variant(overrides)
    return make_row(
        "paper_cells", cell.title, variant,
        target=cell.target_s if paper else None, meets=False if paper else None, note=why,
    )  # fmt: skip


def bench_paper_cells(
    data_dir: str | None,
    *,
    cells: tuple[str, ...] = tuple(CELLS),
    overrides: dict[str, dict[str, str]] | None = None,
    cell_timeout: float | None = None,
    cache: str | None = None,
) -> list[dict[str, Any]]:
    """Each cell in its own process, one after another; a row per cell (printed as it ends).

    ``overrides``: per-cell ``--set`` options (a shortened cell is not the paper's).
    ``cell_timeout``: seconds after which a cell's process group is killed; its row says so.
    ``cache``: a persistent compilation cache directory every cell reads and fills.
    """
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)  # an outer `timeout` too
    try:
        return _run_cells(data_dir, cells, overrides or {}, cell_timeout, cache)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_cells(
    data_dir: str | None,
    cells: tuple[str, ...],
    overrides: dict[str, dict[str, str]],
    cell_timeout: float | None,
    cache: str | None,
) -> list[dict[str, Any]]:
    rows = []
    for name in cells:
        own = overrides.get(name, {})
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "row.json"
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.perf_gpu",
                "--cell",
                name,
                "--json",
                str(target),
            ]
            cmd += (
                ["--data-dir", str(resolve_data_dir(data_dir))]
                if data_dir or os.environ.get("PRIVKERNELS_DATA")
                else []
            )
            cmd += [f"--set={name}.{k}={v}" for k, v in own.items()]
            cmd += ["--compilation-cache", cache] if cache else []
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, start_new_session=True)
            try:
                rc = proc.wait(timeout=cell_timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:  # past its limit, or this process stopped (SIGTERM: `_stop_on_sigterm`)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if rc == 0 and target.exists():
                row = json.loads(target.read_text())
                row["process_s"] = time.perf_counter() - t0
            elif rc is None:
                row = _stopped_row(
                    name, own, f"stopped at the {cell_timeout:.0f} s cell limit: not finished"
                )
            else:
                row = _stopped_row(
                    name, own, f"the cell's process failed (exit status {rc}); see the log"
                )
        print(f"[perf] row {json.dumps(row, default=str)}", flush=True)
        rows.append(row)
    return rows


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM as ``SystemExit``: `bench_paper_cells` then kills the running cell's group
    (a cell runs in its own session, out of reach of a signal sent to this one's group)."""
    raise SystemExit(128 + signum)


def _device_slug() -> str:
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return "cpu"
    kind = gpus[0].device_kind.lower().replace("nvidia", "").strip()
    return "gpu-" + "".join(c for c in kind.split()[0] if c.isalnum())


def run_paper_cells(
    *,
    out: Path,
    data_dir: str | None,
    device: str,
    cells: tuple[str, ...] = tuple(CELLS),
    overrides: dict[str, dict[str, str]] | None = None,
    cell_timeout: float | None = None,
    cache: str | None = None,
    command: str = "",
) -> int:
    """``perf --paper-cells``: the cells, one file ``{device}-paper-cells.{json,md}`` under ``out``.

    ``device="gpu"`` refuses (``SystemExit``) unless JAX sees a GPU. Returns 0, or 1
    when a cell did not finish.
    """
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        raise SystemExit(
            f"--cells: unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}"
        )
    gpu_name = require_gpu() if device == "gpu" else None
    t0 = time.perf_counter()
    name = f"{_device_slug() if device == 'gpu' else 'cpu'}-paper-cells"
    columns = ["case", "variant", "n", "median_s", "compile_s", "run_s", "busy_s", "setup_s",
               "throughput", "peak_mb", "gpu_util_mean", "target", "meets", "note"]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for cell in cells:  # the file is rewritten after each cell: a stopped run keeps its rows
        rows += bench_paper_cells(
            data_dir, cells=(cell,), overrides=overrides, cell_timeout=cell_timeout, cache=cache
        )
        meta = {
            "device": gpu_name or "cpu",
            "jax_backend": f"{jax.default_backend()} (jax {jax.__version__})",
            "cells": list(cells),
            "overrides": overrides or {},
            "cell_timeout_s": cell_timeout,
            "compilation_cache": cache,
            "total_seconds": round(time.perf_counter() - t0, 1),
            "protocol": PROTOCOL,
            "unfinished": [r["case"] for r in rows if r.get("median_s") is None]
            + [CELLS[c].title for c in cells[len(rows) :]],
        }  # fmt: skip
        _, mpath = write_results(out, name, rows, meta=meta, columns=columns, command=command)
    print(mpath.read_text())
    return 1 if meta["unfinished"] else 0


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.perf_gpu")
    p.add_argument("--cell", required=True, choices=tuple(CELLS))
    p.add_argument("--json", required=True)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--compilation-cache", default=None)
    args = p.parse_args(argv)
    own = parse_overrides(args.set).get(args.cell, {})
    row = measure_cell(args.cell, args.data_dir, own, args.compilation_cache)
    Path(args.json).write_text(json.dumps(row, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
