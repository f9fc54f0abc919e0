# ruff: noqa: B023  (timed lambdas are called immediately, inside their loop iteration)
"""Performance benchmarks: every figure is a ratio against a baseline timed in the same run.

``python -m benchmarks perf [--quick] [--out DIR]`` writes ``perf-{quick,full}.json``
/ ``.md`` (rows + machine + load average) and ``perf-{quick,full}.png``.

Protocol: each timed function is called once (compilation + first run:
``first_s``; ``compile_s = first_s - median_s``), then ``repeats`` more times
(>= 5); ``median_s`` is the median of those. Per-example Python-loop baselines
(the reference implementations' algorithm shape) are timed on a subset of
examples the same way and scaled per example (``scaled`` in the notes). The
machine's roof is the measured float32 ``jnp.dot`` throughput of 2048x2048
matrices.

Sections:

* ``entk``: e-NTK mean embedding (DP-NTK eq. 4) of MNIST-shaped data:
  per-example ``jax.grad`` loop (jitted per-example gradient, Python loop,
  accumulation into the (p, C) embedding) vs ``method="generic"`` (vmap) vs
  ``method="structured"`` (dense MLPs); FLOPs of the structured path counted
  analytically (see `_structured_flops`). A torch per-sample
  ``autograd.grad`` loop is timed too when torch is installed.
* ``generator``: one DP-NTK generator step (features of a generated batch with
  gradients flowing back to the generator) vs a per-example loop (per-example
  feature, then per-example VJP of the feature map).
* ``dp_kip``: one DP-KIP step (per-example clipped gradients w.r.t. the support,
  summed, noised) per kernel vs a per-example loop.
* ``scatternet``: jitted JAX ScatterNet vs kymatio's numpy backend.
* ``gsm``: Gaussian sampling mechanism (Gu et al. Alg. 1) and the DP NTK
  regression fit vs a Python loop over the k draws ``g ~ N(0, K)``.
* ``memory``: peak RSS (VmHWM, each measurement in its own subprocess) of the
  structured embedding and of one DP-KIP epoch as n grows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import write_results
from benchmarks.perf_gpu import bench_paper_cells, require_gpu
from benchmarks.perf_loops import bench_dp_kip_epoch, bench_dp_kip_targets, bench_dp_ntk_loop
from benchmarks.perf_timing import (
    COLUMNS,
    TARGETS,
    block,
    make_row,
    matmul_roof,
    mnist_like,
    ratio_row,
    ratio_spread,
    time_calls,
    time_interleaved,
    timing,
)

ROOT = Path(__file__).resolve().parents[1]

QUICK: dict[str, Any] = dict(
    repeats=5,
    entk_n_struct=2000,
    entk_n_generic=64,
    entk_n_generic_cnn=16,
    entk_n_loop=8,
    entk_chunks=(32, 128, 512, 2048),
    gen_batch=500,
    gen_n_loop=8,
    kip_sizes=((64, 2), (500, 10)),  # (target batch, support per class); 2nd = paper-like
    kip_n_loop=6,
    kip_entk_input_space=False,
    kip_kernels=("fc_ntk", "scatternet", "entk"),
    scat_n=256,
    scat_chunks=(16, 64, 256),
    gsm_n=(1000, 2000),
    gsm_loop_draws=20,
    mem_n=(10_000, 30_000, 60_000),
    mem_kip_batch=600,
    epoch_n=6000,
    epoch_batch=500,
    epoch_spc=10,
    epoch_kernels=(("fc_ntk", "input"), ("scatternet", "feature")),
    epoch_repeats=5,
    targets_epochs=2,
    ntk_loop_steps=20,
    ntk_loop_batch=500,
)
FULL: dict[str, Any] = dict(
    QUICK,
    repeats=7,
    entk_n_struct=10_000,
    entk_n_generic=512,
    entk_n_generic_cnn=128,
    entk_n_loop=32,
    entk_chunks=(32, 128, 512, 2048, 8192),
    gen_batch=5000,
    gen_n_loop=16,
    kip_sizes=((256, 10), (2000, 10)),
    kip_n_loop=16,
    kip_entk_input_space=True,
    scat_n=1024,
    scat_chunks=(16, 64, 256, 1024),
    gsm_n=(1000, 2000, 5000, 10_000),
    epoch_n=60_000,
    epoch_batch=500,
    epoch_kernels=(("fc_ntk", "input"), ("scatternet", "feature"), ("scatternet", "input")),
    ntk_loop_steps=50,
    ntk_loop_batch=5000,
)

# --------------------------------------------------------------------------- e-NTK


def _dense_dims(params: Any) -> list[tuple[int, int]]:
    import jax

    return [tuple(np.shape(a)) for a in jax.tree_util.tree_leaves(params) if np.ndim(a) == 2]  # type: ignore[misc]


def _structured_flops(params: Any, cols: int = 1) -> float:
    """FLOPs per example of the structured dense-MLP embedding.

    forward ``2 sum_l in_l out_l`` + backward for the deltas ``2 sum_{l>=2} in_l out_l``
    + embedding products ``2 sum_l in_l out_l cols`` (``cols = 1`` for class-pure
    chunks, ``C`` for the one-hot layout); O(in + out) terms ignored.
    """
    dims = _dense_dims(params)
    mm = [a * b for a, b in dims]
    return 2.0 * sum(mm) + 2.0 * sum(mm[1:]) + 2.0 * cols * sum(mm)


def _phi_one_fn(apply_fn: Callable, params: Any) -> Callable:
    """Jitted per-example normalised e-NTK feature (the reference's per-sample grad)."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    def phi(p: Any, xi: Any) -> Any:
        g = jax.grad(lambda q: jnp.sum(apply_fn(q, xi[None])))(p)
        flat, _ = ravel_pytree(g)
        return flat / jnp.maximum(jnp.linalg.norm(flat), 1e-30)

    return jax.jit(phi)


def _loop_embedding(
    phi_one: Callable, params: Any, x: np.ndarray, y: np.ndarray, n_classes: int, n_total: int
) -> np.ndarray:
    acc = None
    for i in range(x.shape[0]):
        f = np.asarray(phi_one(params, x[i]))
        if acc is None:
            acc = np.zeros((f.shape[0], n_classes), np.float32)
        acc[:, int(y[i])] += f / n_total
    return acc  # type: ignore[return-value]


def _torch_row(x: np.ndarray, y: np.ndarray, width: int, repeats: int) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
    except ImportError:
        return make_row(
            "entk",
            "fc_1l",
            "torch per-sample autograd.grad loop",
            note="torch is not installed here: the reference's torch loop was not timed",
        )
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
    )
    xt = torch.as_tensor(x)
    n = x.shape[0]

    def run() -> None:
        acc = torch.zeros(sum(p.numel() for p in net.parameters()), 10)
        for i in range(n):
            out = net(xt[i : i + 1]).sum()
            g = torch.autograd.grad(out, list(net.parameters()))
            f = torch.cat([t.reshape(-1) for t in g])
            acc[:, int(y[i])] += f / f.norm() / n

    t = time_calls(run, repeats)
    return make_row(
        "entk",
        "fc_1l",
        "torch per-sample autograd.grad loop",
        n=n,
        per_example_ms=1e3 * t["median_s"] / n,
        **t,
    )


