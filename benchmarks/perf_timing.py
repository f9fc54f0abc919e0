"""Shared pieces of the perf benchmarks: the timing protocol, the row format, the data.

`benchmarks.perf`, `benchmarks.perf_loops` and `benchmarks.perf_gpu` all build
their rows from here (so none of them imports another for a helper).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "COLUMNS",
    "TARGETS",
    "block",
    "make_row",
    "matmul_roof",
    "mnist_like",
    "ratio_row",
    "ratio_spread",
    "time_calls",
    "time_interleaved",
    "timing",
]

TARGETS = {
    "structured_vs_loop": 100.0,
    "structured_vs_generic": 5.0,
    "structured_roof_fraction": 0.30,
    "dp_kip_vs_loop": 20.0,
    "scatternet_vs_numpy": 2.5,
    "gsm_vs_loop_n2000": 10.0,
    "memory_flat_rel": 0.15,
    "epoch_scan_vs_loop": 1.5,
}


# --------------------------------------------------------------------------- timing


def block(out: Any) -> Any:
    import jax

    return jax.block_until_ready(out)


def time_calls(fn: Callable[..., Any], repeats: int) -> dict[str, float]:
    """First call (compile + run) then ``repeats`` (>= 5) timed calls of ``fn()``.

    ``fn`` takes no arguments; its parameters, if any, have defaults (a loop
    variable bound as ``lambda c=c: ...``).

    ``median_s`` / ``min_s``: wall clock; ``cpu_s``: median process CPU time
    (all threads) -- on a shared, oversubscribed machine the wall clock includes
    time the process spent descheduled, CPU time does not.
    """
    t0 = time.perf_counter()
    block(fn())
    first = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(max(5, repeats)):
        c0 = time.process_time()
        t0 = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = statistics.median(times)
    return {
        "first_s": first,
        "median_s": med,
        "min_s": min(times),
        "cpu_s": statistics.median(cpu),
        "compile_s": max(0.0, first - med),
    }


def time_interleaved(fns: dict[str, Callable[..., Any]], repeats: int) -> dict[str, dict[str, Any]]:
    """`time_calls` for several ways of doing one job, run in turn: a first call of each, then
    ``repeats`` (>= 5) rounds that call every ``fn`` once, in the given order.

    On a shared, oversubscribed machine the speed of the process drifts (other jobs come
    and go, a descheduled thread of XLA's pool stalls the other one): timing a baseline's
    runs first and the fast path's afterwards measures each under another load, and their
    ratio moves by several times between two runs of the same code. Taken in turn, both
    see the same load. Each result has `time_calls`'s keys plus ``runs`` (the wall times in
    round order) for `ratio_spread`.
    """
    first: dict[str, float] = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        block(fn())
        first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(5, repeats)):
        for name, fn in fns.items():
            c0 = time.process_time()
            t0 = time.perf_counter()
            block(fn())
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    out: dict[str, dict[str, Any]] = {}
    for name in fns:
        med = statistics.median(times[name])
        out[name] = {
            "first_s": first[name],
            "median_s": med,
            "min_s": min(times[name]),
            "cpu_s": statistics.median(cpu[name]),
            "compile_s": max(0.0, first[name] - med),
            "runs": times[name],
        }
    return out


def ratio_spread(base: dict[str, Any], fast: dict[str, Any], scale: float = 1.0) -> str:
    """``"per-round ratio min-max"`` of two `time_interleaved` results (``scale`` times
    base / fast, round by round): how far the load moved the ratio during the run."""
    r = [scale * b / f for b, f in zip(base["runs"], fast["runs"], strict=True) if f > 0]
    return f"interleaved; per-round ratio {min(r):.3g}-{max(r):.3g}" if r else "interleaved"


def timing(t: dict[str, Any]) -> dict[str, float]:
    """A `time_interleaved` result without ``runs`` (the row's timing columns)."""
    return {k: v for k, v in t.items() if k != "runs"}


# the columns of every perf table, in order
COLUMNS = [
    "section",
    "case",
    "variant",
    "n",
    "k",
    "median_s",
    "cpu_s",
    "compile_s",
    "per_example_ms",
    "throughput",
    "gflops",
    "ratio",
    "ratio_cpu",
    "target",
    "meets",
    "baseline",
    "peak_mb",
    "working_mb",
    "data_mb",
    "note",
    "gpu_util_mean",
]


def make_row(section: str, case: str, variant: str, **kw: Any) -> dict[str, Any]:
    row = {"section": section, "case": case, "variant": variant}
    row.update(kw)
    return row


def ratio_row(
    section: str,
    case: str,
    variant: str,
    fast_s: float,
    base_s: float,
    *,
    target: float | None = None,
    baseline: str = "",
    **kw: Any,
) -> dict[str, Any]:
    """Row with ``ratio = base_s / fast_s`` (wall clock) and whether it meets ``target``."""
    ratio = base_s / fast_s if fast_s > 0 else float("nan")
    return make_row(
        section,
        case,
        variant,
        ratio=ratio,
        baseline=baseline,
        target=target,
        meets=None if target is None else bool(ratio >= target),
        **kw,
    )


def matmul_roof(repeats: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    n = 2048
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    t = time_calls(lambda: f(a, b), repeats)
    return {
        "gflops": 2 * n**3 / t["median_s"] / 1e9,
        "gflops_best": 2 * n**3 / t["min_s"] / 1e9,
        **t,
    }


# --------------------------------------------------------------------------- data


def mnist_like(n: int, data_dir: str | None, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    if data_dir:
        try:
            from privkernels.data import load

            ds = load("mnist", data_dir=data_dir, split="train")
            return np.asarray(ds.x[:n], np.float32), np.asarray(ds.y[:n], np.int32), "mnist"
        except Exception:  # noqa: BLE001 - fall back to synthetic data of the same shape
            pass
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 28, 28)).astype(np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    rng.shuffle(y)
    return x, y, "synthetic uniform (28x28)"
