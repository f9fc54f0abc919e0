"""A private start for DP-KIP: the support set begins as DP-NTK samples (issue 16).

DP-KIP (Alg. 1, line 1) needs starting support images. From ``N(0, I)`` the
ScatterNet kernel never removes the high frequencies it barely sees, so the
distilled images stay noise that no other learner can use
(``benchmarks/results/dp-kip-table3-init-diagnostic.md``). The authors' code
starts from real images, which is not private. `DPNTKInit` buys a start that
looks like the data with a stated share of the budget:

1. The inputs are mapped to ``[0, 1]`` by the public affine map of
   ``data_range`` and clipped there (a per-record transform, fixed before
   seeing the data). For inputs standardised per example
   (`privkernels.data.standardize_per_example`, the FC-NTK's preprocessing),
   ``data_range="standardized"`` maps each input to ``[0, 1]`` by its own
   minimum and maximum instead (per record too; for images whose darkest
   pixel is 0 and brightest 1, as for nine in ten MNIST images, this gives
   the pixels back).
2. `privkernels.dp_ntk.fit` releases a class-conditional e-NTK mean embedding
   with ``budget_fraction`` of (epsilon, delta) and trains a generator on it
   (DP-NTK, Alg. 1: one Gaussian mechanism, or under add-remove two: the
   class sums and a noisy n, `NTK_SPLIT`; the rest is post-processing).
3. ``support_per_class`` samples of every class, mapped back to ``data_range``
   (with ``"standardized"``: each sample standardised on its own), are the
   starting support set; DP-KIP spends the remaining
   ``1 - budget_fraction`` with DP-SGD.

With ``corrupt_fraction > 0`` the frozen pixels keep their DP-NTK start
values (Table 4's frozen noise becomes frozen start pixels).

The releases are on the same data under the same relation (DP-KIP's
``neighbouring``: replace-one, or add-remove, where DP-NTK releases the class
sums and a noisy n instead of the mean); the report composes them (basic
composition, `privkernels.privacy.compose`), so the totals are the caller's
(epsilon, delta) exactly (`Budget.split`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels import dp_ntk
from privkernels._validation import check_fraction, check_int, check_positive
from privkernels.data import standardize_per_example
from privkernels.privacy.budget import Budget
from privkernels.privacy.report import PrivacyReport, check_neighbouring

__all__ = [
    "DPNTKInit", "as_dp_ntk_init", "split_budget", "dp_ntk_start", "to_unit_range",
    "from_unit_range", "NTK_SPLIT",
]  # fmt: skip

#: under add-remove, the DP-NTK share is split between the class sums and the noisy n
NTK_SPLIT = (0.9, 0.1)


@dataclasses.dataclass(frozen=True)
class DPNTKInit:
    """``init=DPNTKInit(...)`` (or ``init="dp_ntk"``): start DP-KIP from DP-NTK samples.

    Attributes:
      budget_fraction: share of epsilon and delta given to the DP-NTK release,
        in (0, 1); DP-KIP's DP-SGD gets the rest.
      data_range: public ``(lo, hi)`` of the inputs; they are mapped to
        ``[0, 1]`` (the generator's range) and clipped, samples mapped back.
        Or ``"standardized"``: inputs standardised per example; each is mapped
        to ``[0, 1]`` by its own min and max, each sample standardised back.
      iterations, batch_size, learning_rate, d_code: DP-NTK generator training
        (post-processing; `privkernels.dp_ntk.fit`).
      network: the flax module whose e-NTK is DP-NTK's kernel; None:
        `privkernels.dp_ntk.default_network`.
      centered: the default network on centred inputs (``2 x - 1`` of the
        ``[0, 1]`` images, `privkernels.features.FC`): its e-NTK features see
        contrast, which the default's nearly ignore. A data-independent
        choice of the kernel; only with ``network=None``.
    """

    budget_fraction: float = 0.1
    data_range: tuple[float, float] | str = (-1.0, 1.0)
    iterations: int = 300
    batch_size: int = 500
    learning_rate: float = 0.01
    d_code: int = 5
    network: Any = None
    centered: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.centered, bool):
            raise TypeError(f"centered must be a bool, got {type(self.centered).__name__}")
        if self.centered and self.network is not None:
            raise ValueError(
                "centered=True applies to the default network; pass a centred network instead"
            )
        object.__setattr__(
            self, "budget_fraction", check_fraction(self.budget_fraction, "budget_fraction")
        )
        object.__setattr__(self, "data_range", _range(self.data_range))
        object.__setattr__(self, "iterations", check_int(self.iterations, "iterations"))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch_size"))
        object.__setattr__(self, "d_code", check_int(self.d_code, "d_code"))
        object.__setattr__(
            self, "learning_rate", check_positive(self.learning_rate, "learning_rate")
        )

    @property
    def name(self) -> str:
        """The ``init`` name in the config and the checkpoint fingerprint.

        The fraction and learning rate are written in full (shortest round-trip
        ``repr``): `privkernels.dp_kip.load` reads the fraction back to check the
        saved DP-NTK record against the run.
        """
        return (
            f"dp_ntk(fraction={float(self.budget_fraction)!r}, "
            f"range={_range_text(self.data_range)}, iterations={self.iterations}, "
            f"batch={self.batch_size}, lr={float(self.learning_rate)!r}, "
            f"d_code={self.d_code}, network={self._network_name()})"
        )

    def _network_name(self) -> str:
        if self.network is not None:
            return "custom"
        return "default-centered" if self.centered else "default"


STANDARDIZED = "standardized"


def _range(value: Any) -> tuple[float, float] | str:
    if isinstance(value, str) and value == STANDARDIZED:
        return value
    if isinstance(value, (str, bytes)):  # "12" would otherwise read as (1, 2)
        raise ValueError(f"data_range must be a pair (lo, hi) or {STANDARDIZED!r}, got {value!r}")
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"data_range must be a pair (lo, hi) or {STANDARDIZED!r}, got {value!r}"
        ) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"data_range must be finite with lo < hi, got {value!r}")
    return lo, hi


def _range_text(value: tuple[float, float] | str) -> str:
    """The range in the name: ``:g`` where that is exact (the usual names), else ``repr``."""
    if isinstance(value, str):
        return value
    return "(" + ", ".join(f"{v:g}" if float(f"{v:g}") == v else repr(v) for v in value) + ")"


def to_unit_range(x: Any, data_range: tuple[float, float] | str) -> Any:
    """``(n, ...)`` inputs mapped to ``[0, 1]`` per record, on the device (float32).

    ``(lo, hi)``: the affine map of the public range, then clipped;
    ``"standardized"``: each input by its own min and max (a constant input maps to 0).
    Every finite input gives a finite output in ``[0, 1]``, so no record can make the
    release fail (near the float32 limits the map may lose its precision, not its range).
    """
    x = jnp.asarray(x, jnp.float32)
    if isinstance(data_range, str):
        axes = tuple(range(1, x.ndim))
        half = 0.5 * x  # halved: max - min of finite float32 inputs cannot overflow
        low = jnp.min(half, axis=axes, keepdims=True)
        span = jnp.max(half, axis=axes, keepdims=True) - low
        unit = jnp.where(span > 0, (half - low) / jnp.where(span > 0, span, 1.0), 0.0)
        return jnp.clip(unit, 0.0, 1.0)  # finite and in [0, 1] for every finite input
    lo, hi = data_range
    return jnp.clip((x - lo) / (hi - lo), 0.0, 1.0)


def from_unit_range(xs: np.ndarray, data_range: tuple[float, float] | str) -> np.ndarray:
    """``(m, ...)`` samples in ``[0, 1]`` mapped back to the inputs' scale (float32)."""
    if isinstance(data_range, str):
        return standardize_per_example(np.asarray(xs, np.float32)).astype(np.float32)
    lo, hi = data_range
    return (lo + (hi - lo) * np.asarray(xs, np.float32)).astype(np.float32)


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
    key: jax.Array,
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
    neighbouring: str | None = "replace-one",
) -> tuple[np.ndarray, PrivacyReport]:
    """Starting support ``(m, *input_shape)`` float32 from DP-NTK, and the DP-NTK report.

    ``x``: ``(n, *input_shape)`` validated private inputs; ``y``: ``(n,)`` labels;
    ``labels``: the ``(m,)`` public support labels, one sample drawn per entry;
    ``budget``: the DP-NTK share (None: non-private baseline);
    ``neighbouring``: DP-KIP's relation, which the DP-NTK release takes too
    (under add-remove n is private: the generator's batch is ``spec.batch_size``,
    not capped at n).
    """
    if neighbouring is not None:  # None: a non-private run (no relation)
        check_neighbouring(neighbouring, dp_ntk.release.DP_NTK_RELATIONS)
    add_remove = neighbouring == "add-remove" and budget is not None
    k_fit, k_sample = jax.random.split(key)
    # on the device: a global array sharded over a mesh stays sharded
    x01 = to_unit_range(x, spec.data_range)
    gen = dp_ntk.fit(
        k_fit,
        x01,
        y,
        epsilon=None if budget is None else budget.epsilon,
        delta=1e-5 if budget is None else budget.delta,
        neighbouring="add-remove" if add_remove else "replace-one",
        n_classes=n_classes,
        mesh=mesh,
        progress=progress,
        network=dp_ntk.default_network(n_classes, centered=True) if spec.centered else spec.network,
        iterations=spec.iterations,
        batch_size=spec.batch_size if add_remove else min(spec.batch_size, int(x01.shape[0])),
        learning_rate=spec.learning_rate,
        d_code=spec.d_code,
        label_mode="uniform",
        split=NTK_SPLIT,  # (sums, n) under add-remove; unused under replace-one
        **dict(fit_options or {}),
    )
    xs, _ = dp_ntk.sample(k_sample, gen, int(len(labels)), labels=labels)
    start = from_unit_range(np.asarray(xs).reshape(len(labels), *x.shape[1:]), spec.data_range)
    return start, gen.report.with_note(_note(len(labels), spec.data_range))


def _note(m: int, data_range: tuple[float, float] | str) -> str:
    if isinstance(data_range, str):
        how = (
            "each input mapped to [0, 1] by its own min and max before the release; "
            "each sample standardised on its own"
        )
    else:
        how = f"inputs clipped to the public range [{data_range[0]:g}, {data_range[1]:g}] before the release"
    return f"support initialisation: {m} DP-NTK samples ({how}); DP-KIP starts from them"
