"""DP-NTK's releases: the only functions that read the private data (Yang et al., Alg. 1).

* `private_embedding` -- the class-conditional mean embedding of
  normalised e-NTK features, eq. (4): ``mu = (1/n) sum_i phi(x_i) onehot(y_i)^T``
  of shape ``(p, C)``; replace-one Frobenius sensitivity ``2/n`` (Prop. 3.1),
  released with the analytic Gaussian mechanism by the privacy core.
* `private_class_proportions` -- ``counts / n``; replace-one changes two
  counts by one, L2 sensitivity ``sqrt(2)/n``; released the same way, then
  clipped at 0 and renormalised (post-processing).
* `private_class_counts` -- the class counts under add-remove (sensitivity 1).

``n`` is public under replace-one (neighbours have the same size). Under
add-remove it is private: `private_embedding` then releases the class *sums*
``sum_i phi(x_i) onehot(y_i)^T`` (adding or removing a record moves them by one
unit-norm column, sensitivity 1), and the caller divides them by the total of
the noisy counts (`normalise_sums`, post-processing). The e-NTK network's
parameters come from the key, never from the data.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_array, check_int, check_labels
from privkernels.privacy.accountant import charged_release
from privkernels.privacy.budget import Budget, as_budget
from privkernels.privacy.keys import release_key
from privkernels.privacy.release import gaussian_release, matches_gaussian_release
from privkernels.privacy.released import (
    RELEASED_COUNTS,
    RELEASED_MEAN,
    RELEASED_N,
    RELEASED_PROPORTIONS,
    RELEASED_SUMS,
)
from privkernels.privacy.report import (
    ADD_REMOVE,
    REPLACE_ONE,
    MechanismRecord,
    PrivacyReport,
    check_neighbouring,
    non_private_report,
)
from privkernels.sharding import to_host

__all__ = [
    "DP_NTK_RELATIONS",
    "private_embedding",
    "embedding_release",
    "embedding_keys",
    "EmbeddingKeys",
    "counts_release",
    "proportions_release",
    "private_class_proportions",
    "private_class_counts",
    "normalise_sums",
    "noisy_total",
    "mean_embedding",
    "NTK_PARAMS_NOTE",
    "N_PUBLIC_NOTE",
    "RELEASED_MEAN",
    "check_release_records",
    "release_records_match",
    "RELEASED_SUMS",
    "RELEASED_N",
]

NTK_PARAMS_NOTE = (
    "e-NTK network parameters: random initialisation from a key split off the user key, "
    "independent of the data"
)
N_PUBLIC_NOTE = (
    "dataset size n: treated as public (replace-one neighbours keep n fixed); used unnoised "
    "in the 2/n sensitivity"
)
N_PRIVATE_NOTE = (
    "dataset size n: private (add-remove), never used unnoised; the released class sums are "
    "divided by a noisy n (the noisy total, or the total of the noisy class counts)"
)
#: The relations DP-NTK calibrates for: the mean (2/n) or the class sums and n (1 each).
DP_NTK_RELATIONS = (REPLACE_ONE, ADD_REMOVE)


def _features_module() -> Any:
    return importlib.import_module("privkernels.features")


def mean_embedding(
    network: nn.Module,
    params: Any,
    x: jax.Array,
    y: jax.Array | np.ndarray,
    n_classes: int,
    *,
    chunk_size: int | None,
    method: str,
    mesh: Any = None,
    precision: str | None = "highest",
    total: bool = False,
) -> jax.Array:
    """``(1/n) sum_i phi(x_i) onehot(y_i)^T`` -> ``(p, n_classes)`` via the feature core (eq. 4).

    Full float32 products by default (a release of private data); generator
    training passes ``precision=None`` (`privkernels.precision`). ``total``:
    the sums, with unit weights (add-remove; n private).
    """
    feats = _features_module()
    return feats.entk_mean_embedding(
        network.apply,
        params,
        x,
        y,
        n_classes,
        chunk_size=chunk_size,
        method=method,
        mesh=mesh,
        precision=precision,
        total=total,
    )


def validate_xy(x: Any, y: Any, n_classes: Any) -> tuple[Any, np.ndarray, int]:
    """``(x, int32 labels, n_classes)``; a class without examples is allowed."""
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    x = check_array(x, "x", min_rows=1)
    if x.ndim < 2:
        raise ValueError(
            f"x must have shape (n, ...) with at least 2 dimensions, got {tuple(x.shape)}"
        )
    y = check_labels(y, n_classes, "y", n_rows=int(x.shape[0]))
    return x, y, n_classes


class EmbeddingKeys(NamedTuple):
    """The two keys of an embedding release: the e-NTK network's parameters (drawn unless
    given: data independent) and the Gaussian noise."""

    params: jax.Array
    noise: jax.Array


def embedding_keys(key: jax.Array) -> EmbeddingKeys:
    """``key`` split into `EmbeddingKeys`: the one split `embedding_release` makes, so a
    caller drawing the network's parameters beforehand draws the same ones."""
    k_params, k_noise = jax.random.split(key)
    return EmbeddingKeys(k_params, k_noise)


