"""Old code vs new code, side by side: which side of a perf ratio moved.

A perf ratio (``benchmarks/perf.py``) is a baseline's time over our path's time in one
process; when it falls, either side may have moved. This times both sides of three
headline ratios with the library of two source trees, in separate processes that
alternate tree by tree, round by round (the machine's load drifts; alternation lets
both trees see the same load), and reports each side's median over the rounds:

* ``gram``: the FC-NTK Gram-form clipped sum at ``b=500, m=100`` (one jitted step,
  noise included) vs the per-example loop (jitted ``grad`` of one target's loss,
  clip, accumulate; timed on 6 targets, scaled to ``b``), as in ``perf.py``'s
  ``dp_kip`` section;
* ``entk_fc2l``: the structured e-NTK mean embedding of ``fc_2l(800, 800)`` on 2000
  rows vs the per-example ``jax.grad`` loop (8 rows, scaled), as in the ``entk``
  section;
* ``scatternet``: ``scatternet_features`` on 256 images vs kymatio's numpy backend,
  as in the ``scatternet`` section.

Each child process makes one warm-up call per side, then ``--reps`` rounds calling the
baseline and our path in turn (``perf_timing.time_interleaved``'s protocol), and prints
the two medians (wall and CPU seconds). The child imports only ``privkernels`` (from
``PYTHONPATH``), jax, numpy and kymatio, so it runs against an old tree whose API
differs (both spellings of the Gram-form function are looked up).

Usage::

    git worktree add /tmp/old b76ca57
    python -m benchmarks.perf_compare --tree old=/tmp/old/src --tree new=src \\
        --cases gram entk_fc2l scatternet --rounds 5 --out benchmarks/results/perf-compare.md

``--data-dir`` (default ``$PRIVKERNELS_DATA``) gives MNIST rows to both trees (a
synthetic uniform stand-in when absent); the rows are written once to a temporary
``.npz`` and read by every child, so both trees see the same inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CASES = ("gram", "entk_fc2l", "scatternet")
#: per case: (baseline label, our path's label, rows the baseline runs, rows it is scaled to)
LABELS = {
    "gram": ("per-example grad loop", "Gram-form clipped sum (b=500, m=100)", 6, 500),
    "entk_fc2l": ("per-example jax.grad loop", "structured e-NTK fc_2l(800,800)", 8, 2000),
    "scatternet": ("kymatio numpy", "scatternet_features (256 images)", 256, 256),
}


# --------------------------------------------------------------------------- child side


def _block(out: Any) -> Any:
    import jax

    return jax.block_until_ready(out)


def _interleaved(base: Callable[[], Any], fast: Callable[[], Any], reps: int) -> dict[str, Any]:
    """Warm-up call of each, then ``reps`` rounds calling ``base`` then ``fast``."""
    _block(base())
    _block(fast())
    out: dict[str, list[float]] = {"base": [], "fast": [], "base_cpu": [], "fast_cpu": []}
    for _ in range(reps):
        for name, fn in (("base", base), ("fast", fast)):
            c0, t0 = time.process_time(), time.perf_counter()
            _block(fn())
            out[name].append(time.perf_counter() - t0)
            out[f"{name}_cpu"].append(time.process_time() - c0)
    return {k: statistics.median(v) for k, v in out.items()}


def _gram_case(x: np.ndarray, y: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import jax
    import jax.numpy as jnp

    from privkernels import dp_kip

    b, spc, nl, n_classes = 500, 10, 6, 10
    m = n_classes * spc
    clip, sigma, ridge = 1.0, 1.0, 1e-6
    x_s = dp_kip.init_support(jax.random.key(0), m, (28, 28))
    y_s = jax.nn.one_hot(jnp.asarray(dp_kip.support_labels(n_classes, spc)), n_classes) - 0.1
    yt = jax.nn.one_hot(jnp.asarray(y[:b]), n_classes) - 0.1
    xt = jnp.asarray(x[:b])
    mask = jnp.ones((b,), jnp.float32)
    spec = dp_kip.make_kernel("fc_ntk", (28, 28), n_classes, key=jax.random.key(5))
    sums = getattr(dp_kip, "clipped_sums", None)  # the 2026-11-21 tree: dp_kip._gram_clipped_sum
    gram_sum = getattr(sums, "gram_clipped_sum", None) or vars(dp_kip)["_gram_clipped_sum"]

    @jax.jit
    def step(xs: Any, ys: Any, xb: Any, yb: Any, key: Any) -> Any:
        total, _, _ = gram_sum(
            spec.gram_fn, xs.reshape(m, -1), ys, xb.reshape(b, -1), yb, mask, ridge, clip
        )
        return total + sigma * clip * jax.random.normal(key, total.shape, total.dtype)

    loss_one = jax.jit(
        jax.grad(
            lambda xs, ys, xi, yi: dp_kip.krr_loss(spec, xs, ys, xi[None], yi[None], reg=ridge)[0]
        )
    )

    def loop() -> Any:
        acc = np.zeros(x_s.shape, np.float32)
        for i in range(nl):
            g = np.asarray(loss_one(x_s, y_s, xt[i], yt[i]))
            acc += g / max(1.0, float(np.linalg.norm(g)) / clip)
        return acc

    return loop, lambda: step(x_s, y_s, xt, yt, jax.random.key(9))


def _entk_case(x: np.ndarray, y: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from privkernels import features

    net = features.fc_2l(800, 800)
    params = features.init_params(jax.random.key(0), net, (28, 28))
    nl, ns = 8, 2000

    @jax.jit
    def phi(p: Any, xi: Any) -> Any:
        flat, _ = ravel_pytree(jax.grad(lambda q: jnp.sum(net.apply(q, xi[None])))(p))
        return flat / jnp.maximum(jnp.linalg.norm(flat), 1e-30)

    def loop() -> Any:
        acc = None
        for i in range(nl):
            f = np.asarray(phi(params, x[i]))
            if acc is None:
                acc = np.zeros((f.shape[0], 10), np.float32)
            acc[:, int(y[i])] += f / nl
        return acc

    def structured() -> Any:
        return features.entk_mean_embedding(
            net.apply, params, x[:ns], y[:ns], 10, method="structured"
        )

    return loop, structured


def _kymatio_jax_shim() -> None:
    """Let a tree that imports ``kymatio.jax`` run: that module also imports kymatio's 3-D
    filter bank, which needs ``scipy.special.sph_harm`` (removed in scipy 1.17); the 2-D
    class it exports is the same as ``ScatteringJax2D`` (what the library imports now)."""
    import types

    try:
        import kymatio.jax  # noqa: F401
    except ImportError:
        from kymatio.scattering2d.frontend.jax_frontend import ScatteringJax2D

        shim = types.ModuleType("kymatio.jax")
        shim.Scattering2D = ScatteringJax2D  # type: ignore[attr-defined]
        sys.modules["kymatio.jax"] = shim


def _scatternet_case(x: np.ndarray, y: np.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import warnings

    from privkernels import features

    _kymatio_jax_shim()

    xs = x[:256]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kymatio.scattering2d.frontend.numpy_frontend import ScatteringNumPy2D

        scat = ScatteringNumPy2D(J=2, shape=(28, 28), L=8)
    return lambda: scat(xs[:, None]), lambda: features.scatternet_features(xs)


def child(case: str, data: str, reps: int) -> dict[str, Any]:
    """Time ``case``'s two sides with the ``privkernels`` on ``sys.path``."""
    import jax

    import privkernels

    jax.config.update("jax_platforms", "cpu")
    d = np.load(data)
    x, y = np.asarray(d["x"], np.float32), np.asarray(d["y"], np.int32)
    makers = {"gram": _gram_case, "entk_fc2l": _entk_case, "scatternet": _scatternet_case}
    base, fast = makers[case](x, y)
    return {"src": str(Path(privkernels.__file__).parent), **_interleaved(base, fast, reps)}


