"""A small DP-SGD baseline for the peers table: an MLP trained with optax on the privacy core.

Poisson batches (`privkernels.privacy.poisson_schedule`: one schedule of
per-step samples an epoch, each step's sample that of ``poisson_batch`` for its
key, padded, never truncated; the epoch runs as one compiled ``lax.scan``)
at rate ``q = batch / n``, per-example gradients clipped to ``C``
(`privkernels.privacy.clip_per_example`), summed over the real rows, Gaussian
noise from the calibrated `privkernels.privacy.DPSGDPlan` (PLD, replace-one),
divided by the public expected batch size, an Adam step. The plan accounts
exactly the mechanism that runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def train_mlp(
    key: Any,
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    epsilon: float,
    delta: float,
    epochs: int = 15,
    batch_size: int = 256,
    clip_norm: float = 1.0,
    learning_rate: float = 1e-3,
    hidden: int = 256,
) -> tuple[Callable[[np.ndarray], np.ndarray], Any, int]:
    """Train ``x (n, d) -> tanh(hidden) -> n_classes`` with DP-SGD; ``(predict, plan, steps)``."""
    import jax
    import jax.numpy as jnp
    import optax

    from privkernels.privacy import (
        Budget,
        clip_per_example,
        dpsgd_plan,
        poisson_pad_to,
        poisson_schedule,
    )

    n, dim = x.shape
    q = batch_size / n
    per_epoch = max(1, round(1.0 / q))
    steps = epochs * per_epoch
    plan = dpsgd_plan(Budget(epsilon, delta), sampling_rate=q, steps=steps, clip_norm=clip_norm,
                      neighbouring="replace-one")  # fmt: skip
    k_init, k_train = jax.random.split(key)
    k1, k2 = jax.random.split(k_init)
    params = {
        "w1": jax.random.normal(k1, (dim, hidden)) / np.sqrt(dim), "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, n_classes)) / np.sqrt(hidden),
        "b2": jnp.zeros(n_classes),
    }  # fmt: skip
    opt = optax.adam(learning_rate)
    state = opt.init(params)

    def logits(p: Any, xb: jax.Array) -> jax.Array:
        return jnp.tanh(xb @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

    def loss(p: Any, xi: jax.Array, yi: jax.Array) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(logits(p, xi[None]), yi[None])[0]

    def step(p: Any, s: Any, xb: jax.Array, yb: jax.Array, mask: jax.Array, k: jax.Array) -> Any:
        grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p, xb, yb)
        clipped, _ = clip_per_example(grads, clip_norm)
        summed = jax.tree_util.tree_map(
            lambda g: jnp.sum(jnp.where(mask.reshape((-1,) + (1,) * (g.ndim - 1)), g, 0.0), 0),
            clipped,
        )
        noisy = jax.tree_util.tree_map(lambda g: g / batch_size, plan.add_noise(k, summed))
        updates, s = opt.update(noisy, s, p)
        return optax.apply_updates(p, updates), s

    @jax.jit
    def epoch(p: Any, s: Any, idx: jax.Array, mask: jax.Array, k_noise: jax.Array) -> Any:
        def body(carry: Any, step_in: Any) -> Any:
            i, m, k = step_in
            p_i, s_i = carry
            return step(p_i, s_i, xd[i], yd[i], m, k), None

        return jax.lax.scan(body, (p, s), (idx, mask, k_noise))[0]

    xd = jnp.asarray(np.concatenate([x, np.zeros((1, dim), x.dtype)]), jnp.float32)
    yd = jnp.asarray(np.concatenate([y, [0]]), jnp.int32)
    pad = poisson_pad_to(n, q)
    for e in range(epochs):
        ts = jnp.arange(e * per_epoch, (e + 1) * per_epoch)
        pairs = jax.vmap(lambda t: jax.random.split(jax.random.fold_in(k_train, t)))(ts)
        sched = poisson_schedule(pairs[:, 0], n, q, min_pad=pad, pad_index=n)  # row n: public zeros
        params, state = epoch(params, state, sched.indices, sched.mask, pairs[:, 1])

    def predict(xt: np.ndarray) -> np.ndarray:
        return np.asarray(jnp.argmax(logits(params, jnp.asarray(xt, jnp.float32)), -1))

    return predict, plan, steps