def private_embedding(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float | None = 1e-5,
    budget_accountant: Any = None,
    **options: Any,
) -> tuple[jax.Array, PrivacyReport]:
    """`embedding_release` at ``(epsilon, delta)`` (``epsilon=None``: no noise), for callers
    holding floats; ``options`` are its other keywords (``n_classes`` and ``network``
    required; ``params``, ``chunk_size``, ``method``, ``mesh``, ``neighbouring``), and the
    arguments and the result are documented there. ``budget_accountant`` (None: an open
    ``with BudgetAccountant(...)`` block's, or none) is charged before any noise."""
    budget = as_budget(epsilon, delta)
    relation = str(options.get("neighbouring", REPLACE_ONE))
    return _charged(budget_accountant, budget, relation,
                    lambda: embedding_release(key, x, y, budget=budget, **options))  # fmt: skip


def _charged(accountant: Any, budget: Budget | None, relation: str, release: Any) -> Any:
    """``release()`` (returning ``(value, report)``) charged ``budget`` under ``relation``
    to ``accountant`` (`privkernels.privacy.accountant.charged_release`)."""
    eps, delta = (None, 0.0) if budget is None else (budget.epsilon, budget.delta)
    return charged_release(accountant, eps, delta, relation, release,
                           report_of=lambda out: out[1])  # fmt: skip