# --------------------------------------------------------------------------- DP-KIP epoch split


def epoch_split(data_dir: str | None, reps: int, steps: int = 12) -> dict[str, float]:
    """Where the per-step host loop of ``perf_loops.bench_dp_kip_epoch`` spends its time.

    Per step, medians over ``reps`` rounds (each round runs ``steps`` steps of each part
    in turn): ``host_ms`` = drawing that step's Poisson sample, reading its size back,
    gathering the padded batch (blocked until ready) and the ``int(info.batch_size)``
    read-back a step adds; ``step_ms`` = one jitted ``train_step`` on a ready batch,
    blocked. A compiled epoch removes at most the host part, so its gain over the loop
    is at most ``(host + step) / step``. fc_ntk in input space, n=6000, batch 500,
    m=100 (the perf table's case). Runs in this process (the current tree).
    """
    import jax

    from benchmarks.perf_loops import _kip_setup
    from benchmarks.perf_timing import mnist_like
    from privkernels.dp_kip import Batch
    from privkernels.dp_kip.train import step_keys
    from privkernels.privacy.sampling import poisson_schedule

    jax.config.update("jax_platforms", "cpu")
    x, y, _ = mnist_like(6000, data_dir, seed=3)
    trainer, state, xd, yd, min_pad = _kip_setup("fc_ntk", 2.0 * x - 1.0, y, 500, 10, "input")
    cfg, n = trainer.config, int(xd.shape[0]) - 1
    k_batch, k_noise = step_keys(jax.random.key(11), 0, steps, None)

    def host(t: int) -> Batch:
        sched = poisson_schedule(
            k_batch[t : t + 1], n, cfg.sampling_rate, min_pad=min_pad,
            pad_multiple=cfg.chunk_size, pad_index=n,
        )  # fmt: skip
        idx = sched.indices[0]
        return _block(Batch(xd[idx], yd[idx], sched.mask[0].astype(np.float32)))

    batches = [host(t) for t in range(steps)]
    _block(trainer.train_step(state, batches[0], k_noise[0]))
    out: dict[str, list[float]] = {"host_ms": [], "step_ms": [], "sync_ms": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        for t in range(steps):
            host(t)
        out["host_ms"].append((time.perf_counter() - t0) / steps * 1e3)
        infos = []
        t0 = time.perf_counter()
        for t in range(steps):
            st, info = trainer.train_step(state, batches[t], k_noise[t])
            infos.append(_block(info))
        out["step_ms"].append((time.perf_counter() - t0) / steps * 1e3)
        t0 = time.perf_counter()
        for info in infos:
            int(info.batch_size)
        out["sync_ms"].append((time.perf_counter() - t0) / steps * 1e3)
    med = {k: statistics.median(v) for k, v in out.items()}
    med["bound"] = (med["host_ms"] + med["sync_ms"] + med["step_ms"]) / med["step_ms"]
    return med


# --------------------------------------------------------------------------- e-NTK plan cache


def plan_cache_ab(reps: int, n: int = 2000) -> dict[str, dict[str, float]]:
    """Structured e-NTK embedding of ``n`` uniform rows, with the memoized Dense-call plan vs
    with the memo cleared before every call (the plan traced again, as before it existed);
    medians of ``reps`` interleaved calls, per network. Runs in this process (this tree)."""
    import jax

    from privkernels import features
    from privkernels.features import entk

    jax.config.update("jax_platforms", "cpu")
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(n, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    out = {}
    for name, net in (
        ("fc_1l(800)", features.fc_1l(800)),
        ("fc_2l(800,800)", features.fc_2l(800, 800)),
    ):
        params = features.init_params(jax.random.key(0), net, (28, 28))

        def cached(net: Any = net, params: Any = params) -> Any:
            return features.entk_mean_embedding(net.apply, params, x, y, 10, method="structured")

        def traced(cached: Callable[[], Any] = cached) -> Any:
            entk._cached_dense_plan.cache_clear()
            return cached()

        out[name] = _interleaved(traced, cached, reps)
    return out


# --------------------------------------------------------------------------- committed runs

#: (label, section, case, variant prefix) of the rows `history` reads
_HISTORY_ROWS = (
    ("Gram loop", "dp_kip", "fc_ntk (b=500, m=100)", "per-example grad loop"),
    ("Gram-form", "dp_kip", "fc_ntk (b=500, m=100)", "Gram-form"),
    ("fc_2l loop", "entk", "fc_2l(800,800)", "per-example jax.grad loop"),
    ("fc_2l structured", "entk", "fc_2l(800,800)", "structured vs loop"),
    ("kymatio", "scatternet", "J=2,L=8 28x28", "kymatio"),
    ("ScatterNet", "scatternet", "J=2,L=8 28x28", "jitted JAX (one batch)"),
)


def history(commits: list[str]) -> str:
    """Both sides of the three ratios in the ``perf-quick.json`` committed at ``commits``:
    per-example ms for the loops (wall, CPU), seconds for the rest, the ratios (wall, CPU)
    and the run's matmul roof (how loaded the machine was)."""
    head = "| commit | roof GFLOP/s | " + " | ".join(r[0] for r in _HISTORY_ROWS) + " |"
    lines = [head, "|---|---|" + "---|" * len(_HISTORY_ROWS)]
    for c in commits:
        text = subprocess.run(
            ["git", "show", f"{c}:benchmarks/results/perf-quick.json"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        rows = json.loads(text)["rows"]
        roof = next(r["gflops"] for r in rows if r["section"] == "roof")
        cells = []
        for label, section, case, variant in _HISTORY_ROWS:
            r = next(
                r for r in rows
                if r["section"] == section and r["case"] == case
                and r["variant"].startswith(variant)
            )  # fmt: skip
            loop = label.endswith("loop")
            if loop or label == "kymatio":
                scale, unit = (1e3 / r["n"], " ms/ex") if loop else (1.0, " s")
                cells.append(f"{r['median_s'] * scale:.3g}{unit} (cpu {r['cpu_s'] * scale:.3g})")
            else:
                cells.append(
                    f"{r['median_s']:.3g} s (cpu {r['cpu_s']:.3g}); "
                    f"ratio {r['ratio']:.3g} (cpu {r['ratio_cpu']:.3g})"
                )
        lines.append(f"| {c} | {roof:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- driver side


def _data_file(data_dir: str | None, out: Path) -> str:
    """2000 MNIST rows (``benchmarks.perf_timing.mnist_like``: synthetic uniform without
    data) in a ``.npz`` every child reads."""
    from benchmarks.perf_timing import mnist_like

    x, y, _ = mnist_like(2000, data_dir)
    path = out / "rows.npz"
    np.savez(path, x=x, y=y)
    return str(path)


#: XLA:CPU on one thread (``--one-thread``): no intra-op thread pool to hand work to
ONE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _run_child(
    src: str, case: str, data: str, reps: int, one_thread: bool = False
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case, "--data", data]
    if one_thread:  # both sides on one core: the work, without the thread pool's hand-offs
        env["XLA_FLAGS"] = ONE_THREAD_FLAGS
        cmd = (["taskset", "-c", "0"] if shutil.which("taskset") else []) + cmd
    proc = subprocess.run(
        [*cmd, "--reps", str(reps)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(
    trees: dict[str, str],
    cases: list[str],
    rounds: int,
    reps: int,
    data: str,
    one_thread: bool = False,
) -> dict[str, Any]:
    """``rounds`` rounds; in each, every case runs once per tree (order flipped each round)."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {t: [] for t in trees} for c in cases}
    names = list(trees)
    for r in range(rounds):
        for case in cases:
            for name in names if r % 2 == 0 else names[::-1]:
                runs[case][name].append(_run_child(trees[name], case, data, reps, one_thread))
                print(f"round {r + 1} {case} {name}: {runs[case][name][-1]}", file=sys.stderr)
    return runs


def _summary(
    runs: dict[str, Any], trees: dict[str, str], rounds: int, reps: int, one_thread: bool
) -> str:
    lines = [
        "| case | side | " + " | ".join(f"{t} median s (cpu s)" for t in trees) + " |",
        "|---|---|" + "---|" * len(trees),
    ]
    for case, by_tree in runs.items():
        base_l, fast_l, nl, nb = LABELS[case]
        for side, label in (("base", base_l), ("fast", fast_l)):
            cells = [
                f"{statistics.median(r[side] for r in rs):.4g} "
                f"({statistics.median(r[side + '_cpu'] for r in rs):.4g})"
                for rs in by_tree.values()
            ]
            lines.append(f"| {case} | {label} | " + " | ".join(cells) + " |")
        for label, sfx in (("wall", ""), ("cpu", "_cpu")):
            ratios = [
                statistics.median(r["base" + sfx] / nl * nb / r["fast" + sfx] for r in rs)
                for rs in by_tree.values()
            ]
            lines.append(
                f"| {case} | ratio, {label} time (median of per-process ratios) | "
                + " | ".join(f"{q:.3g}" for q in ratios)
                + " |"
            )
    head = [
        "Trees: " + ", ".join(f"`{t}` = {p}" for t, p in trees.items()),
        f"{rounds} rounds x one process per tree and case (order alternating); "
        f"each process: 1 warm-up + {reps} interleaved calls per side, medians"
        + (
            f"; XLA on one thread, one core (`XLA_FLAGS={ONE_THREAD_FLAGS}`)."
            if one_thread
            else "."
        ),
        "",
    ]
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.perf_compare", description=__doc__)
    p.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--data-dir", default=os.environ.get("PRIVKERNELS_DATA"))
    p.add_argument(
        "--one-thread",
        action="store_true",
        help="children run XLA on one thread, pinned to one core (taskset): the work alone",
    )
    p.add_argument("--out", default=None, help="markdown file for the summary table")
    p.add_argument(
        "--epoch", action="store_true", help="only the DP-KIP epoch host/step split (this tree)"
    )
    p.add_argument("--from-json", help="re-print the summary of a saved --out .json")
    p.add_argument(
        "--plan-cache", action="store_true", help="e-NTK plan memo on vs off (this tree)"
    )
    p.add_argument(
        "--history", nargs="+", metavar="COMMIT", help="both sides in committed perf-quick runs"
    )
    p.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.data, a.reps)))
        return 0
    if a.history:
        print(history(a.history))
        return 0
    if a.plan_cache:
        print(json.dumps(plan_cache_ab(a.reps)))
        return 0
    if a.epoch:
        print(json.dumps(epoch_split(a.data_dir, a.reps)))
        return 0
    trees = dict(t.split("=", 1) for t in a.tree)
    if len(trees) < 1:
        p.error("give at least one --tree NAME=SRC")
    if a.from_json:
        runs = json.loads(Path(a.from_json).read_text())
        print(_summary(runs, trees, a.rounds, a.reps, a.one_thread))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        data = _data_file(a.data_dir, Path(tmp))
        runs = compare(trees, a.cases, a.rounds, a.reps, data, a.one_thread)
    text = _summary(runs, trees, a.rounds, a.reps, a.one_thread)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out).with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
