"""The settings of a DP-NTK run as the user gives them, and the run's plan.

`Settings` is the typed, frozen form of the keywords `privkernels.dp_ntk.fit` takes
besides the data, the keys and the run options (`privkernels.options`); its budget is a
`privkernels.privacy.Budget` from the start. `plan` validates it against the public
shapes (before any data value is read for a release or any randomness drawn) and makes,
once, everything the releases of Yang et al., Algorithm 1 need: the run's `DPNTKConfig`,
the budget's shares (`Budget` values, split once by `Budget.split`), which releases run
(`Releases`) and the keys (`FitKeys`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax

from privkernels._validation import check_int, check_positive
from privkernels.dp_ntk.release import embedding_keys
from privkernels.dp_ntk.train import LABEL_MODES, DPNTKConfig
from privkernels.features.entk import check_method
from privkernels.generators import ColumnGroup, check_groups
from privkernels.privacy.budget import Budget
from privkernels.privacy.keys import public_key_of
from privkernels.privacy.report import ADD_REMOVE

__all__ = ["Settings", "Releases", "Plan", "FitKeys", "check_settings", "fit_keys", "plan"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """A DP-NTK run's settings (Yang et al., Alg. 1), as given.

    Attributes:
      budget: the run's total (epsilon, delta) (`privkernels.privacy.Budget`); None: the
        non-private baseline.
      neighbouring: ``"replace-one"`` (n public: the mean embedding, sensitivity ``2/n``)
        or ``"add-remove"`` (n private: the class sums and a noisy n, sensitivity 1 each).
      iterations, batch_size, learning_rate, d_code, label_mode, split, min_proportion:
        generator training and the label release, documented in
        `privkernels.dp_ntk.train.DPNTKConfig` (``iterations=None``: 2000 for a new fit,
        the checkpoint's total on resume).
      method: the feature core's method (``"auto" | "generic" | "structured"``).
      network: flax module whose e-NTK is the kernel (None: the default network).
      generator: flax generator ``apply(params, z, onehot)`` (None: the default one).
      ntk_params: data-independent e-NTK parameters (None: drawn from `FitKeys.ntk`).
      groups: tabular column groups (None: ``generator.groups`` when present).
      checkpoint_every: checkpoint interval in iterations (also the scan length).
      callback: ``callback(iteration, loss)`` after each iteration (user code, run
        outside the release).
    """

    budget: Budget | None
    neighbouring: str = "replace-one"
    iterations: int | None = None
    batch_size: int = 5000
    learning_rate: float = 0.01
    d_code: int = 5
    label_mode: str = "uniform"
    split: tuple[float, float] = (0.9, 0.1)
    min_proportion: float = 1e-3
    method: str = "auto"
    network: nn.Module | None = None
    generator: nn.Module | None = None
    ntk_params: Any = None
    groups: tuple[ColumnGroup, ...] | None = None
    checkpoint_every: int | None = None
    callback: Callable[[int, float], None] | None = None


class Releases(NamedTuple):
    """What a fit releases, each with its own `Budget` share (None: released without noise).

    Attributes:
      embedding: the e-NTK embedding's budget: the whole budget, or ``split[0]`` of it
        when a second release shares it.
      labels: the second release's budget (``split[1]``), when there is one.
      sums: add-remove with a budget: the embedding is the class sums (sensitivity 1) and
        the second release a noisy n (`privkernels.dp_ntk.release.counts_release`).
      labels_kind: ``"proportions"`` (replace-one, or no budget, ``"released"`` labels),
        ``"counts"`` (add-remove, ``"released"`` labels), ``"total"`` (add-remove,
        uniform labels: the noisy n alone) or None (the embedding alone).
    """

    embedding: Budget | None
    labels: Budget | None
    sums: bool
    labels_kind: str | None


class FitKeys(NamedTuple):
    """The keys of a DP-NTK fit: the two releases' (``emb``: the embedding, split again by
    `privkernels.dp_ntk.release.embedding_keys`; ``labels``: proportions or counts) and the
    data-independent draws' (``ntk``: e-NTK weights; ``gen``: generator init; ``train``:
    latent codes and labels of generator training)."""

    emb: jax.Array
    labels: jax.Array
    ntk: jax.Array
    gen: jax.Array
    train: jax.Array


class Plan(NamedTuple):
    """A fit made once, before any randomness: its config, its releases and its keys."""

    config: DPNTKConfig
    releases: Releases
    keys: FitKeys


def fit_keys(key: jax.Array, public_key: jax.Array | None = None) -> FitKeys:
    """``key`` split into (emb, labels, gen, train), ``ntk`` the weights' key the embedding
    release would draw from ``emb`` (`embedding_keys`, the one place that split is
    written); a ``public_key`` is split into (ntk, gen, train) instead: everything the
    result keeps then says nothing about ``key`` (without it they are split siblings of
    the noise keys: one-way, but a guess of a seeded ``key`` can be checked against them)."""
    k_emb, k_lab, k_gen, k_train = jax.random.split(key, 4)
    k_ntk = embedding_keys(k_emb).params
    if public_key is not None:  # data-independent draws from their own stream
        k_ntk, k_gen, k_train = jax.random.split(public_key_of(public_key, key), 3)
    return FitKeys(k_emb, k_lab, k_ntk, k_gen, k_train)


def plan(
    s: Settings,
    *,
    data_shape: tuple[int, ...],
    n_classes: int,
    chunk_size: int | None,
    key: jax.Array,
    public_key: jax.Array | None,
) -> Plan:
    """Validate ``s`` against the public shapes into the run's `Plan` (nothing is drawn).

    ``data_shape``: one example's shape; ``n_classes``: the validated class count;
    ``chunk_size``: the run option; ``key``/``public_key``: split by `fit_keys`.
    """
    config, releases = check_settings(
        s, data_shape=data_shape, n_classes=n_classes, chunk_size=chunk_size
    )
    return Plan(config, releases, fit_keys(key, public_key))


def check_settings(
    s: Settings, *, data_shape: tuple[int, ...], n_classes: int, chunk_size: int | None
) -> tuple[DPNTKConfig, Releases]:
    """``(config, releases)`` of ``s`` on examples of ``data_shape`` with ``n_classes``
    classes, or the ``ValueError``/``TypeError`` `plan` raises on them: public numbers
    only, no key and no data (an estimator checks its settings with it before a pipeline
    step in front of it draws noise)."""
    label_mode = s.label_mode
    if label_mode not in LABEL_MODES:
        raise ValueError(f"label_mode must be one of {LABEL_MODES}, got {label_mode!r}")
    if n_classes == 1:
        label_mode = "uniform"  # one class: nothing to release about labels
    try:
        split = tuple(float(f) for f in s.split)
    except (TypeError, ValueError):
        split = ()
    if len(split) != 2:
        raise ValueError(f"split must be (embedding, labels) fractions, got {s.split!r}")
    releases = _releases(s.budget, split, label_mode, s.neighbouring)
    config = DPNTKConfig(
        iterations=check_int(
            2000 if s.iterations is None else s.iterations, "iterations", minimum=1
        ),
        batch_size=check_int(s.batch_size, "batch_size", minimum=1),
        learning_rate=check_positive(s.learning_rate, "learning_rate"),
        n_classes=n_classes,
        d_code=check_int(s.d_code, "d_code", minimum=1),
        label_mode=label_mode,
        split=split,  # type: ignore[arg-type]
        min_proportion=check_positive(s.min_proportion, "min_proportion"),
        chunk_size=chunk_size,
        method=check_method(s.method),
        data_shape=tuple(int(d) for d in data_shape),
        epsilon=None if s.budget is None else s.budget.epsilon,  # the file's record of it
        delta=None if s.budget is None else s.budget.delta,
    )
    if s.groups is not None:  # a generator's own groups: `fitting._models`
        check_groups(s.groups, math.prod(config.data_shape))
    return config, releases


def _releases(
    budget: Budget | None, split: tuple[float, ...], label_mode: str, neighbouring: str
) -> Releases:
    """The releases and their shares: ``budget.split(*split)`` (which validates the
    fractions) when two releases share it, the whole budget when the embedding is alone."""
    released = label_mode == "released"
    sums = neighbouring == ADD_REMOVE and budget is not None
    if not (released or sums):
        return Releases(budget, None, False, None)
    if budget is None:
        return Releases(None, None, False, "proportions")
    part_e, part_l = budget.split(*split)
    kind = ("counts" if released else "total") if sums else "proportions"
    return Releases(part_e, part_l, sums, kind)
