"""``dp_kip.fit``: validate, calibrate, train epoch by epoch, report (Vinaroz & Park, Alg. 1)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels import checkpoint
from privkernels._batching import map_row_chunks
from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_array,
    check_bool,
    check_fit_rows,
    check_int,
    check_labels,
    infer_n_classes,
)
from privkernels.dp_kip.clipped_sums import choose_strategy
from privkernels.dp_kip.dp_ntk_init import (
    STANDARDIZED,
    DPNTKInit,
    as_dp_ntk_init,
    dp_ntk_start,
    split_budget,
)
from privkernels.dp_kip.init import corruption_mask, resolve_init, support_labels
from privkernels.dp_kip.kernels import KERNELS, KernelSpec, make_kernel
from privkernels.dp_kip.krr import encode_labels, repr_width, target_repr
from privkernels.dp_kip.result import DPKIPResult, predictor, restored_history, saved_history
from privkernels.dp_kip.settings import (
    DEFAULT_BATCH_SIZE,
    KERNEL_DEFAULTS,
    Resolved,
    Settings,
    resolve,
)
from privkernels.dp_kip.train import (
    DPKIPConfig,
    State,
    Trainer,
    initial_state,
    make_trainer,
    padded_batch_length,
    planning_size,
)
from privkernels.options import RunOptions, run_options
from privkernels.privacy.accountant import charged_release, note_release
from privkernels.privacy.accounting import DPSGD_RELATIONS, check_sampling_rate
from privkernels.privacy.budget import Budget, as_budget
from privkernels.privacy.dpsgd import DPSGDPlan, dpsgd_plan
from privkernels.privacy.keys import public_key_of, release_key
from privkernels.privacy.report import (
    PrivacyReport,
    check_neighbouring,
    compose,
    non_private_report,
    with_notes,
)
from privkernels.privacy.warnings import warn_privacy_leak
from privkernels.sharding import shard_rows

__all__ = [
    "fit",
    "configure",
    "plan_run",
    "check_run_arguments",
    "Settings",
    "KERNEL_DEFAULTS",
    "DEFAULT_BATCH_SIZE",
]

CHECKPOINT_FORMAT = "privkernels.dp_kip.checkpoint/1"

#: target examples per chunk inside a step when ``chunk_size`` is not given
DEFAULT_CHUNK_SIZE = 128


#: With ``progress=True`` an epoch runs as this many compiled segments, so the bar
#: moves within an epoch (a handful of host syncs per epoch; no result changes).
PROGRESS_UPDATES = 10


def fit(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    n_classes: int | None = None,
    mesh: Any = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool = True,
    kernel: Literal["scatternet", "fc_ntk", "entk"] = "scatternet",
    support_per_class: int = 10,
    batch_size: int | None = None,
    epochs: int = 10,
    learning_rate: float | None = None,
    relative_reg: float | None = None,
    jitter: float = 0.0,
    clip_norm: float | None = None,
    clip_space: Literal["auto", "input", "feature"] = "auto",
    init: Any = "gaussian",
    neighbouring: Literal["replace-one", "add-remove"] = "replace-one",
    sampling_rate: float | None = None,
    accountant: Literal["pld", "rdp"] = "pld",
    corrupt_fraction: float = 0.0,
    kernel_options: Mapping[str, Any] | None = None,
    learn_labels: bool = False,
    optimizer: Any = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    grad_method: Literal["auto", "adjoint", "vmap"] = "auto",
    x_test: Any = None,
    y_test: Any = None,
    eval_every: int = 1,
    diagnostics: bool = False,
    max_steps: int | None = None,
    public_key: jax.Array | None = None,
    budget_accountant: Any = None,
) -> DPKIPResult:
    """Distil ``(x, y)`` into ``support_per_class`` points per class with DP-KIP (Alg. 1).

    Args:
      key: ``jax.random.key`` of the release, split by `RunKeys`. A key that visibly comes
        from a small int draws reproducible, not secret, noise
        (`privkernels.privacy.SeededKeyWarning`, report note; use `privkernels.fresh_key`).
      x: ``(n, *input_shape)`` float private inputs; y: ``(n,)`` int labels.
      epsilon ... grad_method (but ``n_classes`` and the run options): the run's
        `privkernels.dp_kip.settings.Settings`, documented there.
      n_classes: number of classes; None reads ``max(y) + 1`` with a
        ``PrivacyLeakWarning`` and a report note.
      mesh, checkpoint_path, resume, progress, chunk_size: the run options
        (`privkernels.options.RunOptions`). A mesh shards the example axis: every
        device samples, gathers and clips its own rows and the clipped sums are added
        before the noise (drawn once, from the step's key). The checkpoint is written
        after every epoch, on ``KeyboardInterrupt`` and (``init="dp_ntk"``) as soon as the
        start is released; ``resume=True`` continues it (same settings, keys, optimizer,
        ``diagnostics`` and test set, else ``ValueError`` before any noise). ``chunk_size``:
        target examples per chunk inside a step.
      x_test, y_test: optional *public* test set, evaluated every ``eval_every`` epochs.
      diagnostics: record the un-noised loss, clip fraction and batch sizes (NOT private).
      max_steps: stop after this many steps in total; the report covers them.
      public_key: the key of the data-independent draws (`RunKeys`), independent of ``key``.
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged ``(epsilon,
        delta)`` (None: the default accountant of an open ``with`` block, or none); it
        refuses the fit before any noise when that does not fit in what remains. A run
        stopped after its release began is charged its plan; its resume (a report of the
        whole run) is charged again: over-counting is safe.

    Returns:
      `DPKIPResult`.

    Raises:
      ValueError: on bad input (TypeError on wrong kinds), before any noise is drawn.
    """
    settings = Settings(
        epsilon=epsilon, delta=delta, kernel=kernel, support_per_class=support_per_class,
        batch_size=batch_size, epochs=epochs, learning_rate=learning_rate,
        relative_reg=relative_reg, jitter=jitter, clip_norm=clip_norm, clip_space=clip_space,
        init=init, neighbouring=neighbouring, sampling_rate=sampling_rate,
        accountant=accountant, corrupt_fraction=corrupt_fraction,
        kernel_options=kernel_options, learn_labels=learn_labels, optimizer=optimizer,
        grad_method=grad_method,
    )  # fmt: skip
    opts = run_options(mesh=mesh, checkpoint_path=checkpoint_path, resume=resume,
                       progress=progress, chunk_size=chunk_size)  # fmt: skip
    key, seeded = release_key(key)
    _check_checkpoint_args(opts.checkpoint_path, opts.resume)
    run = functools.partial(
        _fit_run, key, seeded, x, y, settings, opts, n_classes=n_classes, test=(x_test, y_test),
        eval_every=eval_every, max_steps=max_steps, diagnostics=diagnostics,
        public_key=public_key,
    )  # fmt: skip
    return charged_release(budget_accountant, epsilon, delta, neighbouring, run)


def _fit_run(
    key: jax.Array, seeded: tuple[str, ...], x: Any, y: Any, settings: Settings, opts: RunOptions, *, n_classes: Any,
    test: tuple[Any, Any], eval_every: Any, max_steps: Any, diagnostics: bool, public_key: jax.Array | None,
) -> DPKIPResult:  # fmt: skip
    """`fit` after its settings: validate and plan (`_prepare`), start, train, report."""
    run = _prepare(x, y, settings, opts, n_classes=n_classes, test=test,
                   eval_every=eval_every, max_steps=max_steps, diagnostics=diagnostics)  # fmt: skip
    keys = _run_keys(key, public_key)
    state, history, report, spec, corrupted = _run(
        run, keys, opts, init=settings.init, eval_every=eval_every, diagnostics=diagnostics,
        max_steps=max_steps,
    )  # fmt: skip
    cfg = run.config
    return DPKIPResult(
        support_x=np.asarray(state.params["x"]),
        support_y=support_labels(cfg.n_classes, cfg.support_per_class),
        support_targets=np.asarray(state.params.get("y", state.y_s)),
        report=with_notes(report, seeded),
        config=cfg,
        history=history,
        corrupted=corrupted,
        kernel_params=spec.params,
        steps_done=int(state.step),
    )


class RunKeys(NamedTuple):
    """The keys of a run: the private draws' (``init``: the DP-NTK start's noise; ``train``:
    step ``t`` draws its batch and noise from ``fold_in(fold_digest(train, plan.digest),
    t)``, bound to the plan) and the data-independent ones (support, mask, kernel), with
    the public key the caller gave (None: the latter are split off ``key``)."""

    init: jax.Array
    support: jax.Array
    corrupt: jax.Array
    kernel: jax.Array
    train: jax.Array
    key: jax.Array
    public_key: jax.Array | None


def _run_keys(key: jax.Array, public_key: jax.Array | None) -> RunKeys:
    """``key`` split into (init, corrupt, kernel, train); a ``public_key`` replaces the
    data-independent three (support, corrupt, kernel)."""
    k_init, k_corrupt, k_kernel, k_train = jax.random.split(key, 4)
    k_support = k_init  # the Gaussian start (the DP-NTK start draws its noise from k_init)
    if public_key is not None:
        k_support, k_corrupt, k_kernel = jax.random.split(public_key_of(public_key, key), 3)
    return RunKeys(k_init, k_support, k_corrupt, k_kernel, k_train, key, public_key)


def _run(
    run: Prepared, keys: RunKeys, opts: RunOptions, *, init: Any, eval_every: int,
    diagnostics: bool, max_steps: int | None,
) -> tuple[State, dict[str, list[Any]], PrivacyReport, KernelSpec, np.ndarray]:  # fmt: skip
    """Start (resumed, DP-NTK or data-independent), train, report: the release itself."""
    cfg, data, test, ck = run.config, run.data, run.test, opts.checkpoint_path
    if run.dp_init is not None:  # everything that can refuse, before that release
        _check_before_release(run)
    history = _new_history(test is not None, diagnostics)
    key_check = None if ck is None else _key_check(keys.key, keys.public_key)
    saved = (  # read once and checked whole (settings, key, history, state) before noise
        _read_checkpoint(ck, cfg, key_check, run.optimizer, history) if opts.resume else None
    )
    spec, corrupted, init_fn, init_line = _start(cfg, init, keys.corrupt, keys.kernel, run.dp_init)
    note_release()  # from here a failure is charged its planned budget (`BudgetAccountant`)
    start, init_report, released = _private_start(
        run, keys.init, opts, None if saved is None else saved[1]
    )
    if start is not None:  # the DP-NTK report says where the support starts
        init_fn, init_line = (lambda *_: jnp.asarray(start)), ""
    if saved is not None:  # the checkpoint's state and history, restored by _read_checkpoint
        state, history = saved[0], restored_history(saved[1]["history"])
    else:
        params = {"x": init_fn(keys.support, cfg.n_support, cfg.input_shape)}
        state = initial_state(cfg, params, run.optimizer, corrupted)
    stop_at = cfg.planned_steps if max_steps is None else min(cfg.planned_steps, max_steps)
    save = functools.partial(_save, ck, cfg=cfg, init_report=init_report, key_check=key_check)
    if released:  # a fresh release's record is kept at once (an older checkpoint's too):
        save(state, history)  # a failure from here on resumes
    targets = target_rows(spec, cfg, opts.mesh, stop_at - int(state.step), int(data[0].shape[0]))
    if targets == "repr":  # the fixed feature map of every row, once (not at every step)
        data = (target_repr(spec, data[0], cfg.chunk_size), data[1])
    trainer = make_trainer(
        cfg, spec, run.plan, run.optimizer, n=run.n,
        min_pad=padded_batch_length(
            planning_size(cfg.n, cfg.batch_size, cfg.sampling_rate), cfg.sampling_rate,
            _chunk(opts),
        )[1],
        cacheable=cfg.kernel != "entk" and not cfg.custom_optimizer, mesh=opts.mesh,
        targets=targets,
    )  # fmt: skip
    evaluate = None if test is None else _evaluator(spec, cfg, *test)
    state = _train(
        trainer, state, data, keys.train, stop_at=stop_at, history=history, save=save,
        evaluate=evaluate, eval_every=eval_every, progress=opts.progress, diagnostics=diagnostics,
    )  # fmt: skip
    report = _report(cfg, run.plan, int(state.step), init_line, run.notes, diagnostics)
    if init_report is not None:
        report = compose(init_report, report)
    return state, history, report, spec, corrupted


#: the largest target representation (float32 bytes of the rows held) that `fit`
#: computes once for the ScatterNet kernel instead of at every step
TARGET_REPR_BYTES = 2**31


def target_rows(spec: KernelSpec, cfg: DPKIPConfig, mesh: Any, steps: int, held: int) -> str:
    """What the trainer's rows hold (`privkernels.dp_kip.train.TARGETS`).

    ``"repr"`` for the ScatterNet kernel when the features of the ``held`` rows (the
    private rows and the public zero row) take at most `TARGET_REPR_BYTES` and the
    ``steps`` still to run would featurise at least `planning_size` rows one batch at a
    time; ``"inputs"`` otherwise and with a mesh. ScatterNet's feature map is fixed and
    row-wise, and its features computed once equal those computed inside the step bit
    for bit, so the release is the same either way; the true ``held`` (private under
    add-remove) only chooses how much memory is spent, like the sampler's padding.
    e-NTK keeps per-step features: computed apart they round differently (5e-7
    relative), and one feature per network parameter rarely fits the bound.
    """
    if mesh is not None or spec.name != "scatternet":
        return "inputs"
    f = repr_width(spec, cfg.input_shape)
    rows = planning_size(cfg.n, cfg.batch_size, cfg.sampling_rate)
    if held * f * 4 > TARGET_REPR_BYTES or steps * cfg.batch_size < rows:
        return "inputs"
    return "repr"


def _check_before_release(run: Prepared) -> None:
    """Checks the DP-NTK start must pass before its release (nothing random is drawn).

    The optimizer is traced on a zero support (``jax.eval_shape``) and standardised
    samples need two entries (`plan_run` checked the input rank). A resumed checkpoint is checked against this call by
    `_read_checkpoint` and `_saved_start_report`, also before any release.
    """
    cfg = run.config  # the input rank was checked by plan_run
    if (
        run.dp_init is not None
        and run.dp_init.data_range == STANDARDIZED
        and math.prod(cfg.input_shape) < 2
    ):
        raise ValueError(
            "data_range='standardized' needs inputs of at least 2 entries (a sample is "
            f"standardised on its own), got input_shape {cfg.input_shape}"
        )
    zeros = {"x": jnp.zeros((cfg.n_support, *cfg.input_shape), jnp.float32)}
    if cfg.learn_labels:  # the optimizer must take the labels' leaf too
        zeros["y"] = jnp.zeros((cfg.n_support, cfg.n_classes), jnp.float32)
    opt = run.optimizer
    jax.eval_shape(lambda p: opt.update(p, opt.init(p), p), zeros)


def _private_start(
    run: Prepared, key: jax.Array, opts: RunOptions, resumed_meta: Mapping[str, Any] | None
) -> tuple[np.ndarray | None, PrivacyReport | None, bool]:
    """``init="dp_ntk"``: the DP-NTK start, its report (its share of the budget, split once
    by `plan_run`) and whether the release ran in this call (so `fit` writes its record
    once); else ``None, None, False``.

    A resumed run whose checkpoint holds the start's report (every checkpoint `_save` writes)
    takes that report and a zero placeholder (the checkpoint's state holds the support), so
    the release is not repeated and DP-NTK does not read the data again; one without it (no
    file `_read_checkpoint` accepts is written so) re-runs the release with the same key
    (the same noise: output discarded, counted once).
    """
    if run.dp_init is None:
        return None, None, False
    cfg, share = run.config, run.start_budget
    saved = None if resumed_meta is None else _saved_start_report(resumed_meta, cfg, share)
    if saved is not None:
        return np.zeros((cfg.n_support, *cfg.input_shape), np.float32), saved, False
    start, report = dp_ntk_start(
        key, run.x, run.y, n_classes=cfg.n_classes,
        labels=support_labels(cfg.n_classes, cfg.support_per_class), budget=share,
        spec=run.dp_init, mesh=opts.mesh, progress=opts.progress, neighbouring=cfg.neighbouring,
    )  # fmt: skip
    return start, report, True


def _saved_start_report(
    meta: Mapping[str, Any], cfg: DPKIPConfig, share: Budget | None
) -> PrivacyReport | None:
    """The DP-NTK start's report a checkpoint's ``meta`` keeps (`_read_checkpoint`); None in
    one without it.

    Refused (``ValueError``, nothing drawn) unless it records exactly this call's ``share`` of
    the budget under this call's relation, or no release for a non-private call: a resume
    never composes another release's record.
    """
    if meta.get("init_report") is None:
        return None
    rep = PrivacyReport.from_dict(meta["init_report"])
    if share is None:
        ok = not rep.private
    else:
        ok = (
            rep.private
            and rep.neighbouring == cfg.neighbouring
            and math.isclose(rep.epsilon, share.epsilon, rel_tol=1e-9)
            and math.isclose(rep.delta, share.delta, rel_tol=1e-9)
        )
    if not ok:
        raise ValueError(
            "the checkpoint's DP-NTK start report does not record this call's share of the "
            f"budget ({share}) under its relation ({cfg.neighbouring}); resume refused"
        )
    return rep


def _start(
    cfg: DPKIPConfig, init: Any, k_corrupt: jax.Array, k_kernel: jax.Array, dp_init: Any
) -> tuple[KernelSpec, np.ndarray, Any, str]:
    """The kernel, the frozen-pixel mask and the support's initialiser with its report line.

    All data independent, and built before the DP-NTK start (``dp_init``) is released, so a
    failure here (e.g. out of memory) costs no release; `fit` then initialises from that start.
    """
    spec = make_kernel(
        cfg.kernel, cfg.input_shape, cfg.n_classes, options=cfg.kernel_options, key=k_kernel
    )
    _, init_fn, init_line = (None, None, "") if dp_init is not None else resolve_init(init)
    shape = (cfg.n_support, *cfg.input_shape)
    corrupted = (
        corruption_mask(k_corrupt, shape, cfg.corrupt_fraction)
        if cfg.corrupt_fraction > 0
        else np.zeros(shape, bool)
    )
    return spec, corrupted, init_fn, init_line


class Prepared(NamedTuple):
    """A validated run before any randomness: config, plan, optimizer and the device data."""

    config: DPKIPConfig
    plan: DPSGDPlan | None
    optimizer: Any
    data: tuple[jax.Array, jax.Array]
    test: Any
    n: int
    notes: tuple[str, ...]
    x: Any
    y: Any
    dp_init: DPNTKInit | None
    start_budget: Budget | None


class RunPlan(NamedTuple):
    """`plan_run`'s result: the config, the DP-SGD plan (None: non-private), the optimizer
    and the DP-NTK start's share of the budget (None without that start or privacy)."""

    config: DPKIPConfig
    plan: DPSGDPlan | None
    optimizer: Any
    start_budget: Budget | None


def _prepare(
    x: Any, y: Any, s: Settings, opts: RunOptions, *, n_classes: Any, test: tuple[Any, Any],
    eval_every: Any, max_steps: Any, diagnostics: bool,
) -> Prepared:  # fmt: skip
    """Validate the data and everything else (before any randomness); build config and plan."""
    if s.kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {s.kernel!r}")
    check_neighbouring(s.neighbouring, DPSGD_RELATIONS)  # before the data is read
    check_fit_rows(x, "x")
    x = check_array(x, "x", min_rows=1)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (n, *input_shape), got {tuple(x.shape)}")
    n, input_shape = int(x.shape[0]), tuple(int(s) for s in x.shape[1:])
    n_classes, inferred = infer_n_classes(y, n_classes, minimum=2)
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes}")
    y = check_labels(y, n_classes, "y", n_rows=n)
    _check_loop(eval_every, max_steps, diagnostics)
    rp = plan_run(s, n=n, input_shape=input_shape, n_classes=n_classes, chunk_size=_chunk(opts))
    checked_test = _check_test(*test, input_shape, n_classes)
    if diagnostics and rp.plan is not None:
        warn_privacy_leak(
            "diagnostics=True: the training loss, clip fraction and Poisson batch sizes"
        )
    notes = (N_CLASSES_INFERRED_NOTE,) if inferred else ()
    data = _device_data(x, y, n_classes, opts.mesh)
    return Prepared(rp.config, rp.plan, rp.optimizer, data, checked_test, n, notes, x, y,
                    as_dp_ntk_init(s.init), rp.start_budget)  # fmt: skip


