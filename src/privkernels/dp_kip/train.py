"""DP-KIP training as state + step (Vinaroz & Park, Algorithm 1).

* `DPKIPConfig` -- every public setting of a run, typed and JSON-able.
* `State` -- what changes: support parameters, optimiser state, the
  fixed support targets and frozen-pixel mask, and the step counter.
* `make_trainer` -- builds the pure, jitted
  ``train_step(state, batch, key) -> (state, StepInfo)`` (one noisy step, usable
  without `fit`) and ``run_steps``, which samples
  ``T`` Poisson batches ahead (`privkernels.privacy.poisson_schedule`:
  the batch sizes depend only on keys) and runs them as ONE compiled
  ``lax.scan`` with no device-to-host traffic inside.

One step (Alg. 1 lines 4-9): the batch's clipped per-example gradients are
summed by the strategy chosen once (`clipped_sums`),
the privacy core's optax transformation `dpsgd_noise` adds ``N(0, (sigma C)^2 I)``
(at the plan's ``noise_std`` and ``digest``, passed as traced arguments),
the sum is divided by the public normaliser ``batch_size`` and an optax
step follows. Keys: step ``t`` uses ``fold_in(k_train, t)``, split into the
sampling key and the noise key.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from privkernels._config import ConfigMixin
from privkernels.dp_kip.clipped_sums import clipped_sum_fn
from privkernels.dp_kip.init import support_labels
from privkernels.dp_kip.kernels import KernelSpec
from privkernels.dp_kip.krr import encode_labels, support_repr
from privkernels.privacy.dpsgd import DPSGDNoiseState, DPSGDPlan, dpsgd_noise
from privkernels.privacy.keys import fold_digest
from privkernels.privacy.sampling import (
    compact_indices,
    poisson_inclusion,
    poisson_pad_to,
    poisson_schedule,
)
from privkernels.sharding import mesh_axis, to_host

__all__ = [
    "TARGETS",
    "DPKIPConfig",
    "State",
    "Batch",
    "StepInfo",
    "Trainer",
    "make_trainer",
    "step_keys",
]


@dataclasses.dataclass(frozen=True)
class DPKIPConfig(ConfigMixin):
    """The public settings of a DP-KIP run (what `DPKIPResult.save` stores).

    ``relative_reg`` is the paper's ridge relative to ``tr(K_ss)/m`` (eq. 3);
    ``batch_size`` the public normaliser of the noisy sum; ``n`` the dataset
    size when it is public (replace-one), else None; ``strategy`` the clipped
    sum chosen for these settings. Privacy fields are None without privacy.
    """

    kernel: str
    kernel_options: dict[str, Any]
    input_shape: tuple[int, ...]
    n_classes: int
    support_per_class: int
    relative_reg: float
    jitter: float
    learning_rate: float
    clip_space: str
    strategy: str
    batch_size: int
    sampling_rate: float
    steps_per_epoch: int
    epochs: int
    planned_steps: int
    chunk_size: int
    corrupt_fraction: float
    learn_labels: bool
    init: str
    custom_optimizer: bool
    n: int | None
    epsilon: float | None
    delta: float | None
    clip_norm: float | None
    noise_multiplier: float | None
    neighbouring: str | None
    accountant: str | None

    @property
    def n_support(self) -> int:
        return self.support_per_class * self.n_classes

    @property
    def ridge(self) -> float:
        return self.relative_reg + self.jitter

    @property
    def private(self) -> bool:
        return self.epsilon is not None


class State(NamedTuple):
    """Training state. ``params["x"]``: ``(m, *input_shape)`` support (``"y"`` when labels
    are learned); ``y_s``: ``(m, c)`` fixed targets; ``grad_mask``: frozen pixels (1.0);
    ``step``: int32 number of steps taken (advanced by the step itself, atomically)."""

    params: dict[str, jax.Array]
    opt_state: Any
    y_s: jax.Array
    grad_mask: jax.Array
    step: jax.Array


class Batch(NamedTuple):
    """A padded Poisson sample: ``x (pad, *input_shape)``, ``y (pad, c)`` encoded
    targets and ``mask (pad,)`` (1 = sampled example, 0 = padding)."""

    x: jax.Array
    y: jax.Array
    mask: jax.Array


class StepInfo(NamedTuple):
    """Un-noised per-step statistics (diagnostics only: they are not private)."""

    loss_sum: jax.Array
    n_clipped: jax.Array
    batch_size: jax.Array


class Trainer(NamedTuple):
    """What `make_trainer` returns.

    ``train_step(state, batch, key)`` is one jitted noisy step; ``run_steps(state,
    x, y, k_train, T)`` runs steps ``state.step .. state.step + T - 1`` as one scan.
    ``targets`` says what the rows they take hold (`TARGETS`).
    """

    config: DPKIPConfig
    spec: KernelSpec
    plan: DPSGDPlan | None
    train_step: Callable[[State, Batch, Any], tuple[State, StepInfo]]
    run_steps: Callable[..., tuple[State, StepInfo]]
    targets: str = "inputs"


def step_keys(
    k_train: jax.Array, start: int, count: int, digest: tuple[int, int] | None
) -> tuple[jax.Array, jax.Array]:
    """``(sampling keys, noise keys)`` ``(count,)`` of steps ``start .. start + count - 1``.

    Both come from ``fold_digest(k_train, digest)`` with ``digest`` the plan's parameter
    digest (`DPSGDPlan.digest`: q, sigma, steps, C, relation, budget), so one key at two
    budgets draws independent Poisson batches as well as independent noise: two releases
    over the same batches with independent noise are one release at a smaller sigma.
    ``digest=None`` (the non-private baseline: nothing to protect) uses ``k_train`` itself.
    """
    base = k_train if digest is None else fold_digest(k_train, (digest[0], digest[1]))
    steps = jnp.arange(start, start + count, dtype=jnp.uint32)
    both = jax.vmap(lambda s: jax.random.split(jax.random.fold_in(base, s)))(steps)
    return both[:, 0], both[:, 1]


#: what the rows given to a trainer hold: inputs, or the kernel's target representation
TARGETS = ("inputs", "repr")


class _Hyper(NamedTuple):
    """Per-run values passed as arguments, so one compilation serves every budget: the
    plan's `DPSGDPlan.noise_std` and `DPSGDPlan.digest` for `dpsgd_noise`, and C."""

    noise_std: jax.Array  # () float32, sigma * C
    digest: jax.Array  # (2,) uint32
    clip_norm: jax.Array  # () float32


