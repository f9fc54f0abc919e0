"""The ``dp-ntk-tabular`` table runs end to end on a tiny table, and its file can be rerun."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from benchmarks import dp_ntk_tabular as T
from benchmarks.__main__ import main
from benchmarks.registry import RunContext
from privkernels import dp_ntk
from privkernels.data.synthetic import synthetic_tabular


def _tiny_splits(ctx: RunContext, name: str):
    """A 240-row mixed table (and a 120-row test split) standing in for ``name``."""
    train = dataclasses.replace(synthetic_tabular(0, 240), name=name)
    test = dataclasses.replace(synthetic_tabular(1, 120), name=name)
    return train, test


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(T, "load_splits", _tiny_splits)
    return ["--set", "datasets=adult", "--set", "methods=dp_ntk_paper,dp_ntk",
            "--set", "iterations=2", "--set", "classifiers=gaussian_nb,decision_tree",
            "--set", "n_synthetic=200", "--set", "epsilons=1,10"]  # fmt: skip


def _stub_release(train, recipe, eps, seed, method, n, plain=False):
    """A stand-in release: the first ``n`` training rows with noise of scale ``0.1 / eps``
    on the numeric values (so a larger epsilon is closer), clipped to [0, 1]."""
    rng = np.random.default_rng(seed)
    xs = train.x[:n].copy()
    num = train.schema.numeric_value_indices()
    xs[:, num] = np.clip(xs[:, num] + rng.normal(0, 0.1 / eps, (len(xs), len(num))), 0, 1)
    info = {"library": "stub", "relation": "replace-one", "settings": T.describe(recipe),
            "tuning": recipe["tuning"]}  # fmt: skip
    return [(method, xs, train.y[:n].copy(), info)]


def test_the_runner_measures_aggregates_and_reruns(tiny, tmp_path, monkeypatch):
    """Fast: the release is stubbed; rows, means, summary and rerun are the table's own."""
    monkeypatch.setattr(T, "_dp_ntk_release", _stub_release)
    recipe = T.TABULAR_RECIPE["adult"]
    monkeypatch.setitem(T.TABULAR_RECIPE, "adult", {**recipe, "tuning": "a test's recipe",
                                                    "fit": {**recipe["fit"], "d_code": 3}})  # fmt: skip
    out = tmp_path / "run"
    assert main(["run", "dp-ntk-tabular", "--seeds", "0", "1", "--out", str(out), *tiny]) == 0
    rows = json.loads((out / "dp-ntk-tabular-quick.json").read_text())["rows"]
    cell = {(r["method"], r["epsilon"], r["metric"], r["seed"]): r["value"]
            for r in rows if "seed" in r}  # fmt: skip
    for seed in (0, 1):  # the stub's noise shrinks with epsilon: so must the 1-way TV
        assert cell[("dp_ntk", 10.0, "tv1_mean", seed)] < cell[("dp_ntk", 1.0, "tv1_mean", seed)]
    means = {(r["method"], r["epsilon"], r["metric"]): r for r in rows if "seed" not in r}
    m = means[("dp_ntk", 1.0, "tv1_mean")]
    pair = [cell[("dp_ntk", 1.0, "tv1_mean", s)] for s in (0, 1)]
    assert m["value"] == pytest.approx(np.mean(pair))
    assert m["value_std"] == pytest.approx(np.std(pair, ddof=1))
    assert m["value_ci95"] == pytest.approx(12.706 * np.std(pair, ddof=1) / np.sqrt(2), rel=1e-3)
    ours = [r for r in rows if r.get("seed") == 0 and r["method"] == "dp_ntk"]
    paper = [r for r in rows if r.get("seed") == 0 and r["method"] == "dp_ntk_paper"]
    assert all(r["tuning"] == "a test's recipe" and "d_code=3" in r["settings"] for r in ours)
    assert all("d_code=11" in r["settings"] and "iterations=2" in r["settings"] for r in paper)
    summary = (out / "dp-ntk-tabular-quick-summary.md").read_text()
    assert summary.count("| adult |") == 6 and " ± " in summary
    again = tmp_path / "again"
    assert main(["rerun", str(out / "dp-ntk-tabular-quick.json"), "--seeds", "1",
                 "--out", str(again)]) == 0  # fmt: skip


