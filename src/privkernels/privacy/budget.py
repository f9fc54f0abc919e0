"""A privacy budget as a value: ``Budget(epsilon, delta)`` and its explicit split.

Every method that releases more than one thing (DP-NTK's embedding and class
proportions, DP NTK regression's kernel and inputs) divides its budget with
`Budget.split`; the parts add up to the total exactly, so basic
composition of the releases gives back the budget the caller asked for.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from privkernels._validation import check_delta, check_epsilon, check_fraction

__all__ = ["Budget", "as_budget"]


@dataclasses.dataclass(frozen=True)
class Budget:
    """An (epsilon, delta) guarantee to spend.

    Attributes:
      epsilon: finite, > 0.
      delta: in (0, 1).
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", check_delta(self.delta))

    def matches(self, spent: Any) -> bool:
        """Whether ``spent`` (a report or a mechanism record: ``.epsilon``, ``.delta``) is
        this budget, up to the rounding of a JSON round trip (relative 1e-9)."""
        return math.isclose(spent.epsilon, self.epsilon, rel_tol=1e-9) and math.isclose(
            spent.delta, self.delta, rel_tol=1e-9
        )

    def split(self, *fractions: float) -> tuple[Budget, ...]:
        """Divide epsilon and delta in the given proportions (basic composition).

        ``fractions`` lie in (0, 1) and sum to 1 (within 1e-9). Every part
        after the first is ``(epsilon f_i, delta f_i)``; the first takes the
        remainder, lowered by an ulp where needed, so the parts summed in order never
        exceed the total in floating point (they equal it up to an ulp).

        Example: ``embedding, labels = budget.split(0.9, 0.1)``.
        """
        if len(fractions) < 2:
            raise ValueError("split needs at least two fractions")
        fr = [check_fraction(f, "fraction") for f in fractions]
        if abs(sum(fr) - 1.0) > 1e-9:
            raise ValueError(f"fractions must sum to 1, got {sum(fr)!r}")
        rest = [Budget(self.epsilon * f, self.delta * f) for f in fr[1:]]
        eps0 = _remainder(self.epsilon, [b.epsilon for b in rest])
        delta0 = _remainder(self.delta, [b.delta for b in rest])
        return (Budget(eps0, delta0), *rest)


def _remainder(total: float, rest: list[float]) -> float:
    """``total - sum(rest)``, lowered by ulps until ``first + rest...`` (summed left to
    right, as reports compose) is not above ``total``: a split never overspends."""

    def composed(first: float) -> float:
        acc = first
        for r in rest:
            acc += r
        return acc

    first = total - sum(rest)
    while composed(first) > total:
        first = math.nextafter(first, 0.0)
    return first


def as_budget(epsilon: Any, delta: Any) -> Budget | None:
    """``Budget(epsilon, delta)``, or None for the non-private mode (``epsilon=None``)."""
    if epsilon is None:
        if delta is not None:
            check_delta(delta)
        return None
    if delta is None:
        raise ValueError(
            "delta is required when epsilon is given (use epsilon=None for the non-private baseline)"
        )
    return Budget(epsilon, delta)