def _chunk(opts: RunOptions) -> int:
    return DEFAULT_CHUNK_SIZE if opts.chunk_size is None else opts.chunk_size


def configure(
    *,
    n: int,
    input_shape: tuple[int, ...],
    n_classes: int,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    **settings: Any,
) -> tuple[DPKIPConfig, DPSGDPlan | None, Any]:
    """The validated ``(config, DP-SGD plan, optax optimizer)`` of a run, without data.

    Use it with `make_trainer` to drive ``train_step`` yourself.

    Args:
      n: the number of rows (under add-remove only used to size arrays).
      input_shape, n_classes: the public shapes.
      chunk_size: target examples per chunk inside a step (bounds memory).
      **settings: the run's settings, the keywords of `Settings` (the settings of `fit`;
        ``epsilon`` is required). An unknown keyword is a ``TypeError``.

    Returns:
      ``(DPKIPConfig, DPSGDPlan or None, optax optimizer)``.
    """
    rp = plan_run(
        Settings(**settings), n=n, input_shape=input_shape, n_classes=n_classes,
        chunk_size=chunk_size,
    )  # fmt: skip
    return rp.config, rp.plan, rp.optimizer


def plan_run(
    s: Settings, *, n: int, input_shape: tuple[int, ...], n_classes: int, chunk_size: int
) -> RunPlan:
    """`configure` on typed `Settings`: the budget split once (the DP-NTK start's share
    apart), the settings resolved, the plan calibrated to the DP-SGD share."""
    check_int(n_classes, "n_classes", minimum=2)  # the kernel's name: `resolve`'s check
    if s.optimizer is not None and not all(
        callable(getattr(s.optimizer, f, None)) for f in ("init", "update")
    ):
        raise TypeError("optimizer must be an optax GradientTransformation (init and update)")
    budget, start_budget = as_budget(s.epsilon, s.delta), None
    dp_init = as_dp_ntk_init(s.init)
    if dp_init is not None and len(tuple(input_shape)) not in (1, 2, 3):
        raise ValueError(
            f"init='dp_ntk' needs inputs of shape (d,), (H, W) or (H, W, C), got {input_shape}"
        )
    if dp_init is not None:  # DP-NTK is released under the same relation (one report)
        budget, start_budget = split_budget(budget, dp_init)
    resolved = resolve(s, int(n), budget is not None)
    s = dataclasses.replace(resolved.settings, epochs=check_int(s.epochs, "epochs", minimum=1))
    resolved = resolved._replace(settings=s)
    probe = make_kernel(
        s.kernel, tuple(input_shape), n_classes, options=s.kernel_options, params=_ENTK_PROBE
    )
    if resolved.clip_space == "feature" and probe.kind != "features":
        raise ValueError(
            f"clip_space='feature' needs a linear-feature kernel (scatternet or entk), not {s.kernel}"
        )
    strategy = choose_strategy(
        probe, space=resolved.clip_space, private=budget is not None,
        learn_labels=bool(s.learn_labels), corrupted=s.corrupt_fraction > 0,
        grad_method=s.grad_method,
    )  # fmt: skip
    steps = s.epochs * planned_steps(resolved.sampling_rate, 1)
    plan = None
    if budget is not None:
        assert s.clip_norm is not None  # resolved: checked positive under privacy
        plan = dpsgd_plan(
            budget, sampling_rate=resolved.sampling_rate, steps=steps, clip_norm=s.clip_norm,
            neighbouring=s.neighbouring, accountant=s.accountant,
            variant="support and labels" if s.learn_labels else None,
        )  # fmt: skip
    init_name = dp_init.name if dp_init is not None else resolve_init(s.init)[0]
    if init_name == "lowpass" and len(tuple(input_shape)) not in (2, 3):
        raise ValueError(f"init='lowpass' needs image inputs (H, W[, C]), got {tuple(input_shape)}")
    opt = optax.adam(s.learning_rate) if s.optimizer is None else s.optimizer
    cfg = _config(resolved, plan, probe.options, strategy, init_name,
                  shapes=(int(n), tuple(input_shape), n_classes), chunk_size=chunk_size)  # fmt: skip
    return RunPlan(cfg, plan, opt, start_budget)


