"""Tests of privkernels.privacy.accounting (noise calibration via dp-accounting).

Expected values are recomputed from dp-accounting directly in the tests, or
derived independently (composition of Gaussians is a Gaussian); the reference
table of /work/shared/notes/dependencies.md is checked to 1e-3.
"""

from __future__ import annotations

import math
import signal
import time

import dp_accounting
import pytest

from privkernels.privacy import accounting as acc
from privkernels.privacy.accounting import (
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    gaussian_epsilon,
    gaussian_sigma,
)

DELTA = 1e-5
Q_REF, T_REF = 1 / 120, 1200
TOL = acc.DEFAULT_SIGMA_TOL


# --------------------------------------------------------------------------- #
# single analytic-Gaussian release
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 10.0])
def test_gaussian_sigma_matches_dp_accounting(eps):
    assert gaussian_sigma(eps, DELTA) == pytest.approx(
        dp_accounting.get_sigma_gaussian(eps, DELTA), rel=1e-9
    )


@pytest.mark.parametrize("eps,expected", [(1.0, 3.7306), (10.0, 0.4999)])
def test_gaussian_sigma_reference_table(eps, expected):
    assert abs(gaussian_sigma(eps, DELTA) - expected) < 1e-3


def test_gaussian_sigma_beats_classical_bound_and_is_monotone():
    sigmas = [gaussian_sigma(e, DELTA) for e in (0.5, 1.0, 2.0, 4.0)]
    assert all(a > b for a, b in zip(sigmas, sigmas[1:], strict=False))
    # classical sqrt(2 ln(1.25/delta))/eps is valid only for eps < 1 and looser
    assert sigmas[0] < math.sqrt(2 * math.log(1.25 / DELTA)) / 0.5


@pytest.mark.parametrize("eps", [0.3, 1.0, 8.0])
def test_gaussian_epsilon_inverts_sigma(eps):
    assert gaussian_epsilon(gaussian_sigma(eps, DELTA), DELTA) == pytest.approx(eps, rel=1e-7)


def test_gaussian_epsilon_satisfies_balle_wang_delta():
    """delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s) (Balle & Wang Thm. 8)."""
    from scipy.stats import norm

    s = 2.0
    e = gaussian_epsilon(s, DELTA)
    d = norm.cdf(1 / (2 * s) - e * s) - math.exp(e) * norm.cdf(-1 / (2 * s) - e * s)
    assert d == pytest.approx(DELTA, rel=1e-6)


# --------------------------------------------------------------------------- #
# DP-SGD calibration
# --------------------------------------------------------------------------- #


def _dp_accounting_rdp_sigma(eps: float, q: float, steps: int) -> float:
    """Independent calibration straight through dp_accounting (RDP, cheap)."""

    def make_event(s):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps
        )

    return dp_accounting.calibrate_dp_mechanism(
        dp_accounting.rdp.RdpAccountant,
        make_event,
        eps,
        DELTA,
        bracket_interval=dp_accounting.LowerEndpointAndGuess(0.05, 1.0),
        tol=1e-6,
    )


@pytest.mark.parametrize("eps,expected", [(1.0, 1.4097), (10.0, 0.5594)])
def test_dpsgd_rdp_reference_and_direct(eps, expected):
    sigma = dpsgd_noise_multiplier(eps, DELTA, sampling_rate=Q_REF, steps=T_REF, accountant="rdp")
    assert abs(sigma - expected) < 1e-3
    direct = _dp_accounting_rdp_sigma(eps, Q_REF, T_REF)
    # conservative side, within the documented tolerance
    assert direct - 1e-6 <= sigma <= direct + 2 * TOL


@pytest.mark.parametrize("eps", [1.0, 10.0])
def test_dpsgd_rdp_round_trip_conservative_and_tight(eps):
    kw = dict(sampling_rate=Q_REF, steps=T_REF, accountant="rdp")
    sigma = dpsgd_noise_multiplier(eps, DELTA, **kw)
    assert dpsgd_epsilon(sigma, DELTA, **kw) <= eps
    assert dpsgd_epsilon(sigma - 2 * TOL, DELTA, **kw) > eps  # not wastefully large


def test_dpsgd_pld_reference_eps1():
    kw = dict(sampling_rate=Q_REF, steps=T_REF)
    sigma = dpsgd_noise_multiplier(1.0, DELTA, **kw)
    assert abs(sigma - 1.3204) < 1e-3
    spent = dpsgd_epsilon(sigma, DELTA, **kw)
    assert 1.0 - 1e-2 < spent <= 1.0
    rdp = dpsgd_noise_multiplier(1.0, DELTA, accountant="rdp", **kw)
    assert rdp > sigma  # RDP is the looser accountant


