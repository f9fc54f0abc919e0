"""Private bounds and scales of columns: `PrivateMinMaxScaler`, `PrivateStandardScaler`.

Two releases, both Gaussian mechanisms (Balle & Wang 2018) under replace-one
neighbours (one whole row replaced; ``n`` is public under this relation):

* `column_bounds`: per column, a histogram of the values over a public,
  data-independent grid (`LOG_GRID`, or an even grid inside public coarse
  ``bounds``). A row adds 1 to exactly one bin of each column, so replacing it
  moves at most one unit out of one bin and into another in each column: L2
  sensitivity ``sqrt(2 d)`` for the ``(d, bins)`` counts. The bounds are then read
  from the noisy counts by a fixed rule (post-processing): the outer edges of the
  outermost bins whose noisy count exceeds ``max(4 noise_std, tail n)``
  (the stability-based histogram of Bun, Nissim & Stemmer 2016, in its Gaussian form);
  a column with no such bin gets ``[-M, M]`` from its largest bin if that clears 3/4
  of the threshold, else a fixed fallback: ``[-1, 1]`` on `LOG_GRID`, the public
  bounds otherwise (the data said nothing above the noise).
* `column_moments`: values clipped to ``[lo, hi]`` and mapped to
  ``u = (x - mid) / (hi - lo)`` in ``[-1/2, 1/2]``; one release of
  ``[sum u, 2 sum u^2]`` (``2d`` numbers). Replacing a row moves each ``sum u_j`` by at
  most 1 and each ``2 sum u_j^2`` by at most ``2 * 1/4``: L2 sensitivity
  ``sqrt(1.25 d)`` (the clipped-sum bound of Dwork & Roth 2014, Sec. 3.5).

The scalers are scikit-learn transformers with ``epsilon``, ``delta`` and a
``privacy_report_``; the budget split is stated in the report's records.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from privkernels._sklearn_accounting import AccountedMixin
from privkernels._sklearn_checks import checked_data
from privkernels._validation import check_array, check_fraction, float32_finite
from privkernels.privacy.accountant import charged_release
from privkernels.privacy.budget import Budget
from privkernels.privacy.keys import (
    SEEDED_KEY_NOTE,
    check_seed,
    release_key,
    seed_keys,
    seeded_call,
)
from privkernels.privacy.release import gaussian_release
from privkernels.privacy.report import REPLACE_ONE, MechanismRecord, PrivacyReport

__all__ = [
    "LOG_GRID",
    "PrivateMinMaxScaler",
    "PrivateStandardScaler",
    "column_bounds",
    "column_moments",
    "private_standardize",
    "standardize_budgets",
]

#: The public grid used when no bounds are given: 0 and +-10^(k/2), k = -6..10
#: (1e-3 .. 1e5 in half decades). It depends on no data.
LOG_GRID = np.concatenate(
    [-(10.0 ** (np.arange(10, -7, -1) / 2.0)), [0.0], 10.0 ** (np.arange(-6, 11) / 2.0)]
)

#: Bins of the even grid inside public coarse bounds.
BOUNDED_BINS = 32

#: Share of a scaler's epsilon and delta spent on the bounds when none are given.
BOUNDS_SHARE = 0.5
#: Fraction of ``n`` a histogram bin must exceed to count as occupied (`column_bounds`).
DEFAULT_TAIL = 0.005

R = TypeVar("R")

N_PUBLIC = "n, the number of rows (public under replace-one neighbours)"


def _rows(X: Any, name: str = "X") -> np.ndarray:
    """``X`` as a finite float64 ``(n, d)`` array, n >= 2 (messages name shapes only)."""
    arr = check_array(X, name, ndim=2, min_rows=2, finite=True)
    return np.asarray(arr, np.float64)


def _edges(bounds: Any, d: int) -> np.ndarray:
    """``(d, K + 1)`` public bin edges: `LOG_GRID` per column, or an even grid in ``bounds``."""
    if bounds is None:
        return np.broadcast_to(LOG_GRID, (d, LOG_GRID.size)).copy()
    lo, hi = _public_bounds(bounds, d)
    t = np.linspace(0.0, 1.0, BOUNDED_BINS + 1)
    return lo[:, None] + (hi - lo)[:, None] * t[None, :]


def _public_bounds(bounds: Any, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` each ``(d,)`` from a pair of scalars or of ``(d,)`` arrays."""
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError("bounds must be a pair (lower, upper) of scalars or (d,) arrays") from None
    lo = np.broadcast_to(np.asarray(lo, np.float64), (d,)).copy()
    hi = np.broadcast_to(np.asarray(hi, np.float64), (d,)).copy()
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError("bounds must be finite with lower < upper in every column")
    return lo, hi


