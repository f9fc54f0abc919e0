"""Releases: the one place a budget becomes noise and a record.

Each function takes the caller's key, the private value, a
`Budget` and the sensitivity the caller
derived for its neighbouring relation, calibrates the noise, draws it (from a
key bound to the mechanism's parameters, `privkernels.privacy.keys`) and
returns ``(noisy_value, MechanismRecord)``. Method modules never draw privacy
noise or build records themselves (a test greps for it).

* `gaussian_release` -- analytic Gaussian mechanism (Balle & Wang 2018).
* `truncated_laplace_release` -- TLap per coordinate (Geng et al. 2020;
  Gu et al. Lemma 3.2 / G.1-G.2).
* `gaussian_sampling_release` -- Gu et al. Alg. 1 (PSD kernel release).
* `matches_gaussian_release` -- whether a (loaded) record is what
  `gaussian_release` writes for its budget and a given sensitivity.

DP-SGD, whose noise is added inside a compiled training step, has its own
value, `DPSGDPlan`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import privkernels.privacy as _privacy  # mechanisms looked up at call time (spies, audits)
from privkernels.privacy.accountant import note_release
from privkernels.privacy.budget import Budget
from privkernels.privacy.mechanisms import (
    gaussian_record,
    gaussian_sampling_record,
    truncated_laplace_bound,
    truncated_laplace_record,
)
from privkernels.privacy.report import MechanismRecord

__all__ = [
    "gaussian_release",
    "truncated_laplace_release",
    "gaussian_sampling_release",
    "matches_gaussian_release",
]


def _budget(budget: Any) -> Budget:
    """The release's `Budget`; every open `BudgetAccountant` charge is marked as released
    (`note_release`: a failure from here on is charged its plan)."""
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a privkernels.privacy.Budget, got {type(budget).__name__}")
    note_release()
    return budget


def _record(
    make: Callable[..., MechanismRecord], released: str, budget: Budget, **params: Any
) -> MechanismRecord:
    """``make(released, epsilon=..., delta=..., **params)``: a release's record carries its
    own budget."""
    return make(released, epsilon=budget.epsilon, delta=budget.delta, **params)


def gaussian_release(
    key: jax.Array, value: Any, *, budget: Budget, sensitivity: float, released: str,
    host_float64: bool = False, **params: Any,
) -> tuple[Any, MechanismRecord]:  # fmt: skip
    """``value + N(0, (sigma Delta_2)^2 I)`` with ``sigma = gaussian_sigma(epsilon, delta)``.

    Args:
      key: PRNG key of this release.
      value: array (any shape) computed from the private data.
      budget: the (epsilon, delta) of this release.
      sensitivity: L2 sensitivity ``Delta_2`` under the caller's relation.
      released: what the value is (goes into the record).
      host_float64: add the noise in float64 on the host (`gaussian_mechanism`).
      **params: extra record parameters (e.g. ``n``).

    Returns:
      ``(noisy value, record)``; the record holds sigma and the noise std.
    """
    budget = _budget(budget)
    sigma = float(_privacy.gaussian_sigma(budget.epsilon, budget.delta))
    host = {"host_float64": True} if host_float64 else {}  # the default call as before
    noisy = _privacy.gaussian_mechanism(key, value, sensitivity=sensitivity, sigma=sigma, **host)
    record = _record(
        gaussian_record, released, budget, sensitivity=sensitivity, sigma=sigma, **params
    )
    return noisy, record


def matches_gaussian_release(record: MechanismRecord, sensitivity: float) -> bool:
    """True if ``record`` is a `gaussian_release` record of this ``sensitivity``.

    Checks what a saved report cannot be trusted for: epsilon > 0, delta in
    (0, 1), the sensitivity, the analytic-Gaussian ``sigma`` of the record's own
    budget and ``noise_std = sigma * sensitivity`` (relative 1e-9).
    """
    if record.name != "gaussian" or not (record.epsilon > 0 and 0 < record.delta < 1):
        return False
    params = record.param_dict
    sigma = float(params.get("sigma", -1.0))
    expected = float(_privacy.gaussian_sigma(record.epsilon, record.delta))
    return (
        math.isclose(float(record.sensitivity or 0.0), float(sensitivity), rel_tol=1e-9)
        and math.isclose(sigma, expected, rel_tol=1e-9)
        and math.isclose(float(params.get("noise_std", -1.0)), sigma * sensitivity, rel_tol=1e-9)
    )


def truncated_laplace_release(
    key: jax.Array,
    value: Any,
    *,
    budget: Budget,
    sensitivity: float,
    released: str,
    accountant: str = "closed-form (Geng et al. 2020; Gu et al. Lemma 3.2)",
    **params: Any,
) -> tuple[Any, MechanismRecord]:
    """``value + Z`` with ``Z`` i.i.d. TLap(Delta_1, epsilon, delta) per coordinate.

    ``sensitivity`` is the **L1** sensitivity of the whole vector (matrix) under
    the caller's relation. The noise has ``value``'s shape and dtype (float).
    """
    budget = _budget(budget)
    arr = jnp.asarray(value)
    dtype = arr.dtype if jnp.issubdtype(arr.dtype, jnp.floating) else jnp.float32
    noise = _privacy.truncated_laplace(
        key,
        tuple(arr.shape),
        sensitivity=sensitivity,
        epsilon=budget.epsilon,
        delta=budget.delta,
        dtype=dtype,
    )
    bound = truncated_laplace_bound(sensitivity, budget.epsilon, budget.delta)
    details = {"accountant_detail": accountant, "per_coordinate_bound": bound, **params}
    record = _record(truncated_laplace_record, released, budget, sensitivity=sensitivity, **details)
    return arr.astype(dtype) + noise, record


def gaussian_sampling_release(
    key: jax.Array,
    kmat: Any,
    *,
    budget: Budget,
    k: int,
    released: str,
    shift: float = 0.0,
    sensitivity: float | None = None,
    accountant: str = "gaussian-sampling (Gu et al. Lemma 5.4)",
    **params: Any,
) -> tuple[Any, MechanismRecord]:
    """``K~ = (1/k) sum_j g_j g_j^T``, ``g_j ~ N(0, K + shift I)`` (Gu et al. Alg. 1).

    The guarantee holds under the caller's Condition 5.3 (``M <= Delta(k)``);
    the caller chooses ``k`` accordingly and records ``M`` as ``sensitivity``.
    The samples are bound to (budget, shift, k, n) (`gaussian_sampling_mechanism`).
    """
    budget = _budget(budget)
    noisy = _privacy.gaussian_sampling_mechanism(
        key, kmat, k, epsilon=budget.epsilon, delta=budget.delta, shift=shift
    )
    record = _record(
        gaussian_sampling_record,
        released,
        budget,
        k=k,
        accountant=accountant,
        sensitivity=sensitivity,
        **params,
    )
    return noisy, record