def embedding_release(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    n_classes: int,
    budget: Budget | None,
    network: nn.Module,
    params: Any = None,
    chunk_size: int | None = None,
    method: str = "auto",
    mesh: Any = None,
    neighbouring: str = REPLACE_ONE,
) -> tuple[jax.Array, PrivacyReport]:
    """Release the e-NTK mean embedding of ``(x, y)`` (Algorithm 1, eq. 4 + Gaussian mechanism).

    ``key`` is split by `embedding_keys` into ``(params, noise)``: the network parameters
    are ``init_params(keys.params, network, x.shape[1:])`` unless ``params`` is given
    (which must then be data-independent), and the noise uses ``keys.noise``
    (bound to the budget by the privacy core, so one key at two budgets gives
    independent noise). The same key with ``budget=None`` gives the exact
    (pre-noise) embedding with the same network.

    Args:
      key: JAX PRNG key.
      x: ``(n, *input_shape)`` float private inputs; y: ``(n,)`` int labels in
        ``[0, n_classes)``. A class without examples is allowed (its column is
        pure noise): refusing it would depend on the private data.
      n_classes: number of classes ``C`` (1 for unconditional generation).
      budget: the guarantee of this release (`privkernels.privacy.Budget`); None -> no noise.
      network: flax module whose e-NTK is used (e.g. ``features.fc_1l(800, out_features=10)``).
      params: optional network parameters (data-independent!).
      chunk_size: examples per streamed chunk (bounded memory).
      method: ``"auto" | "generic" | "structured"`` (passed to the feature core).
      mesh: a device mesh over the example axis (`privkernels.sharding`): the
        embedding is summed over the devices' rows by the feature core, and the
        noise is drawn once, from ``key``, on the replicated sum (the same release
        as on one device, up to summation order). ``x``/``y`` may be global arrays.
      neighbouring: ``"replace-one"`` (n public): the mean embedding, sensitivity
        ``2/n`` (Prop. 3.1). ``"add-remove"`` (n private): the class sums
        ``n * mu``, sensitivity 1 (one unit-norm column added or removed);
        divide them by noisy counts (`private_class_counts`, `normalise_sums`).

    Returns:
      ``(embedding (p, C) float32, PrivacyReport)``: noise std ``sigma * 2/n``
      (replace-one) or ``sigma`` (add-remove, on the sums) per entry, ``sigma``
      the analytic-Gaussian multiplier.

    Raises:
      ValueError: on bad input (and TypeError on wrong kinds), before any noise is drawn.
    """
    key, seeded = release_key(key)
    x, y_np, n_classes = validate_xy(x, y, n_classes)
    neighbouring = check_neighbouring(neighbouring, DP_NTK_RELATIONS)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size", minimum=1)
    n = int(x.shape[0])
    keys = embedding_keys(key)
    if params is None:
        params = _features_module().init_params(keys.params, network, tuple(x.shape[1:]))
    sums = neighbouring == ADD_REMOVE and budget is not None
    emb = mean_embedding(  # the sums with unit weights under add-remove: no 1/n anywhere
        network,
        params,
        jnp.asarray(x, jnp.float32),
        jnp.asarray(y_np),
        n_classes,
        chunk_size=chunk_size,
        method=method,
        mesh=mesh,
        total=sums,
    )
    # replicated over the mesh: every process holds the same sum; noise is added once, locally
    emb = jnp.asarray(to_host(emb) if mesh is not None else emb, jnp.float32)
    if budget is None:
        report = non_private_report(
            "epsilon=None: the e-NTK mean embedding was released WITHOUT noise (non-private baseline)"
        )
        return emb, report
    extra: dict[str, Any]  # record parameters
    if sums:  # n is private: release the sums, record no n
        sens, extra, what = 1.0, {}, RELEASED_SUMS
        public: tuple[str, ...] = (NTK_PARAMS_NOTE,)
    else:
        sens, extra, what = 2.0 / n, {"n": n}, RELEASED_MEAN
        public = (NTK_PARAMS_NOTE, N_PUBLIC_NOTE)
    noisy, record = gaussian_release(
        keys.noise,
        emb,
        budget=budget,
        sensitivity=sens,
        released=f"{what} ({emb.shape[0]}, {n_classes})",
        **extra,
    )
    report = PrivacyReport.from_mechanisms(
        [record], neighbouring, data_independent=public, notes=seeded
    )
    return jnp.asarray(noisy, jnp.float32), report


def private_class_proportions(
    key: jax.Array,
    y: Any,
    *,
    n_classes: int,
    epsilon: float | None,
    delta: float | None = 1e-5,
    budget_accountant: Any = None,
) -> tuple[np.ndarray, PrivacyReport]:
    """`proportions_release` at ``(epsilon, delta)`` (``epsilon=None``: exact proportions),
    charged to ``budget_accountant`` as `private_embedding` is."""
    budget = as_budget(epsilon, delta)
    return _charged(budget_accountant, budget, REPLACE_ONE,
                    lambda: proportions_release(key, y, n_classes=n_classes, budget=budget))  # fmt: skip