def _config(
    resolved: Resolved, plan: DPSGDPlan | None, kernel_options: Any, strategy: str,
    init_name: str, *, shapes: tuple[int, tuple[int, ...], int], chunk_size: int,
) -> DPKIPConfig:  # fmt: skip
    """The run's frozen config: the resolved settings, and the plan's numbers as it holds them."""
    s, q = resolved.settings, resolved.sampling_rate
    n, input_shape, n_classes = shapes
    assert s.batch_size is not None and s.learning_rate is not None  # resolved
    assert s.relative_reg is not None
    public_n = n if s.neighbouring == "replace-one" else None  # add-remove: n is private
    steps_per_epoch = planned_steps(q, 1)
    return DPKIPConfig(
        kernel=s.kernel, kernel_options=kernel_options, input_shape=input_shape,
        n_classes=n_classes, support_per_class=check_int(s.support_per_class, "support_per_class"),
        relative_reg=s.relative_reg, jitter=s.jitter, learning_rate=s.learning_rate,
        clip_space=resolved.clip_space, strategy=strategy, batch_size=s.batch_size,
        sampling_rate=q, steps_per_epoch=steps_per_epoch, epochs=s.epochs,
        planned_steps=s.epochs * steps_per_epoch,
        chunk_size=padded_batch_length(
            planning_size(public_n, s.batch_size, q), q, check_int(chunk_size, "chunk_size")
        )[0],
        corrupt_fraction=s.corrupt_fraction, learn_labels=bool(s.learn_labels), init=init_name,
        custom_optimizer=s.optimizer is not None, n=public_n,
        epsilon=None if plan is None else plan.epsilon,
        delta=None if plan is None else plan.delta,
        clip_norm=None if plan is None else plan.clip_norm,
        noise_multiplier=None if plan is None else plan.noise_multiplier,
        neighbouring=None if plan is None else plan.neighbouring,
        accountant=None if plan is None else plan.accountant,
    )  # fmt: skip


