"""Perf sections for the training loops: one compiled scan per epoch vs a per-step host loop.

* ``dp_kip_epoch``: one DP-KIP epoch (``steps_per_epoch`` noisy steps, Poisson
  batches) run as `privkernels.dp_kip.Trainer.run_steps` (schedule drawn
  ahead, one ``lax.scan``) vs the loop shape the library used before: per step,
  draw that step's Poisson sample, read its size back to the host, gather the
  padded batch and call the jitted ``train_step``, then read the step's batch
  size back (a device sync per step). Both use the same keys, so they compute
  the same steps; the row notes the largest difference of the final supports.
* ``dp_kip_targets``: ScatterNet DP-KIP epochs with the targets' features
  computed once before the scan (what `privkernels.dp_kip.fit` does,
  ``targets="repr"``; the one-off featurisation is inside the timing) vs
  computed again at every step (``targets="inputs"``, the baseline). Same keys;
  the row notes the largest difference of the final supports.
* ``dp_ntk_loop``: DP-NTK generator training, ``run_steps`` (one scan) vs a
  Python loop over the jitted ``train_step`` reading each loss back.

The baseline runs in the same process, right before the scan, on the same data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.perf_timing import (
    TARGETS,
    make_row,
    mnist_like,
    ratio_row,
    ratio_spread,
    time_interleaved,
    timing,
)

#: the CPU target of the sync-free epoch (issue: >= 1.5x the per-step loop's steps/s)
EPOCH_TARGET = TARGETS["epoch_scan_vs_loop"]


def _kip_setup(
    kernel: str,
    x: np.ndarray,
    y: np.ndarray,
    batch: int,
    spc: int,
    space: str,
    epochs: int = 1,
    targets: str = "inputs",
) -> Any:
    """A ready-to-run DP-KIP trainer, initial state and device data (as ``fit`` builds them)."""
    import jax
    import jax.numpy as jnp

    from privkernels import dp_kip
    from privkernels.dp_kip.train import padded_batch_length

    n = len(y)
    cfg, plan, opt = dp_kip.configure(
        n=n, input_shape=tuple(x.shape[1:]), n_classes=10, epsilon=1.0, kernel=kernel,
        support_per_class=spc, batch_size=batch, epochs=epochs, clip_space=space,
    )  # fmt: skip
    spec = dp_kip.make_kernel(kernel, cfg.input_shape, 10, key=jax.random.key(5))
    params = {"x": dp_kip.init_support(jax.random.key(0), cfg.n_support, cfg.input_shape)}
    state = dp_kip.initial_state(cfg, params, opt, np.zeros(params["x"].shape, bool))
    _, min_pad = padded_batch_length(n, cfg.sampling_rate, cfg.chunk_size)
    trainer = dp_kip.make_trainer(cfg, spec, plan, opt, n=n, min_pad=min_pad, targets=targets)
    xd = jnp.concatenate([jnp.asarray(x, jnp.float32), jnp.zeros((1, *x.shape[1:]))])
    yd = jnp.concatenate([dp_kip.encode_labels(jnp.asarray(y), 10), jnp.zeros((1, 10))])
    return trainer, state, xd, yd, min_pad


def _host_loop(trainer: Any, state: Any, xd: Any, yd: Any, key: Any, count: int, min_pad: int):
    """The per-step loop: sample, size to host, gather, step, batch size to host."""
    from privkernels.dp_kip import Batch
    from privkernels.dp_kip.train import step_keys
    from privkernels.privacy.sampling import poisson_schedule

    cfg = trainer.config
    n = int(xd.shape[0]) - 1
    digest = None if trainer.plan is None else trainer.plan.digest
    k_batch, k_noise = step_keys(key, 0, count, digest)
    for t in range(count):
        sched = poisson_schedule(
            k_batch[t : t + 1], n, cfg.sampling_rate, min_pad=min_pad,
            pad_multiple=cfg.chunk_size, pad_index=n,
        )  # fmt: skip
        idx = sched.indices[0]
        batch = Batch(xd[idx], yd[idx], sched.mask[0].astype(np.float32))
        state, info = trainer.train_step(state, batch, k_noise[t])
        int(info.batch_size)  # the per-step device sync
    return state


def _compute_only(trainer: Any, state: Any, xd: Any, yd: Any, key: Any, count: int, min_pad: int):
    """The loop's steps without its host work: the same batches, drawn and gathered
    beforehand, one ``train_step`` dispatch per step and no read-back until the end.

    What is left is the steps' compute, which a compiled epoch cannot avoid either:
    ``loop / compute_only`` bounds the scan's gain over the loop.
    """
    from privkernels.dp_kip import Batch
    from privkernels.dp_kip.train import step_keys
    from privkernels.privacy.sampling import poisson_schedule

    cfg = trainer.config
    n = int(xd.shape[0]) - 1
    digest = None if trainer.plan is None else trainer.plan.digest
    k_batch, k_noise = step_keys(key, 0, count, digest)
    sched = poisson_schedule(
        k_batch, n, cfg.sampling_rate, min_pad=min_pad, pad_multiple=cfg.chunk_size, pad_index=n
    )
    batches = [
        Batch(xd[sched.indices[t]], yd[sched.indices[t]], sched.mask[t].astype(np.float32))
        for t in range(count)
    ]

    def run() -> Any:
        st = state
        for t in range(count):
            st, _ = trainer.train_step(st, batches[t], k_noise[t])
        return st

    return run


def bench_dp_kip_epoch(cfg: dict[str, Any], data_dir: str | None) -> list[dict[str, Any]]:
    """One DP-KIP epoch per kernel: scan vs per-step host loop (same keys, same steps)."""
    x, y, source = mnist_like(cfg["epoch_n"], data_dir, seed=3)
    rows: list[dict[str, Any]] = []
    for kernel, space in cfg["epoch_kernels"]:
        rows += _epoch_rows(cfg, 2.0 * x - 1.0, y, kernel, space, source)
    return rows


def _epoch_rows(
    cfg: dict[str, Any], x: np.ndarray, y: np.ndarray, kernel: str, space: str, source: str
) -> list[dict[str, Any]]:
    import jax

    n, batch, spc = len(y), cfg["epoch_batch"], cfg["epoch_spc"]
    reps = max(5, cfg["epoch_repeats"])
    trainer, state, xd, yd, min_pad = _kip_setup(kernel, x, y, batch, spc, space)
    steps = trainer.config.steps_per_epoch
    key = jax.random.key(11)
    case = f"{kernel} ({space} space), n={n}, batch={batch}, m={10 * spc}"
    compute = _compute_only(trainer, state, xd, yd, key, steps, min_pad)
    return _compare_runs(
        "dp_kip_epoch", case, steps, reps,
        base=("per-step host loop (sync every step)",
              lambda: _host_loop(trainer, state, xd, yd, key, steps, min_pad)),
        fast=("one compiled scan per epoch (library)",
              lambda: trainer.run_steps(state, xd, yd, key, steps)[0]),
        base_note=f"{steps} steps per epoch; {source}", fast_note="", target=EPOCH_TARGET,
        bound=("the loop's steps alone (batches drawn beforehand, no per-step sync): "
               "bound on the scan's ratio", compute),
    )  # fmt: skip


def _compare_runs(
    section: str,
    case: str,
    steps: int,
    reps: int,
    *,
    base: tuple[str, Any],
    fast: tuple[str, Any],
    base_note: str,
    fast_note: str,
    target: float | None = None,
    bound: tuple[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Time two ways (``(label, fn() -> state)``) of running the same steps with the same keys,
    in turn (`benchmarks.perf_timing.time_interleaved`): the baseline's row, then the other's ratio
    row, noting the supports' largest difference. ``bound``: a third way, timed in the same
    rounds, whose ratio row bounds the other's (the baseline's compute without its overhead)."""
    ways = {"base": base[1], "fast": fast[1], **({"bound": bound[1]} if bound else {})}
    timed = time_interleaved(ways, reps)
    t_base, t_fast = timing(timed["base"]), timing(timed["fast"])
    a, b = np.asarray(base[1]().params["x"]), np.asarray(fast[1]().params["x"])
    diff = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
    spread = ratio_spread(timed["base"], timed["fast"])
    rows = [
        make_row(section, case, base[0], n=steps, throughput=steps / t_base["median_s"],
             note=f"steps/s in `throughput`; {base_note}", **t_base),
        ratio_row(
            section, case, fast[0], t_fast["median_s"], t_base["median_s"],
            baseline=base[0], target=target, n=steps, throughput=steps / t_fast["median_s"],
            ratio_cpu=t_base["cpu_s"] / max(t_fast["cpu_s"], 1e-12),
            note=f"{fast_note}same keys: max |difference| / max |support| = {diff:.1e}; {spread}",
            **t_fast,
        ),
    ]  # fmt: skip
    if bound is not None:
        t_bound = timing(timed["bound"])
        rows.append(ratio_row(
            section, case, bound[0], t_bound["median_s"], t_base["median_s"], baseline=base[0],
            n=steps, throughput=steps / t_bound["median_s"],
            ratio_cpu=t_base["cpu_s"] / max(t_bound["cpu_s"], 1e-12),
            note=f"host work per step = (loop - this) / steps; "
            f"{ratio_spread(timed['base'], timed['bound'])}", **t_bound,
        ))  # fmt: skip
    return rows


