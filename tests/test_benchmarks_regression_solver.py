"""The ``dp-ntk-regression-solver`` table: settings refused before any data is read, the
rows a fixed fit and an accounted search write (rule dp-ntk-regression-solver-rule.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import dp_ntk_regression_solver as table
from benchmarks.registry import RunContext


def _ctx(tmp_path: Path, **options: str) -> RunContext:
    return RunContext("quick", (0,), None, tmp_path, dict(options))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "grid"}, "mode must be"),
        ({"solver": "kernel-mean"}, "do not set them"),
        ({"fit_intercept": "0"}, "do not set them"),
        ({"datasets": ""}, "non-empty comma list"),
        ({"datasets": "digits,cifar10"}, "non-empty comma list"),
        ({"epsilons": "1,-1"}, "finite numbers > 0"),
        ({"epsilons": "nan"}, "finite numbers > 0"),
        ({"epsilons": "one"}, "must be numbers"),
        ({"delta": "0"}, "delta must lie in"),
        ({"delta": "1"}, "delta must lie in"),
        ({"mode": "fixed", "fit_intercept": "true"}, "fit_intercept 0 or 1"),
        ({"mode": "fixed", "solver": "Ridge"}, "solver must be"),
    ],
)
def test_bad_settings_stop_before_any_data_is_read(tmp_path, monkeypatch, options, message):
    def no_load(*_a: object) -> None:
        raise AssertionError("data read before the settings were checked")

    monkeypatch.setattr(table, "_load", no_load)
    with pytest.raises(SystemExit, match=message):
        table.run(_ctx(tmp_path, **options))


def test_a_fixed_fit_reports_its_guarantee_and_reads_the_test_set_once(tmp_path):
    ctx = _ctx(tmp_path, datasets="digits", epsilons="1", mode="fixed", solver="kernel-mean",
               fit_intercept="0")  # fmt: skip
    (row,) = table.run(ctx)
    assert row["relation"] == "replace-one" and row["eps_spent"] == pytest.approx(1.0)
    assert row["delta"] == 1e-5 and row["n_rows"] == 1438 and row["noisy_val_score"] is None
    assert json.loads(row["candidate"]) == {"fit_intercept": False,
                                            "fit_options": {"solver": "kernel-mean"}}  # fmt: skip
    assert 0.0 <= row["value"] <= 1.0 and row["seconds"] > 0
    assert row["tuning"].startswith("public data (")


@pytest.mark.slow
def test_a_search_spends_its_epsilon_and_publishes_no_running_time(tmp_path):
    (row,) = table.run(_ctx(tmp_path, datasets="digits", epsilons="10"))
    assert row["seconds"] is None  # it grows with the hidden number of runs
    assert row["eps_spent"] == pytest.approx(10.0, rel=1e-4) and row["eps_spent"] <= 10.0
    chosen = json.loads(row["candidate"])
    assert chosen["fit_intercept"] in (True, False)
    assert chosen["fit_options"]["solver"] in ("ridge", "kernel-mean")
    assert isinstance(row["noisy_val_score"], float)  # a mean over the held-out rows, noised
    assert row["tuning"].startswith("privkernels.tuning (accounted)")