@pytest.mark.slow
def test_dpsgd_pld_reference_eps10():
    kw = dict(sampling_rate=Q_REF, steps=T_REF)
    sigma = dpsgd_noise_multiplier(10.0, DELTA, **kw)
    assert abs(sigma - 0.5337) < 1e-3
    assert dpsgd_epsilon(sigma, DELTA, **kw) <= 10.0
    assert dpsgd_noise_multiplier(10.0, DELTA, accountant="rdp", **kw) > sigma


@pytest.mark.parametrize("eps", [2.0, pytest.param(4.0, marks=pytest.mark.slow)])
def test_dpsgd_pld_round_trip_small_run(eps):
    kw = dict(sampling_rate=0.05, steps=40)
    sigma = dpsgd_noise_multiplier(eps, DELTA, **kw)
    assert dpsgd_epsilon(sigma, DELTA, **kw) <= eps
    assert dpsgd_epsilon(sigma - 2 * TOL, DELTA, **kw) > eps
    assert dpsgd_noise_multiplier(eps, DELTA, accountant="rdp", **kw) >= sigma


def _interrupt(signum, frame):
    raise TimeoutError("dpsgd_noise_multiplier did not return within the limit")


@pytest.mark.parametrize(
    "neighbouring", ["add-remove", pytest.param("replace-one", marks=pytest.mark.slow)]
)
def test_pld_calibration_returns_when_every_sigma_meets_the_target(neighbouring):
    """q = 1e-9, 5 steps: a record is in a batch with probability ~5e-9 <= delta, so the
    PLD epsilon is 0 for every sigma; the search used to head to sigma -> 0 (> 90 s)."""
    kw = dict(sampling_rate=1e-9, steps=5, neighbouring=neighbouring)
    limit = 20
    old = signal.signal(signal.SIGALRM, _interrupt)
    signal.alarm(limit)
    try:
        start = time.perf_counter()
        sigma = dpsgd_noise_multiplier(1.0, DELTA, **kw)
        elapsed = time.perf_counter() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert elapsed < limit and sigma > 0
    assert dpsgd_epsilon(sigma, DELTA, **kw) <= 1.0


def test_full_batch_equals_composed_analytic_gaussian():
    """T full-batch Gaussian steps with multiplier s = one release with s/sqrt(T)."""
    steps = 100
    sigma = dpsgd_noise_multiplier(1.0, DELTA, sampling_rate=1.0, steps=steps)
    exact = math.sqrt(steps) * gaussian_sigma(1.0, DELTA)
    assert exact <= sigma + 1e-9  # PLD never under-reports epsilon
    assert sigma == pytest.approx(exact, rel=1e-3)
    assert dpsgd_epsilon(sigma, DELTA, sampling_rate=1.0, steps=steps) <= 1.0


def test_dpsgd_epsilon_monotone_in_steps_and_rate():
    e = [
        dpsgd_epsilon(1.0, DELTA, sampling_rate=0.01, steps=t, accountant="rdp")
        for t in (10, 100, 1000)
    ]
    assert e[0] < e[1] < e[2]
    e_q = [
        dpsgd_epsilon(1.0, DELTA, sampling_rate=q, steps=100, accountant="rdp")
        for q in (0.001, 0.01, 0.1)
    ]
    assert e_q[0] < e_q[1] < e_q[2]


def test_dpsgd_event_structure():
    ev = acc.dpsgd_event(1.1, sampling_rate=0.1, steps=7)
    assert isinstance(ev, dp_accounting.SelfComposedDpEvent) and ev.count == 7
    assert isinstance(ev.event, dp_accounting.PoissonSampledDpEvent)
    assert ev.event.sampling_probability == 0.1 and ev.event.event.noise_multiplier == 1.1
    full = acc.dpsgd_event(1.1, sampling_rate=1.0, steps=7)
    assert isinstance(full.event, dp_accounting.GaussianDpEvent)


def test_dpsgd_record_matches_epsilon():
    rec = acc.dpsgd_record(
        "synthetic set",
        noise_multiplier=1.0,
        delta=DELTA,
        sampling_rate=0.01,
        steps=100,
        clip_norm=0.5,
        accountant="rdp",
    )
    assert rec.epsilon == pytest.approx(
        dpsgd_epsilon(1.0, DELTA, sampling_rate=0.01, steps=100, accountant="rdp")
    )
    assert rec.sensitivity == 0.5 and rec.param_dict["steps"] == 100
    assert rec.name == "poisson_subsampled_gaussian"


# --------------------------------------------------------------------------- #
# validation
# --------------------------------------------------------------------------- #

BAD_EPS = [0.0, -1.0, math.inf, math.nan]
BAD_DELTA = [0.0, 1.0, 1.5, -0.1, math.nan]


@pytest.mark.parametrize("eps", BAD_EPS)
def test_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_sigma(eps, DELTA)
    with pytest.raises(ValueError, match="epsilon"):
        dpsgd_noise_multiplier(eps, DELTA, sampling_rate=0.1, steps=10)


