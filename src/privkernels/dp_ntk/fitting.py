"""``dp_ntk.fit``: release once, then train a generator on the release (Yang et al., Alg. 1)."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels import checkpoint, features
from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_bool,
    check_fit_rows,
    check_in_range,
    check_int,
    infer_n_classes,
)
from privkernels.dp_ntk.release import (
    DP_NTK_RELATIONS,
    N_PRIVATE_NOTE,
    N_PUBLIC_NOTE,
    NTK_PARAMS_NOTE,
    counts_release,
    embedding_release,
    mean_embedding,
    noisy_total,
    normalise_sums,
    proportions_release,
    validate_xy,
)
from privkernels.dp_ntk.result import DPNTKResult, release_arrays, release_meta, result_from
from privkernels.dp_ntk.settings import FitKeys, Plan, Settings, fit_keys, plan
from privkernels.dp_ntk.train import DPNTKConfig, TrainState, run_steps, target_embedding
from privkernels.features.marginal import reference_rows, with_marginals
from privkernels.generators import (
    ColumnGroup,
    ConvCondGenerator,
    TabularGenerator,
    check_groups,
    make_code,
)
from privkernels.options import RunOptions, run_options
from privkernels.privacy.accountant import charged_release, outside_release
from privkernels.privacy.budget import Budget, as_budget
from privkernels.privacy.keys import release_key
from privkernels.privacy.report import (
    ADD_REMOVE,
    PrivacyReport,
    check_neighbouring,
    compose,
    with_notes,
)

__all__ = [
    "fit",
    "fit_keys",
    "FitKeys",
    "default_generator",
    "check_generator_range",
    "generator_range",
    "CHECKPOINT_FORMAT",
]

CHECKPOINT_FORMAT = "privkernels.dp_ntk.checkpoint/1"

#: Share of the e-NTK feature's squared norm that `default_network` gives a table's public
#: marginal code (`privkernels.features.marginal`): an even split, fixed a priori.
MARGINAL_WEIGHT = 0.5

GEN_NOTE = (
    "generator initialisation, latent codes and generated labels: drawn from keys split off "
    "the user key; generator training is post-processing of the release(s)"
)


def default_network(
    n_classes: int,
    *,
    centered: bool = False,
    groups: Sequence[ColumnGroup] = (),
    marginal_bins: int = 16,
    marginal_indicators: bool = False,
) -> nn.Module:
    """``fc_1l(800, out_features=n_classes, layer_norm=True)``: the e-NTK network of the
    paper's image experiments (Table 5), also the benchmarks' choice; ``centered``: on
    ``2 x - 1`` of its inputs (`privkernels.features.FC`).

    With tabular column ``groups`` (a table of ``groups[-1].stop`` encoded columns, the
    numeric ones in ``[0, 1]``), the network gets the public marginal code beside it
    (`privkernels.features.marginal.with_marginals`): every column, and the hats of each
    numeric one, carrying `MARGINAL_WEIGHT` of the feature's squared norm, measured on
    `reference_rows` of the groups' shapes (public rows, no data read); ``marginal_bins``
    sets the code's resolution (``marginal_bins + 1`` hats per numeric column;
    ``marginal_indicators``: and its ``marginal_bins`` bin indicators). Without it the
    e-NTK barely sees a numeric column's shape, and a generator matched to it piles
    numeric columns at their bounds. The normalised feature keeps ``||phi|| <= 1``, so
    the release's sensitivity is unchanged.
    """
    base = features.fc_1l(800, out_features=n_classes, layer_norm=True, centered=centered)
    if not groups:
        return base
    numeric = [j for g in groups if g.kind == "numeric" for j in range(g.start, g.stop)]
    blocks = [(g.start, g.stop) for g in groups if g.kind == "categorical"]
    rows = reference_rows(max(g.stop for g in groups), numeric, blocks)
    return with_marginals(base, numeric, rows, weight=MARGINAL_WEIGHT, bins=marginal_bins,
                          indicators=check_bool(marginal_indicators, "marginal_indicators"))  # fmt: skip


def default_generator(data_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Conditional CNN for images (rank >= 2 examples), FC tabular generator otherwise."""
    if len(data_shape) >= 2:
        return ConvCondGenerator(n_classes=n_classes, output_shape=tuple(data_shape))
    d = int(data_shape[0])
    return TabularGenerator(n_classes=n_classes, n_features=d, hidden=(4 * d, 2 * d))


