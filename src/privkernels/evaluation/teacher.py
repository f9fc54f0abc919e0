"""A ConvNet taught by the kernel model of a distilled set (post-processing).

Trained on the 100 distilled images alone (Table 3's protocol), the ConvNet
sees 100 points. The KRR that DP-KIP optimised (paper eq. 3) sees the same 100
points through its kernel and generalises further (the Benchmarks page has the
numbers). Here the ConvNet learns the KRR's function instead of the 100 labels:

* inputs: the support images plus ``pool_size`` random convex combinations
  ``lam * x_i + (1 - lam) * x_j`` of two of them (``i, j`` uniform,
  ``lam ~ U(0, 1)``; mixup);
* targets: ``softmax(f(x) / temperature)`` where ``f`` is the teacher, e.g. the
  release's KRR predictor `krr_teacher` (knowledge distillation).

When ``x`` is the released support set and the teacher is computed from the
release alone (as `krr_teacher` is), every input and every target is a
function of the release and of public randomness (``key``), so the ConvNet
costs no privacy and the release's `PrivacyReport` stays what it was. A
teacher that reads other data makes the ConvNet depend on that data too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels import dp_kip
from privkernels._validation import check_array, check_int, check_key, check_positive
from privkernels.evaluation.convnet import train_convnet

__all__ = ["krr_teacher", "mixup_pool", "soft_targets", "train_convnet_from_teacher"]


def mixup_pool(key: jax.Array, x: Any, size: int) -> jax.Array:
    """``size`` convex combinations of two random rows of ``x`` ``(m, ...)``.

    Row ``k`` is ``lam_k x[i_k] + (1 - lam_k) x[j_k]`` with ``i_k, j_k`` uniform
    on ``[0, m)`` and ``lam_k ~ U(0, 1)``, all drawn from ``key`` alone.
    Returns ``(size, ...)`` float32.
    """
    key = check_key(key)
    x = jnp.asarray(check_array(x, "x", min_rows=1), jnp.float32)
    size = check_int(size, "size", minimum=0)
    k_i, k_j, k_lam = jax.random.split(key, 3)
    i = jax.random.randint(k_i, (size,), 0, x.shape[0])
    j = jax.random.randint(k_j, (size,), 0, x.shape[0])
    lam = jax.random.uniform(k_lam, (size,) + (1,) * (x.ndim - 1))
    return lam * x[i] + (1.0 - lam) * x[j]


def soft_targets(scores: Any, temperature: float) -> np.ndarray:
    """``softmax(scores / temperature)`` row-wise: ``(n, c)`` scores -> ``(n, c)`` float32.

    ValueError when the temperature is so small that the scores overflow
    (targets not finite).
    """
    scores = check_array(scores, "scores", ndim=2)
    temperature = check_positive(temperature, "temperature")
    z = jnp.asarray(scores, jnp.float32) / temperature
    out = np.asarray(jax.nn.softmax(z, axis=-1), np.float32)
    if not np.all(np.isfinite(out)):
        raise ValueError("temperature is too small for these scores (targets not finite)")
    return out


def krr_teacher(result: Any) -> Callable[[Any], np.ndarray]:
    """The KRR predictor of a `privkernels.dp_kip.DPKIPResult` (`dp_kip.predict`, chunked):
    ``(n, *config.input_shape)`` -> ``(n, c)`` float32 scores."""
    return lambda x: dp_kip.predict(result, x)


def train_convnet_from_teacher(
    key: jax.Array,
    x: Any,
    teacher: Callable[[Any], Any],
    n_classes: int,
    *,
    pool_size: int = 20_000,
    temperature: float = 0.1,
    **train_kw: Any,
) -> tuple[Any, Any]:
    """Train the ConvNet on ``x`` ``(m, h, w[, ch])`` and mixups of it, labelled by ``teacher``.

    ``teacher`` maps ``(b, h, w[, ch])`` images to ``(b, n_classes)`` scores
    (`krr_teacher` for a DP-KIP release); it is called once on all
    ``m + pool_size`` rows, so it batches itself. Its scores, softened at
    ``temperature`` (`soft_targets`), are the targets. ``train_kw`` go to
    `train_convnet` (``steps``, ``batch_size``, ``augment``, ...). ``key`` is
    split into the pool's key and the ConvNet's (so the ConvNet's
    initialisation differs from `train_convnet` at the same key). Returns
    ``(module, params)``.
    """
    k_pool, k_train = jax.random.split(check_key(key))
    x = np.asarray(check_array(x, "x", ndim=(3, 4)), np.float32)
    n_classes = check_int(n_classes, "n_classes", minimum=2)
    temperature = check_positive(temperature, "temperature")
    pool_size = check_int(pool_size, "pool_size", minimum=0)
    inputs = np.concatenate([x, np.asarray(mixup_pool(k_pool, x, pool_size))])
    scores = np.asarray(teacher(inputs))
    if scores.shape != (inputs.shape[0], n_classes):
        raise ValueError(
            f"teacher must return shape ({inputs.shape[0]}, {n_classes}), got {scores.shape}"
        )
    return train_convnet(k_train, inputs, soft_targets(scores, temperature), n_classes, **train_kw)