@pytest.mark.parametrize("delta", BAD_DELTA)
def test_rejects_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        gaussian_sigma(1.0, delta)
    with pytest.raises(ValueError, match="delta"):
        gaussian_epsilon(1.0, delta)
    with pytest.raises(ValueError, match="delta"):
        dpsgd_noise_multiplier(1.0, delta, sampling_rate=0.1, steps=10)
    with pytest.raises(ValueError, match="delta"):
        dpsgd_epsilon(1.0, delta, sampling_rate=0.1, steps=10)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, math.nan, math.inf])
def test_rejects_bad_sampling_rate(q):
    with pytest.raises(ValueError, match="sampling_rate"):
        dpsgd_noise_multiplier(1.0, DELTA, sampling_rate=q, steps=10)
    with pytest.raises(ValueError, match="sampling_rate"):
        dpsgd_epsilon(1.0, DELTA, sampling_rate=q, steps=10)


def test_rejects_bad_steps_sigma_accountant():
    with pytest.raises(ValueError, match="steps"):
        dpsgd_noise_multiplier(1.0, DELTA, sampling_rate=0.1, steps=0)
    with pytest.raises(TypeError, match="steps"):
        dpsgd_epsilon(1.0, DELTA, sampling_rate=0.1, steps=2.5)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="sigma"):
            gaussian_epsilon(bad, DELTA)
        with pytest.raises(ValueError, match="noise_multiplier"):
            dpsgd_epsilon(bad, DELTA, sampling_rate=0.1, steps=10)
    with pytest.raises(ValueError, match="accountant"):
        dpsgd_noise_multiplier(1.0, DELTA, sampling_rate=0.1, steps=10, accountant="moments")
    with pytest.raises(ValueError, match="tol"):
        dpsgd_noise_multiplier(1.0, DELTA, sampling_rate=0.1, steps=10, tol=0.0)
    with pytest.raises(TypeError, match="epsilon"):
        gaussian_sigma("1", DELTA)


def test_dp_sgd_calibration_is_memoized():
    """A second calibration of the same public numbers is a cache hit (PLD costs seconds;
    the cache was once lost when a helper was inserted under its decorator)."""
    from privkernels.privacy import accounting

    kw = dict(sampling_rate=0.37, steps=3, accountant="rdp")
    accounting.dpsgd_noise_multiplier(1.3, 1e-5, **kw)
    hits = accounting._calibrate.cache_info().hits
    accounting.dpsgd_noise_multiplier(1.3, 1e-5, **kw)
    assert accounting._calibrate.cache_info().hits == hits + 1


def test_pld_runs_past_the_grid_limit_are_refused_before_the_pld_is_built():
    """`MAX_PLD_CELLS`: `_pld_cells` estimates the PLD grid (one step's loss range, and the
    composed RDP epsilon at delta 1e-10). Past it, every DP-SGD entry point refuses (a file's
    record, a plan, a record); genuine budgets sit far inside it, and the RDP accountant
    has no such limit. The s70 adversary's bypasses (a tiny q or a large delta made the
    first estimate 0) are among the refused."""
    from privkernels.privacy import accounting

    def cells(sigma, q, steps, relation="add-remove", delta=DELTA, interval=1e-4):
        run = accounting._Run(delta, q, steps, "pld", interval, relation)
        return accounting._pld_cells(sigma, run)

    for relation in ("add-remove", "replace-one"):  # PLD sigma of eps 10 at these numbers
        assert cells(0.5337, 1 / 120, 1200, relation) < 0.5 * accounting.MAX_PLD_CELLS
    refused = [  # sigma, q, steps, delta, interval
        (1.3204, 1 / 120, 10**7, DELTA, 1e-4),
        (1.3204, 1 / 120, 1200, DELTA, 1e-8),
        (0.05, 1e-50, 1, DELTA, 3e-5),
        (0.5, 1.0, 1, 0.9, 1e-6),
        (200.0, 0.01, 3 * 10**7, DELTA, 1e-4),  # a tiny grid composed 3e7 times: 157 s
    ]
    for sigma, q, steps, delta, interval in refused + [(1e-200, 1.0, 1, DELTA, 1e-4)]:
        kw = dict(sampling_rate=q, steps=steps, value_discretization_interval=interval)
        with pytest.raises(ValueError, match="PLD"):
            dpsgd_epsilon(sigma, delta, **kw)
        with pytest.raises(ValueError, match="PLD"):
            accounting.dpsgd_record("x", noise_multiplier=sigma, delta=delta, clip_norm=1.0, **kw)
    with pytest.raises(ValueError, match="PLD grid"):  # refused before any PLD is computed
        dpsgd_noise_multiplier(500.0, DELTA, sampling_rate=1 / 120, steps=1200)
    assert dpsgd_epsilon(1.3204, DELTA, sampling_rate=1 / 120, steps=10**9, accountant="rdp") > 0