def fit(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    neighbouring: str = "replace-one",
    n_classes: int | None = None,
    mesh: Any = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool = True,
    network: nn.Module | None = None,
    generator: nn.Module | None = None,
    iterations: int | None = None,
    batch_size: int = 5000,
    learning_rate: float = 0.01,
    d_code: int = 5,
    label_mode: str = "uniform",
    split: tuple[float, float] = (0.9, 0.1),
    min_proportion: float = 1e-3,
    ntk_params: Any = None,
    groups: tuple[ColumnGroup, ...] | None = None,
    chunk_size: int | None = None,
    method: str = "auto",
    checkpoint_every: int | None = None,
    callback: Callable[[int, float], None] | None = None,
    public_key: jax.Array | None = None,
    budget_accountant: Any = None,
) -> DPNTKResult:
    """Train a DP-NTK generator (Algorithm 1).

    Args:
      key: JAX PRNG key of the release, split by `fit_keys`. A key that visibly comes
        from a small int draws reproducible, not secret, noise
        (`privkernels.privacy.SeededKeyWarning`, report note; use `privkernels.fresh_key`).
      x: ``(n, *data_shape)`` private examples; y: ``(n,)`` int labels (None on resume).
      epsilon, delta: total budget; ``epsilon=None`` -> non-private baseline.
      neighbouring: ``"replace-one"`` (default; n public: the mean embedding, sensitivity
        ``2/n``) or ``"add-remove"`` (n private: the class sums, sensitivity 1, divided by
        a noisy total or, ``"released"`` labels, class counts; ``split`` shares the budget).
      n_classes: None reads ``max(y) + 1`` (``PrivacyLeakWarning``, report note).
      mesh, checkpoint_path, resume, progress, chunk_size: the run options
        (`privkernels.options.RunOptions`). A mesh shards the embedding's example axis
        (``x``/``y`` may be global sharded arrays; generator training, post-processing,
        runs on one device). The checkpoint (``.npz``) is written every
        ``checkpoint_every`` iterations, at the end and on ``KeyboardInterrupt``;
        ``resume=True`` continues it WITHOUT reading the data again (same budget;
        ``iterations`` may extend the run). A path that cannot be written is refused
        before the release, and on resume before any training.
      network: flax module whose e-NTK is the kernel; default `default_network` (the
        paper's MNIST network, Table 5; with the public marginal code of the tabular
        column ``groups`` when there are any), built after every check.
      generator: flax generator ``apply(params, z, onehot)``; default from `default_generator`.
      iterations, batch_size, learning_rate, d_code, label_mode, split, min_proportion:
        the run's settings, documented in `privkernels.dp_ntk.train.DPNTKConfig` (the
        defaults: the paper's Appendix A for MNIST).
      ntk_params: optional data-independent e-NTK parameters; method: the feature core's.
      groups: tabular column groups (for `sample` discretisation); default
        from ``generator.groups`` when present.
      checkpoint_every: checkpoint interval in iterations (also the scan length).
      callback: ``callback(iteration, loss)`` after each iteration.
      public_key: the key of the data-independent draws (`fit_keys`), independent of the
        noise key (a fresh key: the saved weights then say nothing about ``key``).
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged ``(epsilon,
        delta)`` (None: the default accountant of an open ``with`` block, or none); it
        refuses the fit before any noise when that does not fit in what remains. A resume
        releases nothing again and charges nothing.

    Returns:
      `DPNTKResult`.
    """
    opts = run_options(mesh=mesh, checkpoint_path=checkpoint_path, resume=resume,
                       progress=progress, chunk_size=chunk_size)  # fmt: skip
    if checkpoint_every is not None:
        check_int(checkpoint_every, "checkpoint_every", minimum=1)
    neighbouring = check_neighbouring(neighbouring, DP_NTK_RELATIONS)
    settings = Settings(
        budget=as_budget(epsilon, delta), neighbouring=neighbouring,
        iterations=iterations, batch_size=batch_size, learning_rate=learning_rate, d_code=d_code,
        label_mode=label_mode, split=split, min_proportion=min_proportion, method=method,
        network=network, generator=generator, ntk_params=ntk_params, groups=groups,
        checkpoint_every=checkpoint_every, callback=callback,
    )  # fmt: skip
    if opts.resume:
        return _resume(x, y, settings, opts)
    if opts.checkpoint_path is not None:  # before the release, not at the first save
        checkpoint.check_new(opts.checkpoint_path, "continue it (nothing is released again)")
    key, seeded = release_key(key)
    fresh = functools.partial(_fit_fresh, key, seeded, x, y, n_classes, settings, opts, public_key)
    return charged_release(budget_accountant, epsilon, delta, settings.neighbouring, fresh)