def bench_dp_kip_targets(cfg: dict[str, Any], data_dir: str | None) -> list[dict[str, Any]]:
    """ScatterNet DP-KIP: features of the targets once (+ the epochs) vs at every step."""
    import jax

    from privkernels.dp_kip.krr import target_repr

    x, y, source = mnist_like(cfg["epoch_n"], data_dir, seed=3)
    x = 2.0 * x - 1.0
    n, batch, spc, epochs = len(y), cfg["epoch_batch"], cfg["epoch_spc"], cfg["targets_epochs"]
    reps = max(5, cfg["epoch_repeats"])
    base, state, xd, yd, _ = _kip_setup("scatternet", x, y, batch, spc, "feature", epochs)
    once = _kip_setup("scatternet", x, y, batch, spc, "feature", epochs, targets="repr")[0]
    steps, chunk = base.config.planned_steps, base.config.chunk_size
    key = jax.random.key(11)

    def features_once() -> Any:
        return once.run_steps(state, target_repr(once.spec, xd, chunk), yd, key, steps)[0]

    case = f"scatternet (feature space), n={n}, batch={batch}, m={10 * spc}, {epochs} epochs"
    return _compare_runs(
        "dp_kip_targets", case, steps, reps,
        base=("features at every step", lambda: base.run_steps(state, xd, yd, key, steps)[0]),
        fast=("features once, then the steps (fit)", features_once),
        base_note=f"{steps} steps; {source}",
        fast_note=f"timing includes the one-off features of all {n} rows; ",
    )  # fmt: skip


