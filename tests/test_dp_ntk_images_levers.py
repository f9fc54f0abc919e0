"""``dp-ntk-images-levers`` (issue 54, item 2): public data only, a fixed choice rule."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import dp_ntk_images as images
from benchmarks import dp_ntk_images_levers as L
from benchmarks.registry import RunContext


def _ctx(tmp_path: Path, **options: str) -> RunContext:
    return RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)


def test_settings_take_every_candidate_and_refuse_unknown_ones(tmp_path):
    s = L.settings(_ctx(tmp_path))
    assert s["candidates"] == list(L.LEVERS) and s["epsilons"] == [1.0, 10.0]
    assert L.settings(_ctx(tmp_path, candidates="lenet"))["candidates"] == ["lenet"]
    for bad in ({"candidates": "lenet,resnet"}, {"candidates": ","}, {"epsilons": "0"}):
        with pytest.raises(SystemExit, match=f"^{L.TABLE}:"):
            L.settings(_ctx(tmp_path, **bad))


def test_the_split_is_disjoint_seeded_and_holds_out_at_most_a_sixth():
    fit, val = L.split(60_000)
    assert (len(fit), len(val)) == (50_000, L.VALIDATION)
    assert not set(fit) & set(val) and len(set(fit) | set(val)) == 60_000
    again = L.split(60_000)
    assert np.array_equal(fit, again[0]) and np.array_equal(val, again[1])
    small_fit, small_val = L.split(600)
    assert (len(small_fit), len(small_val)) == (500, 100)


def test_only_the_public_training_split_is_loaded(tmp_path, monkeypatch):
    """The lever table reads the public dataset's training images; no test set is loaded."""
    from privkernels import data

    seen: list[tuple[str, str]] = []

    def fake_load(name, data_dir=None, split="train"):
        seen.append((name, split))
        x = np.random.default_rng(0).random((120, 28, 28), dtype=np.float32)
        return SimpleNamespace(x=x, y=np.arange(120) % 10, n_classes=10)

    monkeypatch.setattr(data, "load", fake_load)
    monkeypatch.setattr(L, "resolve_data_dir", lambda d: tmp_path)
    d = L.load_public(_ctx(tmp_path), "mnist", L.settings(_ctx(tmp_path)))
    assert seen == [("mnist", "train")]
    assert (len(d["y"]), len(d["yt"])) == (100, 20)


def _rows(scores: dict[tuple[str, float], float], dataset: str = "mnist") -> list[dict]:
    return [{"dataset": dataset, "candidate": c, "epsilon": e, "seed": 0, "value": v,
             "seconds": 60.0} for (c, e), v in scores.items()]  # fmt: skip


@pytest.mark.parametrize(
    ("lenet", "chosen"),
    [
        ((82.0, 83.0), "lenet"),  # higher at both, +1.5 on the mean
        ((80.5, 82.3), "default"),  # higher at both, but +0.65 on the mean
        ((79.9, 85.0), "default"),  # +2.45 on the mean, but lower at eps 1
        ((80.0, 84.0), "default"),  # a tie at eps 1 is not higher
    ],
)
def test_choose_needs_a_gain_at_every_epsilon_and_the_margin_on_the_mean(lenet, chosen):
    rows = _rows({("default", 1.0): 80.0, ("default", 10.0): 81.5,
                  ("lenet", 1.0): lenet[0], ("lenet", 10.0): lenet[1]})  # fmt: skip
    assert L.choose(rows, "mnist") == chosen
    assert f"Choice for fashion_mnist: **{chosen}**" in L.summary_markdown(rows)


def test_choose_keeps_the_default_without_a_full_comparison():
    """Missing cells, one epsilon only, a NaN score or a name outside `LEVERS` decide nothing."""
    assert L.choose(_rows({("lenet", 1.0): 99.0, ("lenet", 10.0): 99.0}), "mnist") == "default"
    half = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0, ("lenet", 10.0): 99.0})
    assert L.choose(half, "mnist") == "default"
    assert L.choose(_rows({("default", 1.0): 80.0}), "fashion_mnist") == "default"
    one_eps = _rows({("default", 10.0): 80.0, ("lenet", 10.0): 99.0})
    assert L.choose(one_eps, "mnist") == "default" and not L.decides(one_eps, "mnist")
    assert "No choice for fashion_mnist" in L.summary_markdown(one_eps)
    extra = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0, ("default", 1e4): 80.0})
    assert not L.decides(extra, "mnist") and "Choice for" not in L.summary_markdown(extra)
    nan = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0,
                 ("lenet", 1.0): float("nan"), ("lenet", 10.0): 99.0})  # fmt: skip
    assert L.choose(nan, "mnist") == "default"
    alien = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0,
                   ("resnet", 1.0): 99.0, ("resnet", 10.0): 99.0})  # fmt: skip
    assert L.choose(alien, "mnist") == "default"