def bench_entk(
    cfg: dict[str, Any], roof: float, data_dir: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import jax

    from privkernels import features
    from privkernels.features.entk import is_dense_mlp

    reps = cfg["repeats"]
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] = {"chunks": {}}
    x, y, source = mnist_like(cfg["entk_n_struct"], data_dir)
    nets = {
        "fc_1l(800)": features.fc_1l(800),
        "fc_2l(800,800)": features.fc_2l(800, 800),
        "cnn_2l(30,200)": features.cnn_2l(30, 200),
    }
    for name, net in nets.items():
        params = features.init_params(jax.random.key(0), net, (28, 28))
        apply_fn = net.apply
        p = sum(int(np.prod(np.shape(a))) for a in jax.tree_util.tree_leaves(params))
        # per-example loop (reference algorithm shape), timed on a subset, scaled per example
        phi_one = _phi_one_fn(apply_fn, params)
        nl = cfg["entk_n_loop"]
        ng = cfg["entk_n_generic_cnn"] if name.startswith("cnn") else cfg["entk_n_generic"]
        xg, yg = x[:ng], y[:ng]
        dense = is_dense_mlp(apply_fn, params, (28, 28))
        ways: dict[str, Callable[[], Any]] = {
            "loop": lambda: _loop_embedding(phi_one, params, x[:nl], y[:nl], 10, nl),
            "generic": lambda: features.entk_mean_embedding(
                apply_fn, params, xg, yg, 10, method="generic"
            ),
        }
        if dense:
            ways["structured"] = lambda: features.entk_mean_embedding(
                apply_fn, params, x, y, 10, method="structured"
            )
        timed = time_interleaved(ways, reps)
        t_loop = timing(timed["loop"])
        loop_pe = t_loop["median_s"] / nl
        rows.append(
            make_row(
                "entk",
                name,
                "per-example jax.grad loop",
                n=nl,
                params=p,
                per_example_ms=1e3 * loop_pe,
                throughput=1 / loop_pe,
                note=f"jitted per-example grad, Python loop; {source}",
                **t_loop,
            )
        )
        # generic vmap path
        t_gen = timing(timed["generic"])
        gen_pe = t_gen["median_s"] / ng
        rows.append(
            ratio_row(
                "entk",
                name,
                "generic (vmap grad)",
                gen_pe,
                loop_pe,
                baseline="per-example loop",
                n=ng,
                params=p,
                per_example_ms=1e3 * gen_pe,
                throughput=1 / gen_pe,
                ratio_cpu=t_loop["cpu_s"] / nl / (t_gen["cpu_s"] / ng),
                **t_gen,
            )
        )
        if not dense:
            rows.append(
                make_row(
                    "entk",
                    name,
                    "structured",
                    note="not a dense MLP (convolution): generic path only",
                )
            )
            continue
        ns = cfg["entk_n_struct"]
        t_st = timing(timed["structured"])
        st_pe = t_st["median_s"] / ns
        flops = _structured_flops(params, cols=1)
        gfs = flops / st_pe / 1e9
        is_main = name == "fc_1l(800)"
        rows.append(
            ratio_row(
                "entk",
                name,
                "structured vs loop",
                st_pe,
                loop_pe,
                baseline="per-example loop",
                target=TARGETS["structured_vs_loop"],
                n=ns,
                params=p,
                per_example_ms=1e3 * st_pe,
                throughput=1 / st_pe,
                ratio_cpu=t_loop["cpu_s"] / nl / (t_st["cpu_s"] / ns),
                note=ratio_spread(timed["loop"], timed["structured"], ns / nl),
                **t_st,
            )
        )
        rows.append(
            ratio_row(
                "entk",
                name,
                "structured vs generic",
                st_pe,
                gen_pe,
                baseline="generic (vmap)",
                target=TARGETS["structured_vs_generic"],
                n=ns,
                ratio_cpu=t_gen["cpu_s"] / ng / (t_st["cpu_s"] / ns),
            )
        )
        frac = gfs / roof
        rows.append(
            make_row(
                "entk",
                name,
                "structured roof fraction",
                gflops=gfs,
                roof_gflops=roof,
                ratio=frac,
                target=TARGETS["structured_roof_fraction"],
                meets=bool(frac >= TARGETS["structured_roof_fraction"]),
                note=f"{flops / 1e6:.2f} MFLOP/example (analytic, class-pure chunks)",
            )
        )
        if is_main:
            # soft-label (one-hot layout, C columns) variant: what a traced-label generator batch takes
            ymat = np.asarray(jax.nn.one_hot(y, 10), np.float32)
            t_soft = time_calls(
                lambda: features.entk_mean_embedding(
                    apply_fn, params, x, ymat, 10, method="structured"
                ),
                reps,
            )
            soft_pe = t_soft["median_s"] / ns
            rows.append(
                ratio_row(
                    "entk",
                    name,
                    "structured (label matrix, dense layout) vs loop",
                    soft_pe,
                    loop_pe,
                    baseline="per-example loop",
                    n=ns,
                    per_example_ms=1e3 * soft_pe,
                    gflops=_structured_flops(params, cols=10) / soft_pe / 1e9,
                    **t_soft,
                )
            )
            # chunk-size sweep (plot)
            sweep = []
            for c in cfg["entk_chunks"]:
                t_c = time_calls(
                    lambda c=c: features.entk_mean_embedding(
                        apply_fn, params, x, y, 10, method="structured", chunk_size=c
                    ),
                    max(5, reps // 2),
                )
                sweep.append((c, ns / t_c["median_s"]))
                rows.append(
                    make_row(
                        "entk",
                        name,
                        f"structured chunk_size={c}",
                        n=ns,
                        throughput=ns / t_c["median_s"],
                        **t_c,
                    )
                )
            gsweep = []
            for c in (8, 32):
                if c > ng:
                    continue
                t_c = time_calls(
                    lambda c=c: features.entk_mean_embedding(
                        apply_fn, params, xg, yg, 10, method="generic", chunk_size=c
                    ),
                    5,
                )
                gsweep.append((c, ng / t_c["median_s"]))
                rows.append(
                    make_row(
                        "entk",
                        name,
                        f"generic chunk_size={c}",
                        n=ng,
                        throughput=ng / t_c["median_s"],
                        **t_c,
                    )
                )
            plot["chunks"] = {"structured": sweep, "generic": gsweep}
            rows.append(_torch_row(x[:nl], y[:nl], 800, reps))
    return rows, plot


# --------------------------------------------------------------------------- DP-NTK generator step


def bench_generator(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp
    import optax

    from privkernels import features
    from privkernels.dp_ntk import default_generator
    from privkernels.generators import make_code

    reps = cfg["repeats"]
    b = cfg["gen_batch"]
    n_classes, d_code = 10, 5
    net = features.fc_1l(800)
    ntk_params = features.init_params(jax.random.key(0), net, (28, 28))
    gen = default_generator((28, 28), n_classes)
    labels_np = (np.arange(b) % n_classes).astype(np.int32)
    z, onehot = make_code(
        jax.random.key(1), jnp.asarray(labels_np), d_code=d_code, n_classes=n_classes
    )
    gparams = gen.init(jax.random.key(2), z, onehot)
    p = sum(int(np.prod(np.shape(a))) for a in jax.tree_util.tree_leaves(ntk_params))
    target = 0.01 * jax.random.normal(jax.random.key(3), (p, n_classes))
    opt = optax.adam(1e-2)
    opt_state = opt.init(gparams)

    def make_step(concrete_labels: bool) -> Callable:
        @jax.jit
        def step(gp: Any, st: Any, tgt: Any, zz: Any, oh: Any) -> Any:
            def loss(g: Any) -> Any:
                xg = gen.apply(g, zz, oh)
                lab = labels_np if concrete_labels else jnp.argmax(oh, axis=1)
                emb = features.entk_mean_embedding(net.apply, ntk_params, xg, lab, n_classes)
                return jnp.sum((tgt - emb) ** 2)

            val, grads = jax.value_and_grad(loss)(gp)
            upd, st = opt.update(grads, st, gp)
            return optax.apply_updates(gp, upd), st, val

        return step

    rows: list[dict[str, Any]] = []
    step_traced = make_step(False)
    t_fast = time_calls(lambda: step_traced(gparams, opt_state, target, z, onehot), reps)
    step_conc = make_step(True)
    t_conc = time_calls(lambda: step_conc(gparams, opt_state, target, z, onehot), reps)

    # loop baseline: generator forward, per-example phi (forward), residual, per-example VJP of phi
    phi_one = _phi_one_fn(net.apply, ntk_params)
    phi_vjp = jax.jit(lambda xi, ct: jax.vjp(lambda u: phi_one(ntk_params, u), xi)[1](ct)[0])
    gen_fwd = jax.jit(lambda g: gen.apply(g, z, onehot))
    gen_vjp = jax.jit(lambda g, ct: jax.vjp(lambda q: gen.apply(q, z, onehot), g)[1](ct)[0])
    nl = cfg["gen_n_loop"]

    def loop_part() -> Any:
        xg = np.asarray(gen_fwd(gparams))
        emb = np.zeros((p, n_classes), np.float32)
        for i in range(nl):
            emb[:, labels_np[i]] += np.asarray(phi_one(ntk_params, xg[i])) / b
        resid = np.asarray(target) - emb
        outs = []
        for i in range(nl):
            outs.append(np.asarray(phi_vjp(xg[i], -2.0 * resid[:, labels_np[i]] / b)))
        return np.stack(outs)

    t_loop_part = time_calls(loop_part, reps)
    t_gfwd = time_calls(lambda: gen_fwd(gparams), reps)
    ct = jnp.zeros((b, 28, 28), jnp.float32)
    t_gvjp = time_calls(lambda: gen_vjp(gparams, ct), reps)
    per_ex = max(t_loop_part["median_s"] - t_gfwd["median_s"], 1e-9) / nl
    loop_total = t_gfwd["median_s"] + t_gvjp["median_s"] + b * per_ex
    note = (
        f"batch {b}; fc_1l(800) e-NTK, ConvCondGenerator; loop = generator fwd + {b} x (per-example phi + "
        f"per-example VJP of phi), per-example part timed on {nl} examples and scaled"
    )
    rows.append(
        make_row(
            "generator",
            "dp_ntk step",
            "per-example loop (scaled)",
            n=b,
            median_s=loop_total,
            per_example_ms=1e3 * per_ex,
            note=note,
        )
    )
    rows.append(
        ratio_row(
            "generator",
            "dp_ntk step",
            "jit step, traced labels (dense C-column layout)",
            t_fast["median_s"],
            loop_total,
            baseline="per-example loop",
            n=b,
            **t_fast,
        )
    )
    rows.append(
        ratio_row(
            "generator",
            "dp_ntk step",
            "jit step, concrete balanced labels (class-pure chunks)",
            t_conc["median_s"],
            loop_total,
            baseline="per-example loop",
            n=b,
            **t_conc,
        )
    )
    # what bounds the step: the generator network alone, and the e-NTK part alone
    gen_only = jax.jit(jax.grad(lambda g, zz, oh: jnp.sum(jnp.asarray(gen.apply(g, zz, oh)) ** 2)))
    t_g = time_calls(lambda: gen_only(gparams, z, onehot), reps)
    rows.append(
        make_row(
            "generator",
            "dp_ntk step",
            "generator network fwd+bwd alone",
            n=b,
            **t_g,
            note="ConvCondGenerator; part of both the loop and the jitted step",
        )
    )
    xg = gen_fwd(gparams)
    for label, lab in (("traced labels", None), ("concrete labels", labels_np)):

        @jax.jit
        def feat_grad(xx: Any, tgt: Any, oh: Any, lab: Any = lab) -> Any:
            yy = jnp.argmax(oh, axis=1) if lab is None else lab
            return jax.grad(
                lambda u: jnp.sum(
                    (tgt - features.entk_mean_embedding(net.apply, ntk_params, u, yy, n_classes))
                    ** 2
                )
            )(xx)

        t_f = time_calls(lambda feat_grad=feat_grad: feat_grad(xg, target, onehot), reps)
        rows.append(
            ratio_row(
                "generator",
                "dp_ntk step",
                f"e-NTK part only (embedding + grad w.r.t. x), {label}",
                t_f["median_s"],
                b * per_ex,
                baseline="per-example phi + VJP loop (scaled)",
                n=b,
                per_example_ms=1e3 * t_f["median_s"] / b,
                **t_f,
            )
        )
    return rows


# --------------------------------------------------------------------------- DP-KIP step


def bench_dp_kip(cfg: dict[str, Any], data_dir: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, (b, spc) in enumerate(cfg["kip_sizes"]):
        rows += _bench_dp_kip_size(cfg, data_dir, b, spc, all_variants=i == 0)
    return rows


def _bench_dp_kip_size(
    cfg: dict[str, Any], data_dir: str | None, b: int, spc: int, *, all_variants: bool
) -> list[dict[str, Any]]:
    """One DP-KIP step (per-example clipped gradient sum + noise) for each kernel vs a loop.

    ``all_variants`` also times the input-space vmap/adjoint paths (slow for
    ScatterNet at large ``b * m``: one feature-map VJP per (target, support) pair).
    """
    import jax
    import jax.numpy as jnp

    from privkernels import dp_kip
    from privkernels.privacy import clip_per_example

    reps = cfg["repeats"]
    x, y, source = mnist_like(b, data_dir, seed=1)
    n_classes = 10
    m = n_classes * spc
    x_s = dp_kip.init_support(jax.random.key(0), m, (28, 28))
    y_s = (
        jax.nn.one_hot(jnp.asarray(dp_kip.support_labels(n_classes, spc)), n_classes)
        - 1.0 / n_classes
    )
    yt = jax.nn.one_hot(jnp.asarray(y), n_classes) - 1.0 / n_classes
    xt = jnp.asarray(x)
    mask = jnp.ones((b,), jnp.float32)
    clip, sigma, ridge = 1.0, 1.0, 1e-6
    rows: list[dict[str, Any]] = []
    size = f"b={b}, m={m}"
    for kname in cfg["kip_kernels"]:
        spec = dp_kip.make_kernel(kname, (28, 28), n_classes, key=jax.random.key(5))
        case = f"{kname} ({size})"

        def clipped_step(grads_fn: Callable, spec: Any = spec) -> Callable:
            @jax.jit
            def step(xs: Any, ys: Any, xb: Any, yb: Any, key: Any) -> Any:
                g = grads_fn(spec, xs, ys, xb, yb)
                clipped, _ = clip_per_example(g, clip)
                return jnp.sum(clipped, axis=0) + sigma * clip * jax.random.normal(
                    key, xs.shape, xs.dtype
                )

            return step

        # per-example loop (reference shape): jitted grad of one target's loss, clip, accumulate
        loss_one = jax.jit(
            jax.grad(
                lambda xs, ys, xi, yi, spec=spec: dp_kip.krr_loss(
                    spec, xs, ys, xi[None], yi[None], reg=ridge
                )[0]
            )
        )
        nl = cfg["kip_n_loop"]

        def loop(loss_one: Any = loss_one) -> Any:
            acc = np.zeros(x_s.shape, np.float32)
            for i in range(nl):
                g = np.asarray(loss_one(x_s, y_s, xt[i], yt[i]))
                acc += g / max(1.0, float(np.linalg.norm(g)) / clip)
            return acc + sigma * clip * np.random.default_rng(0).standard_normal(acc.shape).astype(
                np.float32
            )

        t_loop = time_calls(loop, reps)
        loop_pe = t_loop["median_s"] / nl
        rows.append(
            make_row(
                "dp_kip",
                case,
                "per-example grad loop (input space)",
                n=nl,
                per_example_ms=1e3 * loop_pe,
                note=f"m={m} support; jitted per-example grad + clip in a Python loop, "
                f"timed on {nl} targets and scaled to b={b}; {source}",
                **t_loop,
            )
        )

        def add(
            variant: str,
            fn: Callable[[], Any],
            target: float | None,
            note: str = "",
            case: str = case,
            loop: Callable[[], Any] = loop,
        ) -> None:
            # the loop again, in turn with this variant: both under the same load
            timed = time_interleaved({"loop": loop, "fast": fn}, reps)
            t, t_base = timing(timed["fast"]), timed["loop"]
            spread = ratio_spread(t_base, timed["fast"], b / nl)
            rows.append(
                ratio_row(
                    "dp_kip",
                    case,
                    variant,
                    t["median_s"],
                    t_base["median_s"] / nl * b,
                    baseline="per-example loop (scaled)",
                    target=target,
                    n=b,
                    per_example_ms=1e3 * t["median_s"] / b,
                    ratio_cpu=t_base["cpu_s"] / nl * b / max(t["cpu_s"], 1e-12),
                    note=f"{note}; {spread}" if note else spread,
                    **t,
                )
            )

        g_ref = None
        input_space = all_variants or kname == "fc_ntk"
        if kname == "entk" and not cfg["kip_entk_input_space"]:
            rows.append(
                make_row(
                    "dp_kip",
                    case,
                    "input-space vmap / adjoint",
                    note="skipped in quick mode (second-order LeNet Jacobians, ~10 s per call); "
                    "the library uses clip_space='feature' for entk",
                )
            )
        elif input_space:
            g_ref = jax.jit(
                lambda xs, ys, xb, yb, sp=spec: dp_kip.per_example_grads(
                    sp, xs, ys, xb, yb, reg=ridge, method="vmap"
                )
            )(x_s, y_s, xt, yt)
            lib = clipped_step(
                lambda sp, xs, ys, xb, yb: dp_kip.per_example_grads(
                    sp, xs, ys, xb, yb, reg=ridge, method="vmap"
                )
            )
            add(
                "vmap(grad) per_example_grads + clip (input space, reference path)",
                partial(lib, x_s, y_s, xt, yt, jax.random.key(9)),
                None,
            )
            adj = clipped_step(
                lambda sp, xs, ys, xb, yb: dp_kip.per_example_grads(
                    sp, xs, ys, xb, yb, reg=ridge, method="adjoint"
                )
            )
            g_adj = jax.jit(
                lambda xs, ys, xb, yb, sp=spec: dp_kip.per_example_grads(
                    sp, xs, ys, xb, yb, reg=ridge, method="adjoint"
                )
            )(x_s, y_s, xt, yt)
            rel = float(
                jnp.max(jnp.abs(g_ref - g_adj)) / jnp.maximum(jnp.max(jnp.abs(g_ref)), 1e-30)
            )
            default = "library default" if spec.gram_fn is None else "used with corrupted pixels"
            add(
                f"adjoint per-example grads + clip (input space, {default})",
                partial(adj, x_s, y_s, xt, yt, jax.random.key(9)),
                TARGETS["dp_kip_vs_loop"] if spec.gram_fn is None else None,
                note=f"max |diff| / max |g| vs the vmap reference = {rel:.1e}",
            )
        if spec.gram_fn is not None:
            gfn = spec.gram_fn

            @jax.jit
            def gram_step(xs: Any, ys: Any, xb: Any, yb: Any, key: Any, gfn: Any = gfn) -> Any:
                total, _, _ = dp_kip.clipped_sums.gram_clipped_sum(
                    gfn, xs.reshape(m, -1), ys, xb.reshape(b, -1), yb, mask, ridge, clip
                )
                noisy = total + sigma * clip * jax.random.normal(key, total.shape, total.dtype)
                return noisy.reshape(xs.shape)

            note = "exact input-space clipping (paper's pixel space) for a dot-product kernel"
            if g_ref is not None:
                clipped, _ = clip_per_example(g_ref, clip)
                ref_sum = jnp.sum(clipped, axis=0).reshape(m, -1)
                got, _, _ = jax.jit(
                    lambda xs, xb, gfn=gfn: dp_kip.clipped_sums.gram_clipped_sum(
                        gfn, xs.reshape(m, -1), y_s, xb.reshape(b, -1), yt, mask, ridge, clip
                    )
                )(x_s, xt)
                rel = float(
                    jnp.max(jnp.abs(got - ref_sum)) / jnp.maximum(jnp.max(jnp.abs(ref_sum)), 1e-30)
                )
                note += f"; max |diff| / max |sum| vs clip(vmap) = {rel:.1e}"
            add(
                "Gram-form clipped sum (input space, library default)",
                partial(gram_step, x_s, y_s, xt, yt, jax.random.key(9)),
                TARGETS["dp_kip_vs_loop"],
                note=note,
            )
        fcs = dp_kip.clipped_sums.feature_clipped_sum
        if spec.kind == "features" and fcs is not None:

            @jax.jit
            def feat_step(
                xs: Any, ys: Any, xb: Any, yb: Any, key: Any, spec: Any = spec, fcs: Any = fcs
            ) -> Any:
                phi_s, vjp_fn = jax.vjp(spec.feature_fn, xs)
                total, _, _, _ = fcs(phi_s, ys, spec.feature_fn(xb), yb, mask, ridge, clip)
                noisy = total + sigma * clip * jax.random.normal(key, total.shape, total.dtype)
                return vjp_fn(noisy)[0]

            lib_default = " = library default" if kname == "entk" else ""
            add(
                f"closed-form clipped sum in feature space (clip_space='feature'{lib_default})",
                partial(feat_step, x_s, y_s, xt, yt, jax.random.key(9)),
                TARGETS["dp_kip_vs_loop"],
                note="clips w.r.t. support features (not the paper's pixel space)",
            )
    return rows


# --------------------------------------------------------------------------- ScatterNet


def bench_scatternet(
    cfg: dict[str, Any], data_dir: str | None
) -> tuple[list[dict[str, Any]], list[tuple[int, float]]]:
    import warnings

    from privkernels import features

    reps = cfg["repeats"]
    n = cfg["scat_n"]
    x, _, source = mnist_like(n, data_dir, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kymatio.scattering2d.frontend.numpy_frontend import (
            ScatteringNumPy2D as Scattering2D,
        )

        scat_np = Scattering2D(J=2, shape=(28, 28), L=8)
    timed = time_interleaved(
        {"numpy": lambda: scat_np(x[:, None]), "jax": lambda: features.scatternet_features(x)},
        reps,
    )
    t_np, t_jax = timing(timed["numpy"]), timing(timed["jax"])
    rows = [
        make_row(
            "scatternet",
            "J=2,L=8 28x28",
            "kymatio numpy backend",
            n=n,
            throughput=n / t_np["median_s"],
            note=source,
            **t_np,
        ),
        ratio_row(
            "scatternet",
            "J=2,L=8 28x28",
            "jitted JAX (one batch)",
            t_jax["median_s"],
            t_np["median_s"],
            baseline="kymatio numpy",
            target=TARGETS["scatternet_vs_numpy"],
            n=n,
            throughput=n / t_jax["median_s"],
            ratio_cpu=t_np["cpu_s"] / t_jax["cpu_s"],
            note="library default chunk_size=64 (chunks of 64 images); "
            + ratio_spread(timed["numpy"], timed["jax"]),
            **t_jax,
        ),
    ]
    sweep = []
    for c in cfg["scat_chunks"]:
        if c >= n:
            continue
        t_c = time_calls(lambda c=c: features.scatternet_features(x, chunk_size=c), 5)
        sweep.append((c, n / t_c["median_s"]))
        rows.append(
            ratio_row(
                "scatternet",
                "J=2,L=8 28x28",
                f"jitted JAX chunk_size={c}",
                t_c["median_s"],
                t_np["median_s"],
                baseline="kymatio numpy",
                n=n,
                throughput=n / t_c["median_s"],
                target=TARGETS["scatternet_vs_numpy"],
                ratio_cpu=t_np["cpu_s"] / t_c["cpu_s"],
                **t_c,
            )
        )
    sweep.append((n, n / t_jax["median_s"]))
    return rows, sweep


# --------------------------------------------------------------------------- Gaussian sampling mechanism


def _loop_sampler_draw_time(lfac: np.ndarray, draws: int, repeats: int) -> float:
    """Median seconds per draw of ``g = L z; acc += g g^T`` (numpy, float32)."""
    n = lfac.shape[0]
    rng = np.random.default_rng(0)
    acc = np.zeros((n, n), np.float32)

    def run() -> None:
        for _ in range(draws):
            g = lfac @ np.asarray(rng.standard_normal(n), np.float32)
            acc[...] += np.outer(g, g)

    t = time_calls(run, repeats)
    return t["median_s"] / draws


def bench_gsm(
    cfg: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, float]]]]:
    import jax
    import jax.numpy as jnp

    from privkernels import dp_ntk_regression as reg
    from privkernels.features import quadratic_ntk_kernel, random_ntk_weights
    from privkernels.privacy import gaussian_sampling_mechanism

    reps = cfg["repeats"]
    rows: list[dict[str, Any]] = []
    plot: dict[str, list[tuple[int, float]]] = {"ours": [], "loop": [], "fit": [], "fit_loop": []}
    d, width = 784, 256
    # the regression tables' setting: eps = 1 (half to the kernel), delta = 2e-3, eta_min = kernel_shift = 5
    eps_a, delta_a, shift = 0.5, 1e-3, 5.0
    for n in cfg["gsm_n"]:
        rng = np.random.default_rng(n)
        x = rng.uniform(size=(n, d)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        y = (np.arange(n) % 10).astype(np.int32)
        w = random_ntk_weights(jax.random.key(0), width, d)
        kmat = quadratic_ntk_kernel(x, x, w, chunk_size=1000) + shift * jnp.eye(n)
        kmat = block(0.5 * (kmat + kmat.T))
        k = int(
            reg.max_k(
                n,
                epsilon_alpha=eps_a,
                delta_alpha=delta_a,
                eta_min=shift,
                beta=1e-6,
                weight_std=1.0,
                input_bound=1.0,
                weights=w,
            )
        )
        t_ours = time_calls(
            lambda: gaussian_sampling_mechanism(
                jax.random.key(1), kmat, k, epsilon=0.5, delta=1e-5
            ),
            reps,
        )
        # loop sampler: numpy Cholesky factor once (eigh if that fails), then k draws in a Python loop
        t0 = time.perf_counter()
        kn = np.asarray(kmat, np.float32)
        try:
            lfac = np.linalg.cholesky(kn)
        except np.linalg.LinAlgError:
            ev, evec = np.linalg.eigh(kn)
            lfac = (evec * np.sqrt(np.maximum(ev, 0))).astype(np.float32)
        t_factor = time.perf_counter() - t0
        draw = _loop_sampler_draw_time(lfac, cfg["gsm_loop_draws"], reps)
        loop_total = t_factor + k * draw
        note = (
            f"k={k} (max private k, eq. (1), eps_alpha={eps_a}, delta_alpha={delta_a}, eta_min=shift={shift}); "
            f"loop = numpy Cholesky once ({t_factor:.2f} s) + k draws g=Lz, acc+=gg^T "
            f"({1e3 * draw:.2f} ms/draw, timed on {cfg['gsm_loop_draws']} draws, scaled)"
        )
        rows.append(
            make_row(
                "gsm", f"n={n}", "loop sampler (scaled)", n=n, k=k, median_s=loop_total, note=note
            )
        )
        rows.append(
            ratio_row(
                "gsm",
                f"n={n}",
                "gaussian_sampling_mechanism",
                t_ours["median_s"],
                loop_total,
                baseline="loop sampler",
                target=TARGETS["gsm_vs_loop_n2000"] if n == 2000 else None,
                n=n,
                k=k,
                **t_ours,
            )
        )
        plot["ours"].append((n, t_ours["median_s"]))
        plot["loop"].append((n, loop_total))
        # the full regression fit; its loop counterpart replaces the fit's sampling by the loop draws
        t_fit = time_calls(
            lambda: (
                reg.fit(
                    jax.random.key(2),
                    x,
                    y,
                    epsilon=1.0,
                    delta=2e-3,
                    width=width,
                    reg=5.0,
                    kernel_shift=shift,
                    fit_intercept=False,
                    n_classes=10,
                    neighbouring="beta-close",
                ).alpha
            ),
            reps,
        )
        fit_loop = t_fit["median_s"] - t_ours["median_s"] + loop_total
        rows.append(
            make_row(
                "gsm",
                f"n={n}",
                "regression fit with loop sampler (estimated)",
                n=n,
                k=k,
                median_s=fit_loop,
                note="fit - gaussian_sampling_mechanism time + loop sampler time (factor + k draws)",
            )
        )
        rows.append(
            ratio_row(
                "gsm",
                f"n={n}",
                "dp_ntk_regression.fit",
                t_fit["median_s"],
                fit_loop,
                baseline="fit with loop sampler",
                n=n,
                k=k,
                **t_fit,
            )
        )
        plot["fit"].append((n, t_fit["median_s"]))
        plot["fit_loop"].append((n, fit_loop))
    return rows, plot


# --------------------------------------------------------------------------- memory (subprocesses)


def _vm(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def _child(kind: str, n: int, extra: int) -> dict[str, Any]:
    """Run one memory measurement in THIS (fresh) process; return kB figures."""
    import jax

    from privkernels import features

    # the input lives on the device before the baseline (one copy), then the peak-RSS
    # counter is reset (Linux: "5" > /proc/self/clear_refs) so VmHWM covers the run only
    rng = np.random.default_rng(0)
    x_np = np.empty((n, 28, 28), np.float32)
    for s in range(0, n, 5000):
        x_np[s : s + 5000] = rng.uniform(size=x_np[s : s + 5000].shape)
    x = jax.device_put(x_np)
    block(x)
    del x_np
    y = (np.arange(n) % 10).astype(np.int32)
    reset = True
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        reset = False
    base_rss, base_hwm = _vm("VmRSS"), _vm("VmHWM")
    t0 = time.perf_counter()
    if kind == "embed":
        net = features.fc_1l(800)
        params = features.init_params(jax.random.key(0), net, (28, 28))
        block(features.entk_mean_embedding(net.apply, params, x, y, 10, method="structured"))
    elif kind == "dpkip":
        from privkernels import dp_kip

        res = dp_kip.fit(
            jax.random.key(0),
            x,
            y,
            kernel="fc_ntk",
            support_per_class=1,
            epsilon=1.0,
            delta=1e-5,
            batch_size=extra,
            epochs=1,
            n_classes=10,
            accountant="rdp",
            neighbouring="add-remove",
            sampling_rate=extra / n,  # the benchmark's n is public
            progress=False,
        )
        block(res.x_support if hasattr(res, "x_support") else res)
    else:
        raise ValueError(kind)
    return {
        "kind": kind,
        "n": n,
        "base_rss_kb": base_rss,
        "base_hwm_kb": base_hwm,
        "peak_kb": _vm("VmHWM"),
        "seconds": time.perf_counter() - t0,
        "data_kb": n * 28 * 28 * 4 // 1024,
        "hwm_reset": reset,
    }


def _run_child(kind: str, n: int, extra: int = 0, timeout: int = 600) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.perf", "--child", kind, str(n), str(extra)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} n={n} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_memory(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind, label, extra in (
        ("embed", "e-NTK structured embedding (fc_1l 800)", 0),
        ("dpkip", f"DP-KIP epoch (fc_ntk, batch {cfg['mem_kip_batch']})", cfg["mem_kip_batch"]),
    ):
        res = [_run_child(kind, n, extra) for n in cfg["mem_n"]]
        for r in res:
            work = r["peak_kb"] - r["base_rss_kb"]
            rows.append(
                make_row(
                    "memory",
                    label,
                    f"n={r['n']}",
                    n=r["n"],
                    peak_mb=r["peak_kb"] / 1024,
                    base_mb=r["base_rss_kb"] / 1024,
                    working_mb=work / 1024,
                    data_mb=r["data_kb"] / 1024,
                    seconds=r["seconds"],
                )
            )
        peaks = [r["peak_kb"] for r in res]
        works = [r["peak_kb"] - r["base_rss_kb"] for r in res]
        rel_peak = peaks[-1] / peaks[0] - 1
        # one-sided: how much more working memory the largest n needs than the smallest
        rel_work = max(works) / max(works[0], 1) - 1
        rows.append(
            make_row(
                "memory",
                label,
                "working set growth 10k->60k",
                ratio=rel_work,
                target=TARGETS["memory_flat_rel"],
                meets=bool(rel_work <= TARGETS["memory_flat_rel"]),
                note=f"peak RSS during the run minus RSS before it (imports + the input already on the "
                f"device); total peak grows {100 * rel_peak:.1f}% (includes the n*784*4-byte input itself)",
            )
        )
        rows.append(make_row("memory", label, "total peak RSS growth 10k->60k", ratio=rel_peak))
    return rows


# --------------------------------------------------------------------------- plot + driver


def _plot(
    path: Path,
    entk_plot: dict[str, Any],
    scat_sweep: list[tuple[int, float]],
    gsm_plot: dict[str, Any],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    for name, pts in (entk_plot.get("chunks") or {}).items():
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=f"{name} e-NTK embedding")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="chunk_size",
        ylabel="examples / s",
        title="e-NTK fc_1l(800), MNIST shape",
    )
    ax.legend(fontsize=8)
    ax = axes[1]
    if scat_sweep:
        ax.plot(*zip(*scat_sweep, strict=True), "o-", label="JAX ScatterNet")
    ax.set(xscale="log", xlabel="chunk_size", ylabel="images / s", title="ScatterNet J=2 L=8")
    ax.legend(fontsize=8)
    ax = axes[2]
    for name, pts in gsm_plot.items():
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=name)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="n",
        ylabel="seconds",
        title="Gaussian sampling / regression fit",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _backend() -> str:
    import jax

    return f"{jax.default_backend()} (jax {jax.__version__})"