def bench_dp_ntk_loop(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """DP-NTK generator steps: one scan vs a per-step loop reading each loss back."""
    import jax
    import optax

    from privkernels import dp_ntk
    from privkernels.dp_ntk.train import TrainState, run_steps, target_embedding, train_step
    from privkernels.features import fc_1l

    steps, gb = cfg["ntk_loop_steps"], cfg["ntk_loop_batch"]
    x, y, source = mnist_like(2000, None, seed=4)
    res = dp_ntk.fit(
        jax.random.key(0), x.reshape(len(x), -1), y, epsilon=1.0, n_classes=10,
        network=fc_1l(800), iterations=1, batch_size=gb, progress=False,
    )  # fmt: skip
    cfg_r = res.config
    target = target_embedding(res.noisy_embedding, res.noisy_proportions, cfg_r.min_proportion)
    state = TrainState(res.generator_params, optax.adam(cfg_r.learning_rate).init(
        res.generator_params), jax.random.key(1), jax.numpy.int32(0))  # fmt: skip
    args = (cfg_r, res.generator, res.network, res.ntk_params, target)

    def loop() -> Any:
        st = state
        for _ in range(steps):
            st, loss = train_step(st, *args)
            float(loss)
        return st

    reps = max(5, cfg["epoch_repeats"])
    timed = time_interleaved(
        {"loop": loop, "scan": lambda: run_steps(state, steps, *args)[0]}, reps
    )
    t_loop, t_scan = timing(timed["loop"]), timing(timed["scan"])
    case = f"fc_1l(800) e-NTK, generator batch {gb}, {steps} steps"
    return [
        make_row("dp_ntk_loop", case, "per-step loop (loss read every step)", n=steps,
             throughput=steps / t_loop["median_s"], note=f"steps/s in `throughput`; {source}",
             **t_loop),
        ratio_row(
            "dp_ntk_loop", case, "run_steps: one compiled scan (library)", t_scan["median_s"],
            t_loop["median_s"], baseline="per-step loop", target=None, n=steps,
            throughput=steps / t_scan["median_s"],
            ratio_cpu=t_loop["cpu_s"] / max(t_scan["cpu_s"], 1e-12),
            note=ratio_spread(timed["loop"], timed["scan"]), **t_scan,
        ),
    ]  # fmt: skip