def test_a_gain_of_exactly_the_margin_passes_despite_float_rounding():
    """(86.16 - 84.37 + 86.06 - 85.85) / 2 is 1.00 but 0.99999999999999 in floats (helper-71)."""
    rows = _rows({("default", 1.0): 84.37, ("default", 10.0): 85.85,
                  ("lenet", 1.0): 86.16, ("lenet", 10.0): 86.06})  # fmt: skip
    assert L.choose(rows, "mnist") == "lenet"


def test_the_levers_feature_maps_have_distinct_shapes():
    """Candidates at one epsilon share a noise key; the mechanism folds the embedding's
    shape into the noise, so two levers with one shape would carry the same noise."""
    import jax

    from benchmarks.dp_ntk_tables import _network
    from privkernels import features

    sizes = {}
    for name, over in L.LEVERS.items():
        spec = {**images.IMAGES_RECIPE["mnist"], **over}["network"]
        params = features.init_params(jax.random.key(0), _network(spec, 10), (28, 28))
        sizes[name] = sum(p.size for p in jax.tree_util.tree_leaves(params))
    assert sizes == {"default": 636_010, "lenet": 61_706}
    assert len(set(sizes.values())) == len(L.LEVERS)


def test_candidates_key_with_this_tables_name_and_override_the_targets_recipe(monkeypatch):
    """Keys carry ``dp-ntk-images-levers`` (never the table's own cells' keys); the target's
    recipe is the base, the lever its override."""
    calls: dict[str, object] = {}

    def fake_train(seed, dataset, eps, d, recipe, table):
        calls.update(recipe=recipe, table=table, dataset=dataset)
        res = SimpleNamespace(loss_history=[0.5],
                              report=SimpleNamespace(epsilon=eps, neighbouring="replace-one"))  # fmt: skip
        return res, images.Clock(), images.Clock()

    monkeypatch.setattr(images, "release_and_train", fake_train)
    monkeypatch.setattr(images, "draw_samples", lambda *a, table: (None, None, "balanced"))
    monkeypatch.setattr(images, "cnn_accuracy", lambda *a, table: 77.0)
    s = L.settings(_ctx(Path(".")))
    d = {"y": np.zeros(50), "yt": np.zeros(10)}
    (row,) = L.candidate_rows("fashion_mnist", "lenet", 1.0, 0, d, s)
    assert calls["table"] == L.TABLE != images.TABLE and calls["dataset"] == "fashion_mnist"
    assert calls["recipe"] == {**images.IMAGES_RECIPE["mnist"], "network": ("lenet", None, None)}
    assert (row["for_dataset"], row["network"], row["value"], row["n_val"]) == (
        "mnist", "lenet", 77.0, 10,
    )  # fmt: skip


@pytest.mark.slow  # about 40 s: two candidates at two epsilons on 600 MNIST rows
def test_a_tiny_run_writes_rows_and_a_summary_with_the_choice(tmp_path, shared_data_dir):
    from benchmarks.__main__ import main

    opts = {"datasets": "mnist", "max_train": "600", "iterations": "2", "batch_size": "100",
            "samples": "200", "cnn_steps": "3"}  # fmt: skip
    argv = ["run", L.TABLE, "--out", str(tmp_path), "--data-dir", str(shared_data_dir)]
    assert main(argv + [a for k, v in opts.items() for a in ("--set", f"{k}={v}")]) == 0
    payload = json.loads((tmp_path / f"{L.TABLE}-quick.json").read_text())
    rows = payload["rows"]
    assert payload["rerun"]["options"] == opts
    assert sorted((r["candidate"], r["epsilon"]) for r in rows) == [
        ("default", 1.0), ("default", 10.0), ("lenet", 1.0), ("lenet", 10.0),
    ]  # fmt: skip
    for r in rows:
        assert (r["n_fit"], r["n_val"], r["for_dataset"]) == (500, 100, "fashion_mnist")
        assert 0.0 <= r["value"] <= 100.0 and r["report_epsilon"] == r["epsilon"]
    summary = (tmp_path / f"{L.TABLE}-quick-summary.md").read_text()
    assert f"Choice for fashion_mnist: **{L.choose(rows, 'mnist')}**" in summary