#: placeholder e-NTK parameters for the validation-time kernel probe (shapes only)
_ENTK_PROBE = "probe"


def planned_steps(sampling_rate: float, epochs: int) -> int:
    """The number of DP-SGD steps (Alg. 1's ``T``) of ``epochs`` epochs at Poisson rate ``q``:
    ``epochs * max(1, round(1 / q))``, one epoch being ``1 / q`` expected batches.

    A function of public numbers only, as `configure` uses it; a caller building a step-size
    schedule for ``fit(optimizer=...)`` gets the same count from here (``q = batch_size / n``
    under replace-one, the public ``sampling_rate`` under add-remove).
    """
    q = check_sampling_rate(sampling_rate)
    return check_int(epochs, "epochs", minimum=1) * max(1, round(1.0 / q))


def _check_test(x_test: Any, y_test: Any, input_shape: tuple[int, ...], n_classes: int) -> Any:
    if x_test is None and y_test is None:
        return None
    if x_test is None or y_test is None:
        raise ValueError("give both x_test and y_test, or neither")
    x_test = check_array(x_test, "x_test")
    if tuple(x_test.shape[1:]) != input_shape:
        raise ValueError(f"x_test must have shape (n, {input_shape}), got {tuple(x_test.shape)}")
    y_test = check_labels(y_test, n_classes, "y_test", n_rows=int(x_test.shape[0]))
    return jnp.asarray(x_test, jnp.float32), np.asarray(y_test)