def _fit_fresh(
    key: jax.Array, seeded: tuple[str, ...], x: Any, y: Any, n_classes: int | None,
    s: Settings, opts: RunOptions, public_key: jax.Array | None,
) -> DPNTKResult:  # fmt: skip
    """A new fit (not a resume): validate the data, plan, release, then train the generator."""
    n_classes, inferred = infer_n_classes(y, n_classes)
    check_fit_rows(x, "x")  # the one minimum-rows rule of every fit
    x, y_np, n_classes = validate_xy(x, y, n_classes)
    p = plan(s, data_shape=tuple(x.shape[1:]), n_classes=n_classes, chunk_size=opts.chunk_size,
             key=key, public_key=public_key)  # fmt: skip
    cfg = p.config
    network, generator, groups = _models(x, cfg, s)
    ntk_params = s.ntk_params
    if ntk_params is None:
        ntk_params = _init_ntk(p.keys.ntk, network, cfg.data_shape)
    gparams = _init_generator(p.keys.gen, generator, cfg, network, ntk_params)  # refuses first
    noisy_emb, proportions, total, report = _release(p, x, y_np, network, ntk_params, inferred,
                                                     opts.mesh)  # fmt: skip
    report = with_notes(report, seeded)
    del x, y, y_np  # everything below is post-processing
    state = TrainState(gparams, optax.adam(cfg.learning_rate).init(gparams), p.keys.train,
                       jnp.int32(0))  # fmt: skip
    result = DPNTKResult(generator, gparams, network, ntk_params, noisy_emb, proportions, report,
                         np.zeros((0,), np.float32), cfg, groups, 0, total)  # fmt: skip
    return _train(result, state, s, opts)


def _models(
    x: Any, cfg: DPNTKConfig, s: Settings
) -> tuple[nn.Module, nn.Module, tuple[ColumnGroup, ...]]:
    """The e-NTK network, the generator (defaults where None; a generator that cannot
    produce ``x`` refused before any noise) and the tabular column groups."""
    generator = s.generator
    if generator is None:
        generator = default_generator(cfg.data_shape, cfg.n_classes)
    check_generator_range(x, generator)
    groups = s.groups
    if groups is None:
        groups = getattr(generator, "groups", ()) or ()
    groups = check_groups(groups, math.prod(cfg.data_shape))  # before the network's draws
    network = s.network
    if network is None:  # built here, after `plan`: its public draws follow every check
        network = default_network(cfg.n_classes, groups=groups)
    return network, generator, groups


def _init_generator(
    key: jax.Array, generator: nn.Module, cfg: DPNTKConfig, network: nn.Module, ntk_params: Any
) -> Any:
    """The generator's initial parameters, refusing a generator whose samples the e-NTK
    network cannot embed as it embeds the data (eq. (6)); shapes only (`jax.eval_shape`)."""
    n_classes = cfg.n_classes
    labels = jnp.zeros((2,), jnp.int32)
    z0, oh0 = make_code(key, labels, d_code=cfg.d_code, n_classes=n_classes)
    gparams = generator.init(key, z0, oh0)
    out = jax.eval_shape(generator.apply, gparams, z0, oh0)
    embed = functools.partial(
        mean_embedding, network, ntk_params, y=labels, n_classes=n_classes,
        chunk_size=cfg.chunk_size, method=cfg.method, precision=None,
    )  # fmt: skip
    try:
        jax.eval_shape(embed, out)
    except Exception as err:  # any failure to trace eq. (6) on these samples
        raise ValueError(
            f"the generator's samples have shape {tuple(out.shape)[1:]} and the network, built "
            f"for data {tuple(cfg.data_shape)}, cannot embed them: pass a generator whose "
            f"output matches the data ({type(err).__name__})"
        ) from err
    return gparams


def generator_range(generator: nn.Module) -> tuple[float, float] | None:
    """The range of ``generator``'s outputs (its ``output_range``), None when unbounded."""
    bounds = getattr(generator, "output_range", None)
    return bounds() if callable(bounds) else None


def check_generator_range(x: Any, generator: nn.Module) -> None:
    """Refuse data the generator cannot produce (before any noise): a sigmoid generator
    matched to pixels in 0..255 learns nothing and no error would say so."""
    bounds = generator_range(generator)
    if bounds is None:
        return
    lo, hi = bounds
    check_in_range(
        x, "x", lo, hi,
        f"the generator's outputs lie in [{lo:g}, {hi:g}], so it cannot match this data. "
        "Rescale with PUBLIC bounds (e.g. pixels / 255, or (v - lower) / (upper - lower) per "
        "column with documented limits), or pass a generator whose output covers the data",
    )  # fmt: skip