def proportions_release(
    key: jax.Array, y: Any, *, n_classes: int, budget: Budget | None
) -> tuple[np.ndarray, PrivacyReport]:
    """Release class proportions ``counts / n`` with the Gaussian mechanism.

    Replace-one changes two counts by one: L2 sensitivity ``sqrt(2)/n`` on
    proportions. Post-processing: clip at 0, renormalise to sum 1 (uniform if
    everything was clipped). ``budget=None`` -> exact proportions, non-private.

    Returns:
      ``(proportions (n_classes,) float64 summing to 1, PrivacyReport)``.
    """
    key, seeded = release_key(key)
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    y_np = check_labels(y, n_classes, "y")
    n = int(y_np.shape[0])
    props = np.asarray(_counts(y_np, n_classes), np.float64) / n
    if budget is None:
        return props, non_private_report("epsilon=None: class proportions released WITHOUT noise")
    noisy, record = gaussian_release(
        key,
        jnp.asarray(props, jnp.float32),
        budget=budget,
        sensitivity=math.sqrt(2.0) / n,
        released=f"{RELEASED_PROPORTIONS} ({n_classes},)",
        n=n,
        post_processing="clip at 0, renormalise",
    )
    clipped = np.clip(np.asarray(noisy, dtype=np.float64), 0.0, None)
    total = clipped.sum()
    out = clipped / total if total > 0 else np.full(n_classes, 1.0 / n_classes)
    return out, PrivacyReport.from_mechanisms(
        [record], REPLACE_ONE, data_independent=(N_PUBLIC_NOTE,), notes=seeded
    )


def private_class_counts(
    key: jax.Array,
    y: Any,
    *,
    n_classes: int,
    epsilon: float,
    delta: float = 1e-5,
    per_class: bool = True,
    budget_accountant: Any = None,
) -> tuple[np.ndarray, PrivacyReport]:
    """`counts_release` at ``(epsilon, delta)`` (add-remove), charged to
    ``budget_accountant`` as `private_embedding` is."""
    budget = as_budget(epsilon, delta)
    if budget is None:
        raise ValueError("private_class_counts needs a budget (epsilon is None)")
    return _charged(budget_accountant, budget, ADD_REMOVE, lambda: counts_release(
        key, y, n_classes=n_classes, budget=budget, per_class=per_class))  # fmt: skip


def counts_release(
    key: jax.Array, y: Any, *, n_classes: int, budget: Budget, per_class: bool = True
) -> tuple[np.ndarray, PrivacyReport]:
    """Release the class counts (or, ``per_class=False``, their total n) under add-remove.

    Adding or removing one record changes one count by one: Gaussian
    mechanism, sensitivity 1. The total alone carries ``n_classes`` times less
    noise variance than the sum of noisy class counts (for label-free uses:
    normalising the class sums). The noisy values are returned as drawn
    (float64, possibly negative); `normalise_sums` post-processes them.

    Returns:
      ``(noisy counts (n_classes,) or (1,) float64, PrivacyReport)`` under add-remove.
    """
    key, seeded = release_key(key)
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    y_np = check_labels(y, n_classes, "y")
    counts = _counts(y_np, n_classes)
    value = counts if per_class else np.asarray([counts.sum()])
    noisy, record = gaussian_release(
        key,
        jnp.asarray(value, jnp.float32),
        budget=budget,
        sensitivity=1.0,
        released=f"{RELEASED_COUNTS} ({n_classes},)" if per_class else f"{RELEASED_N} (1,)",
        post_processing="clipped at 0; the total divides the class sums",
    )
    return np.asarray(noisy, np.float64), PrivacyReport.from_mechanisms(
        [record], ADD_REMOVE, notes=seeded
    )


def normalise_sums(sums: jax.Array, noisy_counts: np.ndarray) -> tuple[jax.Array, np.ndarray]:
    """``(sums / n_hat, proportions)`` from noisy counts (post-processing; add-remove).

    ``n_hat = noisy_total(counts) = max(sum(max(counts, 0)), 1)``; proportions are the
    clipped counts renormalised (uniform if every count was clipped; meaningful for
    per-class counts). ``sums`` is ``(p, C)``; ``noisy_counts`` ``(C,)`` or ``(1,)``.
    """
    clipped = np.clip(np.asarray(noisy_counts, np.float64), 0.0, None)
    total = float(clipped.sum())
    props = clipped / total if total > 0 else np.full(clipped.shape, 1.0 / clipped.size)
    return jnp.asarray(sums, jnp.float32) / jnp.float32(noisy_total(noisy_counts)), props