def _check_loop(eval_every: Any, max_steps: Any, diagnostics: Any) -> None:
    """`fit`'s checks of its loop arguments (``ValueError`` / ``TypeError``, no data read)."""
    check_int(eval_every, "eval_every", minimum=1)
    check_bool(diagnostics, "diagnostics")
    if max_steps is not None:
        check_int(max_steps, "max_steps", minimum=1)


def check_run_arguments(
    *, input_shape: tuple[int, ...] | None, n_classes: int | None,
    checkpoint_path: str | os.PathLike[str] | None = None, resume: bool = False,
    x_test: Any = None, y_test: Any = None, eval_every: Any = 1, max_steps: Any = None,
    diagnostics: Any = False,
) -> None:  # fmt: skip
    """Refuse, as `fit` does before its noise, run arguments that need no private data:
    ``eval_every`` / ``max_steps`` below 1, a checkpoint path that exists without
    ``resume`` (or is missing with it) or cannot be written (`_check_checkpoint_args`),
    and a public test set whose rows are not ``input_shape`` or whose labels are not in
    ``range(n_classes)`` (checked when both are given). For a caller that releases
    something before calling `fit` (a pipeline's private scaler), so that such a
    setting costs no budget. ``ValueError`` (``TypeError`` on wrong kinds)."""
    _check_loop(eval_every, max_steps, diagnostics)
    opts = run_options(checkpoint_path=checkpoint_path, resume=resume)
    _check_checkpoint_args(opts.checkpoint_path, opts.resume)
    if input_shape is not None and n_classes is not None:
        _check_test(x_test, y_test, tuple(input_shape), n_classes)


