"""The s62 attacks (repros in /work/adv9b/repro and /work/adv9/repro/r2): each test fails on
f4f2a9b and names the finding it pins."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels.privacy import BudgetAccountant
from privkernels.sklearn import DPKIPClassifier, DPNTKGenerator, DPNTKRegressor


@pytest.mark.parametrize("value", [1e39, 1e300])
def test_regressor_targets_beyond_float32_are_refused_before_the_private_scales(monkeypatch, value):
    """b1/b2: one target of 1e300 was refused only after the feature scales' noise (charged
    1), with a message naming X."""
    x = np.random.default_rng(0).uniform(size=(30, 4))
    y = x[:, 0].copy()
    y[0] = value
    acc = BudgetAccountant(10.0, 1e-3)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="^y contains NaN or infinite"):
        DPNTKRegressor(width=16, budget_accountant=acc).fit(x, y)
    assert acc.spent().epsilon == 0.0


def _add_remove_estimators():
    return [
        DPKIPClassifier(classes=[0, 1], batch_size=10,
                        fit_options=dict(neighbouring="add-remove", sampling_rate=0.3)),
        DPNTKGenerator(classes=[0, 1], iterations=1, fit_options=dict(neighbouring="add-remove")),
    ]  # fmt: skip


@pytest.mark.parametrize("which", ["y_two_columns", "x_no_columns"])
@pytest.mark.parametrize("est", _add_remove_estimators(), ids=["kip", "generator"])
def test_shape_refusals_name_no_row_count(monkeypatch, est, which):
    """b5: under add-remove n is private; scikit-learn's messages printed the shape (37, 2)."""
    n = 37
    x = np.random.default_rng(0).uniform(size=(n, 3))
    y = np.arange(n) % 2
    if which == "y_two_columns":
        y = np.stack([y, y], 1)
    else:
        x = x[:, :0]
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError) as err:
            est.fit(x, y)
    assert str(n) not in str(err.value)


@pytest.mark.parametrize("bad", ["--7", "7\u00b2", "9" * 30])
def test_cli_labels_that_look_like_integers_are_never_echoed(tmp_path, bad):
    """b6: '--7' and '7²' passed ``str.isdigit`` and numpy's int parse quoted them; 30 digits
    raised an uncaught OverflowError."""
    rng = np.random.default_rng(0)
    rows = [f"{rng.normal():.3f},{rng.normal():.3f},{bad if i == 4 else i % 2}" for i in range(30)]
    (tmp_path / "d.csv").write_text("a,b,y\n" + "\n".join(rows) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "privkernels", "distill", "d.csv", "--label", "y", "--out",
         "o.npz", "--epsilon", "1", "--quiet", "--classes", "0,1"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert bad not in r.stderr and "Traceback" not in r.stderr
