"""The ``dp-ntk-images`` benchmark table (issue 54, item 1): options, keys, summary, one tiny run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest
import scipy.stats

from benchmarks import dp_ntk_images as T
from benchmarks.common import MAX_PNG_BYTES
from benchmarks.registry import RunContext


def _ctx(tmp_path: Path, **options: str) -> RunContext:
    return RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)


def test_settings_default_to_the_fixed_protocol_and_refuse_bad_options(tmp_path):
    """No ``--set``: both datasets, eps 1 and 10, 60,000 samples, the CNN's 1000 steps, the
    recipe's generator settings; a malformed smoke option exits before anything is read."""
    s = T.settings(_ctx(tmp_path))
    assert s["datasets"] == ["mnist", "fashion_mnist"] and s["epsilons"] == [1.0, 10.0]
    assert (s["samples"], s["cnn_steps"]) == (60_000, T.CNN["steps"])
    assert s["iterations"] is s["batch_size"] is s["max_train"] is s["max_test"] is None
    assert T._recipe("mnist", s) == T.IMAGES_RECIPE["mnist"]
    small = T.settings(_ctx(tmp_path, samples="500", cnn_steps="3", iterations="2"))
    assert (small["samples"], small["cnn_steps"], T._recipe("mnist", small)["iterations"]) == (
        500, 3, 2,
    )  # fmt: skip
    for bad in ({"samples": "0"}, {"cnn_steps": "many"}, {"epsilons": "1,-1"},
                {"epsilons": "nan"}, {"datasets": "cifar10"}, {"max_train": "5"}):  # fmt: skip
        with pytest.raises(SystemExit, match="dp-ntk-images"):
            T.settings(_ctx(tmp_path, **bad))


def test_cells_share_public_draws_across_epsilons_and_release_once(tmp_path, monkeypatch):
    """Each epsilon gets its own noise key but the same public key (common random numbers);
    the fit is released once (iteration 1, from the data) and then resumed from its
    checkpoint without the data to the recipe's iterations."""
    from privkernels import dp_ntk

    calls: list[dict] = []

    def fake_fit(key, x, y, **kw):
        calls.append({"key": key, "x": x, "y": y, **kw})
        return "result"

    monkeypatch.setattr(dp_ntk, "fit", fake_fit)
    d = {"x": np.zeros((40, 28, 28), np.float32), "y": np.arange(40) % 10, "c": 10}
    recipe = T.IMAGES_RECIPE["mnist"]
    for eps in (1.0, 10.0):
        res, t_rel, t_gen = T.release_and_train(0, "mnist", eps, d, recipe)
        assert res == "result" and t_rel.seconds >= 0 and t_gen.cpu_seconds >= 0
    first, resumed, other = calls[0], calls[1], calls[2]
    assert first["iterations"] == 1 and first["x"] is d["x"] and not first.get("resume")
    assert resumed["resume"] and resumed["x"] is None and resumed["y"] is None
    assert resumed["iterations"] == recipe["iterations"]
    assert resumed["checkpoint_path"] == first["checkpoint_path"]
    assert first["epsilon"] == 1.0 and other["epsilon"] == 10.0
    kd = jax.random.key_data
    assert not np.array_equal(kd(first["key"]), kd(other["key"]))
    assert np.array_equal(kd(first["public_key"]), kd(other["public_key"]))
    assert not np.array_equal(kd(first["public_key"]), kd(first["key"]))


def _rows(values: dict[float | None, list[float]]) -> list[dict]:
    rows = []
    for eps, vals in values.items():
        source = "real" if eps is None else "dp-ntk"
        for seed, v in enumerate(vals):
            rows.append({"dataset": "mnist", "source": source, "epsilon": eps, "seed": seed,
                         "metric": "cnn_test_acc", "value": v, "cnn_seconds": 2.0 + seed, "cnn_cpu_seconds": 1.0})  # fmt: skip
    return rows


def test_summary_is_a_t_interval_beside_the_quoted_numbers():
    """Mean ± the 95% Student-t half-width over seeds, one seed without an interval, the
    real-data ceiling, and every DPImageBench method marked as quoted, not measured."""
    rows = _rows({1.0: [90.0, 92.0, 94.0], 10.0: [95.5], None: [99.0, 98.0, 98.5]})
    summary = {(s["epsilon"], s["source"]): s for s in T.summarize(rows)}
    half = scipy.stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)  # sd of 90, 92, 94 is 2
    assert summary[(1.0, "dp-ntk")]["mean"] == pytest.approx(92.0)
    assert summary[(1.0, "dp-ntk")]["ci95"] == pytest.approx(half)
    assert summary[(1.0, "dp-ntk")]["cnn_seconds"] == pytest.approx(3.0)
    assert math.isnan(summary[(10.0, "dp-ntk")]["ci95"])
    text = T.summary_markdown(rows, [1.0, 10.0])
    assert f"| DP-NTK -> CNN (measured) | 92.0 ± {half:.1f} (n=3) | 95.5 (n=1) |" in text
    assert "| CNN on real training images (non-private ceiling) | 98.5 ± " in text
    for method, per in T.DPIMAGEBENCH.items():
        a, b = per["mnist"]
        assert f"| {method} (QUOTED, DPImageBench via issue 54) | {a:.1f} | {b:.1f} |" in text
    assert "fashion_mnist" not in text.split("Recipe tuning")[0]  # only the datasets run
    assert "| mnist | dp-ntk | 1.0 | - | - | - | 3.0 (1.0) | - |" in text  # wall (CPU)