def _device_data(x: Any, y: Any, n_classes: int, mesh: Any) -> tuple[jax.Array, jax.Array]:
    """The n private rows, then one public zero row (index n): where padding points.

    With a mesh: the rows sharded over it (each device appends its own public row).
    """
    if mesh is not None:
        xd = jnp.asarray(x).astype(jnp.float32)
        yd = jax.jit(lambda a: encode_labels(a, n_classes))(jnp.asarray(y))
        (xs, ys), _ = shard_rows(mesh, xd, yd)
        return xs, ys
    xd = jnp.asarray(x, jnp.float32)
    xd = jnp.concatenate([xd, jnp.zeros((1, *xd.shape[1:]), jnp.float32)])
    yd = jnp.concatenate(
        [encode_labels(jnp.asarray(y), n_classes), jnp.zeros((1, n_classes), jnp.float32)]
    )
    return xd, yd


def _check_checkpoint_args(path: Path | None, resume: bool) -> None:
    if path is None:
        if resume:
            raise ValueError("resume=True needs checkpoint_path")
        return
    if not resume:  # before any noise, not at the first save
        checkpoint.check_new(
            path, "continue it (a fresh run would not count the steps already taken)"
        )
        return
    checkpoint.check_writable(path)
    if not path.is_file():
        raise ValueError(f"resume=True but checkpoint {path} does not exist")


def _new_history(has_test: bool, diagnostics: bool) -> dict[str, list[Any]]:
    history: dict[str, list[Any]] = {"epoch": [], "step": [], "seconds": []}
    if has_test:
        history.update(test_accuracy=[], test_loss=[])
    if diagnostics:
        history.update(train_loss=[], clip_fraction=[], batch_sizes=[])
    return history


def _evaluator(spec: KernelSpec, cfg: DPKIPConfig, xt: jax.Array, yt: np.ndarray) -> Any:
    run = predictor(spec, cfg)
    yt_enc = np.asarray(encode_labels(jnp.asarray(yt), cfg.n_classes))

    def evaluate(state: State) -> tuple[float, float]:
        xs, ys = state.params["x"], state.params.get("y", state.y_s)
        pred = map_row_chunks(lambda xb: run(xs, ys, xb), xt, 1000)
        acc = float(np.mean(np.argmax(pred, -1) == yt))
        return acc, float(np.mean(np.sum((pred - yt_enc) ** 2, -1)))

    return evaluate


