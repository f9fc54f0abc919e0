"""The defaults `privkernels.sklearn.DPKIPClassifier` fills in, as functions of public numbers.

DP-KIP (Vinaroz & Park, Alg. 1) sums clipped per-example gradients w.r.t. the support
set and adds Gaussian noise of norm about ``sigma C sqrt(m d)`` (``m`` support points of
``d`` features) to a signal of at most ``B C`` (``B`` the expected batch size). On a few
hundred rows that noise drowns a support set of the MNIST size (10 per class), and Adam at
a fixed step moves the support too little in the few steps a small set allows. The
estimator's defaults for the ``fc_ntk`` kernel therefore scale with the public row count:

* ``support_per_class = clip(n // (200 c), 1, 10)``;
* ``learning_rate = 1 / sqrt(T)``, ``T = epochs * round(1 / q)`` DP-SGD steps
  (`privkernels.dp_kip.planned_steps`), ``q = batch_size / n`` (replace-one) or the public
  ``sampling_rate`` (add-remove);
* ``epochs = 10``, ``batch_size = min(500, n)``, ``clip_norm`` and ``relative_reg`` from
  `privkernels.dp_kip.KERNEL_DEFAULTS` (unchanged);
* ``kernel_options={"sphere_lift": True}`` (`KERNEL_OPTION_DEFAULTS`): the FC-NTK of each
  row lifted onto a sphere, so that rows of large norm are not scored by their norm
  (``benchmarks/results/defaults-dp-kip-lift-rule.md``; it mended epileptic's inverted
  ranking, ``defaults-tabular.md``).

Other kernels keep ``support_per_class = 10`` and their `KERNEL_DEFAULTS`. Chosen on public
data only (scikit-learn's iris, wine, breast cancer and digits, ``make_classification`` at
300 to 20000 rows; standardised features) by the rule in
``benchmarks/results/defaults-dp-kip-rule.md``, written before the grid ran
(``benchmarks/results/defaults-dp-kip-grid.md``; final check ``defaults-dp-kip.md``).

``n`` is public: under replace-one (the default) the row count is the same for every
neighbour and the estimator already sets ``q = batch_size / n`` from it; under add-remove
the public ``batch_size / sampling_rate`` (the expected row count) stands in for it, so no
default reads the private n there. No default reads a value of X or y.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from privkernels._warnings import SmallDataWarning, user_stacklevel
from privkernels.dp_kip.settings import DEFAULT_BATCH_SIZE

__all__ = [
    "DEFAULT_EPOCHS",
    "KERNEL_OPTION_DEFAULTS",
    "RARE_VALIDATED_N",
    "VALIDATED_N",
    "WARN_N",
    "EstimatorDefaults",
    "SmallDataWarning",
    "estimator_defaults",
    "estimator_fit_options",
    "public_row_count",
    "warn_small_data",
]

#: ``epochs`` when not given.
DEFAULT_EPOCHS = 10

#: The smallest training row count at which the defaults met the target (>= 80% of a
#: non-private logistic regression's ROC-AUC lift over 0.5) at epsilon 1, on that set and on
#: every larger ``make_classification`` set (``benchmarks/results/defaults-dp-kip.md``).
VALIDATED_N = 398

#: The same, on ``make_classification`` with one class at a minority share of the rows
#: (``benchmarks/results/defaults-rare-class-rule.md``; table ``defaults-rare-class.md``):
#: share -> the smallest training row count from which on the target held at epsilon 1.
#: No share below 0.05 was validated.
RARE_VALIDATED_N: Mapping[float, int] = MappingProxyType({0.10: 7000, 0.05: 14000})

#: `warn_small_data` warns below this ``n * min(epsilon, 1)``: the class counts are
#: private, so the estimator cannot tell a balanced set from one with a 5% class, and the
#: warning covers both (the rare-class rule's decision).
WARN_N = max(VALIDATED_N, RARE_VALIDATED_N[0.05])

#: ``kernel_options`` the estimator adds under the caller's (whose keys win), by kernel:
#: the FC-NTK on sphere-lifted rows (`privkernels.dp_kip.kernels.sphere_lift`; chosen by
#: ``benchmarks/results/defaults-dp-kip-lift-rule.md``).
KERNEL_OPTION_DEFAULTS: dict[str, dict[str, Any]] = {"fc_ntk": {"sphere_lift": True}}

#: ``support_per_class = clip(n // (ROWS_PER_SUPPORT * c), 1, MAX_SUPPORT_PER_CLASS)``.
ROWS_PER_SUPPORT = 200
MAX_SUPPORT_PER_CLASS = 10


class EstimatorDefaults(NamedTuple):
    """The settings a `DPKIPClassifier` fit passes on (given values kept as given)."""

    support_per_class: Any
    epochs: Any
    learning_rate: Any


def public_row_count(
    n: int, *, neighbouring: str, batch_size: Any, sampling_rate: Any
) -> float | None:
    """The row count a default may use: ``n`` under replace-one (public there);
    ``batch_size / sampling_rate`` under add-remove; None when that is not given (or not
    a positive number: the fit refuses it before any noise)."""
    if neighbouring != "add-remove":
        return float(n)
    if not all(_positive(v) for v in (batch_size, sampling_rate)):
        return None
    return float(batch_size) / float(sampling_rate)


def estimator_defaults(
    n_public: float | None,
    n_classes: int,
    *,
    kernel: str,
    support_per_class: Any = None,
    epochs: Any = None,
    learning_rate: Any = None,
    batch_size: Any = None,
    sampling_rate: Any = None,
) -> EstimatorDefaults:
    """Fill the unset ``support_per_class``, ``epochs`` and ``learning_rate`` (module doc).

    Args:
      n_public: `public_row_count` (None: no rule that needs it applies).
      n_classes: ``c``; kernel: the DP-KIP kernel; the rest as given to the estimator
        (None: unset). ``sampling_rate``: the add-remove rate, else None.
    Returns: `EstimatorDefaults`; a ``learning_rate`` of None takes the kernel's entry of
    `privkernels.dp_kip.KERNEL_DEFAULTS` in `privkernels.dp_kip.fit`.
    """
    ep = DEFAULT_EPOCHS if epochs is None else epochs
    if kernel != "fc_ntk" or n_public is None:
        spc = MAX_SUPPORT_PER_CLASS if support_per_class is None else support_per_class
        return EstimatorDefaults(spc, ep, learning_rate)
    spc = support_per_class
    if spc is None:
        spc = _support_per_class(n_public, n_classes)
    lr = learning_rate
    if lr is None and _positive(ep) and float(ep).is_integer():
        q = _rate(n_public, batch_size, sampling_rate)
        if q is not None:
            lr = 1.0 / math.sqrt(int(ep) * max(1, round(1.0 / q)))
    return EstimatorDefaults(spc, ep, lr)


def estimator_fit_options(kernel: str, fit_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``fit_options`` with the kernel's `KERNEL_OPTION_DEFAULTS` under its ``kernel_options``
    (the caller's keys win; a ``kernel_options`` that is not a mapping is passed on as given,
    for the fit to refuse). No data: a function of the settings alone."""
    opts = dict(fit_options or {})
    base = KERNEL_OPTION_DEFAULTS.get(kernel)
    given = opts.get("kernel_options")
    if base and (given is None or isinstance(given, Mapping)):
        opts["kernel_options"] = {**base, **(given or {})}
    return opts


