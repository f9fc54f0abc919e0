"""DP-NTK generator training as state + step: post-processing of the release (eq. 6).

The generator minimises ``||mu~_P - mu_Q||_F^2`` where ``mu~_P`` is the released
noisy embedding and ``mu_Q`` the e-NTK mean embedding of a fresh generated
batch (Yang et al., Alg. 1 lines 6-9). Nothing here reads private data, so
training costs no privacy however long it runs.

* `DPNTKConfig` -- the public settings of a run (typed, JSON-able);
* `TrainState` -- generator parameters, Adam state, training key, step;
* `train_step` -- one pure Adam step (iteration ``t`` uses
  ``fold_in(state.key, t)`` for its latent codes);
* `run_steps` -- ``T`` steps as one compiled ``lax.scan`` (equal configs
  share one compilation; no host traffic inside).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels._config import ConfigMixin
from privkernels.dp_ntk.release import mean_embedding
from privkernels.generators import make_code

__all__ = [
    "DPNTKConfig",
    "TrainState",
    "train_step",
    "run_steps",
    "batch_labels",
    "target_embedding",
]

LABEL_MODES = ("uniform", "released")


@dataclasses.dataclass(frozen=True)
class DPNTKConfig(ConfigMixin):
    """Public settings of a DP-NTK run (what a saved result stores).

    Attributes:
      iterations, batch_size, learning_rate: Adam training (Appendix A: 2000, 5000, 0.01 for
        MNIST; ``iterations=None`` -> 2000, or the checkpoint's total when resuming).
      d_code: latent code size (Appendix A: 5 for MNIST/FMNIST).
      label_mode: ``"uniform"`` (balanced data; paper) or ``"released"`` (noisy
        class proportions weight the embedding and drive label sampling).
      split: ``(embedding, labels)`` budget fractions in ``"released"`` mode
        and under add-remove (the labels' release is then the class counts;
        `privkernels.privacy.Budget.split`).
      min_proportion: floor of the noisy proportion when dividing the embedding.
      n_classes, data_shape: the public shapes; chunk_size, method: the feature core's.
      epsilon, delta: the run's total budget (None: non-private), as the file records it;
        the releases spend the `privkernels.dp_ntk.settings.Plan`'s `Budget` shares, never
        these floats.
    """

    iterations: int
    batch_size: int
    learning_rate: float
    n_classes: int
    d_code: int
    label_mode: str
    split: tuple[float, float]
    min_proportion: float
    chunk_size: int | None
    method: str
    data_shape: tuple[int, ...]
    epsilon: float | None
    delta: float | None


class TrainState(NamedTuple):
    """Generator training state; ``step`` (int32) counts completed iterations."""

    params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array


def batch_labels(batch_size: int, n_classes: int) -> np.ndarray:
    """Class-balanced generator batch: label ``i % n_classes`` for row ``i``.

    The paper draws the generated labels uniformly at random; a balanced batch
    is the stratified version of that draw (same expected embedding, lower
    variance). Being a NumPy constant, it also lets the feature core group the
    batch by class (structured path, C times fewer FLOPs than a one-hot layout).
    In ``"released"`` mode the loss rescales each column by ``batch/count_c``.
    """
    return (np.arange(batch_size) % n_classes).astype(np.int32)


def target_embedding(
    noisy_embedding: jax.Array, proportions: np.ndarray | None, min_proportion: float
) -> jax.Array:
    """The matched target: the embedding, or its columns divided by the noisy proportions."""
    if proportions is None:
        return noisy_embedding
    w = jnp.maximum(jnp.asarray(proportions, jnp.float32), min_proportion)
    return noisy_embedding / w[None, :]


def column_rescale(config: DPNTKConfig) -> jax.Array:
    """``(1, C)``: ``batch / count_c`` in released mode (class-conditional means), else ones."""
    if config.label_mode == "released":
        counts = np.bincount(
            np.arange(config.batch_size) % config.n_classes, minlength=config.n_classes
        )
        return jnp.asarray(config.batch_size / counts, jnp.float32)[None, :]
    return jnp.ones((1, config.n_classes), jnp.float32)


_STATIC = (
    "generator",
    "network",
    "learning_rate",
    "batch_size",
    "n_classes",
    "d_code",
    "chunk_size",
    "method",
)


def _step(
    state: TrainState,
    ntk_params: Any,
    target: jax.Array,
    rescale: jax.Array,
    *,
    generator: nn.Module,
    network: nn.Module,
    learning_rate: float,
    batch_size: int,
    n_classes: int,
    d_code: int,
    chunk_size: int | None,
    method: str,
) -> tuple[TrainState, jax.Array]:
    """One Adam step on eq. (6) at iteration ``state.step``."""
    key = jax.random.fold_in(state.key, state.step)

    def loss_fn(gp: Any) -> jax.Array:
        labels = batch_labels(batch_size, n_classes)
        z, onehot = make_code(key, jnp.asarray(labels), d_code=d_code, n_classes=n_classes)
        xg = cast(jax.Array, generator.apply(gp, z, onehot))
        emb = mean_embedding(  # generated data: the backend's fast products are fine
            network,
            ntk_params,
            xg,
            labels,
            n_classes,
            chunk_size=chunk_size,
            method=method,
            precision=None,
        )
        return jnp.sum((target - emb * rescale) ** 2)  # eq. (6), squared Frobenius norm

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = optax.adam(learning_rate).update(grads, state.opt_state, state.params)
    new = TrainState(
        optax.apply_updates(state.params, updates), opt_state, state.key, state.step + 1
    )
    return new, loss


def _static(config: DPNTKConfig, generator: nn.Module, network: nn.Module) -> dict[str, Any]:
    return dict(
        generator=generator,
        network=network,
        learning_rate=float(config.learning_rate),
        batch_size=config.batch_size,
        n_classes=config.n_classes,
        d_code=config.d_code,
        chunk_size=config.chunk_size,
        method=config.method,
    )


_jit_step = jax.jit(_step, static_argnames=_STATIC)


@functools.partial(jax.jit, static_argnames=("count", *_STATIC))
def _scan(
    state: TrainState,
    ntk_params: Any,
    target: jax.Array,
    rescale: jax.Array,
    *,
    count: int,
    **static: Any,
) -> tuple[TrainState, jax.Array]:
    def body(st: TrainState, _: None) -> tuple[TrainState, jax.Array]:
        return _step(st, ntk_params, target, rescale, **static)

    return jax.lax.scan(body, state, None, length=count)


def train_step(
    state: TrainState,
    config: DPNTKConfig,
    generator: nn.Module,
    network: nn.Module,
    ntk_params: Any,
    target: jax.Array,
) -> tuple[TrainState, jax.Array]:
    """One generator step (pure; module-level jit: equal configs share one compilation).

    ``ntk_params`` and ``target`` (the matched embedding, `target_embedding`)
    are arguments, not closed-over constants, so XLA does not constant-fold
    through the large embedding.
    """
    return _jit_step(
        state, ntk_params, target, column_rescale(config), **_static(config, generator, network)
    )


def run_steps(
    state: TrainState,
    count: int,
    config: DPNTKConfig,
    generator: nn.Module,
    network: nn.Module,
    ntk_params: Any,
    target: jax.Array,
) -> tuple[TrainState, jax.Array]:
    """``count`` steps as one ``lax.scan``; returns the new state and the ``(count,)`` losses."""
    return _scan(
        state,
        ntk_params,
        target,
        column_rescale(config),
        count=int(count),
        **_static(config, generator, network),
    )