def _train(
    trainer: Trainer,
    state: State,
    data: tuple[jax.Array, jax.Array],
    k_train: jax.Array,
    *,
    stop_at: int,
    history: dict[str, list[Any]],
    save: Callable[[State, dict[str, list[Any]]], None],
    evaluate: Any,
    eval_every: int,
    progress: bool,
    diagnostics: bool,
) -> State:
    """Epoch loop: compiled scans (one per epoch; ``PROGRESS_UPDATES`` per epoch with a
    progress bar), then history, evaluation and ``save(state, history)`` (the checkpoint,
    `_save`) at every epoch's end.

    Step ``t`` draws its batch and noise from ``fold_in(k_train, t)`` whatever the
    segment it runs in, so the segmenting changes no result.
    """
    cfg = trainer.config
    per_epoch = cfg.steps_per_epoch
    segment = -(-per_epoch // PROGRESS_UPDATES) if progress else per_epoch
    t0 = time.perf_counter()
    bar = _progress_bar(progress, cfg, int(state.step))
    infos: list[Any] = []
    try:
        while int(state.step) < stop_at:
            done = int(state.step)
            count = min(segment, per_epoch - done % per_epoch, stop_at - done)
            new_state, info = trainer.run_steps(state, *data, k_train, count)
            _check_support(new_state)
            state = new_state  # one assignment commits (state, step) together
            infos.append(info)
            if bar is not None:
                bar.update(count)
            done = int(state.step)
            if done % per_epoch and done < stop_at:
                continue  # mid-epoch: progress only
            epoch_info = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *infos)
            infos = []
            _log_epoch(history, state, epoch_info, cfg, t0, stop_at, evaluate, eval_every,
                       diagnostics)  # fmt: skip
            save(state, history)
            if bar is not None and evaluate is not None:
                if not math.isnan(history["test_accuracy"][-1]):
                    bar.set_postfix(test_acc=f"{history['test_accuracy'][-1]:.4f}")
    except KeyboardInterrupt:
        save(state, history)
        raise
    finally:
        if bar is not None:
            bar.close()
    return state


def _progress_bar(progress: bool, cfg: DPKIPConfig, initial: int) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm  # only when a progress bar is shown

    return tqdm(
        total=cfg.planned_steps,
        initial=initial,
        desc=f"DP-KIP[{cfg.kernel}]",
        unit="step",
        mininterval=1.0,
    )


def _check_support(state: State) -> None:
    if not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in state.params.values()):
        raise FloatingPointError(
            "support set (or its learned labels) became non-finite; increase "
            "relative_reg/jitter or lower the learning rate"
        )


def _log_epoch(
    history: dict[str, list[Any]],
    state: State,
    info: Any,
    cfg: DPKIPConfig,
    t0: float,
    stop_at: int,
    evaluate: Any,
    eval_every: int,
    diagnostics: bool,
) -> None:
    done = int(state.step)
    epoch = done / cfg.steps_per_epoch
    history["epoch"].append(epoch)
    history["step"].append(done)
    history["seconds"].append(time.perf_counter() - t0)
    if diagnostics:
        sizes = np.asarray(info.batch_size)
        count = max(float(sizes.sum()), 1.0)
        history["train_loss"].append(float(np.sum(info.loss_sum)) / count)
        history["clip_fraction"].append(float(np.sum(info.n_clipped)) / count)
        history["batch_sizes"].append(sizes.tolist())
    if evaluate is not None:
        if done == stop_at or int(round(epoch)) % eval_every == 0:
            acc, loss = evaluate(state)
        else:
            acc, loss = math.nan, math.nan
        history["test_accuracy"].append(acc)
        history["test_loss"].append(loss)


def _save(
    path: Path | None,
    state: State,
    history: dict[str, list[Any]],
    *,
    cfg: DPKIPConfig,
    init_report: PrivacyReport | None,
    key_check: str | None,
) -> None:
    """The checkpoint: the state, and in its metadata the settings' fingerprint, the key's
    `_key_check`, the history and the DP-NTK start's report (so a resume need not repeat
    that release)."""
    if path is None:
        return
    meta = {
        "format": CHECKPOINT_FORMAT,
        "fingerprint": cfg.fingerprint(),
        "config": cfg.to_dict(),
        "key_check": key_check,
        "history": saved_history(history),  # no running times (`UNSAVED_HISTORY`)
        "steps_done": int(state.step),
        "init_report": None if init_report is None else init_report.to_dict(),
    }
    checkpoint.save(path, checkpoint.flatten_tree("state", state), meta)


#: PBKDF2-SHA256 rounds of `_key_check` (about 0.1 s once per fit with a checkpoint): a key
#: made from a small int seed is not found from a checkpoint by trying seeds at hash speed
KEY_CHECK_ROUNDS = 200_000


def _key_check(key: jax.Array, public_key: jax.Array | None = None) -> str:
    """A deliberately slow one-way digest of ``key`` (and ``public_key`` when given; PBKDF2 over
    their bits, 16 hex digits): a checkpoint resumes only under the keys that wrote it, so a
    copy cannot be forked into runs with other noise. As secret as the key's entropy allows
    (fresh keys: 64 bits)."""
    given = [k for k in (key, public_key) if k is not None]
    bits = np.concatenate([np.asarray(checkpoint.key_to_array(k)[0], np.uint32) for k in given])
    salt = b"privkernels.dp_kip.checkpoint key"
    return hashlib.pbkdf2_hmac("sha256", bits.tobytes(), salt, KEY_CHECK_ROUNDS).hex()[:16]