def _hyper(config: DPKIPConfig, plan: DPSGDPlan | None) -> _Hyper:
    if plan is None:
        return _Hyper(jnp.float32(0.0), jnp.zeros((2,), jnp.uint32), jnp.float32(1.0))
    return _Hyper(
        jnp.float32(plan.noise_std),
        jnp.asarray(plan.digest, jnp.uint32),
        jnp.float32(plan.clip_norm),
    )


def _step_fn(
    config: DPKIPConfig,
    spec: KernelSpec,
    optimizer: Any,
    axis_name: str | None = None,
    targets: str = "inputs",
) -> Callable[..., Any]:
    """The pure step ``(state, batch, key, hyper) -> (state, info)`` (Alg. 1 lines 4-9).

    With ``axis_name`` (inside a ``shard_map`` over the example axis) ``batch`` is
    this device's part of the Poisson sample: the clipped sums are added over
    the devices (``psum``) before the noise, which every device then draws from
    the same key, so all of them make the same update. ``targets="repr"``:
    ``batch.x`` already holds the targets' `support_repr` rows (`TARGETS`).
    """
    space, chunk, private = config.clip_space, config.chunk_size, config.private
    clipped_sum = clipped_sum_fn(config.strategy, spec, space=space, ridge=config.ridge)

    def step(state: State, batch: Batch, key: jax.Array, hyper: _Hyper) -> tuple[State, StepInfo]:
        params = state.params
        if space == "feature":
            assert spec.feature_fn is not None
            phi_s, vjp_fn = jax.vjp(spec.feature_fn, params["x"])
            work = {"phi": phi_s, **({"y": params["y"]} if config.learn_labels else {})}
        else:
            work = dict(params)
        n_chunks = batch.mask.shape[0] // chunk

        def chunk_body(carry: Any, c: jax.Array) -> tuple[Any, None]:
            acc, loss_acc, clip_acc = carry
            sl = lambda a: jax.lax.dynamic_slice_in_dim(a, c * chunk, chunk)  # noqa: E731
            t = sl(batch.x) if targets == "repr" else support_repr(spec, sl(batch.x))
            summed, lsum, ncl = clipped_sum(
                work, state.y_s, t, sl(batch.y), sl(batch.mask), state.grad_mask, hyper.clip_norm
            )
            acc = jax.tree_util.tree_map(jnp.add, acc, summed)
            return (acc, loss_acc + lsum, clip_acc + ncl), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, work)
        (gsum, loss_sum, n_clipped), _ = jax.lax.scan(
            chunk_body, (zeros, jnp.float32(0.0), jnp.float32(0.0)), jnp.arange(n_chunks)
        )
        count = jnp.sum(batch.mask > 0).astype(jnp.int32)
        if axis_name is not None:
            gsum, loss_sum, n_clipped, count = jax.lax.psum(
                (gsum, loss_sum, n_clipped, count), axis_name
            )
        if private:  # the privacy core draws the noise (traced parameters: one compilation)
            noise = dpsgd_noise(hyper.noise_std, hyper.digest)
            gsum, _ = noise.update(gsum, DPSGDNoiseState(key))
        grad = jax.tree_util.tree_map(lambda leaf: leaf / float(config.batch_size), gsum)
        if space == "feature":
            (gx,) = vjp_fn(grad["phi"])
            grad = {"x": gx, **({"y": grad["y"]} if config.learn_labels else {})}
        grad = {**grad, "x": grad["x"] * (1.0 - state.grad_mask)}
        updates, opt_state = optimizer.update(grad, state.opt_state, params)
        new = optax.apply_updates(params, updates)
        # Frozen pixels never move (also guards against optimiser side effects).
        new = {**new, "x": jnp.where(state.grad_mask > 0, params["x"], new["x"])}
        info = StepInfo(loss_sum, n_clipped, count)
        return State(new, opt_state, state.y_s, state.grad_mask, state.step + 1), info

    return step