@pytest.mark.slow
def test_the_table_runs_end_to_end_and_reruns(tiny, tmp_path):
    """Slow (about 50 s: the DP-NTK fits compile): real releases, two iterations each."""
    out = tmp_path / "run"
    assert main(["run", "dp-ntk-tabular", "--seeds", "0", "--out", str(out), *tiny]) == 0
    payload = json.loads((out / "dp-ntk-tabular-quick.json").read_text())
    rows = payload["rows"]
    per_seed = [r for r in rows if "seed" in r]
    methods = {r["method"] for r in per_seed}
    assert methods == {"real", "real_test", "dp_ntk_paper", "dp_ntk"}
    got = {(r["method"], r["epsilon"], r["metric"]) for r in per_seed}
    for method in ("dp_ntk_paper", "dp_ntk"):
        for eps in (1.0, 10.0):
            for metric in ("tv1_mean", "tv2_mean", "max_bound_excess_pp", "accuracy", "roc_auc"):
                assert (method, eps, metric) in got
    real = {r["metric"]: r["value"] for r in per_seed if r["method"] == "real"}
    assert real["tv1_mean"] == 0.0 and real["max_bound_excess_pp"] == 0.0
    assert 0.5 < real["accuracy"] <= 1.0
    release = [r for r in per_seed if r["method"] == "dp_ntk"]
    assert all(r["relation"] == "replace-one" and "iterations=2" in r["settings"] for r in release)
    assert all(0 < r["value"] <= 1 for r in release if r["metric"] == "tv1_mean")
    means = [r for r in rows if "seed" not in r]
    assert means and all(r["value_std"] == 0.0 and math.isnan(r["value_ci95"]) for r in means)
    assert (out / "dp-ntk-tabular-quick-summary.md").read_text().count("| adult |") == 6
    again = tmp_path / "again"
    assert main(["rerun", str(out / "dp-ntk-tabular-quick.json"), "--out", str(again)]) == 0


def test_the_recipe_starts_as_the_paper_settings():
    for profile in ("quick", "paper"):
        ctx = RunContext(profile, (0,), None, None, {})  # type: ignore[arg-type]
        for name in T.DATASETS:
            ours, paper = T.TABULAR_RECIPE[name], T.paper_recipe(name)
            assert set(ours) == set(paper)
            # the settings that decide the release are the paper's until the recipe is tuned
            if ours["tuning"] == "none yet (= paper)":
                mine, theirs = T.resolve_recipe(ours, ctx), T.resolve_recipe(paper, ctx)
                assert {**mine, "tuning": ""} == {**theirs, "tuning": ""}
    quick = T.resolve_recipe(T.paper_recipe("cervical"), RunContext("quick", (0,), None, None, {}))  # type: ignore[arg-type]
    assert quick["net"] == ("cnn_2l", 30, 200) and quick["fit"]["iterations"] == 100


def test_a_method_that_cannot_run_is_a_row_that_says_why(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_snsynth_release", lambda *a: (_ for _ in ()).throw(
        ModuleNotFoundError("no snsynth here", name="snsynth")))  # fmt: skip
    options = {"methods": "mst,aim", "epsilons": "1", "datasets": "adult", "classifiers": "lda"}
    ctx = RunContext("quick", (0,), None, tmp_path, options)
    rows = [r for r in T.run(ctx) if r.get("method") in ("mst", "aim") and "seed" in r]
    status = {r["method"]: r["status"] for r in rows}
    assert status == {"mst": "missing snsynth", "aim": T.AIM_SKIPPED}
    assert all(math.isnan(r["value"]) for r in rows)


def test_unknown_names_stop_the_run_before_anything_runs(monkeypatch):
    monkeypatch.setattr(T, "load_splits", lambda *a: pytest.fail("loaded data"))
    ctx = RunContext("quick", (0,), None, None, {"methods": "dp_ntk,gan"})  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match="gan"):
        T.run(ctx)


