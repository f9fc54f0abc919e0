"""`benchmarks.perf_compare`: the summary reads both sides of each ratio per tree."""

from __future__ import annotations

from benchmarks.perf_compare import LABELS, _summary


def test_summary_scales_the_loop_to_the_batch_and_reports_both_times() -> None:
    """The Gram-form loop runs 6 targets and is scaled to b=500 before dividing; the ratio
    is the median of the per-process ratios (wall and CPU), one column per tree."""
    _, _, n_loop, n_batch = LABELS["gram"]
    runs = {
        "gram": {
            "a": [
                {"base": 0.006, "fast": 0.01, "base_cpu": 0.012, "fast_cpu": 0.02},
                {"base": 0.012, "fast": 0.01, "base_cpu": 0.012, "fast_cpu": 0.04},
                {"base": 0.003, "fast": 0.01, "base_cpu": 0.006, "fast_cpu": 0.02},
            ],
            "b": [{"base": 0.006, "fast": 0.02, "base_cpu": 0.006, "fast_cpu": 0.01}],
        }
    }
    text = _summary(runs, {"a": "x/src", "b": "y/src"}, 3, 5, False)
    wall = next(line for line in text.splitlines() if "ratio, wall" in line)
    cpu = next(line for line in text.splitlines() if "ratio, cpu" in line)
    scale = n_batch / n_loop
    assert wall.split("|")[3].strip() == f"{scale * 0.6:.3g}"  # median of 0.6, 1.2, 0.3
    assert wall.split("|")[4].strip() == f"{scale * 0.3:.3g}"
    assert cpu.split("|")[3].strip() == f"{scale * 0.3:.3g}"  # median of 0.6, 0.3, 0.3
    assert cpu.split("|")[4].strip() == f"{scale * 0.6:.3g}"
