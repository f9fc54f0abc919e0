"""`MechanismRecord`: one noisy release, as reports and files hold it.

The record sits below the accountants (`privkernels.privacy.accounting` builds
DP-SGD's), the record checks (`privkernels.privacy.verify`) and the reports
(`privkernels.privacy.report`, which exports it too), so none of them imports
another for it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MechanismRecord", "freeze_params"]


def freeze_params(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Record parameters as sorted ``(name, value)`` pairs (hashable, order-free)."""
    return tuple(sorted((str(k), v) for k, v in params.items()))


@dataclasses.dataclass(frozen=True)
class MechanismRecord:
    """One noisy release.

    Attributes:
      name: mechanism, e.g. ``"gaussian"``, ``"truncated_laplace"``,
        ``"gaussian_sampling"``, ``"poisson_subsampled_gaussian"``.
      released: what quantity was released (e.g. ``"mean embedding (p, c)"``).
      epsilon, delta: the guarantee this release alone satisfies.
      sensitivity: L2 (or L1 for Laplace) sensitivity used to calibrate the noise.
      accountant: how (epsilon, delta) was computed (``"analytic-gaussian"``,
        ``"pld"``, ``"rdp"``, ``"closed-form"`` ...).
      params: other parameters (sigma, sampling rate, steps, ...), as sorted pairs.
    """

    name: str
    released: str
    epsilon: float
    delta: float
    sensitivity: float | None = None
    accountant: str = "closed-form"
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # A record's cost is never negative: a negative part could hide another's
        # cost in a total that still adds up (a loaded report is checked this way too).
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"record {self.name!r}: epsilon must be finite and >= 0, "
                             f"got {self.epsilon!r}")  # fmt: skip
        if not 0 <= self.delta < 1:
            raise ValueError(f"record {self.name!r}: delta must lie in [0, 1), got {self.delta!r}")
        sens = self.sensitivity
        if sens is not None and not (math.isfinite(sens) and sens >= 0):
            raise ValueError(f"record {self.name!r}: sensitivity must be finite and >= 0, "
                             f"got {sens!r}")  # fmt: skip

    @classmethod
    def make(
        cls,
        name: str,
        released: str,
        epsilon: float,
        delta: float,
        *,
        sensitivity: float | None = None,
        accountant: str = "closed-form",
        **params: Any,
    ) -> MechanismRecord:
        """Build a record; keyword ``params`` are stored as sorted pairs."""
        return cls(
            name=name,
            released=released,
            epsilon=float(epsilon),
            delta=float(delta),
            sensitivity=None if sensitivity is None else float(sensitivity),
            accountant=accountant,
            params=freeze_params(params),
        )

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)