def test_a_merged_files_summary_is_the_one_process_summary(tmp_path):
    """`after_merge` (called by ``python -m benchmarks merge``) writes the summary a run over
    all the seeds writes, its epsilons in the rows' order."""
    rows = _rows({None: [99.0, 98.0], 1.0: [90.0, 92.0], 10.0: [93.0, 95.0]})
    path = T.after_merge(tmp_path, rows, {"profile": "quick", "seeds": [0, 1]})
    assert path == tmp_path / "dp-ntk-images-quick-summary.md"
    assert path.read_text() == T.summary_markdown(rows, [1.0, 10.0])


#: Every field of a DP-NTK row (the real-data row has the shared ones and cnn_seconds).
_SHARED = {"dataset", "seed", "n_train", "n_test", "cnn", "cnn_steps", "cnn_batch", "cnn_lr",
           "cnn_augment", "device", "epsilon", "delta", "source", "metric", "value",
           "paper_value", "seconds", "cnn_seconds", "cnn_cpu_seconds"}  # fmt: skip
_DP_NTK = _SHARED | {
    "release_seconds", "generator_seconds", "sample_seconds", "classifier_seconds",
    "release_cpu_seconds", "generator_cpu_seconds", "sample_cpu_seconds", "classifier_cpu_seconds",
    "samples",
    "sample_labels", "network", "generator", "iterations", "batch_size", "learning_rate",
    "d_code", "label_mode", "final_loss", "report_epsilon", "report_delta", "neighbouring",
}  # fmt: skip


@pytest.mark.slow  # about 90 s on 2 shared CPU cores (two CNN and two DP-NTK compilations)
def test_a_tiny_run_writes_well_formed_rows_summary_and_thumbnail(tmp_path, shared_data_dir):
    """MNIST cut to 300 training rows, 2 generator iterations, 500 samples, 3 CNN steps,
    eps 1, one seed: one real-data row and a CNN, LogReg and MLP row with every field, the
    provenance and rerun block, the summary and a thumbnail under 60 KB."""
    from benchmarks.__main__ import main

    opts = {"datasets": "mnist", "epsilons": "1", "max_train": "300", "max_test": "500",
            "iterations": "2", "batch_size": "100", "samples": "500", "cnn_steps": "3"}  # fmt: skip
    argv = ["run", T.TABLE, "--out", str(tmp_path), "--data-dir", str(shared_data_dir)]
    assert main(argv + [a for k, v in opts.items() for a in ("--set", f"{k}={v}")]) == 0
    payload = json.loads((tmp_path / "dp-ntk-images-quick.json").read_text())
    assert (
        payload["rerun"]["options"] == opts and "dp-ntk-images" in payload["provenance"]["command"]
    )
    rows = payload["rows"]
    real = [r for r in rows if r["source"] == "real"]
    synth = [r for r in rows if r["source"] == "dp-ntk"]
    assert len(real) == 1 and set(real[0]) == _SHARED and real[0]["epsilon"] is None
    assert sorted(r["metric"] for r in synth) == ["cnn_test_acc", "logreg_test_acc", "mlp_test_acc"]
    device = ", ".join(str(dev) for dev in jax.devices())
    for r in rows:
        assert 0.0 <= r["value"] <= 100.0 and r["device"] == device
        assert (r["n_train"], r["n_test"], r["cnn_steps"]) == (300, 500, 3)
    for r in synth:
        assert set(r) == _DP_NTK and r["epsilon"] == 1.0 and r["report_epsilon"] == 1.0
        assert (r["samples"], r["sample_labels"], r["iterations"]) == (500, "balanced", 2)
        stages = [r[k] for k in ("release_seconds", "generator_seconds", "sample_seconds",
                                 "cnn_seconds", "classifier_seconds")]  # fmt: skip
        assert all(math.isfinite(t) and t > 0 for t in stages)
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in r if k.endswith("_cpu_seconds"))
        assert r["seconds"] == pytest.approx(sum(stages)) and math.isfinite(r["final_loss"])
    summary = (tmp_path / "dp-ntk-images-quick-summary.md").read_text()
    assert "DP-NTK -> CNN (measured)" in summary and "QUOTED" in summary
    assert "| mnist | dp-ntk | 1.0 | " in summary.split("Seconds per stage")[1]
    png = tmp_path / "dp-ntk-images-mnist-eps1.png"
    assert 0 < png.stat().st_size <= MAX_PNG_BYTES