@pytest.mark.parametrize(
    ("options", "match"),
    [({"net": "fc_2l_9"}, "net must be one of"), ({"batch_size": "0"}, "batch_size"),
     ({"batch_size": "-5"}, "batch_size"), ({"batch_size": "nan"}, "batch_size"),
     ({"batch_size": "\u00b2"}, "batch_size"), ({"batch_size": "\u0663"}, "batch_size"),
     ({"rule": "mine"}, "rule must be one of"), ({"calibrate": "0"}, "calibrate"),
     ({"calibrate": "-1"}, "calibrate"), ({"calibrate": "inf"}, "calibrate"),
     ({"calibrate": "nan"}, "calibrate"), ({"calibrate": "\u0663"}, "calibrate"),
     ({"plain": "1"}, "only with calibrate"), ({"calibrate": "100", "plain": "yes"}, "plain"),
     ({"calibrate": "100", "plain": "0"}, "plain")],
)  # fmt: skip
def test_a_bad_network_or_batch_stops_the_run_before_any_data(monkeypatch, options, match):
    monkeypatch.setattr(T, "load_splits", lambda *a: pytest.fail("loaded data"))
    ctx = RunContext("quick", (0,), None, None, {"methods": "dp_ntk", **options})  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match=match):
        T.run(ctx)


def test_net_and_batch_size_set_the_privkernels_recipe_only():
    """The transfer rule's candidates: ``net`` / ``batch_size`` change the ``dp_ntk`` recipe,
    never the paper's settings; every named network is one the table can build."""
    options = {"net": "table_code64", "batch_size": "200", "iterations": "7"}
    ctx = RunContext("quick", (0,), None, None, options)  # type: ignore[arg-type]
    ours = T.resolve_recipe(T.TABULAR_RECIPE["adult"], ctx, own=True)
    paper = T.resolve_recipe(T.paper_recipe("adult"), ctx)
    assert ours["net"] == ("table_code", 64) and ours["fit"]["batch_size"] == 200
    assert ours["fit"]["iterations"] == paper["fit"]["iterations"] == 7
    assert paper["net"] == T.TABULAR_SETTINGS["adult"]["net"]
    assert paper["fit"]["batch_size"] == T.TABULAR_SETTINGS["adult"]["batch_size"]
    assert T.TABULAR_RECIPE["adult"]["net"] == ("table_default",)  # the module's dict kept
    assert ours["tuning"] == T.COMMAND_TUNING and paper["tuning"].startswith("paper")
    ruled = RunContext("quick", (0,), None, None, {**options, "rule": "adult-transfer"})  # type: ignore[arg-type]
    assert T.resolve_recipe(T.TABULAR_RECIPE["adult"], ruled, own=True)["tuning"].startswith(
        "public data (intrusion"
    )
    plain = RunContext("quick", (0,), None, None, {"iterations": "7"})  # type: ignore[arg-type]
    assert T.resolve_recipe(T.TABULAR_RECIPE["adult"], plain, own=True)["tuning"] == (
        T.TABLE_DEFAULT_TUNING
    )
    train, _ = _tiny_splits(ctx, "adult")
    n_numeric = len(train.schema.numeric_value_indices())
    for name, spec in T.NETS.items():
        net = T._recipe_network(spec, train)
        if name.startswith("table_"):
            bins = 64 if name == "table_code64" else 16
            assert net.bins == bins and len(net.numeric) == n_numeric, name
            assert net.indicators is (name == "table_indicators"), name