def _read_checkpoint(
    path: Path | None,
    cfg: DPKIPConfig,
    key_check: str | None,
    optimizer: Any,
    history: Mapping[str, Any],
) -> tuple[State, dict[str, Any]]:
    """A resumed run's checkpoint ``(state, meta)``, read once and checked before any noise
    is drawn (``ValueError`` otherwise): the settings' fingerprint against ``cfg``, the key
    (`_key_check`, required: a file without it, written before 2026-11-27 or edited, could
    be resumed under any key), the history's entries against this call's ``history`` (so
    un-noised ``diagnostics`` never pass on unannounced, and a changed ``diagnostics`` or test
    set does not fail after noisy steps), the state against ``optimizer``'s (restored into a
    data-independent template), and its step against ``steps_done`` and the history
    (`_check_steps`)."""
    assert path is not None
    arrays, meta = checkpoint.load(path, format=CHECKPOINT_FORMAT)
    _check_fingerprint(meta, cfg)
    if not isinstance(meta.get("key_check"), str):
        raise ValueError(
            "the checkpoint holds no key_check (it was written before 2026-11-27 or edited), so "
            "its resume cannot be bound to one run's key: restart the run without resume=True"
        )
    if meta["key_check"] != key_check:
        raise ValueError(
            "the checkpoint was written by a run with another key: resume with the key of "
            "the run that wrote it (each key gives other noise; a resume continues one run)"
        )
    if not isinstance(meta.get("history"), dict):
        raise ValueError(
            "the checkpoint's history is not a JSON object (the file was edited or damaged): "
            "resume refused; restart the run without resume=True"
        )
    saved, wanted = sorted(saved_history(meta["history"])), sorted(saved_history(history))
    if saved != wanted:
        raise ValueError(
            f"the checkpoint's history records {saved}, this call would record {wanted}: resume "
            "with the diagnostics and x_test/y_test of the run that wrote it"
        )
    shape = (cfg.n_support, *cfg.input_shape)
    template = initial_state(
        cfg, {"x": jnp.zeros(shape, jnp.float32)}, optimizer, np.zeros(shape, bool)
    )
    state = checkpoint.unflatten_like(template, arrays, "state")
    _check_steps(int(state.step), meta, cfg.planned_steps)
    return state, meta


def _check_steps(step: int, meta: Mapping[str, Any], planned: int) -> None:
    """A checkpoint's DP-SGD step count, read three times, must agree with itself (``ValueError``
    otherwise): the state's ``step`` (what the resumed run starts from and what its report
    counts) lies in ``[0, planned]`` and equals the saved ``steps_done``, and the history's
    ``step`` entries (one per epoch end or ``max_steps`` stop, strictly increasing) end at or
    before it (an interrupt can save a state past the last logged step). A state stepped back
    would otherwise re-run steps with their noise keys on another support, uncounted."""
    done = meta.get("steps_done")
    logged = meta["history"].get("step")  # a dict (`_read_checkpoint`)
    if isinstance(logged, list) and all(_is_int(t) for t in logged):
        increasing = all(a < b for a, b in zip([0, *logged], logged, strict=False))
        last = logged[-1] if logged else 0
    else:
        increasing, last = False, 0
    if not (
        0 <= step <= planned and _is_int(done) and done == step and increasing and last <= step
    ):
        raise ValueError(
            "the checkpoint's step count disagrees between its state, steps_done and history "
            "(the file was edited or damaged): resume refused; restart the run without resume=True"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_fingerprint(meta: Mapping[str, Any], cfg: DPKIPConfig) -> None:
    """A checkpoint resumes only the run it was written by (same budget, plan, kernel, ...)."""
    if meta.get("fingerprint") != cfg.fingerprint():
        saved = meta.get("config") or {}
        now = json.loads(json.dumps(cfg.to_dict(), default=str))  # as the checkpoint stores it
        differ = sorted(k for k in now if k in saved and saved[k] != now[k]) or ["unknown"]
        raise ValueError(
            f"checkpoint configuration differs from this call ({', '.join(differ)}); resuming "
            "with another plan or accountant state is not allowed"
        )


def _report(
    cfg: DPKIPConfig,
    plan: DPSGDPlan | None,
    steps_done: int,
    init_line: str,
    notes: tuple[str, ...],
    diagnostics: bool,
) -> PrivacyReport:
    if plan is None:
        return non_private_report("epsilon=None: non-private KIP baseline")
    data_indep = (
        (init_line,) * bool(init_line)
        + (
            "support labels: class-balanced centred one-hot (onehot - 1/c), "
            + ("the start of the learned labels" if cfg.learn_labels else "fixed"),
            f"kernel: {cfg.kernel} {cfg.kernel_options} (fixed feature map; e-NTK weights drawn from the key)",
            (
                "n (dataset size): equal for replace-one neighbours (public); sets q = batch_size/n"
                if plan.neighbouring == "replace-one"
                else f"sampling rate q={plan.sampling_rate:.6g} and normaliser batch_size="
                f"{cfg.batch_size}: public values given by the caller; the true n is not used in the release"
            ),
            "Poisson padding rows: one fixed public zero row, masked out",
        )
        + (("corrupted-pixel mask: drawn from the key",) if cfg.corrupt_fraction > 0 else ())
    )
    if cfg.learn_labels:
        notes += (
            "learn_labels: each target's gradient w.r.t. the support features and labels is "
            "clipped as one vector and both are noised; the learned labels are part of the "
            "DP-SGD release, at no extra cost",
        )
    if cfg.clip_space == "feature":
        notes += (
            "clip_space='feature': per-example gradients are clipped w.r.t. the support features and "
            "mapped to pixels after noising (post-processing); same guarantee, not the paper's variant",
        )
    if diagnostics:
        notes += ("diagnostics=True: history holds un-noised training statistics (not covered)",)
    record = plan.record(
        "noisy clipped sum of per-example KRR gradients w.r.t. the support "
        + ("and its labels " if cfg.learn_labels else "")
        + f"({cfg.clip_space} space)",
        steps_done,
    )
    return PrivacyReport.from_mechanisms(
        [record], plan.neighbouring, data_independent=data_indep, notes=notes
    )


def replace_config(result: DPKIPResult, **changes: Any) -> DPKIPResult:
    """A copy of ``result`` with config fields replaced (for tests and tools)."""
    return dataclasses.replace(result, config=dataclasses.replace(result.config, **changes))