def _scan_fn(step: Callable[..., Any]) -> Callable[..., Any]:
    """``T`` steps over pre-drawn Poisson indices as one ``lax.scan`` (no host traffic)."""

    def run(
        state: State,
        x: jax.Array,
        y: jax.Array,
        idx: jax.Array,
        mask: jax.Array,
        noise_keys: jax.Array,
        hyper: _Hyper,
    ) -> tuple[State, StepInfo]:
        def body(st: State, inp: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[State, StepInfo]:
            i, mk, kn = inp
            return step(st, Batch(x[i], y[i], mk.astype(jnp.float32)), kn, hyper)

        return jax.lax.scan(body, state, (idx, mask, noise_keys))

    return jax.jit(run)


def _mesh_scan_fn(step: Callable[..., Any], mesh: Any) -> Callable[..., Any]:
    """`_scan_fn` over a mesh: each device samples and clips its own rows.

    ``include`` ``(T, n_pad)`` is sharded along the rows like ``x``; inside the
    ``shard_map`` each device compacts its rows of step ``t``'s Poisson sample
    (padding points at a local public zero row), and the step adds the
    per-device clipped sums with one ``psum`` before the noise.
    """
    name, _ = mesh_axis(mesh)

    def local(state, xl, yl, inc, noise_keys, hyper, pad):  # type: ignore[no-untyped-def]
        n_l = xl.shape[0]
        xe = jnp.concatenate([xl, jnp.zeros((1, *xl.shape[1:]), xl.dtype)])
        ye = jnp.concatenate([yl, jnp.zeros((1, *yl.shape[1:]), yl.dtype)])

        def body(st: State, inp: tuple[jax.Array, jax.Array]) -> tuple[State, StepInfo]:
            inc_t, kn = inp
            idx, mask = compact_indices(inc_t, jnp.sum(inc_t), pad, n_l)
            return step(st, Batch(xe[idx], ye[idx], mask.astype(jnp.float32)), kn, hyper)

        keys = jax.random.wrap_key_data(noise_keys)
        return jax.lax.scan(body, state, (inc, keys))

    def run(state, x, y, include, noise_keys, hyper, *, pad):  # type: ignore[no-untyped-def]
        fn = jax.shard_map(
            lambda *a: local(*a, pad),
            mesh=mesh,
            in_specs=(P(), P(name), P(name), P(None, name), P(), P()),
            out_specs=(P(), P()),
            check_vma=False,
        )
        return fn(state, x, y, include, noise_keys, hyper)

    return jax.jit(run, static_argnames=("pad",))


#: Compiled (step, scan) pairs for data-independent kernels, keyed by every static
#: setting: repeated fits (seeds, budgets, tables) reuse one compilation. Never holds data.
_COMPILED: OrderedDict[tuple[Any, ...], tuple[Callable[..., Any], Callable[..., Any]]] = (
    OrderedDict()
)
_COMPILED_SIZE = 16


def _compiled(
    config: DPKIPConfig,
    spec: KernelSpec,
    optimizer: Any,
    cacheable: bool,
    mesh: Any = None,
    targets: str = "inputs",
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def build() -> tuple[Callable[..., Any], Callable[..., Any]]:
        step = _step_fn(config, spec, optimizer, targets=targets)
        if mesh is None:
            return jax.jit(step), _scan_fn(step)

        sharded = _step_fn(config, spec, optimizer, axis_name=mesh_axis(mesh)[0], targets=targets)
        return jax.jit(step), _mesh_scan_fn(sharded, mesh)

    if not cacheable:
        return build()
    static = {k: v for k, v in config.to_dict().items() if k not in _ARGUMENT_FIELDS}
    key = (json.dumps(static, sort_keys=True, default=str), mesh, targets)
    fns = _COMPILED.get(key)
    if fns is None:
        fns = build()
        _COMPILED[key] = fns
        while len(_COMPILED) > _COMPILED_SIZE:
            _COMPILED.popitem(last=False)
    else:
        _COMPILED.move_to_end(key)
    return fns


#: config fields that reach the compiled step as arguments, not constants
_ARGUMENT_FIELDS = {
    "epsilon",
    "delta",
    "noise_multiplier",
    "clip_norm",
    "neighbouring",
    "accountant",
    "epochs",
    "planned_steps",
    "n",
    "init",
}


def make_trainer(
    config: DPKIPConfig,
    spec: KernelSpec,
    plan: DPSGDPlan | None,
    optimizer: Any,
    *,
    n: int,
    min_pad: int,
    cacheable: bool = True,
    mesh: Any = None,
    targets: str = "inputs",
) -> Trainer:
    """Build ``train_step`` and ``run_steps`` for one run.

    ``n`` is the number of private rows (used for sampling, never released under
    add-remove); the data passed to ``run_steps`` holds them followed by one
    public zero row at index ``n``, which padding entries point at. ``min_pad``
    is the usual padded batch length (`privkernels.privacy.poisson_pad_to`).
    ``targets``: ``"inputs"`` (rows are inputs ``(n + 1, *input_shape)``) or
    ``"repr"`` (rows are ``target_repr(spec, inputs)`` ``(n + 1, f)``, computed
    once instead of at every step; the same for ``train_step``'s ``batch.x``).

    With ``mesh``, ``run_steps`` takes the rows sharded over the mesh (no public
    row: each device appends its own) and each device samples, gathers and
    clips its own rows; the result equals ``mesh=None`` up to summation order
    (inputs only: each device's appended row is an input).
    """
    if targets not in TARGETS:
        raise ValueError(f"targets must be one of {TARGETS}, got {targets!r}")
    if mesh is not None and targets != "inputs":
        raise ValueError("with a mesh the rows must be inputs (targets='inputs')")
    hyper = _hyper(config, plan)
    digest = None if plan is None else plan.digest
    step, scan = _compiled(config, spec, optimizer, cacheable, mesh, targets)
    if mesh is not None:
        run_mesh = _mesh_runner(scan, config, hyper, n, min_pad, mesh, digest)
        return Trainer(config, spec, plan, lambda s, b, k: step(s, b, k, hyper), run_mesh, targets)

    def train_step(state: State, batch: Batch, key: jax.Array) -> tuple[State, StepInfo]:
        return step(state, batch, key, hyper)

    def run_steps(
        state: State, x: jax.Array, y: jax.Array, k_train: jax.Array, count: int
    ) -> tuple[State, StepInfo]:
        k_batch, k_noise = step_keys(k_train, int(state.step), count, digest)
        sched = poisson_schedule(
            k_batch,
            n,
            config.sampling_rate,
            min_pad=min_pad,
            pad_multiple=config.chunk_size,
            pad_index=n,
        )
        return scan(state, x, y, sched.indices, sched.mask, k_noise, hyper)

    return Trainer(config, spec, plan, train_step, run_steps, targets)


def _mesh_runner(
    scan: Callable[..., Any],
    config: DPKIPConfig,
    hyper: _Hyper,
    n: int,
    min_pad: int,
    mesh: Any,
    digest: tuple[int, int] | None,
) -> Callable[..., tuple[State, StepInfo]]:
    """``run_steps`` over a mesh: Poisson inclusion drawn ahead, sharded by rows."""
    name, d = mesh_axis(mesh)

    def run_steps(
        state: State, x: jax.Array, y: jax.Array, k_train: jax.Array, count: int
    ) -> tuple[State, StepInfo]:
        k_batch, k_noise = step_keys(k_train, int(to_host(state.step)), count, digest)
        include, _ = poisson_inclusion(k_batch, n, config.sampling_rate)
        inc = np.zeros((count, int(x.shape[0])), bool)
        inc[:, :n] = np.asarray(include)  # padding rows are never sampled
        per_device = inc.reshape(count, d, -1).sum(-1).max(initial=1)
        need = max(int(per_device), -(-min_pad // d))
        pad = -(-need // config.chunk_size) * config.chunk_size
        sharding = NamedSharding(mesh, P(None, name))
        inc_s = jax.make_array_from_callback(inc.shape, sharding, lambda i: inc[i])
        host = jax.tree_util.tree_map(to_host, (state, hyper))
        keys = np.asarray(jax.random.key_data(k_noise))
        out = scan(host[0], x, y, inc_s, keys, host[1], pad=pad)
        # replicated over the mesh (identical everywhere): continue from this process's copy
        return jax.tree_util.tree_map(lambda a: jnp.asarray(to_host(a)), out)

    return run_steps


def planning_size(n: int | None, batch_size: int, q: float) -> int:
    """The dataset size that shapes the padded batch (`padded_batch_length`).

    ``n`` when it is public (replace-one: pass the true size), else ``None`` and
    the size the public ``batch_size`` and rate ``q`` describe,
    ``round(batch_size / q)``. Under add-remove the chunk length is stored in
    the released config, so it must not be read from the private ``n`` (a
    padded length steps every ~150 records, which would tell neighbours apart).
    Poisson batches larger than the planned pad still fit: the schedule pads
    to the largest sampled batch (`privkernels.privacy.sampling.poisson_schedule`).
    """
    if n is not None:
        return int(n)
    return max(1, round(batch_size / q))


def padded_batch_length(n: int, q: float, chunk_size: int) -> tuple[int, int]:
    """``(chunk, pad)``: a chunk length ``<= chunk_size`` that splits the usual padded batch
    with little waste, and that padded length (``P[Binomial(n, q) > pad] <= 1e-9``)."""
    raw = int(poisson_pad_to(n, q, failure_prob=1e-9, pad_multiple=1))
    n_chunks = max(1, -(-raw // chunk_size))
    chunk = max(1, -(-raw // n_chunks))
    return chunk, int(poisson_pad_to(n, q, failure_prob=1e-9, pad_multiple=chunk))


def initial_state(
    config: DPKIPConfig, params: dict[str, jax.Array], optimizer: Any, corrupted: np.ndarray
) -> State:
    """The state before step 0 (support already drawn by the initialiser)."""
    y_s = encode_labels(
        jnp.asarray(support_labels(config.n_classes, config.support_per_class)), config.n_classes
    )
    if config.learn_labels:
        params = {**params, "y": y_s}
    return State(
        params,
        optimizer.init(params),
        y_s,
        jnp.asarray(corrupted, jnp.float32),
        jnp.zeros((), jnp.int32),
    )
