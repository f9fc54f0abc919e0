"""The ``dp-ntk-regression-fig1`` table: per-seed means in every row, and the replace-one
sketch settings reach the fits and the rows (rule dp-ntk-regression-fig1-mnist-replace-one-rule.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import dp_ntk_regression_tables as table
from benchmarks.common import markdown_table
from benchmarks.registry import RunContext
from privkernels import dp_ntk_regression as R

SMALL = dict(datasets="digits", per_class_train="20", per_class_test="10", n_eps="1", reps="2")


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: str) -> tuple[list, list]:
    """The table's rows on a small digits run (seeds 0 and 1), and every replace-one fit's
    keyword arguments."""
    calls: list[dict[str, Any]] = []
    fit = R.fit

    def spy(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("neighbouring") == "replace-one":
            calls.append(kwargs)
        return fit(*args, **kwargs)

    monkeypatch.setattr(R, "fit", spy)
    ctx = RunContext("quick", (0, 1), None, tmp_path, {**SMALL, **options})
    return table.run(ctx), calls


def test_rows_give_each_seeds_mean_and_the_sketch_settings(tmp_path, monkeypatch):
    rows, calls = _run(
        tmp_path, monkeypatch, replace_one_features="16", replace_one_ridge_factor="0.5"
    )
    assert len(calls) == 4  # 2 seeds x 2 releases x 1 epsilon
    assert all(c["features"] == 16 and c["ridge_factor"] == 0.5 for c in calls)
    by_metric = {r["metric"]: r for r in rows}
    one = by_metric["replace_one_test_acc"]
    assert one["features"] == 16 and one["ridge_factor"] == 0.5
    assert "features" not in by_metric["private_test_acc"]
    for row in rows:
        assert len(row["seed_values"]) == 2, row["metric"]
        # two releases per seed: the mean of the seeds' means is the row's value
        assert np.mean(row["seed_values"]) == pytest.approx(row["value"], abs=1e-12)


@pytest.mark.slow
def test_without_the_options_the_fits_take_the_functions_defaults(tmp_path, monkeypatch):
    rows, calls = _run(tmp_path, monkeypatch, reps="1")
    assert calls and all("features" not in c and "ridge_factor" not in c for c in calls)
    assert not any("features" in r or "ridge_factor" in r for r in rows)


@pytest.mark.slow
def test_each_seed_value_is_that_seeds_own_run(tmp_path, monkeypatch):
    """``seed_values`` follow the seeds' order: seed 1's entry of a (0, 1) run is what a run
    of seed 1 alone gives (same keys, same data)."""
    both, _ = _run(tmp_path, monkeypatch, reps="1")
    ctx = RunContext("quick", (1,), None, tmp_path, {**SMALL, "reps": "1"})
    alone = table.run(ctx)
    for row, single in zip(both, alone, strict=True):
        assert row["metric"] == single["metric"] and row["epsilon"] == single["epsilon"]
        assert row["seed_values"][1] == pytest.approx(single["seed_values"][0], abs=1e-12)


def test_a_bad_sketch_size_is_refused_when_the_options_are_read(tmp_path):
    ctx = RunContext("quick", (0,), None, tmp_path, {**SMALL, "replace_one_features": "1.5"})
    with pytest.raises(ValueError):
        table.run(ctx)


def test_the_markdown_shows_per_seed_values_as_numbers():
    text = markdown_table([{"metric": "acc", "seed_values": [0.73125, 0.71]}])
    assert "| acc | 0.7312 / 0.71 |" in text
