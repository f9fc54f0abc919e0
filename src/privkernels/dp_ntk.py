"""DP-NTK: private data generation by matching e-NTK mean embeddings.

Yang, Adamczewski, Li, Sutherland & Park, "Differentially Private Neural
Tangent Kernels for Privacy-Preserving Data Generation" (Algorithm 1, Sec. 3).

The method touches the private data exactly once:

1. :func:`private_embedding` releases the class-conditional mean embedding
   ``mu_P = (1/n) sum_i phi(x_i) onehot(y_i)^T`` (eq. 4, shape ``(p, C)``) of
   normalised e-NTK features ``phi(x) = grad_theta f(x) / ||grad_theta f(x)||``
   of a randomly initialised network. Under replace-one neighbours its
   Frobenius sensitivity is ``2/n`` (Prop. 3.1) and the Gaussian mechanism with
   the analytic-Gaussian noise multiplier (:func:`privkernels.privacy.gaussian_sigma`)
   privatises it.
2. Optionally (class-imbalanced data, ``label_mode="released"``)
   :func:`private_class_proportions` releases the class proportions with
   their own Gaussian noise and its own share of the budget.
3. :func:`fit` trains a generator with Adam to minimise
   ``||mu~_P - mu_Q||_F^2`` (eq. 6), where ``mu_Q`` is the e-NTK mean
   embedding of a fresh batch of generated samples (gradients flow through the
   feature map). This is post-processing: no further privacy cost, however
   many iterations, checkpoints or resumes.

Privacy conventions (also recorded in each :class:`PrivacyReport`):

* Neighbouring datasets differ by *replacing* one example, so the dataset
  size ``n`` is the same for both and is treated as public. It is used
  unnoised in the ``2/n`` and ``sqrt(2)/n`` sensitivities.
* The e-NTK network parameters, the generator initialisation and every latent
  code come from keys split off the user's key and never depend on the data.
* ``epsilon=None`` is a non-private baseline and the report says so.

Class proportions (``label_mode="released"``, the tabular setting). The
paper borrows DP-MERF's class-weighted embedding, whose reference code reads
the raw class counts without noise. Here the count vector is released with
the Gaussian mechanism: replacing one example changes two counts by one, so
the L2 sensitivity is ``sqrt(2)`` on counts and ``sqrt(2)/n`` on proportions.
It gets a fraction ``label_budget_fraction`` of both epsilon and delta, and
the report composes the two releases (basic composition). Post-processing:
clip at 0 and renormalise to sum 1; if every entry is clipped, use uniform.
The noisy proportions ``p~`` are then used

* to weight the released embedding: column ``c`` is divided by
  ``max(p~_c, min_proportion)``, which turns ``p_c * mean_c + noise`` into an
  estimate of the class-conditional mean embedding ``mean_c``.
* on the generator side: each training batch holds (near-)equal numbers of
  every class, and column ``c`` of its embedding is rescaled by
  ``batch_size / count_c``, so it is the class-conditional mean too. The loss
  compares class-conditional means.
* to draw the labels of synthetic samples in :func:`sample`.

With ``label_mode="uniform"`` (balanced image data, the paper's MNIST setup)
the unweighted embedding (4) is matched by a generator whose labels are drawn
uniformly (Sec. 3), and :func:`sample` draws labels uniformly.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_array,
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
    check_key,
    check_labels,
    check_positive,
    infer_n_classes,
)
from privkernels.generators import (
    ColumnGroup,
    ConvCondGenerator,
    TabularGenerator,
    discretize,
    make_code,
)
from privkernels.privacy.report import (
    REPLACE_ONE,
    MechanismRecord,
    PrivacyReport,
    compose,
    non_private_report,
)

__all__ = [
    "DPNTKResult",
    "private_embedding",
    "private_class_proportions",
    "default_generator",
    "fit",
    "resume",
    "sample",
    "load_checkpoint",
]

LABEL_MODES = ("uniform", "released")

_NTK_PARAMS_NOTE = (
    "e-NTK network parameters: random initialisation from a key split off the user key, "
    "independent of the data"
)
_N_PUBLIC_NOTE = (
    "dataset size n: treated as public (replace-one neighbours keep n fixed); used unnoised "
    "in the 2/n sensitivity"
)
_GEN_NOTE = (
    "generator initialisation, latent codes and generated labels: drawn from keys split off "
    "the user key; generator training is post-processing of the release(s)"
)


@dataclasses.dataclass(frozen=True)
class DPNTKResult:
    """What :func:`fit` returns.

    Attributes:
      generator: the flax generator module; ``generator.apply(generator_params, z, onehot)``.
      generator_params: trained generator parameters (pytree).
      network: the flax module whose e-NTK defines the kernel.
      ntk_params: its (data-independent, random) parameters.
      noisy_embedding: the released embedding ``(p, n_classes)`` float32 (after
        noise, before any class weighting).
      noisy_proportions: released class proportions ``(n_classes,)`` (post-processed),
        or None when ``label_mode="uniform"``.
      label_mode: ``"uniform"`` or ``"released"``.
      report: the :class:`PrivacyReport` of everything released.
      loss_history: ``(iterations,)`` float32 training loss (eq. 6) per iteration.
      n_classes, d_code: label count and latent code size.
      data_shape: shape of one example (e.g. ``(28, 28)`` or ``(d,)``).
      groups: tabular output column groups (for discretising categorical heads).
      iteration: number of completed training iterations.
    """

    generator: nn.Module
    generator_params: Any
    network: nn.Module
    ntk_params: Any
    noisy_embedding: jax.Array
    noisy_proportions: np.ndarray | None
    label_mode: str
    report: PrivacyReport
    loss_history: np.ndarray
    n_classes: int
    d_code: int
    data_shape: tuple[int, ...]
    groups: tuple[ColumnGroup, ...] = ()
    iteration: int = 0


# ---------------------------------------------------------------------------
# Releases (the only functions that read private data)
# ---------------------------------------------------------------------------


def _features_module() -> Any:
    return importlib.import_module("privkernels.features")


def _privacy_module() -> Any:
    return importlib.import_module("privkernels.privacy")


def _mean_embedding(
    network: nn.Module,
    params: Any,
    x: jax.Array,
    y: jax.Array | np.ndarray,
    n_classes: int,
    *,
    chunk_size: int | None,
    method: str,
) -> jax.Array:
    """``(1/n) sum_i phi(x_i) onehot(y_i)^T`` -> ``(p, n_classes)`` via the feature core."""
    feats = _features_module()
    return feats.entk_mean_embedding(
        network.apply, params, x, y, n_classes, chunk_size=chunk_size, method=method
    )


def _validate_xy(x: Any, y: Any, n_classes: Any) -> tuple[Any, np.ndarray, int]:
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    x = check_array(x, "x", min_rows=1)
    if x.ndim < 2:
        raise ValueError(
            f"x must have shape (n, ...) with at least 2 dimensions, got {tuple(x.shape)}"
        )
    y = check_labels(y, n_classes, "y", n_rows=int(x.shape[0]))
    return x, y, n_classes


def _check_privacy_args(epsilon: Any, delta: Any) -> tuple[float | None, float | None]:
    if epsilon is None:
        return None, None if delta is None else check_delta(delta)
    return check_epsilon(epsilon), check_delta(delta)


def private_embedding(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    n_classes: int,
    epsilon: float | None,
    delta: float | None = None,
    network: nn.Module,
    params: Any = None,
    chunk_size: int | None = None,
    method: str = "auto",
) -> tuple[jax.Array, PrivacyReport]:
    """Release the e-NTK mean embedding of ``(x, y)`` (Algorithm 1, eq. 4 + Gaussian mechanism).

    ``key`` is split into ``(k_params, k_noise)``: the network parameters are
    ``init_params(k_params, network, x.shape[1:])`` unless ``params`` is given
    (which must then be data-independent), and the noise uses ``k_noise``.
    The split does not depend on ``epsilon``, so the same key with
    ``epsilon=None`` gives the exact (pre-noise) embedding with the same network.

    Args:
      key: JAX PRNG key.
      x: ``(n, *input_shape)`` float private inputs; y: ``(n,)`` int labels in
        ``[0, n_classes)``. A class without examples is allowed (its column is
        pure noise): refusing it would depend on the private data.
      n_classes: number of classes ``C`` (1 for unconditional generation).
      epsilon, delta: the guarantee of this release; ``epsilon=None`` -> no noise.
      network: flax module whose e-NTK is used (e.g. ``features.fc_1l(800, out_features=10)``).
      params: optional network parameters (data-independent!).
      chunk_size: examples per streamed chunk (bounded memory).
      method: ``"auto" | "generic" | "structured"`` (passed to the feature core).

    Returns:
      ``(embedding (p, C) float32, PrivacyReport)``. Sensitivity ``2/n``
      (Prop. 3.1), noise std ``gaussian_sigma(eps, delta) * 2/n`` per entry.

    Raises:
      ValueError: on bad input (and TypeError on wrong kinds), before any noise is drawn.
    """
    key = check_key(key)
    x, y_np, n_classes = _validate_xy(x, y, n_classes)
    eps, dlt = _check_privacy_args(epsilon, delta)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size", minimum=1)
    n = int(x.shape[0])
    k_params, k_noise = jax.random.split(key)
    if params is None:
        params = _features_module().init_params(k_params, network, tuple(x.shape[1:]))
    emb = _mean_embedding(
        network,
        params,
        jnp.asarray(x, jnp.float32),
        jnp.asarray(y_np),
        n_classes,
        chunk_size=chunk_size,
        method=method,
    )
    emb = jnp.asarray(emb, jnp.float32)
    if eps is None:
        report = non_private_report(
            "epsilon=None: the e-NTK mean embedding was released WITHOUT noise (non-private baseline)"
        )
        return emb, report
    assert dlt is not None  # check_delta ran whenever epsilon is not None
    priv = _privacy_module()
    sigma = float(priv.gaussian_sigma(eps, dlt))
    sensitivity = 2.0 / n
    noisy = priv.gaussian_mechanism(k_noise, emb, sensitivity=sensitivity, sigma=sigma)
    record = MechanismRecord.make(
        "gaussian",
        f"e-NTK mean embedding ({emb.shape[0]}, {n_classes})",
        eps,
        dlt,
        sensitivity=sensitivity,
        accountant="analytic-gaussian",
        sigma=sigma,
        noise_std=sigma * sensitivity,
        n=n,
    )
    report = PrivacyReport.from_mechanisms(
        [record], REPLACE_ONE, data_independent=(_NTK_PARAMS_NOTE, _N_PUBLIC_NOTE)
    )
    return jnp.asarray(noisy, jnp.float32), report


def private_class_proportions(
    key: jax.Array,
    y: Any,
    *,
    n_classes: int,
    epsilon: float | None,
    delta: float | None = None,
) -> tuple[np.ndarray, PrivacyReport]:
    """Release class proportions ``counts / n`` with the Gaussian mechanism.

    Replace-one changes two counts by one: L2 sensitivity ``sqrt(2)/n`` on
    proportions. Post-processing: clip at 0, renormalise to sum 1 (uniform if
    everything was clipped). ``epsilon=None`` -> exact proportions, non-private.

    Returns:
      ``(proportions (n_classes,) float64 summing to 1, PrivacyReport)``.
    """
    key = check_key(key)
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    y_np = check_labels(y, n_classes, "y")
    eps, dlt = _check_privacy_args(epsilon, delta)
    n = int(y_np.shape[0])
    props = np.bincount(y_np, minlength=n_classes).astype(np.float64) / n
    if eps is None:
        return props, non_private_report("epsilon=None: class proportions released WITHOUT noise")
    assert dlt is not None
    priv = _privacy_module()
    sigma = float(priv.gaussian_sigma(eps, dlt))
    sensitivity = math.sqrt(2.0) / n
    noisy = np.asarray(
        priv.gaussian_mechanism(
            key, jnp.asarray(props, jnp.float32), sensitivity=sensitivity, sigma=sigma
        ),
        dtype=np.float64,
    )
    clipped = np.clip(noisy, 0.0, None)
    total = clipped.sum()
    out = clipped / total if total > 0 else np.full(n_classes, 1.0 / n_classes)
    record = MechanismRecord.make(
        "gaussian",
        f"class proportions ({n_classes},)",
        eps,
        dlt,
        sensitivity=sensitivity,
        accountant="analytic-gaussian",
        sigma=sigma,
        noise_std=sigma * sensitivity,
        n=n,
        post_processing="clip at 0, renormalise",
    )
    return out, PrivacyReport.from_mechanisms(
        [record], REPLACE_ONE, data_independent=(_N_PUBLIC_NOTE,)
    )


# ---------------------------------------------------------------------------
# Generator training (post-processing)
# ---------------------------------------------------------------------------


def default_generator(data_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Conditional CNN for images (rank >= 2 examples), FC tabular generator otherwise."""
    if len(data_shape) >= 2:
        return ConvCondGenerator(n_classes=n_classes, output_shape=tuple(data_shape))
    d = int(data_shape[0])
    return TabularGenerator(n_classes=n_classes, n_features=d, hidden=(4 * d, 2 * d))