def warn_small_data(n_public: float | None, epsilon: float | None) -> None:
    """Warn (`SmallDataWarning`) when ``n_public * min(epsilon, 1) < WARN_N``.

    The defaults were validated at epsilon 1; the noise std scales as ``1 / epsilon``, so
    a smaller epsilon needs about proportionally more rows. The class counts are private
    and not read, so the threshold is the one of a 5% class (`RARE_VALIDATED_N`). The
    message names no row count of the data, only the validated ones.
    """
    if epsilon is None or n_public is None or not _positive(epsilon):
        return
    if n_public * min(float(epsilon), 1.0) < WARN_N:
        warnings.warn(
            f"DPKIPClassifier's defaults were validated at epsilon 1 (n * min(epsilon, 1) "
            f"at least the figure) from n >= {VALIDATED_N} training rows with balanced "
            f"classes, n >= {RARE_VALIDATED_N[0.10]} when one class has 10% of the rows and "
            f"n >= {RARE_VALIDATED_N[0.05]} when it has 5% (public tabular sets, fc_ntk "
            "kernel: benchmarks/results/defaults-dp-kip.md, defaults-rare-class.md); no "
            "rarer class was validated. This fit has fewer than the 5% figure, and its class "
            "counts are private, so they were not read. The DP-SGD noise can dominate a "
            "small or rare class and the support set may score near chance; with a rare "
            "class, predict() gives the majority class even when the scores rank well "
            "(use decision_function or predict_proba). Use more rows or a larger epsilon, "
            "or check the result on public data.",
            SmallDataWarning,
            stacklevel=user_stacklevel(),
        )


def _support_per_class(n_public: float, n_classes: int) -> int:
    per = int(n_public) // (ROWS_PER_SUPPORT * max(1, int(n_classes)))
    return int(min(MAX_SUPPORT_PER_CLASS, max(1, per)))


def _rate(n_public: float, batch_size: Any, sampling_rate: Any) -> float | None:
    """The Poisson rate ``q`` (None when a given value is invalid: the fit refuses it)."""
    if sampling_rate is not None:
        return float(sampling_rate) if _positive(sampling_rate) and sampling_rate <= 1 else None
    if batch_size is None:
        batch_size = min(DEFAULT_BATCH_SIZE, n_public)
    if not _positive(batch_size) or n_public <= 0:
        return None
    return min(1.0, float(batch_size) / n_public)


def _positive(v: Any) -> bool:
    """``v`` is a finite real number > 0 (not a bool)."""
    if isinstance(v, bool):
        return False
    try:
        f = float(v)
    except (TypeError, ValueError):
        return False
    return math.isfinite(f) and f > 0