def noisy_total(noisy_counts: np.ndarray) -> float:
    """``n_hat = max(sum(max(counts, 0)), 1)`` (float): the divisor of `normalise_sums`,
    from the noisy counts ``(C,)`` or ``(1,)`` (post-processing; add-remove)."""
    clipped = np.clip(np.asarray(noisy_counts, np.float64), 0.0, None)
    return max(float(clipped.sum()), 1.0)


def _counts(y_np: Any, n_classes: int) -> np.ndarray:
    if isinstance(y_np, jax.Array):  # possibly sharded over hosts: count where the labels live
        return np.asarray(
            to_host(jax.jit(lambda a: jnp.sum(jax.nn.one_hot(a, n_classes), axis=0))(y_np))
        )
    return np.bincount(y_np, minlength=n_classes)


def _expected(relation: str, released_labels: bool, n: int) -> list[tuple[str, float]]:
    """``(released name prefix, sensitivity)`` of each record `fitting` writes."""
    if relation == ADD_REMOVE:
        return [(RELEASED_SUMS, 1.0), (RELEASED_COUNTS if released_labels else RELEASED_N, 1.0)]
    out = [(RELEASED_MEAN, 2.0 / n)]
    if released_labels:
        out.append((RELEASED_PROPORTIONS, math.sqrt(2.0) / n))
    return out


def release_records_match(
    records: Sequence[MechanismRecord],
    relation: str,
    *,
    budget: Budget,
    split: tuple[float, float],
    label_mode: str,
    n: int | None = None,
) -> bool:
    """Whether ``records`` are what `privkernels.dp_ntk.fit` (or a DP-KIP start, with
    ``label_mode="uniform"``) releases under ``relation`` for ``budget``: one Gaussian
    record per release, in order, each a `matches_gaussian_release` of the relation's
    sensitivity (replace-one: ``2/n`` and ``sqrt(2)/n``, n the public ``n`` when given,
    else the recorded one; add-remove: 1, and no n recorded) with its share of ``budget``."""
    if relation not in DP_NTK_RELATIONS or not records:
        return False
    if relation == REPLACE_ONE:
        n = int(records[0].param_dict.get("n", 0)) if n is None else int(n)
        if n < 1:
            return False
    expected = _expected(relation, label_mode == "released", n or 1)
    parts = budget.split(*split) if len(expected) == 2 else (budget,)
    ok = len(records) == len(expected)
    for rec, (name, sens), part in zip(records, expected, parts, strict=False):
        ok = ok and matches_gaussian_release(rec, sens) and rec.released.startswith(name)
        ok = ok and part.matches(rec)
        recorded_n = rec.param_dict.get("n")
        if relation == ADD_REMOVE:
            ok = ok and recorded_n is None  # n is private: never recorded
        else:
            ok = ok and recorded_n is not None and int(recorded_n) == n
    return ok


def check_release_records(
    report: PrivacyReport,
    *,
    epsilon: float | None,
    delta: float | None,
    split: tuple[float, float],
    label_mode: str,
) -> None:
    """Refuse a loaded DP-NTK report that is not what `privkernels.dp_ntk.fit` releases for
    this config (`release_records_match` under the report's relation). The records' own
    consistency (sigma against epsilon) is `PrivacyReport.from_dict`'s too."""
    if not report.private:
        return
    if epsilon is None or delta is None:
        raise ValueError("saved report is private but the config holds no budget")
    relation = check_neighbouring(report.neighbouring, DP_NTK_RELATIONS)
    if not release_records_match(
        report.mechanisms, relation, budget=Budget(epsilon, delta), split=split,
        label_mode=label_mode,
    ):  # fmt: skip
        raise ValueError(
            "saved report does not hold the releases this DP-NTK config makes under "
            f"{relation} (record names, sensitivities or budget shares differ)"
        )