def _batch_labels(batch_size: int, n_classes: int) -> np.ndarray:
    """Class-balanced generator batch: label ``i % n_classes`` for row ``i``.

    The paper draws the generated labels uniformly at random; a balanced batch
    is the stratified version of that draw (same expected embedding, lower
    variance). Being a NumPy constant, it also lets the feature core group the
    batch by class (structured path, C times fewer FLOPs than a one-hot layout).
    In ``"released"`` mode the loss rescales each column by ``batch/count_c``.
    """
    return (np.arange(batch_size) % n_classes).astype(np.int32)


def _target_embedding(
    noisy_embedding: jax.Array, proportions: np.ndarray | None, min_proportion: float
) -> jax.Array:
    if proportions is None:
        return noisy_embedding
    w = jnp.maximum(jnp.asarray(proportions, jnp.float32), min_proportion)
    return noisy_embedding / w[None, :]


@functools.partial(
    jax.jit,
    static_argnames=(
        "generator",
        "network",
        "learning_rate",
        "batch_size",
        "n_classes",
        "d_code",
        "label_mode",
        "chunk_size",
        "method",
    ),
)
def _train_step(
    gparams: Any,
    opt_state: Any,
    key: jax.Array,
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
    label_mode: str,
    chunk_size: int | None,
    method: str,
) -> tuple[Any, Any, jax.Array]:
    """One Adam step on eq. (6). Module-level jit: equal configs share one compilation.

    ``ntk_params`` / ``target`` are arguments (not closed-over constants) so XLA
    does not constant-fold through the large embedding.
    """

    def loss_fn(gp: Any) -> jax.Array:
        labels = _batch_labels(batch_size, n_classes)
        z, onehot = make_code(key, jnp.asarray(labels), d_code=d_code, n_classes=n_classes)
        xg = cast(jax.Array, generator.apply(gp, z, onehot))
        emb = _mean_embedding(
            network, ntk_params, xg, labels, n_classes, chunk_size=chunk_size, method=method
        )
        return jnp.sum((target - emb * rescale) ** 2)  # eq. (6), squared Frobenius norm

    loss, grads = jax.value_and_grad(loss_fn)(gparams)
    updates, opt_state = optax.adam(learning_rate).update(grads, opt_state, gparams)
    return optax.apply_updates(gparams, updates), opt_state, loss


