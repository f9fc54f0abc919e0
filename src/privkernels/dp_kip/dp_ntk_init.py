"""A private start for DP-KIP: the support set begins as DP-NTK samples (issue 16).

DP-KIP (Alg. 1, line 1) needs starting support images. From ``N(0, I)`` the
ScatterNet kernel never removes the high frequencies it barely sees, so the
distilled images stay noise that no other learner can use
(``benchmarks/results/dp-kip-table3-init-diagnostic.md``). The authors' code
starts from real images, which is not private. `DPNTKInit` buys a start that
looks like the data with a stated share of the budget:

1. The inputs are mapped to ``[0, 1]`` by the public affine map of
   ``data_range`` and clipped there (a per-record transform, fixed before
   seeing the data).
2. `privkernels.dp_ntk.fit` releases a class-conditional e-NTK mean embedding
   with ``budget_fraction`` of (epsilon, delta) and trains a generator on it
   (DP-NTK, Alg. 1: one Gaussian mechanism, the rest post-processing).
3. ``support_per_class`` samples of every class, mapped back to ``data_range``,
   are the starting support set; DP-KIP spends the remaining
   ``1 - budget_fraction`` with DP-SGD.

With ``corrupt_fraction > 0`` the frozen pixels keep their DP-NTK start
values (Table 4's frozen noise becomes frozen start pixels).

The two releases are on the same data under the same replace-one relation;
the report composes them (basic composition, `privkernels.privacy.compose`),
so the totals are the caller's (epsilon, delta) exactly (`Budget.split`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privkernels._validation import check_fraction, check_int, check_positive
from privkernels.privacy.budget import Budget
from privkernels.privacy.report import PrivacyReport

__all__ = ["DPNTKInit", "as_dp_ntk_init", "split_budget", "dp_ntk_start"]


@dataclasses.dataclass(frozen=True)
class DPNTKInit:
    """``init=DPNTKInit(...)`` (or ``init="dp_ntk"``): start DP-KIP from DP-NTK samples.

    Attributes:
      budget_fraction: share of epsilon and delta given to the DP-NTK release,
        in (0, 1); DP-KIP's DP-SGD gets the rest.
      data_range: public ``(lo, hi)`` of the inputs; they are mapped to
        ``[0, 1]`` (the generator's range) and clipped, samples mapped back.
      iterations, batch_size, learning_rate, d_code: DP-NTK generator training
        (post-processing; `privkernels.dp_ntk.fit`).
      network: the flax module whose e-NTK is DP-NTK's kernel; None:
        `privkernels.dp_ntk.default_network`.
    """

    budget_fraction: float = 0.1
    data_range: tuple[float, float] = (-1.0, 1.0)
    iterations: int = 300
    batch_size: int = 500
    learning_rate: float = 0.01
    d_code: int = 5
    network: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "budget_fraction", check_fraction(self.budget_fraction, "budget_fraction")
        )
        lo, hi = _range(self.data_range)
        object.__setattr__(self, "data_range", (lo, hi))
        object.__setattr__(self, "iterations", check_int(self.iterations, "iterations"))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch_size"))
        object.__setattr__(self, "d_code", check_int(self.d_code, "d_code"))
        object.__setattr__(
            self, "learning_rate", check_positive(self.learning_rate, "learning_rate")
        )

    @property
    def name(self) -> str:
        """The ``init`` name in the config and the checkpoint fingerprint."""
        lo, hi = self.data_range
        return (
            f"dp_ntk(fraction={self.budget_fraction:g}, range=({lo:g}, {hi:g}), "
            f"iterations={self.iterations}, batch={self.batch_size}, lr={self.learning_rate:g}, "
            f"d_code={self.d_code}, network={'default' if self.network is None else 'custom'})"
        )


def _range(value: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"data_range must be a pair (lo, hi), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"data_range must be finite with lo < hi, got {value!r}")
    return lo, hi


def as_dp_ntk_init(init: Any) -> DPNTKInit | None:
    """``DPNTKInit`` for ``"dp_ntk"`` or an instance; None for every other ``init``."""
    if isinstance(init, DPNTKInit):
        return init
    if isinstance(init, str) and init == "dp_ntk":
        return DPNTKInit()
    return None


def split_budget(budget: Budget | None, spec: DPNTKInit) -> tuple[Budget | None, Budget | None]:
    """``(DP-KIP budget, DP-NTK budget)``: ``budget.split(1 - f, f)``; they sum to at most ``budget``."""
    if budget is None:
        return None, None
    kip, ntk = budget.split(1.0 - spec.budget_fraction, spec.budget_fraction)
    return kip, ntk


def dp_ntk_start(
    key: Any,
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_classes: int,
    labels: np.ndarray,
    budget: Budget | None,
    spec: DPNTKInit,
    mesh: Any = None,
    progress: bool = False,
    fit_options: Mapping[str, Any] | None = None,
) -> tuple[np.ndarray, PrivacyReport]:
    """Starting support ``(m, *input_shape)`` float32 from DP-NTK, and the DP-NTK report.

    ``x``: ``(n, *input_shape)`` validated private inputs; ``y``: ``(n,)`` labels;
    ``labels``: the ``(m,)`` public support labels, one sample drawn per entry;
    ``budget``: the DP-NTK share (None: non-private baseline).
    """
    import jax

    from privkernels import dp_ntk

    k_fit, k_sample = jax.random.split(key)
    lo, hi = spec.data_range
    import jax.numpy as jnp

    # on the device: a global array sharded over a mesh stays sharded
    x01 = jnp.clip((jnp.asarray(x, jnp.float32) - lo) / (hi - lo), 0.0, 1.0)
    gen = dp_ntk.fit(
        k_fit,
        x01,
        y,
        epsilon=None if budget is None else budget.epsilon,
        delta=1e-5 if budget is None else budget.delta,
        n_classes=n_classes,
        mesh=mesh,
        progress=progress,
        network=spec.network,
        iterations=spec.iterations,
        batch_size=min(spec.batch_size, int(x01.shape[0])),
        learning_rate=spec.learning_rate,
        d_code=spec.d_code,
        label_mode="uniform",
        **dict(fit_options or {}),
    )
    xs, _ = dp_ntk.sample(k_sample, gen, int(len(labels)), labels=labels)
    start = lo + (hi - lo) * np.asarray(xs, np.float32).reshape(len(labels), *x.shape[1:])
    report = gen.report.with_note(
        f"support initialisation: {len(labels)} DP-NTK samples (inputs clipped to the public "
        f"range [{lo:g}, {hi:g}] before the release); DP-KIP starts from them"
    )
    return start.astype(np.float32), report