def _counts(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``(d, K + 2)`` counts: bin 0 below the first edge, bin K + 1 at or above the last."""
    n, d = x.shape
    nb = edges.shape[1] + 1
    idx = np.stack([np.searchsorted(edges[j], x[:, j], side="right") for j in range(d)], axis=1)
    flat = idx + nb * np.arange(d)[None, :]
    return np.bincount(flat.ravel(), minlength=nb * d).reshape(d, nb).astype(np.float32)


def _read_bounds(
    noisy: np.ndarray, edges: np.ndarray, threshold: float, grid_fallback: bool
) -> np.ndarray:
    """``(d, 2)`` bounds from noisy counts (post-processing, the module's fixed rule).

    A column with no bin above ``threshold`` gets ``[-M, M]``, ``M`` the outer edge of its
    largest bin, when that bin clears ``0.75 threshold`` (3 noise stds at least); else
    ``[-1, 1]`` on `LOG_GRID` (``grid_fallback``), or the public bounds themselves."""
    d, nb = noisy.shape
    ext = np.concatenate([edges[:, :1], edges, edges[:, -1:]], axis=1)  # bin b is [ext b, ext b+1]
    out = np.empty((d, 2))
    for j in range(d):
        keep = np.flatnonzero(noisy[j] > threshold)
        if keep.size:
            lo, hi = ext[j, keep[0]], ext[j, keep[-1] + 1]
        elif noisy[j].max() > 0.75 * threshold:  # the largest bin, symmetric about 0
            b = int(np.argmax(noisy[j]))
            m = max(abs(ext[j, b]), abs(ext[j, b + 1]))
            lo, hi = max(-m, edges[j, 0]), min(m, edges[j, -1])
        else:  # nothing above the noise: a fixed, public fallback
            lo, hi = (-1.0, 1.0) if grid_fallback else (edges[j, 0], edges[j, -1])
        if not hi > lo:  # only an overflow bin: widen by one grid step inwards
            lo, hi = min(lo, edges[j, -2]), max(hi, edges[j, 1])
        out[j] = lo, hi
    return out


def column_bounds(
    key: jax.Array,
    X: Any,
    budget: Budget,
    *,
    bounds: Any = None,
    tail: float = DEFAULT_TAIL,
    what: str = "column",
    budget_accountant: Any = None,
) -> tuple[np.ndarray, MechanismRecord]:
    """Private per-column bounds ``(d, 2)`` float64 from one noisy histogram release.

    Args:
      key: PRNG key of the release.
      X: ``(n, d)`` private rows, finite.
      budget: the (epsilon, delta) of this release.
      bounds: public coarse ``(lower, upper)`` (scalars or ``(d,)``): values are clipped
        to them and binned on an even grid inside; None bins on `LOG_GRID`.
      tail: fraction of ``n`` a bin must exceed to count as occupied.
      what: what the columns are, for the record (``"feature"``, ``"target"``).
      budget_accountant: charged ``budget`` before any noise (None: an open ``with
        BudgetAccountant(...)`` block's, or none).

    Returns:
      ``(bounds (d, 2), record)``; sensitivity ``sqrt(2 d)`` (module docstring).
    """
    return _charge(budget_accountant, budget, lambda out: (out[1],),
                   lambda: _bounds_release(key, X, budget, bounds, tail, what))  # fmt: skip


def _charge(accountant: Any, budget: Budget, records_of: Callable[[Any], Any],
            release: Callable[[], R]) -> R:  # fmt: skip
    """``release()`` charged ``budget`` under replace-one to ``accountant`` (None: the
    default one), settled with the records ``records_of(result)``; inside a release already
    charged to the same accountant (a scaler's or an estimator's fit) it just runs."""
    return charged_release(
        accountant, budget.epsilon, budget.delta, REPLACE_ONE, release,
        report_of=lambda out: PrivacyReport.from_mechanisms(records_of(out), REPLACE_ONE),
    )  # fmt: skip


def _bounds_release(
    key: jax.Array, X: Any, budget: Budget, bounds: Any, tail: float, what: str
) -> tuple[np.ndarray, MechanismRecord]:
    """`column_bounds`'s release, uncharged."""
    x = _rows(X)
    tail = check_fraction(tail, "tail")
    n, d = x.shape
    edges = _edges(bounds, d)
    if bounds is not None:
        x = np.clip(x, edges[:, 0], edges[:, -1])
    counts = _counts(x, edges)
    sens = math.sqrt(2.0 * d)
    noisy, record = gaussian_release(
        key, counts, budget=budget, sensitivity=sens,
        released=f"{what} histograms ({d} columns x {counts.shape[1]} public bins), for bounds",
        n=n, grid="even in public bounds" if bounds is not None else "LOG_GRID",
    )  # fmt: skip
    std = float(record.param_dict["noise_std"])
    threshold = max(4.0 * std, tail * n)
    return _read_bounds(np.asarray(noisy, np.float64), edges, threshold, bounds is None), record


def column_moments(
    key: jax.Array,
    X: Any,
    bounds: np.ndarray,
    budget: Budget,
    *,
    what: str = "column",
    budget_accountant: Any = None,
) -> tuple[np.ndarray, np.ndarray, MechanismRecord]:
    """Private per-column mean and variance of ``X`` clipped to ``bounds`` (one release).

    Args:
      key: PRNG key of the release.
      X: ``(n, d)`` private rows, finite.
      bounds: ``(d, 2)`` public or privately released ``[lo, hi]`` per column.
      budget: the (epsilon, delta) of this release.

    Returns:
      ``(mean (d,), var (d,), record)`` float64; ``var`` is floored at the noise level
      of its estimate, ``(hi - lo)^2 max(1e-6, noise_std / (2 n))`` (public numbers), so a
      column whose spread the noise hides is not blown up. Sensitivity ``sqrt(1.25 d)``.
      ``budget_accountant`` is charged as in `column_bounds`.
    """
    return _charge(budget_accountant, budget, lambda out: (out[2],),
                   lambda: _moments_release(key, X, bounds, budget, what))  # fmt: skip


def _moments_release(
    key: jax.Array, X: Any, bounds: np.ndarray, budget: Budget, what: str
) -> tuple[np.ndarray, np.ndarray, MechanismRecord]:
    """`column_moments`'s release, uncharged."""
    x = _rows(X)
    n, d = x.shape
    lo, hi = np.asarray(bounds, np.float64)[:, 0], np.asarray(bounds, np.float64)[:, 1]
    width, mid = hi - lo, (hi + lo) / 2.0
    u = (np.clip(x, lo, hi) - mid) / width
    stats = np.concatenate([u.sum(0), 2.0 * (u * u).sum(0)]).astype(np.float32)
    noisy, record = gaussian_release(
        key, stats, budget=budget, sensitivity=math.sqrt(1.25 * d),
        released=f"clipped {what} sums and sums of squares ({d} columns)", n=n,
    )  # fmt: skip
    s = np.asarray(noisy, np.float64)
    mu_u = np.clip(s[:d] / n, -0.5, 0.5)
    floor = max(1e-6, float(record.param_dict["noise_std"]) / (2.0 * n))  # the noise level
    var_u = np.clip(s[d:] / (2.0 * n) - mu_u**2, floor, 0.25)
    return mid + width * mu_u, var_u * width**2, record


def standardize_budgets(budget: Budget) -> tuple[Budget, Budget]:
    """``(bounds, moments)`` parts of a `private_standardize` budget without public bounds
    (`BOUNDS_SHARE` to the bounds; the parts compose back to ``budget``)."""
    moments, bounds = budget.split(1.0 - BOUNDS_SHARE, BOUNDS_SHARE)
    return bounds, moments


def private_standardize(
    key: jax.Array,
    X: Any,
    budget: Budget,
    *,
    bounds: Any = None,
    what: str = "column",
    budget_accountant: Any = None,
) -> tuple[np.ndarray, np.ndarray, tuple[MechanismRecord, ...]]:
    """Private ``(mean (d,), scale (d,), records)`` of the columns of ``X (n, d)``.

    Public ``bounds``: one `column_moments` release at the whole ``budget``. None: the
    budget is split by `standardize_budgets` between `column_bounds` and `column_moments`.
    ``budget_accountant`` is charged the whole ``budget`` as in `column_bounds`.
    """
    return _charge(budget_accountant, budget, lambda out: out[2],
                   lambda: _standardize_release(key, X, budget, bounds, what))  # fmt: skip


def _standardize_release(
    key: jax.Array, X: Any, budget: Budget, bounds: Any, what: str
) -> tuple[np.ndarray, np.ndarray, tuple[MechanismRecord, ...]]:
    """`private_standardize`'s releases, uncharged."""
    x = _rows(X, "y" if what == "target" else "X")
    k_bounds, k_moments = jax.random.split(key)
    if bounds is None:
        b_bounds, b_mom = standardize_budgets(budget)
        bnd, rec_b = _bounds_release(k_bounds, x, b_bounds, None, DEFAULT_TAIL, what)
        records: tuple[MechanismRecord, ...] = (rec_b,)
    else:
        lo, hi = _public_bounds(bounds, x.shape[1])
        bnd, b_mom, records = np.stack([lo, hi], axis=1), budget, ()
    mean, var, rec_m = _moments_release(k_moments, x, bnd, b_mom, what)
    return mean, np.sqrt(var), (*records, rec_m)


class _PrivateScaler(OneToOneFeatureMixin, TransformerMixin, AccountedMixin, BaseEstimator):
    """Shared ``fit`` bookkeeping: budget, keys, report; the accountant's in `AccountedMixin`."""

    def _planned_charge(self) -> tuple[Any, float, float, str]:
        """``(accountant, epsilon, delta, relation)`` a fit will charge (no data read)."""
        return self._accountant(), self.epsilon, self.delta, REPLACE_ONE

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> Budget:
        """Refuse the settings ``fit`` refuses before its noise (``shape``: the data's
        ``(n, d)``, None when unknown, then the public ``bounds`` are checked at fit)."""
        budget = Budget(self.epsilon, self.delta)  # refuses eps <= 0, delta outside (0, 1)
        check_seed(self.random_state)
        if self.bounds is not None and shape is not None:
            _public_bounds(self.bounds, int(np.prod(shape[1:])))
        return budget

    def _start(self, X: Any) -> tuple[np.ndarray, Budget, Any]:
        self._check_fit_settings(None)
        X = checked_data(self, X, dtype=np.float64)  # no input value in a message
        x = _rows(X)
        budget = self._check_fit_settings(x.shape)
        key, _ = seed_keys(self.random_state)  # an int seed: warned by name here
        seed = self.random_state
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            self._notes: tuple[str, ...] = (SEEDED_KEY_NOTE,)
        else:  # a JAX key that visibly comes from a small int: warned and noted
            key, self._notes = release_key(key, what="random_state")
        return x, budget, key

    def _released(self) -> bool:
        return hasattr(self, "privacy_report_")

    def _report(self, records: tuple[MechanismRecord, ...]) -> PrivacyReport:
        self.privacy_report_ = PrivacyReport.from_mechanisms(
            records, REPLACE_ONE, data_independent=(N_PUBLIC,), notes=self._notes
        )
        return self.privacy_report_

    def _charged(self, budget: Budget, release: Callable[[], PrivacyReport]) -> None:
        """Run ``release`` charged to ``budget_accountant`` (or the ``with`` block's) before
        any noise (`privkernels.privacy.accountant.charged_release`)."""
        charged_release(self._accountant(), budget.epsilon, budget.delta, REPLACE_ONE,
                        release, report_of=lambda report: report)  # fmt: skip


class PrivateStandardScaler(_PrivateScaler):
    """``(x - mean_) / scale_`` with a private mean and standard deviation per column.

    Replace-one (epsilon, delta)-DP (`private_standardize`). Without public ``bounds``,
    half the budget finds per-column bounds on `LOG_GRID` (`column_bounds`), half the
    clipped moments (`column_moments`). Attributes after ``fit``: ``mean_``, ``scale_``,
    ``var_`` ``(d,)``, ``privacy_report_``, ``n_features_in_``.
    ``random_state``: None (fresh OS entropy, for a release), an int or a JAX key
    (reproducible, not secret: a `privkernels.privacy.SeededKeyWarning`).
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-5, *, bounds: Any = None,
                 random_state: jax.Array | int | None = None, budget_accountant: Any = None) -> None:  # fmt: skip
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.random_state = random_state
        self.budget_accountant = budget_accountant

    def fit(self, X: Any, y: Any = None) -> PrivateStandardScaler:
        x, budget, key = self._start(X)

        def release() -> PrivacyReport:
            with seeded_call():
                mean, scale, records = private_standardize(
                    key, x, budget, bounds=self.bounds, budget_accountant=self._accountant()
                )
            self.mean_, self.scale_, self.var_ = mean, scale, scale**2
            return self._report(records)

        self._charged(budget, release)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """``(n, d)`` float64 standardized rows (post-processing of the release)."""
        check_is_fitted(self, "mean_")
        X = checked_data(self, X, reset=False, dtype=np.float64)  # no value in a message
        return float32_finite((X - self.mean_) / self.scale_)

    def inverse_transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "mean_")
        return np.asarray(X, np.float64) * self.scale_ + self.mean_


class PrivateMinMaxScaler(_PrivateScaler):
    """Columns mapped from private ``[data_min_, data_max_]`` to ``feature_range``.

    The bounds are one `column_bounds` release at the whole (epsilon, delta), replace-one:
    on an even grid inside public coarse ``bounds`` when given (finer bounds within
    them), else on `LOG_GRID` (coarse, half-decade edges). ``clip=True`` clips the
    output to ``feature_range``. Attributes after ``fit``: ``data_min_``, ``data_max_``,
    ``scale_``, ``min_`` ``(d,)``, ``privacy_report_``, ``n_features_in_``.
    ``random_state``: None (fresh OS entropy, for a release), an int or a JAX key
    (reproducible, not secret: a `privkernels.privacy.SeededKeyWarning`).
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-5, *, bounds: Any = None,
                 feature_range: tuple[float, float] = (0.0, 1.0), clip: bool = True,
                 random_state: jax.Array | int | None = None, budget_accountant: Any = None) -> None:  # fmt: skip
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.feature_range = feature_range
        self.clip = clip
        self.random_state = random_state
        self.budget_accountant = budget_accountant

    def _range(self) -> tuple[float, float]:
        """``feature_range`` as two floats, finite with min < max (else ``ValueError``)."""
        a, b = (float(v) for v in self.feature_range)
        if not (math.isfinite(a) and math.isfinite(b) and a < b):
            raise ValueError("feature_range must be finite with min < max")
        return a, b

    def _check_fit_settings(self, shape: tuple[int, ...] | None) -> Budget:
        self._range()
        return super()._check_fit_settings(shape)

    def fit(self, X: Any, y: Any = None) -> PrivateMinMaxScaler:
        a, b = self._range()
        x, budget, key = self._start(X)

        def release() -> PrivacyReport:
            with seeded_call():
                bnd, record = column_bounds(
                    key, x, budget, bounds=self.bounds, budget_accountant=self._accountant()
                )
            self.data_min_, self.data_max_ = bnd[:, 0], bnd[:, 1]
            self.scale_ = (b - a) / (self.data_max_ - self.data_min_)
            self.min_ = a - self.data_min_ * self.scale_
            return self._report((record,))

        self._charged(budget, release)
        return self

    def _output_range(self) -> tuple[float, float] | None:
        """The range every output value lies in (``feature_range`` when ``clip``, else none
        is guaranteed), for `privkernels.pipeline.PrivatePipeline`'s checks."""
        return (float(self.feature_range[0]), float(self.feature_range[1])) if self.clip else None

    def transform(self, X: Any) -> np.ndarray:
        """``(n, d)`` float64 rows in ``feature_range`` (clipped when ``clip``)."""
        check_is_fitted(self, "scale_")
        X = checked_data(self, X, reset=False, dtype=np.float64)  # no value in a message
        out = X * self.scale_ + self.min_
        out = float32_finite(out)  # NaN (inf scales of degenerate bounds) and inf mapped first
        return np.clip(out, *self.feature_range) if self.clip else out

    def inverse_transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "scale_")
        return (np.asarray(X, np.float64) - self.min_) / self.scale_
