"""``perf --paper-cells``: option checks before anything runs, the compile clock, the cell
limit (the cell's whole process group is stopped), and what a row claims."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import pytest

from benchmarks import perf_gpu
from benchmarks.__main__ import main


def test_compile_clock_counts_compilations_and_removes_its_listener():
    from jax._src import monitoring

    before = len(monitoring._event_duration_secs_listeners)
    with perf_gpu.CompileClock() as clock:
        jax.jit(lambda x: jnp.cos(x) * 3.0 + 0.5)(jnp.arange(7.0)).block_until_ready()
    assert clock.compiles >= 1 and clock.seconds["compile"] > 0.0
    assert clock.total == pytest.approx(sum(clock.seconds.values()))
    assert len(monitoring._event_duration_secs_listeners) == before


_CACHED = """
import sys, jax, jax.numpy as jnp, privkernels
from benchmarks.perf_gpu import CompileClock
privkernels.enable_compilation_cache(sys.argv[1], min_compile_time_secs=0.0)
with CompileClock() as clock:
    jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.0)(jnp.ones((8, 8))).block_until_ready()
print(clock.compiles, clock.cache_hits)
"""


def test_compile_clock_counts_programs_read_from_a_persistent_cache(tmp_path):
    """A second process with the same cache reads its program instead of compiling it."""

    def run():
        out = subprocess.run([sys.executable, "-c", _CACHED, str(tmp_path / "cache")],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return [int(v) for v in out.stdout.split()]

    compiles, hits = run()
    assert compiles >= 1 and hits == 0
    compiles_again, hits_again = run()
    assert compiles_again == compiles and hits_again >= 1


@pytest.mark.parametrize(
    "items, match",
    [
        (["epochs=2"], "CELL.option=value"),
        (["kip_nothing.epochs=2"], "CELL.option=value"),
        (["kip_input.epochs"], "CELL.option=value"),
        (["kip_input.=3"], "CELL.option=value"),
        (["kip_input.not_an_option=3"], "unknown --set option"),
        (["dp_ntk.epochs=3"], "unknown --set option"),  # a DP-KIP key on the DP-NTK cell
        (["kip_feature.chunk_size=abc"], "integer >= 1"),  # a performance-only key: checked
        (["kip_feature.chunk_size=0"], "integer >= 1"),
        (["kip_feature.chunk_size=-5"], "integer >= 1"),
    ],
)
def test_bad_cell_options_are_refused_before_anything_runs(items, match):
    with pytest.raises(SystemExit, match=match):
        perf_gpu.parse_overrides(items)


def test_cli_refuses_unknown_cells_and_cell_options_without_paper_cells(tmp_path):
    with pytest.raises(SystemExit, match="unknown cell"):
        main(["perf", "--paper-cells", "--cells", "kip_feature,nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--paper-cells only"):
        main(["perf", "--set", "kip_input.epochs=1", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_paper_cells_on_the_gpu_refuse_without_one(tmp_path):
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is visible: the refusal path cannot be exercised here")
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        main(["perf", "--device", "gpu", "--paper-cells", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_only_performance_options_keep_a_row_the_papers_cell():
    assert perf_gpu._variant({}) == ("paper settings", True)
    assert perf_gpu._variant({"chunk_size": "500"}) == ("paper settings; chunk_size=500", True)
    text, paper = perf_gpu._variant({"chunk_size": "500", "epochs": "1"})
    assert not paper and text.startswith("NOT the paper cell")
    row = perf_gpu._stopped_row("kip_input", {"epochs": "1"}, "stopped")
    assert row["target"] is None and row["meets"] is None  # a shortened cell claims no target
    row = perf_gpu._stopped_row("kip_input", {}, "stopped")
    assert row["target"] == 90.0 and row["meets"] is False and row.get("median_s") is None


def test_a_cell_past_its_limit_is_stopped_with_its_process_group(tmp_path, capsys):
    """The limit kills the cell's process and what it started (the utilisation sampler)."""
    t0 = time.perf_counter()
    rows = perf_gpu.bench_paper_cells(None, cells=("dp_ntk",), cell_timeout=1.0)
    assert time.perf_counter() - t0 < 30.0
    assert len(rows) == 1 and "not finished" in rows[0]["note"]
    assert rows[0]["meets"] is False and rows[0].get("median_s") is None
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[perf] row")]
    assert json.loads(printed[0].split(" ", 2)[2])["note"] == rows[0]["note"]
    left = subprocess.run(
        ["pgrep", "-f", "benchmarks.perf_gpu --cell dp_ntk"], capture_output=True, text=True
    )
    assert left.stdout.strip() == ""


def _cells_running(tag):
    out = subprocess.run(["pgrep", "-f", f"benchmarks.perf_gpu --cell dp_ntk --json {tag}"],
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.split()


def test_a_stopped_run_stops_its_running_cell(tmp_path):
    """SIGTERM to the runner (an outer ``timeout``) also ends the cell, which runs in a
    session of its own that the signal to the runner's group does not reach."""
    tag = str(tmp_path / "cells")
    runner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from benchmarks.perf_gpu import bench_paper_cells; "
         "bench_paper_cells(None, cells=('dp_ntk',)); sys.exit(3)"],
        env={**os.environ, "TMPDIR": tag},
    )  # fmt: skip
    os.makedirs(tag, exist_ok=True)
    deadline = time.monotonic() + 60
    while not _cells_running(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _cells_running(tag), "the cell never started"
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while _cells_running(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _cells_running(tag) == []


def test_the_child_refuses_a_cell_it_does_not_know(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.perf_gpu", "--cell", "nope", "--json", str(tmp_path / "r")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode != 0 and "invalid choice" in out.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_shortened_cell_runs_end_to_end_on_the_cpu(tmp_path):
    """A DP-KIP feature-space cell cut to one epoch, in its own process, through the CLI: its
    row has the compile split and the accuracy, and claims no target."""
    rc = main([
        "perf", "--paper-cells", "--cells", "kip_feature", "--out", str(tmp_path),
        "--set", "kip_feature.epochs=1", "--set", "kip_feature.max_test=500",
    ])  # fmt: skip
    assert rc == 0
    data = json.loads((tmp_path / "cpu-paper-cells.json").read_text())
    (row,) = data["rows"]
    assert row["n"] == 120 and row["variant"].startswith("NOT the paper cell")
    assert 0.0 < row["compile_s"] < row["median_s"] and row["target"] is None
    assert "KRR test accuracy" in row["note"] and data["meta"]["unfinished"] == []
    assert "--paper-cells" in data["provenance"]["command"]


def test_a_named_commit_wins_over_a_stale_git_copy(monkeypatch):
    """On a lent machine the tree's ``.git`` may read an older commit than the code copied
    there; the commit the caller names is recorded, and what ``.git`` said beside it."""
    from benchmarks.common import provenance

    monkeypatch.delenv("BENCHMARKS_GIT_COMMIT", raising=False)
    head = provenance(None)["git_commit"]
    if not head:
        pytest.skip("this copy of the tree has no .git")
    assert provenance(None)["git_commit_source"] == "git"
    monkeypatch.setenv("BENCHMARKS_GIT_COMMIT", head[:7])  # the same commit: git's view stands
    same = provenance(None)
    assert same["git_commit"] == head and same["git_commit_source"] == "git"
    monkeypatch.setenv("BENCHMARKS_GIT_COMMIT", "0123abc")
    named = provenance(None)
    assert named["git_commit"] == "0123abc" and named["git_commit_source"] == "environment"
    assert named["git_dirty"] is None and named["git_head_seen"] == head