def _init_ntk(key: jax.Array, network: nn.Module, data_shape: tuple[int, ...]) -> Any:
    return features.init_params(key, network, data_shape)  # looked up at call time (spies)


#: ``(embedding, proportions, noisy total n_hat or None, report, public notes, n notes)``.
_Released = tuple[
    jax.Array, np.ndarray | None, float | None, PrivacyReport, tuple[str, ...], tuple[str, ...]
]


def _release(
    p: Plan, x: Any, y: np.ndarray, network: nn.Module, ntk_params: Any, inferred: bool,
    mesh: Any,
) -> tuple[jax.Array, np.ndarray | None, float | None, PrivacyReport]:  # fmt: skip
    """The only reads of private data, as ``p.releases`` says: the embedding, and the
    proportions (``"released"`` labels) or, under add-remove (private), the class sums
    and the class counts or their total, the sums divided by the counts' total
    (`privkernels.dp_ntk.release.normalise_sums`; that total is returned, else None)."""
    emb_release = functools.partial(
        embedding_release, p.keys.emb, x, y, n_classes=p.config.n_classes, network=network,
        params=ntk_params, chunk_size=p.config.chunk_size, method=p.config.method, mesh=mesh,
    )  # fmt: skip
    if p.releases.sums:
        emb, props, total, report, public, n_note = _release_sums(p, y, emb_release)
    elif p.releases.labels_kind == "proportions":
        emb, props, total, report, public, n_note = _release_with_proportions(p, y, emb_release)
    else:
        emb, report = emb_release(budget=p.releases.embedding)
        props, total, public, n_note = None, None, (NTK_PARAMS_NOTE, N_PUBLIC_NOTE, GEN_NOTE), ()
    if report.private:
        notes = n_note + ((N_CLASSES_INFERRED_NOTE,) if inferred else ())
        report = dataclasses.replace(
            report,
            data_independent=tuple(dict.fromkeys((*report.data_independent, *public))),
            notes=report.notes + notes,
        )
    return emb, props, total, report


def _release_sums(
    p: Plan, y: np.ndarray, emb_release: Callable[..., tuple[jax.Array, PrivacyReport]]
) -> _Released:
    """Add-remove: class sums (share ``split[0]``) and a noisy n (``split[1]``: the class
    counts in released mode, else the total alone), divided."""
    rel = p.releases
    assert rel.labels is not None  # the plan's second share, by `Releases.sums`
    sums, rep_e = emb_release(budget=rel.embedding, neighbouring=ADD_REMOVE)
    per_class = rel.labels_kind == "counts"  # uniform labels need only the total n
    counts, rep_c = counts_release(p.keys.labels, y, n_classes=p.config.n_classes,
                                   budget=rel.labels, per_class=per_class)  # fmt: skip
    emb, props_ar = normalise_sums(sums, counts)
    props = props_ar if per_class else None
    total = noisy_total(counts) if per_class else None  # uniform labels: n_hat stays inside
    return emb, props, total, compose(rep_e, rep_c), (NTK_PARAMS_NOTE, GEN_NOTE), (N_PRIVATE_NOTE,)


def _release_with_proportions(
    p: Plan, y: np.ndarray, emb_release: Callable[..., tuple[jax.Array, PrivacyReport]]
) -> _Released:
    """Released labels, except a private add-remove run: the mean embedding and the class
    proportions, each at its share (both None without a budget)."""
    emb, rep_e = emb_release(budget=p.releases.embedding)
    props, rep_l = proportions_release(p.keys.labels, y, n_classes=p.config.n_classes,
                                       budget=p.releases.labels)  # fmt: skip
    public = (NTK_PARAMS_NOTE, N_PUBLIC_NOTE, GEN_NOTE)
    return emb, props, None, compose(rep_e, rep_l), public, ()


def _train(result: DPNTKResult, state: TrainState, s: Settings, opts: RunOptions) -> DPNTKResult:
    """Scan the generator steps in segments; history, progress (``opts``), the callback and
    checkpoints (``s``) in between."""
    cfg, path, every, callback = result.config, opts.checkpoint_path, s.checkpoint_every, s.callback
    target = target_embedding(result.noisy_embedding, result.noisy_proportions, cfg.min_proportion)
    segment = every or max(1, min(100, cfg.iterations))
    losses = [np.asarray(result.loss_history, np.float32)]
    bar = _bar(opts.progress, cfg.iterations, int(state.step))
    try:
        while int(state.step) < cfg.iterations:
            count = min(segment, cfg.iterations - int(state.step))
            state, seg_losses = run_steps(state, count, cfg, result.generator, result.network,
                                          result.ntk_params, target)  # fmt: skip
            losses.append(np.asarray(seg_losses, np.float32))
            done = int(state.step)
            if callback is not None:  # user code: a fit it makes is charged on its own
                with outside_release():
                    for i, lv in enumerate(losses[-1]):
                        callback(done - count + i + 1, float(lv))
            if bar is not None:
                bar.update(count)
                bar.set_postfix(loss=f"{float(losses[-1][-1]):.4g}")
            if every is not None and done % every == 0:
                _save(path, _with(result, state, losses), state)
    except KeyboardInterrupt:
        _save(path, _with(result, state, losses), state)
        raise
    finally:
        if bar is not None:
            bar.close()
    final = _with(result, state, losses)
    _save(path, final, state)
    return final


