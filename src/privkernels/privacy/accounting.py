"""Privacy accounting: noise calibration through dp-accounting (0.6).

Two settings are covered.

* **One Gaussian release** (`gaussian_sigma`, `gaussian_epsilon`):
  the analytic Gaussian mechanism of Balle & Wang (ICML 2018, Thm. 8 / Alg. 1),
  via `dp_accounting.get_sigma_gaussian`. It is exact (no composition
  theorem, no discretization) and tighter than the classical
  ``sqrt(2 ln(1.25/delta)) / epsilon`` bound. ``sigma`` is a *noise
  multiplier*: noise std per unit of L2 sensitivity. The result holds for any
  neighbouring relation, provided the L2 sensitivity was computed for that
  relation (e.g. replace-one: ``max ||f(X) - f(X')||_2`` over datasets that
  differ by replacing one example, often twice the add/remove sensitivity).

* **DP-SGD** (`dpsgd_noise_multiplier`, `dpsgd_epsilon`): ``steps``
  self-compositions of the Poisson-subsampled Gaussian mechanism
  ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` (Abadi et al. 2016),
  with clipping norm as the sensitivity, under either neighbouring relation
  (``neighbouring=``):

  - ``"add-remove"`` (dp-accounting's ``ADD_OR_REMOVE_ONE``): neighbours
    differ by one example, so their sizes differ. The sampling rate and the
    normaliser must then be public values, not computed from the true ``n``.
  - ``"replace-one"`` (``REPLACE_ONE``): neighbours have the same ``n`` and
    differ in one example; one step moves the clipped sum by up to ``2C``
    when both examples are sampled. Only the PLD accountant supports it for
    Poisson subsampling (paper MNIST setting q = 1/120, 1200 steps, sigma
    1.3204: epsilon 1.0 add-remove, 1.766 replace-one).

  The sampler must be true Poisson sampling, never truncated (see
  `privkernels.privacy.sampling`). With ``sampling_rate == 1`` (full
  batch) the event is the plain ``steps``-fold composed Gaussian.

Accountants:

* ``"pld"``: privacy loss distributions (Koskela et al. 2020; Doroshenko et al.
  2022), pessimistic discretization: the reported epsilon is an upper bound
  whose slack grows with ``value_discretization_interval`` (default ``1e-4``,
  dp-accounting's own default; at ``1e-3`` the calibrated sigma for the
  reference setting below is ~0.1% larger, i.e. still safe but looser).
* ``"rdp"``: Renyi DP (Mironov 2017; Mironov, Talwar & Zhang 2019) with
  dp-accounting's default orders; fast, looser (larger sigma).

Reference numbers (delta = 1e-5, q = 1/120, 1200 steps; recomputed in the
tests from dp-accounting directly): target eps 1 -> RDP 1.4097, PLD 1.3204;
target eps 10 -> RDP 0.5594, PLD 0.5337; a single analytic Gaussian release
needs 3.7306 (eps 1) and 0.4999 (eps 10).

All functions are pure. `dpsgd_noise_multiplier` memoizes the pure map
``(epsilon, delta, q, steps, accountant, interval, tol) -> sigma`` with a
bounded `functools.lru_cache` because PLD calibration costs seconds;
the cache holds only floats derived from public parameters, never data.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np
from scipy.special import gammaln

from privkernels._validation import (
    check_delta,
    check_epsilon,
    check_int,
    check_nonnegative,
    check_positive,
)
from privkernels.privacy.record import MechanismRecord
from privkernels.privacy.relations import check_neighbouring

__all__ = [
    "gaussian_sigma",
    "gaussian_epsilon",
    "dpsgd_noise_multiplier",
    "dpsgd_epsilon",
    "dpsgd_event",
    "dpsgd_record",
    "check_sampling_rate",
    "check_relation",
    "DPSGD_RELATIONS",
    "DEFAULT_PLD_INTERVAL",
    "DEFAULT_SIGMA_TOL",
    "tlap_bound",
    "gsm_divisor",
    "gsm_epsilon",
    "SelectionEvent",
    "candidate_rdp",
    "check_repetitions",
    "check_candidate_count",
    "repetition_tail",
    "MAX_REPETITIONS",
    "MAX_REPETITION_TAIL",
    "MIN_SHAPE",
    "MAX_SHAPE",
    "MIN_MEAN_ABOVE_ONE",
    "repeat_and_select_epsilon",
    "tnb_gamma",
    "tnb_log_mass",
]

Accountant = Literal["pld", "rdp"]
Relation = Literal["add-remove", "replace-one"]

#: Relations DP-SGD can be accounted under (strings of privkernels.privacy.report).
DPSGD_RELATIONS = ("add-remove", "replace-one")

#: PLD ``value_discretization_interval`` used unless overridden (dp-accounting's default).
DEFAULT_PLD_INTERVAL = 1e-4
#: Absolute tolerance on the calibrated noise multiplier.
DEFAULT_SIGMA_TOL = 1e-4
#: PLD interval of the cheap first pass that brackets the accurate calibration.
_COARSE_FACTOR = 10.0
#: Most candidates `repeat_and_select_epsilon` accounts, and most DP-SGD events over its
#: distinct candidates: each such event costs an RDP curve (0.04 to 0.4 s), and files
#: listing thousands of candidates, or hundreds of events in one, made loading run for
#: minutes (adversary s70).
MAX_SELECT_CANDIDATES = 256
MAX_SELECT_DPSGD_EVENTS = 64
MAX_SELECT_EVENTS = 4 * MAX_SELECT_CANDIDATES
#: Most DP-SGD steps the PLD accountant composes: a large sigma keeps the grid small, and
#: dp-accounting's sparse composition then works on an integer of ``size**steps`` (3e7
#: steps took 157 s). The RDP accountant has no such limit.
MAX_PLD_STEPS = 10**6
#: Largest PLD grid a DP-SGD epsilon is computed on, in discretization intervals, as
#: `_pld_cells` estimates it; past this, memory and time grow without bound (a file's
#: ``steps=10**7`` once asked for 9.4 GiB, an interval of 1e-7 ran for minutes).
MAX_PLD_CELLS = 10**6


# --------------------------------------------------------------------------- #
# validation
# --------------------------------------------------------------------------- #


def check_sampling_rate(sampling_rate: Any, name: str = "sampling_rate") -> float:
    """Return ``sampling_rate`` as a float in ``(0, 1]`` (1 = full batch)."""
    q = check_positive(sampling_rate, name)
    if q > 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {sampling_rate!r}")
    return q


def _check_accountant(accountant: Any) -> str:
    if accountant not in ("pld", "rdp"):
        raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")
    return str(accountant)


def check_relation(neighbouring: Any, accountant: str = "pld") -> str:
    """Validate a DP-SGD neighbouring relation (and that the accountant supports it)."""
    neighbouring = check_neighbouring(neighbouring, DPSGD_RELATIONS)
    if neighbouring == "replace-one" and accountant != "pld":
        raise ValueError(
            "neighbouring='replace-one' needs accountant='pld' (dp-accounting's RDP accountant "
            "does not support Poisson subsampling under replace-one)"
        )
    return neighbouring


def _quiet_rdp() -> Any:
    """Silence dp-accounting's RDP log lines ("failed to converge ... Excluding this order").

    Those orders are only left out of a minimum over orders, which loosens the
    bound (never the wrong way); the lines are noise for a user.
    """

    @contextlib.contextmanager
    def ctx() -> Any:
        loggers = [logging.getLogger(), logging.getLogger("absl")]
        levels = [lg.level for lg in loggers]
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, lv in zip(loggers, levels, strict=True):
                lg.setLevel(lv)

    return ctx()


def _check_interval(value: Any) -> float:
    v = check_positive(value, "value_discretization_interval")
    if v > 0.1:
        raise ValueError(f"value_discretization_interval must be <= 0.1, got {value!r}")
    return v


class _Run(NamedTuple):
    """The public numbers a DP-SGD run is accounted from, validated (`_check_run`): target
    ``delta``, Poisson rate ``q``, ``steps``, ``accountant`` (``"pld"``/``"rdp"``), PLD
    ``interval`` and neighbouring ``relation``."""

    delta: float
    q: float
    steps: int
    accountant: str
    interval: float
    relation: str = "add-remove"


def _check_run(
    delta: Any, sampling_rate: Any, steps: Any, accountant: Any, interval: Any, relation: Any
) -> _Run:
    """Validate the accounting arguments every DP-SGD function takes (ValueError/TypeError)."""
    d = check_delta(delta)
    q = check_sampling_rate(sampling_rate)
    t = check_int(steps, "steps", minimum=1)
    acc = _check_accountant(accountant)
    rel = check_relation(relation, acc)
    return _Run(d, q, t, acc, _check_interval(interval), rel)


# --------------------------------------------------------------------------- #
# single Gaussian release
# --------------------------------------------------------------------------- #


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """Noise multiplier of the analytic Gaussian mechanism (Balle & Wang 2018).

    Adding ``N(0, (sigma * Delta_2)^2 I)`` to a query of L2 sensitivity
    ``Delta_2`` is ``(epsilon, delta)``-DP (under the relation ``Delta_2`` was
    computed for), and ``sigma`` is the smallest such multiplier up to a
    root-finding tolerance of 1e-12.

    Args:
      epsilon: target epsilon, finite and > 0.
      delta: target delta in (0, 1).

    Returns:
      sigma (float), noise std per unit L2 sensitivity. E.g. 3.7306 at
      ``(1, 1e-5)``, 0.4999 at ``(10, 1e-5)``.
    """
    import dp_accounting  # heavy (seconds to import): loaded on first use

    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    return float(dp_accounting.get_sigma_gaussian(eps, d))


def gaussian_epsilon(sigma: float, delta: float) -> float:
    """Epsilon of one analytic-Gaussian release with noise multiplier ``sigma``.

    Inverse of `gaussian_sigma` (Balle & Wang 2018, Thm. 8):
    ``gaussian_epsilon(gaussian_sigma(e, d), d) == e`` up to ~1e-9.

    Args:
      sigma: noise std per unit L2 sensitivity, finite and > 0.
      delta: delta in (0, 1).

    Returns:
      epsilon (float, >= 0; 0 when ``sigma`` is so large that the mechanism is
      ``(0, delta)``-DP).
    """
    import dp_accounting  # heavy (seconds to import): loaded on first use

    s = check_positive(sigma, "sigma")
    d = check_delta(delta)
    return float(dp_accounting.get_epsilon_gaussian(s, d))


# --------------------------------------------------------------------------- #
# DP-SGD (Poisson-subsampled Gaussian, composed)
# --------------------------------------------------------------------------- #


def dpsgd_event(noise_multiplier: float, *, sampling_rate: float, steps: int) -> Any:
    """The dp-accounting ``DpEvent`` of ``steps`` DP-SGD steps.

    ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``;
    for ``q == 1`` the Poisson wrapper is dropped (every example is used).
    """
    import dp_accounting  # heavy (seconds to import): loaded on first use

    gaussian = dp_accounting.GaussianDpEvent(float(noise_multiplier))
    if sampling_rate >= 1.0:
        return dp_accounting.SelfComposedDpEvent(gaussian, int(steps))
    sampled = dp_accounting.PoissonSampledDpEvent(float(sampling_rate), gaussian)
    return dp_accounting.SelfComposedDpEvent(sampled, int(steps))


def _make_accountant(accountant: str, interval: float, relation: str) -> Any:
    import dp_accounting  # heavy (seconds to import): loaded on first use

    rel = dp_accounting.NeighboringRelation
    neighbouring = rel.REPLACE_ONE if relation == "replace-one" else rel.ADD_OR_REMOVE_ONE
    if accountant == "pld":
        return dp_accounting.pld.PLDAccountant(
            neighboring_relation=neighbouring, value_discretization_interval=interval
        )
    return dp_accounting.rdp.RdpAccountant(neighboring_relation=neighbouring)


def _check_pld_size(sigma: float, run: _Run) -> None:
    """Refuse (``ValueError``) a PLD run whose loss grid would pass `MAX_PLD_CELLS`.

    The estimate (`_pld_cells`) reads no data. Genuine budgets are far inside it: eps 10
    at q = 1/120, 1200 steps and the default interval is about 2e5 cells (4e5 under
    replace-one).
    """
    if run.accountant != "pld":
        return
    _check_pld_steps(run)
    try:
        cells = _pld_cells(sigma, run)
    except ArithmeticError:  # a sigma near the float range's ends
        cells = math.inf
    _refuse_large_pld(cells, run)


def _check_pld_steps(run: _Run) -> None:
    if run.accountant == "pld" and run.steps > MAX_PLD_STEPS:
        raise ValueError(
            f"the PLD accountant composes at most {MAX_PLD_STEPS:.0e} DP-SGD steps, got "
            f"{run.steps}; use accountant='rdp' (add-remove)"
        )


def _pld_cells(sigma: float, run: _Run) -> float:
    """Rough size of the PLD grid of ``run`` at noise multiplier ``sigma``, in intervals.

    The larger of (1) one step's privacy-loss range between dp-accounting's own
    truncation points, which neither a tiny q nor a large delta shrinks, and (2) the
    composed run's add-remove RDP epsilon at delta 1e-10 (not the record's delta),
    doubled under replace-one, for the drift of many steps. Both are cheap for any q,
    delta and step count.
    """
    from dp_accounting.pld import privacy_loss_mechanism as plm  # heavy: loaded on first use

    kind = plm.AdjacencyType
    kinds = (kind.REPLACE,) if run.relation == "replace-one" else (kind.ADD, kind.REMOVE)
    ranges = []
    for adjacency in kinds:
        loss = plm.GaussianPrivacyLoss(sigma, sampling_prob=run.q, adjacency_type=adjacency)
        tail = loss.privacy_loss_tail()
        lo, hi = (loss.privacy_loss(x) for x in (tail.lower_x_truncation, tail.upper_x_truncation))
        ranges.append(abs(hi - lo))
    rdp = run._replace(delta=min(run.delta, 1e-10), accountant="rdp", relation="add-remove")
    ranges.append(_epsilon(sigma, rdp) * (2.0 if run.relation == "replace-one" else 1.0))
    if not all(math.isfinite(r) for r in ranges):
        return math.inf
    return max(ranges) / run.interval


def _refuse_large_pld(cells: float, run: _Run) -> None:
    if not cells <= MAX_PLD_CELLS:
        raise ValueError(
            f"this DP-SGD run would need a PLD grid of about {cells:.3g} cells at the "
            f"interval {run.interval:g}, more than the {MAX_PLD_CELLS:.0e} the PLD accountant "
            "is run on; add noise, take fewer steps, use accountant='rdp' (add-remove), or a "
            "larger value_discretization_interval where the call takes one"
        )


def _epsilon(sigma: float, run: _Run) -> float:
    """Epsilon of ``run.steps`` Poisson-subsampled Gaussian steps of noise multiplier ``sigma``."""
    acc = _make_accountant(run.accountant, run.interval, run.relation)
    with _quiet_rdp():
        acc.compose(dpsgd_event(sigma, sampling_rate=run.q, steps=run.steps))
        return max(0.0, float(acc.get_epsilon(run.delta)))


def dpsgd_epsilon(
    noise_multiplier: float,
    delta: float,
    *,
    sampling_rate: float,
    steps: int,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_PLD_INTERVAL,
    neighbouring: Relation = "add-remove",
) -> float:
    """Epsilon of ``steps`` Poisson-subsampled Gaussian steps.

    Args:
      noise_multiplier: sigma, noise std per unit of clipping norm, > 0.
      delta: delta in (0, 1).
      sampling_rate: Poisson inclusion probability q in (0, 1] (1 = full batch).
      steps: number of noisy steps, >= 1.
      accountant: ``"pld"`` (tight, default) or ``"rdp"`` (add-remove only).
      value_discretization_interval: PLD discretization (ignored by RDP).
      neighbouring: ``"add-remove"`` or ``"replace-one"`` (module docstring).

    Returns:
      epsilon (float >= 0; an upper bound, see the module docstring).
    """
    sigma = check_positive(noise_multiplier, "noise_multiplier")
    run = _check_run(
        delta, sampling_rate, steps, accountant, value_discretization_interval, neighbouring
    )
    _check_pld_size(sigma, run)
    return _epsilon(sigma, run)


def _bracket(gap: Callable[[float], float], guess: float, factor: float) -> tuple[float, float]:
    """Find ``lo < hi`` with ``gap(lo) > 0 >= gap(hi)`` starting at ``guess``.

    ``gap(sigma) = epsilon(sigma) - target`` is decreasing in sigma.
    """
    x = guess
    g = gap(x)
    if g > 0:  # too little noise: walk up
        for _ in range(200):
            lo = x
            x *= factor
            if gap(x) <= 0:
                return lo, x
        raise ValueError(
            "no noise multiplier reaches the target epsilon (the accountant's bound stays "
            "above it); raise epsilon, or lower value_discretization_interval for tiny epsilon"
        )
    for _ in range(200):  # enough noise: walk down
        hi = x
        x /= factor
        if x < 1e-6:
            raise ValueError(
                "the target epsilon is met with a noise multiplier below 1e-6: the budget is "
                "too large to calibrate"
            )
        if gap(x) > 0:
            return x, hi
    raise ValueError(
        "could not bracket the noise multiplier for this target epsilon; for a tiny epsilon "
        "lower value_discretization_interval"
    )


def _solve(gap: Callable[[float], float], lo: float, hi: float, tol: float) -> float:
    """Smallest evaluated sigma with ``gap <= 0`` after Brent's method on [lo, hi].

    Brent keeps a sign-change bracket, so the returned value lies within about
    ``tol`` above the exact root and always satisfies ``epsilon <= target``.
    """
    from scipy import optimize  # heavy (seconds to import): loaded on first use

    feasible = [hi]

    def tracked(x: float) -> float:
        g = gap(x)
        if g <= 0:
            feasible.append(x)
        return g

    try:
        optimize.brentq(tracked, lo, hi, xtol=tol, rtol=1e-12, maxiter=200)
    except (ValueError, RuntimeError):  # pragma: no cover - keep the safe endpoint
        pass
    return float(min(feasible))


def _make_gap(epsilon: float, run: _Run) -> tuple[Callable[[float], float], dict[float, float]]:
    """``gap(sigma) = epsilon(sigma) - target`` (decreasing), memoized per call."""
    memo: dict[float, float] = {}  # bracketing and Brent revisit endpoints

    def gap(s: float) -> float:
        if s not in memo:
            memo[s] = _epsilon(s, run) - epsilon
        return memo[s]

    return gap, memo


def _closest_bracket(memo: dict[float, float]) -> tuple[float, float] | None:
    """The tightest ``(lo, hi)`` among evaluated points with ``gap(lo) > 0 >= gap(hi)``."""
    infeasible = [s for s, g in memo.items() if g > 0]
    feasible = [s for s, g in memo.items() if g <= 0]
    if not infeasible or not feasible:
        return None
    lo, hi = max(infeasible), min(feasible)
    return (lo, hi) if lo < hi else None


def _refine(
    gap: Callable[[float], float],
    memo: dict[float, float],
    start: float,
    slope: float,
    tol: float,
) -> float:
    """Root of an expensive ``gap`` near ``start`` given a slope estimate.

    One Newton step with the slope of a cheaper, nearby curve (the coarse
    PLD), then a check that ``[hi - tol, hi]`` brackets the root, with
    ``hi = x + tol/2`` or ``start`` when that is feasible and closer (2-3
    evaluations in the usual case); otherwise bracketing + Brent.
    """
    g0 = gap(start)
    if slope < 0 and math.isfinite(g0):
        x = start - g0 / slope
        hi = x + tol / 2
        if g0 <= 0 and start <= hi:  # the start point already qualifies
            hi = start
        lo = hi - tol
        if lo > 0 and gap(hi) <= 0 and gap(lo) > 0:
            return hi
    bracket = _closest_bracket(memo)
    if bracket is None:
        guess = min((s for s, g in memo.items() if g <= 0), default=start)
        bracket = _bracket(gap, guess, 1.02)
    return _solve(gap, bracket[0], bracket[1], tol)


def _rdp_start(epsilon: float, run: _Run, guess: float, tol: float) -> float:
    """Add-remove RDP calibration: a cheap starting point for the PLD search.

    RDP is looser than PLD, and replace-one needs more noise than add-remove,
    so it is only a start. Tiny targets below RDP's floor fall back to ``guess``.
    """
    add_remove = run._replace(
        accountant="rdp", interval=DEFAULT_PLD_INTERVAL, relation="add-remove"
    )
    rdp_gap, _ = _make_gap(epsilon, add_remove)
    try:
        lo, hi = _bracket(rdp_gap, guess, 1.5)
    except ValueError:
        return guess
    return _solve(rdp_gap, lo, hi, tol)


def _touch_probability(run: _Run) -> float:
    """``1 - (1 - q)^T``: the chance that one record enters at least one of ``T`` Poisson
    batches of rate ``q``. Outside that event the output distributions of neighbouring
    datasets coincide, so when it is ``<= delta`` the run is (0, delta)-DP whatever the
    noise (the total-variation bound: ``P[M(D) in S] <= P[M(D') in S] + TV``)."""
    if run.q >= 1.0:
        return 1.0
    return float(-math.expm1(run.steps * math.log1p(-run.q)))


@functools.lru_cache(maxsize=256)
def _calibrate(epsilon: float, run: _Run, tol: float) -> float:
    """`dpsgd_noise_multiplier` after validation (memoized on the public numbers)."""
    import dp_accounting  # heavy (seconds to import): loaded on first use

    # Starting guess: the single-release sigma scaled by sqrt(q^2 * steps)
    # (small-q central-limit heuristic), floored; only affects speed.
    single = float(dp_accounting.get_sigma_gaussian(epsilon, run.delta))
    guess = max(0.3, single * math.sqrt(min(1.0, run.q * run.q * run.steps)))
    start = _rdp_start(epsilon, run, guess, tol)
    if run.accountant == "rdp":  # add-remove (`check_relation`)
        rdp_gap, _ = _make_gap(epsilon, run)
        lo, hi = _bracket(rdp_gap, start, 1.5)
        return _solve(rdp_gap, lo, hi, tol)

    if _touch_probability(run) <= run.delta and _epsilon(start, run) <= epsilon:
        # Every sigma meets the target (see `_touch_probability`): the PLD search would
        # head to sigma -> 0 through ever slower evaluations. Keep the checked RDP start.
        return start
    # PLD pass 1 at a 10x coarser interval (~10x cheaper) locates the root and
    # the local slope; pass 2 at the requested interval refines it.
    # The coarse interval never exceeds a tenth of the target (a pessimistic PLD
    # cannot resolve an epsilon below its own discretization).
    coarse = min(0.1, run.interval * _COARSE_FACTOR, max(run.interval, epsilon / 10.0))
    coarse_gap, coarse_memo = _make_gap(epsilon, run._replace(interval=coarse))
    lo, hi = _bracket(coarse_gap, start, 1.05)
    sigma_coarse = _solve(coarse_gap, lo, hi, tol)
    bracket = _closest_bracket(coarse_memo)
    slope = -1.0
    if bracket is not None and bracket[1] > bracket[0]:
        slope = (coarse_memo[bracket[1]] - coarse_memo[bracket[0]]) / (bracket[1] - bracket[0])
    fine_gap, fine_memo = _make_gap(epsilon, run)
    return _refine(fine_gap, fine_memo, sigma_coarse, slope, tol)


def dpsgd_noise_multiplier(
    epsilon: float,
    delta: float,
    *,
    sampling_rate: float,
    steps: int,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_PLD_INTERVAL,
    tol: float = DEFAULT_SIGMA_TOL,
    neighbouring: Relation = "add-remove",
) -> float:
    """Smallest DP-SGD noise multiplier whose accounted epsilon is <= ``epsilon``.

    Calibrates sigma for ``steps`` compositions of the Poisson-subsampled
    Gaussian mechanism (add/remove-one relation; see the module docstring) by
    bracketing and Brent's method on ``epsilon(sigma) - epsilon``:

    1. RDP calibration (cheap; its answer brackets the PLD answer);
    2. for ``"pld"``: a coarse PLD pass (interval x10) finds the root and the
       local slope; one Newton step on the PLD at
       ``value_discretization_interval`` plus a two-point bracket check
       finishes, so the expensive accurate PLD is evaluated 2-3 times, near
       the answer (about 2-10 s on 2 CPU cores for 1200 steps).

    The returned sigma is always one whose accounted epsilon was checked to be
    ``<= epsilon`` (conservative side) and lies within about ``tol`` above the
    exact calibrated value. Results are memoized (`functools.lru_cache`
    on the pure parameter tuple; no data involved).

    Args:
      epsilon: target epsilon, finite and > 0.
      delta: target delta in (0, 1).
      sampling_rate: Poisson inclusion probability q in (0, 1].
      steps: number of noisy steps T >= 1.
      accountant: ``"pld"`` or ``"rdp"``.
      value_discretization_interval: PLD discretization (ignored by RDP).
      tol: absolute tolerance on sigma (> 0).

    When a record is in any batch with probability ``1 - (1 - q)^T <= delta``, every
    sigma meets every target (the run is (0, delta)-DP without noise); no smallest sigma
    exists, and the PLD search returns its RDP starting point once the PLD has checked it.

    Very large budgets (sigma below ~0.3) make every PLD evaluation slow
    (e.g. ~30 s for eps=50, q=0.01, 10 steps); ``accountant="rdp"`` stays fast.
    A sigma whose PLD grid would pass `MAX_PLD_CELLS` is refused (``ValueError``), as
    `dpsgd_epsilon` and `dpsgd_record` refuse it, so no plan is made whose record a
    loader could not re-derive.

    Returns:
      sigma (float). Use ``dpsgd_epsilon(sigma, delta, ...)`` with the same
      ``accountant`` and interval to report the spent epsilon.
    """
    eps = check_epsilon(epsilon)
    run = _check_run(
        delta, sampling_rate, steps, accountant, value_discretization_interval, neighbouring
    )
    if run.accountant == "pld":  # the answer's RDP epsilon is at least the target
        _check_pld_steps(run)
        _refuse_large_pld(eps / run.interval, run)
    sigma = _calibrate(eps, run, check_positive(tol, "tol"))
    _check_pld_size(sigma, run)  # a plan whose record could not be re-derived from its file
    return sigma


def dpsgd_record(
    released: str,
    *,
    noise_multiplier: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    clip_norm: float,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_PLD_INTERVAL,
    epsilon: float | None = None,
    neighbouring: Relation = "add-remove",
    **params: Any,
) -> Any:
    """`MechanismRecord` of a DP-SGD run.

    ``epsilon`` defaults to `dpsgd_epsilon` of the steps actually run
    (pass ``steps`` = steps done, not planned) under ``neighbouring``; the
    sensitivity recorded is ``clip_norm`` (per example).
    """
    sigma = check_positive(noise_multiplier, "noise_multiplier")
    run = _check_run(
        delta, sampling_rate, steps, accountant, value_discretization_interval, neighbouring
    )
    c = check_positive(clip_norm, "clip_norm")
    _check_pld_size(sigma, run)
    eps = _epsilon(sigma, run) if epsilon is None else check_epsilon(epsilon)
    pld = run.accountant == "pld"
    extra: dict[str, Any] = {"value_discretization_interval": run.interval} if pld else {}
    return MechanismRecord.make(
        "poisson_subsampled_gaussian",
        released,
        eps,
        run.delta,
        sensitivity=c,
        accountant=run.accountant,
        noise_multiplier=sigma,
        sampling_rate=run.q,
        steps=run.steps,
        neighbouring=run.relation,
        **extra,
        **params,
    )


# --------------------------------------------------------------------------- #
# closed forms: truncated Laplace and the Gaussian sampling mechanism
# --------------------------------------------------------------------------- #


def tlap_bound(sens: float, eps: float, delta: float) -> float:
    """Support half-width ``B = (Delta / eps) log(1 + (e^eps - 1) / (2 delta))`` of
    TLap(Delta, eps, delta) (Geng et al. 2020; Gu et al. Sec. 3.2), stable for tiny and
    huge eps (float64; inputs assumed valid)."""
    ratio = math.expm1(eps) / (2.0 * delta) if eps < 700 else math.inf
    if math.isfinite(ratio):
        log_term = math.log1p(ratio)
    else:  # e^eps overflows: log(1 + (e^eps-1)/(2d)) ~= eps - log(2 delta)
        log_term = eps - math.log(2.0 * delta)
    return (sens / eps) * log_term


def gsm_divisor(k: float, delta: float) -> float:
    """``max(sqrt(8 k L), 8 L)`` with ``L = log(1/delta)``: Def. 5.2's
    ``Delta(eps, delta, k) = eps / gsm_divisor(k, delta)`` (``k`` may be real)."""
    log_term = math.log(1.0 / delta)
    return max(math.sqrt(8.0 * k * log_term), 8.0 * log_term)


def gsm_epsilon(m_bound: float, delta: float, k: int) -> float:
    """The smallest epsilon at which ``k`` Gaussian samples satisfy Condition 5.3.

    Def. 5.2: ``Delta(eps, delta, k) = eps / max(sqrt(8 k L), 8 L)``, ``L = log(1/delta)``;
    the mechanism is (eps, delta)-DP when ``M <= Delta`` (Lemma 5.4), i.e. for every
    ``eps >= M max(sqrt(8 k L), 8 L)``.
    """
    delta = check_delta(delta)
    return float(m_bound) * gsm_divisor(check_int(k, "k", minimum=1), delta)


# --------------------------------------------------------------------------- #
# repeat-and-select (Papernot & Steinke 2022), RDP
# --------------------------------------------------------------------------- #


class SelectionEvent(NamedTuple):
    """One privacy event of one hyperparameter candidate, as public numbers.

    ``kind`` is ``"gaussian"`` (``sigma``: one Gaussian release, noise multiplier per unit
    sensitivity) or ``"dpsgd"`` (``sigma``, Poisson ``sampling_rate`` and ``steps``, under
    add-remove). Tuples of them describe a candidate's run: its fit and its noisy score.
    """

    kind: str
    sigma: float
    sampling_rate: float = 1.0
    steps: int = 1

    def dp_event(self) -> Any:
        """The dp-accounting ``DpEvent``."""
        import dp_accounting  # heavy (seconds to import): loaded on first use

        if self.kind == "gaussian":
            return dp_accounting.GaussianDpEvent(float(self.sigma))
        if self.kind == "dpsgd":
            return dpsgd_event(self.sigma, sampling_rate=self.sampling_rate, steps=self.steps)
        raise ValueError(f"unknown selection event kind {self.kind!r}")


def candidate_rdp(events: Any) -> tuple[Any, Any]:
    """``(orders, rdp)`` of one candidate's composed events (dp-accounting's RDP orders)."""
    import dp_accounting  # heavy (seconds to import): loaded on first use

    acc = dp_accounting.rdp.RdpAccountant()
    with _quiet_rdp():
        acc.compose(dp_accounting.ComposedDpEvent([SelectionEvent(*e).dp_event() for e in events]))
    return acc.orders, acc.rdp


def _tnb_mean(gamma: float, shape: float) -> float:
    """Mean of the truncated negative binomial (Papernot & Steinke, Def. 1)."""
    if shape == 1.0:
        return 1.0 / gamma
    if shape == 0.0:
        return (1.0 - 1.0 / gamma) / math.log(gamma) if gamma < 1.0 else 1.0
    return shape * (1.0 / gamma - 1.0) / (1.0 - gamma**shape) if gamma < 1.0 else 1.0


def tnb_gamma(mean: float, shape: float) -> float:
    """The halting probability gamma whose TNB has this mean (bisection, conservative:
    the smaller gamma, i.e. the larger mean). A mean of 1 is the point mass at 1 for
    every shape: gamma 1."""
    if shape == 1.0 or mean == 1.0:
        return 1.0 / mean
    lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)
    while hi > lo * (1.0 + 1e-12) and hi - lo > 1e-300:
        mid = 0.5 * (lo + hi)
        if _tnb_mean(mid, shape) < mean:
            hi = mid
        else:
            lo = mid
    return lo


#: The most runs a search draws: `privkernels.privacy.selection.draw_repetitions` stops its
#: inverse CDF here, and `check_repetitions` refuses any ``(mean, shape)`` whose number of
#: runs passes it with probability above `MAX_REPETITION_TAIL`, so the runs' distribution is
#: the one Theorem 2 assumes up to that mass. (The masses' float64 sum falls about 2e-14
#: short of 1 and the draw gives the shortfall to the cap: the drawn mean exceeds the asked
#: one by at most about 2e-9 relative, about 1e-9 in epsilon; s73 adversary round.)
MAX_REPETITIONS = 100_000
MAX_REPETITION_TAIL = 1e-12
#: The shapes `check_repetitions` takes besides 0: outside this range the halting
#: probability's bisection (`tnb_gamma`, ``gamma ** shape`` near 1 below it) and the
#: masses' float64 sum were not checked.
MIN_SHAPE, MAX_SHAPE = 0.01, 100.0
#: The smallest mean above 1 that `check_repetitions` takes: closer to 1, the halting
#: probability's bisection (`tnb_gamma`) gives a distribution whose mean misses the asked
#: one by up to 10% of ``mean - 1`` (1e-7 above 1 at shape 0.01), and the masses may sum
#: past 1 in float64. A mean of exactly 1 is one run.
MIN_MEAN_ABOVE_ONE = 1.01


#: From here on (both arguments), `_log_gamma_ratio` uses Stirling's series: its first
#: omitted term is below 1e-16 there.
STIRLING_FROM = 30.0


def _stirling_tail(y: np.ndarray) -> np.ndarray:
    """``log Gamma(y) - (y - 1/2) log y + y - log(2 pi) / 2`` for ``y >= STIRLING_FROM``."""
    y2 = y * y
    return (1.0 / 12.0 - (1.0 / 360.0 - (1.0 / 1260.0 - 1.0 / (1680.0 * y2)) / y2) / y2) / y


def _log_gamma_ratio(k: np.ndarray, shape: float) -> np.ndarray:
    """``log Gamma(k + shape) - log Gamma(k + 1)`` for ``k (m,) >= 1``, float64, to about
    1e-13 absolute at every ``k``. The plain difference of two log-gammas of size
    ``k log k`` loses about 1e-10 at ``k = 1e5``; for large arguments Stirling's series is
    differenced term by term instead (``log1p`` of the arguments' ratio, no cancellation)."""
    a, b = k + shape, k + 1.0
    out = np.asarray(gammaln(a) - gammaln(b), dtype=np.float64)
    big = np.minimum(a, b) >= STIRLING_FROM
    if np.any(big):
        a, b, d = a[big], b[big], shape - 1.0
        out[big] = (
            (a - 0.5) * np.log1p(d / b)
            + d * np.log(b)
            - d
            + (_stirling_tail(a) - _stirling_tail(b))
        )
    return out


def tnb_log_mass(k: Any, gamma: float, shape: float) -> np.ndarray:
    """``log P[K = k]`` of the truncated negative binomial (Papernot & Steinke 2022, Def. 1)
    for ``k (m,)`` (or a scalar) >= 1, float64, with halting probability ``gamma`` in (0, 1):
    ``(1 - gamma)^k / (k log(1/gamma))`` for ``shape = 0`` (logarithmic), otherwise
    ``C(k + shape - 1, k) (1 - gamma)^k gamma^shape / (1 - gamma^shape)`` (``shape = 1``:
    the geometric ``gamma (1 - gamma)^(k-1)``). The one formula of both `repetition_tail`
    and the draw (`privkernels.privacy.selection.draw_repetitions`); ``log C`` by
    `_log_gamma_ratio`, ``log(1 - gamma^shape)`` through ``expm1``."""
    k = np.asarray(k, dtype=np.float64)
    log_q = math.log1p(-gamma)
    if shape == 0.0:
        return k * log_q - np.log(k) - math.log(math.log(1.0 / gamma))
    if shape == 1.0:  # C(k, k) = 1
        return k * log_q + math.log(gamma) - log_q
    log_gamma = math.log(gamma)
    log_binom = _log_gamma_ratio(np.atleast_1d(k), shape).reshape(k.shape) - math.lgamma(shape)
    return log_binom + k * log_q + shape * log_gamma - math.log(-math.expm1(shape * log_gamma))


@functools.lru_cache(maxsize=256)
def repetition_tail(mean: float, shape: float, k_max: int = MAX_REPETITIONS) -> float:
    """``P[K > k_max]`` of the truncated negative binomial of ``(mean, shape)`` (Papernot &
    Steinke 2022, Def. 1): one minus the exactly rounded sum of its first ``k_max`` masses
    (`tnb_log_mass`, the draw's own). Negative when float64 makes those masses sum past 1
    (a mean just above 1): `check_repetitions` refuses either side."""
    gamma = tnb_gamma(mean, shape)
    if gamma >= 1.0:
        return 0.0
    logp = tnb_log_mass(np.arange(1, k_max + 1, dtype=np.float64), gamma, shape)
    return 1.0 - math.fsum(np.exp(logp).tolist())


def check_repetitions(mean: Any, shape: Any) -> tuple[float, float]:
    """``(mean, shape)`` of the truncated negative binomial number of repetitions
    (Papernot & Steinke 2022, Theorem 2) as floats, or an error (``TypeError`` for a
    non-number: bool, str, None, an array; ``ValueError`` otherwise): ``mean`` 1 or a finite
    number >= `MIN_MEAN_ABOVE_ONE`, ``shape`` 0 or in ``[MIN_SHAPE, MAX_SHAPE]``, and the chance that the runs
    pass `MAX_REPETITIONS` at most `MAX_REPETITION_TAIL` (public settings, no data; the
    geometric allows a mean up to about 3,500)."""
    mean, shape = check_positive(mean, "mean"), check_nonnegative(shape, "shape")
    if not mean >= 1.0:
        raise ValueError(f"mean must be a finite number >= 1, got {mean!r}")
    if 1.0 < mean < MIN_MEAN_ABOVE_ONE:
        raise ValueError(
            f"mean {mean!r} is too close to 1: the halting probability is then too close to 1 "
            f"for float64 to tie the draw to the accounted mean (use a mean of 1, or "
            f"{MIN_MEAN_ABOVE_ONE} or more)"
        )
    shape = 0.0 if shape == 0.0 else shape  # -0.0 is the logarithmic 0.0
    if not (shape == 0.0 or MIN_SHAPE <= shape <= MAX_SHAPE):
        raise ValueError(f"shape must be 0 or in [{MIN_SHAPE}, {MAX_SHAPE}], got {shape!r}")
    # half the bound: the tail is computed in float64, to about 1e-13
    tail = repetition_tail(mean, shape)
    if tail > MAX_REPETITION_TAIL / 2:
        raise ValueError(
            f"mean {mean!r} (shape {shape!r}) is too large: the number of runs would pass "
            f"{MAX_REPETITIONS} with probability above {MAX_REPETITION_TAIL}"
        )
    if tail < -MAX_REPETITION_TAIL / 2:
        raise ValueError(
            f"mean {mean!r} (shape {shape!r}) is too close to 1 for float64: the number of "
            f"runs could not be drawn from its distribution (use a mean of 1, or "
            f"{MIN_MEAN_ABOVE_ONE} or more)"
        )
    return mean, shape


def check_candidate_count(n: int) -> None:
    """Refuse (``ValueError``) a search over more than `MAX_SELECT_CANDIDATES` candidates
    (a public count: no data)."""
    if n > MAX_SELECT_CANDIDATES:
        raise ValueError(
            f"repeat-and-select accounts at most {MAX_SELECT_CANDIDATES} candidates, got {n}"
        )


def repeat_and_select_epsilon(candidates: Any, *, mean: float, shape: float, delta: float) -> float:
    """Epsilon of repeat-and-select over ``candidates`` (Papernot & Steinke 2022, Thm. 2).

    Each repetition runs one candidate chosen uniformly at random (public randomness)
    and the best noisy score is kept; the number of repetitions is drawn from the
    truncated negative binomial with ``shape`` (1: geometric, 0: logarithmic) and
    ``mean``. The RDP of one repetition is at most the pointwise maximum of the
    candidates' curves (Renyi divergence is jointly quasi-convex, so a public mixture
    costs no more than its worst part); Theorem 2 then gives, for every order
    ``l > 1``, ``rdp(l) + log(mean) / (l - 1) + (1 + shape) min_l' [(1 - 1/l') rdp(l')
    - log(gamma) / l']``, made monotone in the order, and dp-accounting converts it to
    (epsilon, delta). With one candidate this equals dp-accounting's own
    ``RepeatAndSelectDpEvent`` (tested).

    Args:
      candidates: a sequence of at most `MAX_SELECT_CANDIDATES` candidates, each a
        sequence of `SelectionEvent` tuples (equal ones share one RDP curve; at most
        `MAX_SELECT_DPSGD_EVENTS` DP-SGD events and `MAX_SELECT_EVENTS` events
        in all over the distinct ones).
      mean: expected number of repetitions, >= 1.
      shape: the distribution's shape in ``[0, inf)``.
      delta: target delta in (0, 1).

    Returns:
      epsilon (float).
    """
    # heavy (seconds to import): loaded on first use
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod

    mean, shape = check_repetitions(mean, shape)
    d = check_delta(delta)
    check_candidate_count(len(candidates))
    distinct = {tuple(tuple(e) for e in c): c for c in candidates}  # one curve per run shape
    sgd = sum(1 for c in distinct for e in c if e and e[0] == "dpsgd")
    total = sum(len(c) for c in distinct)
    if sgd > MAX_SELECT_DPSGD_EVENTS or total > MAX_SELECT_EVENTS:
        raise ValueError(
            f"repeat-and-select accounts at most {MAX_SELECT_DPSGD_EVENTS} DP-SGD events and "
            f"{MAX_SELECT_EVENTS} events in all over its distinct candidates, got "
            f"{sgd} and {total}"
        )
    curves = [candidate_rdp(c) for c in distinct.values()]
    if not curves:
        raise ValueError("repeat-and-select needs at least one candidate")
    orders = np.asarray(curves[0][0], np.float64)
    rdp = np.max(np.stack([np.asarray(c[1], np.float64) for c in curves]), axis=0)
    gamma = tnb_gamma(mean, shape)
    const = (1.0 + shape) * float(np.min((1.0 - 1.0 / orders) * rdp - math.log(gamma) / orders))
    out = np.full_like(orders, np.inf)
    above = orders > 1.0
    out[above] = rdp[above] + math.log(mean) / (orders[above] - 1.0) + const
    out = np.minimum.accumulate(out[::-1])[::-1]  # monotone: a lower order is no worse
    eps, _ = rdp_mod.compute_epsilon(orders, out, d)
    return float(eps)
