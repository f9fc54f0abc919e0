"""The s72 adversary's findings against the accounted search, held as tests.

* a search's warnings must not count its hidden number of runs ``K`` (each run's fit
  used to reset the once-per-location registry, so a per-fit warning showed once a run);
* no ``(mean, shape)`` may put ``K`` at its cap with more than a negligible chance (the
  inverse CDF stops at `MAX_REPETITIONS`, a fixed ``K`` the theorem does not cover);
* a value float32 cannot hold is refused before the first run's noise, wherever the
  split puts its row;
* the marginal code refuses a resolution that would only exhaust memory.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels import tuning
from privkernels.features import fc_1l
from privkernels.features.marginal import MAX_BINS, reference_rows, with_marginals
from privkernels.privacy.accounting import (
    MAX_REPETITION_TAIL,
    MAX_REPETITIONS,
    check_repetitions,
    repetition_tail,
)
from privkernels.sklearn import DPNTKClassifier, PrivateSearchCV


def _rows(n: int = 300, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, (x[:, 0] > 0).astype(int)


def test_a_search_shows_each_warning_once_whatever_its_number_of_runs(monkeypatch):
    """300 rows: every fit warns (a small sample). Whatever ``K`` is drawn, the user sees
    each distinct warning once, the chosen run's."""
    x, y = _rows()
    drawn = []
    real = tuning.draw_repetitions
    monkeypatch.setattr(tuning, "draw_repetitions", lambda *a: drawn.append(real(*a)) or drawn[-1])
    counts = []
    for seed in range(4):
        base = DPNTKClassifier(1.0, 1e-5, classes=[0, 1], preprocessing=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            search = PrivateSearchCV(base, {"fit_intercept": [True, False]}, epsilon=1.0,
                                     mean_runs=3, random_state=seed)  # fmt: skip
            search.fit(x, y)
        names = [w.category.__name__ for w in caught]
        counts.append(names.count("SmallSampleWarning"))
        assert len(set(map(str, (w.message for w in caught)))) == len(caught), names
    assert max(drawn) > 1, drawn  # the case the old code counted
    assert counts == [1] * len(counts), (drawn, counts)


@pytest.mark.parametrize(("mean", "shape"), [(1e4, 1.0), (1e6, 1.0), (1000.0, 0.0), (5e3, 0.5)])
def test_a_mean_whose_runs_could_reach_the_cap_is_refused(mean, shape):
    assert repetition_tail(mean, shape) > MAX_REPETITION_TAIL
    with pytest.raises(ValueError, match="too large"):
        check_repetitions(mean, shape)


@pytest.mark.parametrize(
    ("mean", "shape"), [(8.0, 1.0), (3000.0, 1.0), (300.0, 0.0), (1000.0, 3.0)]
)
def test_a_usable_mean_keeps_its_cap_out_of_reach(mean, shape):
    assert check_repetitions(mean, shape) == (mean, shape)
    assert repetition_tail(mean, shape) <= MAX_REPETITION_TAIL


def test_the_tail_is_the_geometric_one_in_closed_form():
    for mean in (1000.0, 3000.0, 3700.0, 1e4):
        exact = math.exp(MAX_REPETITIONS * math.log1p(-1.0 / mean))
        assert repetition_tail(mean, 1.0) == pytest.approx(exact, rel=1e-3, abs=1e-15)


def test_a_search_refuses_a_row_float32_cannot_hold_before_any_noise(monkeypatch):
    x, y = _rows(200, 5, seed=1)
    x[123, 0] = 1e39  # finite in float64, inf in float32
    forbid_noise(monkeypatch)
    for seed in range(4):  # the split puts row 123 in either part; refused either way
        search = PrivateSearchCV(DPNTKClassifier(classes=[0, 1], preprocessing=None),
                                 {"fit_intercept": [True, False]}, random_state=seed)  # fmt: skip
        with pytest.raises(ValueError, match="float32") as err:
            search.fit(x, y)
        assert "1e+39" not in str(err.value) and "123" not in str(err.value)


def test_the_marginal_code_refuses_a_resolution_past_its_limit():
    rows = reference_rows(6, [0, 1], [(2, 6)])
    base = fc_1l(8, out_features=2)
    assert with_marginals(base, [0, 1], rows, bins=MAX_BINS).bins == MAX_BINS
    with pytest.raises(ValueError, match="at most"):
        with_marginals(base, [0, 1], rows, bins=MAX_BINS + 1)


# ------------------------------------------------------------------ round 2 (helper-55)
def test_a_numeric_dataframe_is_checked_in_float32_too(monkeypatch):
    pd = pytest.importorskip("pandas")
    x, y = _rows(200, 5, seed=1)
    x[123, 0] = 1e39
    forbid_noise(monkeypatch)
    frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(5)])
    search = PrivateSearchCV(DPNTKClassifier(classes=[0, 1], preprocessing=None),
                             {"fit_intercept": [True, False]}, random_state=2)  # fmt: skip
    with pytest.raises(ValueError, match="float32"):
        search.fit(frame, y)