def test_classifiers_none_measures_the_marginals_alone(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_dp_ntk_release", _stub_release)
    args = [a if a != "classifiers=gaussian_nb,decision_tree" else "classifiers=none" for a in tiny]
    out = tmp_path / "run"
    assert main(["run", "dp-ntk-tabular", "--seeds", "0", "--out", str(out), *args]) == 0
    rows = json.loads((out / "dp-ntk-tabular-quick.json").read_text())["rows"]
    metrics = {r["metric"] for r in rows}
    assert metrics == set(T.MARGINAL_METRICS)


def test_calibrate_changes_the_sampling_of_the_privkernels_recipe_only(tiny, tmp_path):
    """``calibrate=P``: the ``dp_ntk`` rows are drawn from tilted pools and say so (settings,
    per-class effective pool share and misfit); the uncalibrated settings text is unchanged."""
    options = {"calibrate": "100", "rule": "adult-calibrate"}
    ctx = RunContext("quick", (0,), None, None, options)  # type: ignore[arg-type]
    ours = T.resolve_recipe(T.TABULAR_RECIPE["adult"], ctx, own=True)
    assert ours["calibrate"] == {"penalty": 100.0, "pool_factor": T.CALIBRATE_POOL}
    assert "calibrate" not in T.resolve_recipe(T.paper_recipe("adult"), ctx)
    assert "calibrated (tilt penalty 100" in T.describe(ours)
    plain = T.resolve_recipe(T.TABULAR_RECIPE["adult"], RunContext("quick", (0,), None, None, {}),  # type: ignore[arg-type]
                             own=True)  # fmt: skip
    assert "sampling" not in T.describe(plain)
    assert ours["tuning"] == T.RULES["adult-calibrate"]
    train, _ = _tiny_splits(ctx, "adult")
    ours["fit"]["iterations"] = 3
    ((method, xs, ys, info),) = T._dp_ntk_release(train, ours, 1.0, 0, "dp_ntk", 200)
    assert method == "dp_ntk" and xs.shape == (200, train.x.shape[1]) and ys.shape == (200,)
    assert len(info["calibration_ess"]) == train.n_classes
    assert all(a <= b + 1e-9 for a, b in zip(info["calibration_misfit_after"],
                                             info["calibration_misfit_before"], strict=True))  # fmt: skip


def test_plain_measures_the_same_release_sampled_both_ways(tiny, tmp_path, monkeypatch):
    """``plain=1`` (with ``calibrate``): one release, two samples; the ``dp_ntk_plain`` rows
    are `dp_ntk.sample` of that release with the same key, their settings say no
    calibration, and both methods share the release's seconds."""
    fits = []
    real_fit = dp_ntk.fit
    monkeypatch.setattr(dp_ntk, "fit", lambda *a, **k: fits.append(1) or real_fit(*a, **k))
    i = tiny.index("methods=dp_ntk_paper,dp_ntk")
    args = tiny[: i - 1] + tiny[i + 1 :]
    out = tmp_path / "run"
    assert main(["run", "dp-ntk-tabular", "--seeds", "0", "--out", str(out), *args,
                 "--set", "methods=dp_ntk", "--set", "epsilons=1", "--set", "calibrate=100",
                 "--set", "plain=1", "--set", "classifiers=none"]) == 0  # fmt: skip
    assert len(fits) == 1  # one release for both samples
    rows = [r for r in json.loads((out / "dp-ntk-tabular-quick.json").read_text())["rows"]
            if r.get("seed") == 0 and r["method"].startswith("dp_ntk")]  # fmt: skip
    by = {(r["method"], r["metric"]): r for r in rows}
    cal, bare = by[("dp_ntk", "tv1_mean")], by[("dp_ntk_plain", "tv1_mean")]
    assert "calibrated" in cal["settings"] and "sampling" not in bare["settings"]
    assert "calibration_ess" in cal and "calibration_ess" not in bare
    assert cal["seconds"] == bare["seconds"]
    assert {m for m, _ in by} == {"dp_ntk", "dp_ntk_plain"}
    summary = (out / "dp-ntk-tabular-quick-summary.md").read_text()
    assert "| dp_ntk_plain |" in summary
    alone = tmp_path / "alone"  # the same command without calibration: the plain rows again
    assert main(["run", "dp-ntk-tabular", "--seeds", "0", "--out", str(alone), *args,
                 "--set", "methods=dp_ntk", "--set", "epsilons=1",
                 "--set", "classifiers=none"]) == 0  # fmt: skip
    again = {r["metric"]: r["value"] for r in json.loads(
        (alone / "dp-ntk-tabular-quick.json").read_text())["rows"]
        if r.get("seed") == 0 and r["method"] == "dp_ntk"}  # fmt: skip
    assert again == {m: r["value"] for (k, m), r in by.items() if k == "dp_ntk_plain"}