def _make_step(
    generator: nn.Module,
    network: nn.Module,
    ntk_params: Any,
    target: jax.Array,
    config: dict[str, Any],
) -> Callable[[Any, Any, jax.Array], tuple[Any, Any, jax.Array]]:
    n_classes, batch_size = config["n_classes"], config["batch_size"]
    if config["label_mode"] == "released":
        # balanced batch: column c rescaled by batch_size / count_c -> class-conditional mean
        counts = np.bincount(np.arange(batch_size) % n_classes, minlength=n_classes)
        rescale = jnp.asarray(batch_size / counts, jnp.float32)[None, :]
    else:
        rescale = jnp.ones((1, n_classes), jnp.float32)
    static = {
        "generator": generator,
        "network": network,
        "learning_rate": float(config["learning_rate"]),
        "batch_size": batch_size,
        "n_classes": n_classes,
        "d_code": config["d_code"],
        "label_mode": config["label_mode"],
        "chunk_size": config["chunk_size"],
        "method": config["method"],
    }

    def step(gparams: Any, opt_state: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        return _train_step(gparams, opt_state, key, ntk_params, target, rescale, **static)

    return step


@dataclasses.dataclass
class _State:
    generator_params: Any
    opt_state: Any
    iteration: int
    train_key: jax.Array
    loss_history: list[float]


def fit(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float | None = 1e-5,
    network: nn.Module,
    generator: nn.Module | None = None,
    iterations: int | None = None,
    batch_size: int = 5000,
    learning_rate: float = 0.01,
    n_classes: int | None = None,
    d_code: int = 5,
    label_mode: str = "uniform",
    label_budget_fraction: float = 0.1,
    min_proportion: float = 1e-3,
    ntk_params: Any = None,
    groups: tuple[ColumnGroup, ...] | None = None,
    chunk_size: int | None = None,
    method: str = "auto",
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    resume_from: str | os.PathLike[str] | None = None,
    progress: bool = True,
    callback: Callable[[int, float], None] | None = None,
) -> DPNTKResult:
    """Train a DP-NTK generator (Algorithm 1).

    Args:
      key: JAX PRNG key; split into (release, label release, generator init, training).
      x: ``(n, *data_shape)`` private examples; y: ``(n,)`` int labels.
      epsilon, delta: total budget; ``epsilon=None`` -> non-private baseline.
      network: flax module whose e-NTK is the kernel (paper: fc_1l width 800 for MNIST).
      generator: flax generator ``apply(params, z, onehot)``; default from :func:`default_generator`.
      iterations, batch_size, learning_rate: Adam training (Appendix A: 2000, 5000, 0.01 for
        MNIST; ``iterations=None`` -> 2000, or the checkpoint's total when resuming).
      n_classes: default ``max(y) + 1`` (pass it explicitly for private data: the
        default reads the largest label without noise).
      d_code: latent code size (Appendix A: 5 for MNIST/FMNIST).
      label_mode: ``"uniform"`` (balanced data; paper) or ``"released"`` (noisy
        class proportions weight the embedding and drive label sampling; see module doc).
      label_budget_fraction: share of epsilon and delta spent on the proportions.
      min_proportion: floor of the noisy proportion when dividing the embedding.
      ntk_params: optional data-independent e-NTK parameters.
      groups: tabular column groups (for :func:`sample` discretisation); default
        from ``generator.groups`` when present.
      chunk_size, method: passed to the feature core.
      checkpoint_path, checkpoint_every: save a checkpoint every that many
        iterations, at the end, and on KeyboardInterrupt.
      resume_from: continue the run saved at that checkpoint (x and y are then
        ignored and may be None: the private data is not read again).
      progress: tqdm progress bar with the loss.
      callback: ``callback(iteration, loss)`` after each iteration.

    Returns:
      :class:`DPNTKResult`.
    """
    if resume_from is not None:
        _check_resume_budget(resume_from, x, y, epsilon, delta)
        return resume(
            resume_from,
            network=network,
            generator=generator,
            iterations=iterations,
            checkpoint_path=checkpoint_path,
            checkpoint_every=checkpoint_every,
            progress=progress,
            callback=callback,
        )
    # ---- validation (before any randomness) ----
    key = check_key(key)
    n_classes, n_classes_inferred = infer_n_classes(y, n_classes)
    x, y_np, n_classes = _validate_xy(x, y, n_classes)
    eps, dlt = _check_privacy_args(epsilon, delta)
    iterations = check_int(2000 if iterations is None else iterations, "iterations", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    learning_rate = check_positive(learning_rate, "learning_rate")
    d_code = check_int(d_code, "d_code", minimum=1)
    if label_mode not in LABEL_MODES:
        raise ValueError(f"label_mode must be one of {LABEL_MODES}, got {label_mode!r}")
    if n_classes == 1:
        label_mode = "uniform"  # one class: nothing to release about labels
    if label_mode == "released" and eps is not None:
        label_budget_fraction = check_fraction(label_budget_fraction, "label_budget_fraction")
    min_proportion = check_positive(min_proportion, "min_proportion")
    if checkpoint_every is not None:
        check_int(checkpoint_every, "checkpoint_every", minimum=1)
    data_shape = tuple(int(s) for s in x.shape[1:])
    if generator is None:
        generator = default_generator(data_shape, n_classes)
    if groups is None:
        groups = tuple(getattr(generator, "groups", ()) or ())

    k_emb, k_lab, k_gen, k_train = jax.random.split(key, 4)
    if ntk_params is None:  # same split as private_embedding uses internally
        ntk_params = _features_module().init_params(jax.random.split(k_emb)[0], network, data_shape)

    # ---- the only reads of private data ----
    if label_mode == "released":
        if eps is None:
            eps_e = eps_l = dlt_e = dlt_l = None
        else:
            assert dlt is not None
            eps_l, dlt_l = eps * label_budget_fraction, dlt * label_budget_fraction
            eps_e, dlt_e = eps - eps_l, dlt - dlt_l
        noisy_emb, rep_e = private_embedding(
            k_emb,
            x,
            y_np,
            n_classes=n_classes,
            epsilon=eps_e,
            delta=dlt_e,
            network=network,
            params=ntk_params,
            chunk_size=chunk_size,
            method=method,
        )
        proportions, rep_l = private_class_proportions(
            k_lab, y_np, n_classes=n_classes, epsilon=eps_l, delta=dlt_l
        )
        report = compose(rep_e, rep_l)
    else:
        noisy_emb, report = private_embedding(
            k_emb,
            x,
            y_np,
            n_classes=n_classes,
            epsilon=eps,
            delta=dlt,
            network=network,
            params=ntk_params,
            chunk_size=chunk_size,
            method=method,
        )
        proportions = None
    del x, y, y_np  # everything below is post-processing
    if report.private:
        report = dataclasses.replace(
            report,
            data_independent=tuple(
                dict.fromkeys(
                    (*report.data_independent, _NTK_PARAMS_NOTE, _N_PUBLIC_NOTE, _GEN_NOTE)
                )
            ),
            notes=report.notes + ((N_CLASSES_INFERRED_NOTE,) if n_classes_inferred else ()),
        )

    config = {
        "iterations": iterations,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "n_classes": n_classes,
        "d_code": d_code,
        "label_mode": label_mode,
        "min_proportion": min_proportion,
        "chunk_size": chunk_size,
        "method": method,
        "data_shape": list(data_shape),
    }
    z0, oh0 = make_code(k_gen, jnp.zeros((2,), jnp.int32), d_code=d_code, n_classes=n_classes)
    gparams = generator.init(k_gen, z0, oh0)
    optimizer = optax.adam(learning_rate)
    state = _State(gparams, optimizer.init(gparams), 0, k_train, [])
    return _train(
        state,
        config,
        generator=generator,
        network=network,
        ntk_params=ntk_params,
        noisy_emb=noisy_emb,
        proportions=proportions,
        report=report,
        groups=tuple(groups),
        checkpoint_path=checkpoint_path,
        checkpoint_every=checkpoint_every,
        progress=progress,
        callback=callback,
    )


def _train(
    state: _State,
    config: dict[str, Any],
    *,
    generator: nn.Module,
    network: nn.Module,
    ntk_params: Any,
    noisy_emb: jax.Array,
    proportions: np.ndarray | None,
    report: PrivacyReport,
    groups: tuple[ColumnGroup, ...],
    checkpoint_path: Any,
    checkpoint_every: int | None,
    progress: bool,
    callback: Callable[[int, float], None] | None,
) -> DPNTKResult:
    from tqdm.auto import tqdm

    target = _target_embedding(noisy_emb, proportions, config["min_proportion"])
    step = _make_step(generator, network, ntk_params, target, config)

    def save() -> None:
        if checkpoint_path is not None:
            _save_checkpoint(
                checkpoint_path,
                state,
                config,
                generator=generator,
                network=network,
                ntk_params=ntk_params,
                noisy_emb=noisy_emb,
                proportions=proportions,
                report=report,
                groups=groups,
            )

    total = config["iterations"]
    bar = tqdm(
        range(state.iteration, total),
        total=total,
        initial=state.iteration,
        disable=not progress,
        desc="DP-NTK",
        leave=False,
    )
    try:
        for it in bar:
            # fold_in(iteration): an interrupted-and-resumed run equals an uninterrupted one
            k = jax.random.fold_in(state.train_key, it)
            gp, os_, loss = step(state.generator_params, state.opt_state, k)
            state.generator_params, state.opt_state = gp, os_
            lv = float(loss)
            state.loss_history.append(lv)
            state.iteration = it + 1
            bar.set_postfix(loss=f"{lv:.4g}")
            if checkpoint_every is not None and state.iteration % checkpoint_every == 0:
                save()
            if callback is not None:
                callback(state.iteration, lv)
    except KeyboardInterrupt:
        save()
        raise
    finally:
        bar.close()
    save()
    return DPNTKResult(
        generator=generator,
        generator_params=state.generator_params,
        network=network,
        ntk_params=ntk_params,
        noisy_embedding=noisy_emb,
        noisy_proportions=proportions,
        label_mode=config["label_mode"],
        report=report,
        loss_history=np.asarray(state.loss_history, np.float32),
        n_classes=config["n_classes"],
        d_code=config["d_code"],
        data_shape=tuple(config["data_shape"]),
        groups=groups,
        iteration=state.iteration,
    )


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("generator",))
def _generator_apply(
    params: Any, z: jax.Array, onehot: jax.Array, *, generator: nn.Module
) -> jax.Array:
    return cast(jax.Array, generator.apply(params, z, onehot))


def sample(
    key: jax.Array,
    result: DPNTKResult,
    n: int,
    *,
    labels: Any = None,
    discretize_categorical: bool = True,
    batch_size: int = 10000,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` synthetic examples ``(x (n, *data_shape) float32, y (n,) int32)``.

    Labels are drawn uniformly over the classes (``label_mode="uniform"``) or
    from the released noisy class proportions (``"released"``), unless given.
    Tabular categorical heads are turned into exact one-hots when
    ``discretize_categorical``.
    """
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    k_lab, k_z = jax.random.split(key)
    C = result.n_classes
    if labels is not None:
        y = check_labels(labels, C, "labels", n_rows=n)
    elif result.label_mode == "released" and result.noisy_proportions is not None:
        p = jnp.asarray(result.noisy_proportions, jnp.float32)
        y = np.asarray(jax.random.choice(k_lab, C, (n,), p=p / p.sum()), np.int32)
    else:
        y = np.asarray(jax.random.randint(k_lab, (n,), 0, C), np.int32)
    apply = functools.partial(_generator_apply, generator=result.generator)
    xs = []
    for i, start in enumerate(range(0, n, batch_size)):
        yb = jnp.asarray(y[start : start + batch_size])
        z, oh = make_code(jax.random.fold_in(k_z, i), yb, d_code=result.d_code, n_classes=C)
        xs.append(np.asarray(apply(result.generator_params, z, oh), np.float32))
    x = np.concatenate(xs, axis=0)
    if discretize_categorical and any(g.kind == "categorical" for g in result.groups):
        x = discretize(x, result.groups)
    return x, y


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------


def _to_jsonable(v: Any) -> Any:
    if isinstance(v, ColumnGroup):
        return {"__column_group__": [v.kind, v.start, v.stop]}
    if isinstance(v, (tuple, list)):
        return (
            {"__tuple__": [_to_jsonable(e) for e in v]}
            if isinstance(v, tuple)
            else [_to_jsonable(e) for e in v]
        )
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    raise TypeError(f"cannot serialise {type(v).__name__}")


def _from_jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        if "__column_group__" in v:
            return ColumnGroup(*v["__column_group__"])
        if "__tuple__" in v:
            return tuple(_from_jsonable(e) for e in v["__tuple__"])
        return {k: _from_jsonable(e) for k, e in v.items()}
    if isinstance(v, list):
        return [_from_jsonable(e) for e in v]
    return v


def _module_spec(m: nn.Module) -> dict[str, Any] | None:
    """``{"class": "pkg.mod.Class", "fields": {...}}`` when every field is JSON-able."""
    try:
        fields = {
            f.name: _to_jsonable(getattr(m, f.name))
            for f in dataclasses.fields(m)
            if f.name not in ("parent", "name") and f.init
        }
    except TypeError:
        return None
    return {"class": f"{type(m).__module__}.{type(m).__qualname__}", "fields": fields}


def _module_from_spec(spec: dict[str, Any] | None, what: str) -> nn.Module:
    if spec is None:
        raise ValueError(f"the checkpoint cannot rebuild the {what}; pass {what}= to resume()")
    path = spec["class"]
    if not path.startswith("privkernels."):  # never import arbitrary code named in a file
        raise ValueError(
            f"the checkpoint names {what} class {path!r} outside privkernels; pass {what}= to resume()"
        )
    mod, cls = path.rsplit(".", 1)
    klass = getattr(importlib.import_module(mod), cls)
    return klass(**{k: _from_jsonable(v) for k, v in spec["fields"].items()})


def _key_to_array(key: jax.Array) -> tuple[np.ndarray, bool]:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(key)), True
    return np.asarray(key), False


def _save_checkpoint(
    path: Any,
    state: _State,
    config: dict[str, Any],
    *,
    generator: nn.Module,
    network: nn.Module,
    ntk_params: Any,
    noisy_emb: jax.Array,
    proportions: np.ndarray | None,
    report: PrivacyReport,
    groups: tuple[ColumnGroup, ...],
) -> None:
    """Write an ``.npz`` (no pickle): arrays + a JSON metadata string; atomic replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for prefix, tree in (
        ("gen", state.generator_params),
        ("opt", state.opt_state),
        ("ntk", ntk_params),
    ):
        for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
            arrays[f"{prefix}_{i}"] = np.asarray(leaf)
    arrays["noisy_embedding"] = np.asarray(noisy_emb)
    if proportions is not None:
        arrays["noisy_proportions"] = np.asarray(proportions)
    key_arr, typed = _key_to_array(state.train_key)
    arrays["train_key"] = key_arr
    arrays["loss_history"] = np.asarray(state.loss_history, np.float32)
    meta = {
        "format": "privkernels.dp_ntk/1",
        "iteration": state.iteration,
        "typed_key": typed,
        "config": config,
        "report": report.to_dict(),
        "groups": _to_jsonable(tuple(groups)),
        "generator": _module_spec(generator),
        "network": _module_spec(network),
        "n_leaves": {
            "gen": len(jax.tree_util.tree_leaves(state.generator_params)),
            "opt": len(jax.tree_util.tree_leaves(state.opt_state)),
            "ntk": len(jax.tree_util.tree_leaves(ntk_params)),
        },
    }
    arrays["meta"] = np.asarray(json.dumps(meta, default=float))
    tmp = path.with_name(path.name + ".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`fit` (metadata + raw arrays; no pickle)."""
    with np.load(Path(path), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("format") != "privkernels.dp_ntk/1":
        raise ValueError(f"{path} is not a DP-NTK checkpoint")
    meta["report"] = PrivacyReport.from_dict(meta["report"])
    meta["groups"] = _from_jsonable(meta["groups"])
    return {"meta": meta, "arrays": arrays}


def _unflatten_like(template: Any, arrays: dict[str, np.ndarray], prefix: str, count: int) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if len(leaves) != count:
        raise ValueError(
            f"checkpoint {prefix} tree has {count} leaves, the module gives {len(leaves)}"
        )
    new = []
    for i, leaf in enumerate(leaves):
        a = arrays[f"{prefix}_{i}"]
        if tuple(a.shape) != tuple(np.shape(leaf)):
            raise ValueError(
                f"checkpoint {prefix} leaf {i} has shape {a.shape}, expected {np.shape(leaf)}"
            )
        new.append(jnp.asarray(a, dtype=jnp.asarray(leaf).dtype))
    return jax.tree_util.tree_unflatten(treedef, new)


def _check_resume_budget(path: Any, x: Any, y: Any, epsilon: Any, delta: Any) -> None:
    """A resumed run keeps the budget it was released with; refuse anything that suggests otherwise."""
    if x is not None or y is not None:
        raise ValueError(
            "resume_from continues from the checkpoint alone and never reads data: pass x=None, y=None"
        )
    saved: PrivacyReport = load_checkpoint(path)["meta"]["report"]
    if not saved.private:
        if epsilon is not None:
            raise ValueError(
                f"resume_from: the checkpointed run is non-private; epsilon={epsilon!r} cannot be "
                "added on resume (start a new fit instead)"
            )
        return
    if (
        epsilon is None
        or not math.isclose(float(epsilon), saved.epsilon, rel_tol=1e-9)
        or (delta is not None and not math.isclose(float(delta), saved.delta, rel_tol=1e-9))
    ):
        raise ValueError(
            f"resume_from: the checkpoint's release was made at (epsilon={saved.epsilon:g}, "
            f"delta={saved.delta:g}); got (epsilon={epsilon!r}, delta={delta!r}). The budget of a "
            "release cannot change on resume: pass the original values (or use dp_ntk.resume)."
        )


def resume(
    path: str | os.PathLike[str],
    *,
    network: nn.Module | None = None,
    generator: nn.Module | None = None,
    iterations: int | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    progress: bool = True,
    callback: Callable[[int, float], None] | None = None,
) -> DPNTKResult:
    """Continue a checkpointed :func:`fit` WITHOUT reading the private data.

    Everything training needs was saved: the released noisy embedding and
    proportions, the report (returned unchanged: nothing new is spent), the
    e-NTK and generator parameters, the Adam state, the iteration and the
    training key. ``network`` / ``generator`` are rebuilt from the checkpoint
    when they are privkernels modules with simple fields; otherwise pass them.
    ``iterations`` may extend the run (default: the original total).
    ``checkpoint_path`` defaults to ``path``.
    """
    ck = load_checkpoint(path)
    meta, arrays = ck["meta"], ck["arrays"]
    config = dict(meta["config"])
    if iterations is not None:
        config["iterations"] = check_int(iterations, "iterations", minimum=1)
    if network is None:
        network = _module_from_spec(meta["network"], "network")
    if generator is None:
        generator = _module_from_spec(meta["generator"], "generator")
    data_shape = tuple(config["data_shape"])
    C, d_code = config["n_classes"], config["d_code"]
    dummy_key = jax.random.key(0)  # templates only: every value is overwritten below
    ntk_params = _unflatten_like(
        _features_module().init_params(dummy_key, network, data_shape),
        arrays,
        "ntk",
        meta["n_leaves"]["ntk"],
    )
    z0, oh0 = make_code(dummy_key, jnp.zeros((2,), jnp.int32), d_code=d_code, n_classes=C)
    gparams = _unflatten_like(
        generator.init(dummy_key, z0, oh0), arrays, "gen", meta["n_leaves"]["gen"]
    )
    opt_state = _unflatten_like(
        optax.adam(config["learning_rate"]).init(gparams), arrays, "opt", meta["n_leaves"]["opt"]
    )
    train_key = (
        jax.random.wrap_key_data(jnp.asarray(arrays["train_key"]))
        if meta["typed_key"]
        else jnp.asarray(arrays["train_key"])
    )
    state = _State(
        gparams, opt_state, int(meta["iteration"]), train_key, arrays["loss_history"].tolist()
    )
    proportions = arrays.get("noisy_proportions")
    return _train(
        state,
        config,
        generator=generator,
        network=network,
        ntk_params=ntk_params,
        noisy_emb=jnp.asarray(arrays["noisy_embedding"]),
        proportions=proportions,
        report=meta["report"],
        groups=tuple(meta["groups"]),
        checkpoint_path=path if checkpoint_path is None else checkpoint_path,
        checkpoint_every=checkpoint_every,
        progress=progress,
        callback=callback,
    )