@pytest.mark.parametrize("shape", [1e8, 1e4, 101.0, 1e-14, 0.009, -0.5, math.nan])
def test_a_shape_the_draw_cannot_sum_in_float64_is_refused(shape):
    with pytest.raises(ValueError, match="shape must be (0 or in|a finite number >= 0)"):
        check_repetitions(2.0, shape)


@pytest.mark.parametrize(("mean", "shape"), [(1.0, 0.0), (1.0, 1.0), (2.0, 0.01), (2.0, 100.0)])
def test_the_smallest_means_pass_at_every_shape_taken(mean, shape):
    assert check_repetitions(mean, shape) == (mean, shape)


def test_a_callers_error_filter_still_stops_the_search_before_any_noise(monkeypatch):
    """300 rows: every fit warns (a small sample) before its noise; a caller who made that
    warning an error gets it from the first run, as from a plain fit."""
    from privkernels.privacy.warnings import SmallSampleWarning

    x, y = _rows()
    forbid_noise(monkeypatch, samplers=False)  # the split's permutation is public: allowed
    search = PrivateSearchCV(DPNTKClassifier(classes=[0, 1], preprocessing=None),
                             {"fit_intercept": [True, False]}, random_state=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        with pytest.raises(SmallSampleWarning):
            search.fit(x, y)


def test_a_callers_filter_by_module_still_matches_the_shown_warnings():
    x, y = _rows()
    search = PrivateSearchCV(DPNTKClassifier(classes=[0, 1], preprocessing=None),
                             {"fit_intercept": [True, False]}, random_state=0)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=r"privkernels\.")
        search.fit(x, y)
    assert not [w for w in caught if "privkernels" in w.filename], [str(w.message) for w in caught]


# ------------------------------------------------------------------ round 3 (helper-56)
@pytest.mark.parametrize(("mean", "shape"), [(1 + 1e-9, 0.0), (1 + 1e-5, 0.0), (1 + 1e-7, 0.01)])
def test_a_mean_just_above_one_that_float64_cannot_draw_is_refused(mean, shape):
    with pytest.raises(ValueError, match="too large|too close to 1"):
        check_repetitions(mean, shape)


@pytest.mark.parametrize("shape", [0.0, 0.01, 0.5, 1.0, 100.0])
def test_a_mean_of_one_is_one_run_at_every_shape(shape):
    import jax

    from privkernels.privacy.selection import draw_repetitions

    assert check_repetitions(1.0, shape) == (1.0, shape)
    assert {draw_repetitions(jax.random.key(i), 1.0, shape) for i in range(50)} == {1}


def test_an_error_inside_a_search_leaves_no_frame_that_holds_the_runs(monkeypatch):
    """A run that fails (here the second) must not hand a traceback printer the hidden
    number of runs, the picks or the best run so far."""
    x, y = _rows()
    real, calls = tuning._run, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a candidate failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(tuning, "_run", failing)
    search = PrivateSearchCV(DPNTKClassifier(classes=[0, 1], preprocessing=None),
                             {"fit_intercept": [True, False]}, mean_runs=50,
                             random_state=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="a candidate failed") as info:
            search.fit(x, y)
    assert len(calls) == 2
    tb, names = info.value.__traceback__, set()
    while tb is not None:
        names |= set(tb.tb_frame.f_locals)
        tb = tb.tb_next
    assert not names & {"runs", "picks", "best", "j"}, sorted(names)


def test_a_run_keeps_the_callers_error_and_ignore_filters_as_they_are():
    import re

    from privkernels.privacy.warnings import SmallSampleWarning

    strict = ("error", re.compile("Few Rows", re.X), SmallSampleWarning, None, 0)
    quiet = ("ignore", None, UserWarning, re.compile("Mod", 0), 7)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        filters: list = warnings.filters  # type: ignore[assignment]
        filters[:0] = [strict, quiet]
        with warnings.catch_warnings():
            tuning._every_run_records()
            inside = list(warnings.filters)
        assert inside[:2] == [strict, quiet]
        assert all(f[0] in ("error", "ignore", "always") for f in inside)
        assert warnings.filters[:2] == [strict, quiet]  # the caller's, after the run