def _bar(progress: bool, total: int, initial: int) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm  # only when a progress bar is shown

    return tqdm(total=total, initial=initial, desc="DP-NTK", leave=False, mininterval=1.0)


def _with(result: DPNTKResult, state: TrainState, losses: list[np.ndarray]) -> DPNTKResult:
    history = np.concatenate(losses) if losses else np.zeros((0,), np.float32)
    return dataclasses.replace(
        result, generator_params=state.params, loss_history=history, iteration=int(state.step)
    )


def _save(path: Path | None, result: DPNTKResult, state: TrainState) -> None:
    if path is None:
        return
    arrays = release_arrays(result)
    arrays.update(checkpoint.flatten_tree("opt_state", state.opt_state))
    key_data, typed = checkpoint.key_to_array(state.key)
    arrays["train_key"] = key_data
    meta = {**release_meta(result, CHECKPOINT_FORMAT), "typed_key": typed}
    checkpoint.save(path, arrays, meta)


def _resume(x: Any, y: Any, s: Settings, opts: RunOptions) -> DPNTKResult:
    """Continue a checkpointed run from the saved release alone (the data is never read),
    with its budget and relation (``s.budget``, ``s.neighbouring``: checked against the
    file). A checkpoint that could not be saved again is refused before any training."""
    path = opts.checkpoint_path
    if path is None or not path.exists():
        raise ValueError(f"resume=True needs an existing checkpoint_path, got {path}")
    checkpoint.check_writable(path)  # not at the first save after the training
    if x is not None or y is not None:
        raise ValueError(
            "resume=True continues from the checkpoint alone and never reads data: pass x=None, y=None"
        )
    arrays, meta = checkpoint.load(path, format=CHECKPOINT_FORMAT)
    saved = PrivacyReport.from_dict(meta["report"])
    _check_resume_budget(saved, s.budget)
    if saved.private and saved.neighbouring != s.neighbouring:
        raise ValueError(
            f"the checkpoint's release is under {saved.neighbouring}; got "
            f"neighbouring={s.neighbouring!r}. Pass the relation it was released under."
        )
    result = result_from(arrays, meta, generator=s.generator, network=s.network,
                         generator_params={})  # fmt: skip
    if s.iterations is not None:
        cfg = dataclasses.replace(result.config, iterations=check_int(s.iterations, "iterations"))
        result = dataclasses.replace(result, config=cfg)
    z0, oh0 = make_code(jax.random.key(0), jnp.zeros((2,), jnp.int32), d_code=result.d_code,
                        n_classes=result.n_classes)  # fmt: skip
    template = result.generator.init(jax.random.key(0), z0, oh0)  # shapes only
    gparams = checkpoint.unflatten_like(template, arrays, "generator_params")
    opt_state = checkpoint.unflatten_like(
        optax.adam(result.config.learning_rate).init(gparams), arrays, "opt_state"
    )
    key = checkpoint.key_from_array(arrays["train_key"], bool(meta["typed_key"]))
    state = TrainState(gparams, opt_state, key, jnp.int32(result.iteration))
    result = dataclasses.replace(result, generator_params=gparams)
    return _train(result, state, s, opts)


def _check_resume_budget(saved: PrivacyReport, budget: Budget | None) -> None:
    """A resumed run keeps the budget it was released with; refuse anything else."""
    if not saved.private:
        if budget is not None:
            raise ValueError(
                f"the checkpointed run is non-private; epsilon={budget.epsilon!r} cannot be "
                "added on resume (start a new fit instead)"
            )
        return
    if budget is None or not budget.matches(saved):
        got = "epsilon=None" if budget is None else f"epsilon={budget.epsilon!r}, delta={budget.delta!r}"  # fmt: skip
        raise ValueError(
            f"the checkpoint's release was made at (epsilon={saved.epsilon:g}, "
            f"delta={saved.delta:g}); got ({got}). The budget of a release cannot change on "
            "resume: pass the original values."
        )