def run_perf(*, quick: bool, out: Path, data_dir: str | None, device: str = "cpu") -> int:
    """Run every section; write ``perf-{quick,full,gpu}.{json,md,png}`` under ``out``.

    ``device="gpu"`` refuses (``SystemExit``) unless JAX sees a GPU, uses the
    full sizes unless ``quick`` and adds the paper-profile cells
    (`benchmarks.perf_gpu`). Returns 0 (1 if a section failed).
    """

    gpu_name = None
    if device == "gpu":
        gpu_name = require_gpu()
    cfg = QUICK if quick else FULL
    name = "perf-gpu" if device == "gpu" else ("perf-quick" if quick else "perf-full")
    sections = [s for s in os.environ.get("PRIVKERNELS_PERF_SECTIONS", "").split(",") if s]
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    roof = matmul_roof(cfg["repeats"])
    rows.append(
        make_row(
            "roof",
            "jnp.dot f32 2048x2048",
            "matmul (start)",
            gflops=roof["gflops"],
            median_s=roof["median_s"],
            note=f"best of runs: {roof['gflops_best']:.1f} GFLOP/s (used as the roof)",
        )
    )
    print(f"[perf] row {json.dumps(rows[-1], default=str)}", flush=True)
    entk_plot: dict[str, Any] = {}
    scat_sweep: list[tuple[int, float]] = []
    gsm_plot: dict[str, Any] = {}

    def section(key: str, fn: Callable[[], Any]) -> Any:
        if sections and key not in sections:
            return None
        t0 = time.perf_counter()
        print(f"[perf] {key} ...", flush=True)
        try:
            res = fn()
        except Exception as err:  # noqa: BLE001 - record and continue with the next section
            failures.append(key)
            rows.append(make_row(key, "ERROR", type(err).__name__, note=str(err)[:300]))
            traceback.print_exc()
            return None
        print(
            f"[perf] {key} done in {time.perf_counter() - t0:.1f} s (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
        # each row as soon as its section ends: a run stopped at a hard limit keeps what it measured
        for row in (res[0] if isinstance(res, tuple) else res) or []:
            print(f"[perf] row {json.dumps(row, default=str)}", flush=True)
        return res

    r = section("entk", lambda: bench_entk(cfg, roof["gflops_best"], data_dir))
    if r:
        rows += r[0]
        entk_plot = r[1]
    r = section("generator", lambda: bench_generator(cfg))
    rows += r or []
    r = section("dp_kip", lambda: bench_dp_kip(cfg, data_dir))
    rows += r or []
    r = section("dp_kip_epoch", lambda: bench_dp_kip_epoch(cfg, data_dir))
    rows += r or []
    r = section("dp_kip_targets", lambda: bench_dp_kip_targets(cfg, data_dir))
    rows += r or []
    r = section("dp_ntk_loop", lambda: bench_dp_ntk_loop(cfg))
    rows += r or []
    r = section("scatternet", lambda: bench_scatternet(cfg, data_dir))
    if r:
        rows += r[0]
        scat_sweep = r[1]
    r = section("gsm", lambda: bench_gsm(cfg))
    if r:
        rows += r[0]
        gsm_plot = r[1]
    r = section("memory", lambda: bench_memory(cfg))
    rows += r or []
    if device == "gpu":
        r = section("paper_cells", lambda: bench_paper_cells(data_dir))
        rows += r or []

    load_end = os.getloadavg()
    meta = {
        "mode": "quick" if quick else "full",
        "device": gpu_name or "cpu",
        "jax_backend": _backend(),
        "load_avg_start_1_5_15": [round(v, 2) for v in load_start],
        "load_avg_end_1_5_15": [round(v, 2) for v in load_end],
        "matmul_roof_gflops_median": round(roof["gflops"], 2),
        "matmul_roof_gflops_best": round(roof["gflops_best"], 2),
        "total_seconds": round(time.perf_counter() - t_start, 1),
        "protocol": "median of >= 5 runs after one warm-up call (compile_s = first call - median); "
        "ratio = baseline time / our time, same process, same run; the headline ratios "
        "(e-NTK vs loop, DP-KIP vs loop, ScatterNet vs kymatio, epoch scan vs loop) time "
        "both sides in turn, round by round (note: per-round ratio range)",
        "failed_sections": failures,
    }
    command = "python -m benchmarks perf" + (" --quick" if quick else "") + f" --device {device}"
    command += f" --out {out}"
    jpath, mpath = write_results(out, name, rows, meta=meta, columns=COLUMNS, command=command)
    try:
        _plot(Path(out) / f"{name}.png", entk_plot, scat_sweep, gsm_plot)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    print(mpath.read_text())
    print(f"wrote {jpath}, {mpath} and {name}.png")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        print(
            json.dumps(
                _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
            )
        )
    else:
        raise SystemExit(
            "usage: python -m benchmarks perf [--quick] (this module's __main__ is the memory child)"
        )
