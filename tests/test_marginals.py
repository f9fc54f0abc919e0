"""`privkernels.evaluation.marginals`: every measure against a table small enough to count by hand."""

from __future__ import annotations

import numpy as np
import pytest

from privkernels.data.schema import TabularSchema, categorical, numeric
from privkernels.evaluation import marginals as M
from privkernels.privacy import PrivacyLeakWarning

SCHEMA = TabularSchema.from_columns(
    "toy", [numeric("a", 0, 10), categorical("b", ("x", "y"))], label="label"
)
# columns of x: a (scaled), b=x, b=y.  The fourth real row's b is missing (all zero).
X_REAL = np.array([[0.0, 1, 0], [1.0, 0, 1], [0.5, 1, 0], [0.5, 0, 0]])
Y_REAL = np.array([0, 1, 0, 1])
X_SYN = np.array([[0.0, 1, 0], [0.0, 1, 0], [0.0, 0, 1], [0.97, 0, 1]])
Y_SYN = np.array([0, 0, 1, 1])


def _report(**kw):
    with pytest.warns(PrivacyLeakWarning, match="marginal_report"):
        return M.marginal_report(X_REAL, Y_REAL, X_SYN, Y_SYN, SCHEMA, n_classes=2, **kw)


def test_one_way_tv_by_hand():
    # a in 2 bins: real [1, 3] / 4, synth [3, 1] / 4 -> 0.5
    # b over (x, y, missing): real [2, 1, 1] / 4, synth [2, 2, 0] / 4 -> 0.25
    # label: [2, 2] against [2, 2] -> 0
    rep = _report(bins=2)
    assert rep["tv1"] == pytest.approx({"a": 0.5, "b": 0.25, "label": 0.0})
    assert rep["tv1_mean"] == pytest.approx(0.75 / 3)
    assert rep["tv1_numeric_mean"] == pytest.approx(0.5)
    assert rep["tv1_categorical_mean"] == pytest.approx(0.25)


def test_two_way_tv_by_hand():
    # (a, b): real (0,x) (1,y) (1,x) (1,miss); synth (0,x) x2, (0,y), (1,y) -> 0.5
    # (a, label): real (0,0) (1,1) (1,0) (1,1); synth (0,0) x2, (0,1), (1,1) -> 0.5
    # (b, label): real (x,0) x2, (y,1), (miss,1); synth (x,0) x2, (y,1) x2 -> 0.25
    codes_r, cards, _ = M.column_codes(X_REAL, Y_REAL, SCHEMA, n_classes=2, bins=2)
    codes_s, _, _ = M.column_codes(X_SYN, Y_SYN, SCHEMA, n_classes=2, bins=2)
    np.testing.assert_allclose(M.two_way_tv(codes_r, codes_s, cards), [0.5, 0.5, 0.25])
    assert _report(bins=2)["tv2_mean"] == pytest.approx(1.25 / 3)


def test_bound_shares_and_excess_by_hand():
    # a: real at 0 once and at 1 once in 4 rows; synth at 0 three times, 0.97 is not at 1
    rep = _report()
    b = rep["bounds"]["a"]
    assert (b["real_lower"], b["real_upper"]) == (0.25, 0.25)
    assert (b["synth_lower"], b["synth_upper"]) == (0.75, 0.0)
    assert b["excess_lower_pp"] == pytest.approx(50.0)
    assert b["excess_upper_pp"] == pytest.approx(-25.0)
    assert rep["max_bound_excess_pp"] == pytest.approx(50.0)
    assert rep["max_bound_column"] == "a (lower)"


def test_at_a_bound_is_half_a_step_of_the_scaled_range():
    x = np.array([[0.005, 1, 0], [0.0051, 1, 0], [0.995, 1, 0], [0.9949, 1, 0]])
    assert M.bound_shares(x, SCHEMA) == {"a": (0.25, 0.25)}  # 100 steps: tolerance 0.005
    assert M.bound_shares(x, SCHEMA, bound_steps=10) == {"a": (0.5, 0.5)}


@pytest.mark.filterwarnings("ignore::privkernels.privacy.PrivacyLeakWarning")
def test_identical_tables_have_tv_zero_and_disjoint_ones_tv_one():
    same = M.marginal_report(X_REAL, Y_REAL, X_REAL, Y_REAL, SCHEMA, n_classes=2)
    assert same["tv1_mean"] == 0.0 and same["tv2_mean"] == 0.0
    assert same["max_bound_excess_pp"] == 0.0 and same["max_bound_column"] is None
    low = np.array([[0.0, 1, 0]] * 3)
    high = np.array([[1.0, 0, 1]] * 5)
    apart = M.marginal_report(low, np.zeros(3, int), high, np.ones(5, int), SCHEMA, n_classes=2)
    assert apart["tv1_mean"] == 1.0 and apart["tv2_mean"] == 1.0


def test_codes_default_to_16_bins_and_a_missing_cell():
    nullable = TabularSchema.from_columns("n", [numeric("v", 0, 1, nullable=True)])
    x = np.array([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.99, 0.0]])  # row 0 missing
    codes, cards, names = M.column_codes(x, np.zeros(4, int), nullable, n_classes=1)
    assert codes[0].tolist() == [16, 0, 15, 15] and cards.tolist() == [17, 1]
    assert names == ("v", "label")
    assert M.bound_shares(x, nullable) == {"v": (0.25, 0.25)}  # the missing row is at neither


@pytest.mark.parametrize(
    "x_syn, y_syn, match",
    [
        (np.full((4, 2), 0.123456), Y_SYN, "x_synth has 2 columns"),
        (np.where(X_SYN == 0.97, np.nan, X_SYN), Y_SYN, "x_synth"),
        (X_SYN, np.array([0, 0, 1, 7]), "y_synth must lie in"),
        (X_SYN, Y_SYN[:3], "y_synth has 3 labels"),
    ],
)
def test_bad_input_is_refused_without_showing_values(x_syn, y_syn, match):
    with pytest.raises(ValueError, match=match) as err:
        M.marginal_report(X_REAL, Y_REAL, x_syn, y_syn, SCHEMA, n_classes=2)
    assert "0.123" not in str(err.value) and "0.97" not in str(err.value)
    assert "7" not in str(err.value)
