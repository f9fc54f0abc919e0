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


def test_settings_take_every_candidate_of_the_round_and_refuse_unknown_ones(tmp_path):
    s = L.settings(_ctx(tmp_path))
    assert s["round"] == 1 and s["candidates"] == list(L.ROUNDS[1])
    assert s["epsilons"] == [1.0, 10.0]
    assert L.settings(_ctx(tmp_path, candidates="lenet"))["candidates"] == ["lenet"]
    two = L.settings(_ctx(tmp_path, round="2"))
    assert (two["round"], two["candidates"]) == (2, ["default", "capacity", "long"])
    for bad in ({"candidates": "lenet,resnet"}, {"candidates": ","}, {"epsilons": "0"},
                {"round": "3"}, {"round": "0"}, {"round": "two"},
                {"round": "2", "candidates": "lenet"}):  # fmt: skip
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


def test_round_one_keeps_its_rows_and_later_rounds_score_on_fresh_ones():
    """Round 1's split is the one its results were made with (the first block of the
    seed-54 permutation); round 2 holds out the next block, disjoint from round 1's."""
    perm = np.random.default_rng(54).permutation(60_000)
    _, val1 = L.split(60_000, 1)
    fit2, val2 = L.split(60_000, 2)
    assert np.array_equal(val1, np.sort(perm[:10_000]))
    assert np.array_equal(val2, np.sort(perm[10_000:20_000]))
    assert not set(val1) & set(val2) and set(val1) <= set(fit2)
    assert len(fit2) == 50_000 and len(set(fit2) | set(val2)) == 60_000
    with pytest.raises(ValueError):
        L.split(600, 7)


def test_each_round_has_a_committed_rule_and_its_own_key_tag():
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    assert set(L.RULES) == set(L.ROUNDS)
    for name in L.RULES.values():
        assert "before" in (results / name).read_text().splitlines()[0]
    assert L.key_tag(1) == L.TABLE and len({L.key_tag(r) for r in L.ROUNDS}) == len(L.ROUNDS)
    assert all(images.TABLE != L.key_tag(r) for r in L.ROUNDS)


def test_two_caps_that_leave_as_many_rows_never_share_a_noise_key():
    """helper-72: max_train 59 and 60 both leave 50 rows to release from (different rows),
    so the cap is in the key's tags; a full run (no cap) keeps round 1's keys."""
    fits = {m: len(L.split(m)[0]) for m in (59, 60, 59_999, 60_000)}
    assert fits[59] == fits[60] and fits[59_999] == fits[60_000]
    tags = {L.key_tag(1, m) for m in (None, 59, 60, 59_999)}
    assert len(tags) == 4 and L.key_tag(1, None) == L.TABLE
    keys = {str(images.release_key(0, 1.0, t, "mnist")) for t in tags}
    assert len(keys) == 4


def test_smoke_options_are_recorded_and_a_full_run_records_none(tmp_path):
    assert L.settings(_ctx(tmp_path))["overrides"] == {}
    smoke = L.settings(_ctx(tmp_path, iterations="300", samples="100"))
    assert smoke["overrides"] == {"iterations": 300, "samples": 100}


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


def _rows(
    scores: dict[tuple[str, float], float], dataset: str = "mnist", rnd: int | None = None
) -> list[dict]:
    extra = {} if rnd is None else {"round": rnd}
    return [{"dataset": dataset, "candidate": c, "epsilon": e, "seed": 0, "value": v,
             "seconds": 60.0, **extra} for (c, e), v in scores.items()]  # fmt: skip


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
    lenet_in_round2 = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0,
                             ("lenet", 1.0): 99.0, ("lenet", 10.0): 99.0}, rnd=2)  # fmt: skip
    assert not L.decides(lenet_in_round2, "mnist")


def test_round_two_chooses_the_larger_gain_and_never_across_rounds():
    scores = {("default", 1.0): 80.0, ("default", 10.0): 80.0, ("capacity", 1.0): 81.5,
              ("capacity", 10.0): 81.5, ("long", 1.0): 82.0, ("long", 10.0): 83.0}  # fmt: skip
    rows = _rows(scores, rnd=2)
    assert L.decides(rows, "mnist") and L.choose(rows, "mnist") == "long"
    summary = L.summary_markdown(rows)
    assert "round 2;" in summary and "Choice for fashion_mnist: **long**" in summary
    # round 2's levers against round 1's default (other rows, other keys) decide nothing
    mixed = _rows({("default", 1.0): 80.0, ("default", 10.0): 80.0}, rnd=1) + [
        r for r in rows if r["candidate"] != "default"
    ]
    assert not L.decides(mixed, "mnist") and L.choose(mixed, "mnist") == "default"
    summary = L.summary_markdown(mixed)
    assert "round 1;" in summary and "round 2;" in summary and "**" not in summary


def test_partial_unbalanced_or_smoke_rows_decide_nothing():
    """helper-72: a run of some candidates, unequal seeds or smoke settings is no choice."""
    full = {("default", 1.0): 80.0, ("default", 10.0): 80.0, ("capacity", 1.0): 85.0,
            ("capacity", 10.0): 85.0, ("long", 1.0): 79.0, ("long", 10.0): 79.0}  # fmt: skip
    assert L.choose(_rows(full, rnd=2), "mnist") == "capacity"
    partial = {k: v for k, v in full.items() if k[0] != "long"}
    assert not L.decides(_rows(partial, rnd=2), "mnist")
    unbalanced = _rows(full, rnd=2) + [
        {**r, "seed": 1} for r in _rows(full, rnd=2) if r["candidate"] == "capacity"
    ]
    assert not L.decides(unbalanced, "mnist")
    smoke = [{**r, "overrides": {"samples": 10}} for r in _rows(full, rnd=2)]
    assert not L.decides(smoke, "mnist") and L.choose(smoke, "mnist") == "default"
    assert "No choice for fashion_mnist" in L.summary_markdown(smoke)


def test_a_gain_of_exactly_the_margin_passes_despite_float_rounding():
    """(86.16 - 84.37 + 86.06 - 85.85) / 2 is 1.00 but 0.99999999999999 in floats (helper-71)."""
    rows = _rows({("default", 1.0): 84.37, ("default", 10.0): 85.85,
                  ("lenet", 1.0): 86.16, ("lenet", 10.0): 86.06})  # fmt: skip
    assert L.choose(rows, "mnist") == "lenet"


def test_the_levers_feature_maps_have_distinct_shapes():
    """Candidates of a round at one epsilon share a noise key; the mechanism folds the
    embedding's shape into the noise, so two feature maps with one shape in one round would
    carry the same noise. Within a round, one network means one shape (one release)."""
    import jax

    from benchmarks.dp_ntk_tables import _network
    from privkernels import features

    for rnd, levers in L.ROUNDS.items():
        sizes, specs = {}, {}
        for name, over in levers.items():
            specs[name] = {**L.BASES[rnd], **over}["network"]
            params = features.init_params(jax.random.key(0), _network(specs[name], 10), (28, 28))
            sizes[name] = sum(p.size for p in jax.tree_util.tree_leaves(params))
        assert sizes["default"] == 636_010
        assert len(set(sizes.values())) == len(set(specs.values())), rnd
    assert L.ROUNDS[1]["lenet"]["network"] == ("lenet", None, None)
    assert {
        L.lever_recipe("mnist", n, {"round": 2, "iterations": None, "batch_size": None})["network"]
        for n in L.ROUNDS[2]
    } == {L.BASES[2]["network"]}


def test_round_two_levers_override_the_generator_side_only_and_smoke_options_win():
    s = {"round": 2, "iterations": None, "batch_size": None}
    base = L.BASES[2]
    cap, long_ = L.lever_recipe("mnist", "capacity", s), L.lever_recipe("mnist", "long", s)
    assert {k for k in base if cap[k] != base[k]} == {"d_code", "generator"}
    assert (cap["d_code"], cap["generator"]["hidden"]) == (32, (800,))
    assert {k for k in base if long_[k] != base[k]} == {"iterations"} and long_[
        "iterations"
    ] == 1000
    smoke = L.lever_recipe("mnist", "long", {**s, "iterations": 2, "batch_size": 50})
    assert (smoke["iterations"], smoke["batch_size"]) == (2, 50)


def test_candidates_key_with_this_tables_name_and_override_the_rounds_base(monkeypatch):
    """Keys carry ``dp-ntk-images-levers`` (never the table's own cells' keys); the round's
    base recipe (`BASES`) is the base, the lever its override."""
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
    assert "round" not in row and "overrides" not in row  # round 1's rows as first run
    assert calls["recipe"] == {**L.BASES[1], "network": ("lenet", None, None)}
    assert (row["for_dataset"], row["network"], row["value"], row["n_val"]) == (
        "mnist", "lenet", 77.0, 10,
    )  # fmt: skip
    (row2,) = L.candidate_rows("fashion_mnist", "long", 1.0, 0, d, {**s, "round": 2})
    assert calls["table"] == L.key_tag(2) and calls["recipe"]["iterations"] == 1000
    assert row2["round"] == 2 and row2["iterations"] == 1000


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
    assert all(r["overrides"] == {"max_train": 600, "iterations": 2, "batch_size": 100,
                                  "samples": 200, "cnn_steps": 3} for r in rows)  # fmt: skip
    summary = (tmp_path / f"{L.TABLE}-quick-summary.md").read_text()
    assert "No choice for fashion_mnist" in summary and not L.decides(rows, "mnist")


def test_round_two_candidates_share_one_release_and_differ_in_the_generator_only():
    """All of round 2's levers are on the fc_1l map: at one (seed, epsilon) they release the
    same noisy embedding, byte for byte, so the round costs one release per epsilon."""
    rng = np.random.default_rng(3)
    d = {"x": rng.random((60, 28, 28), dtype=np.float32), "y": np.arange(60) % 10, "c": 10}
    s = {"round": 2, "iterations": 2, "batch_size": 20}
    tag = L.key_tag(2)
    out = {n: images.release_and_train(0, "mnist", 1.0, d, L.lever_recipe("fashion_mnist", n, s),
                                       table=tag)[0] for n in ("default", "capacity")}  # fmt: skip
    a, b = (np.asarray(out[n].noisy_embedding) for n in ("default", "capacity"))
    assert a.shape == (636_010, 10) and np.array_equal(a, b)
    other = images.release_and_train(0, "mnist", 1.0, d, L.lever_recipe("fashion_mnist", "default", s),
                                     table=L.key_tag(1))[0]  # fmt: skip
    assert not np.allclose(np.asarray(other.noisy_embedding), a)


def test_round_one_rows_keep_the_fields_of_the_committed_files(monkeypatch):
    """helper-72: `benchmarks.rerun` keys rows on their non-float fields, so a round-1 row
    made now must carry exactly the fields of the committed round-1 files."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/results"
    (rec, *_) = json.loads((path / f"{L.TABLE}-mnist-quick.json").read_text())["rows"]
    res = SimpleNamespace(loss_history=[0.1],
                          report=SimpleNamespace(epsilon=1.0, neighbouring="replace-one"))  # fmt: skip
    monkeypatch.setattr(
        images, "release_and_train", lambda *a, **k: (res, images.Clock(), images.Clock())
    )
    monkeypatch.setattr(images, "draw_samples", lambda *a, table: (None, None, "balanced"))
    monkeypatch.setattr(images, "cnn_accuracy", lambda *a, table: 80.0)
    s = L.settings(_ctx(Path(".")))
    d = {"y": np.zeros(50), "yt": np.zeros(10)}
    (row,) = L.candidate_rows("mnist", "default", 1.0, 0, d, s)
    assert set(row) == set(rec)


def test_the_images_recipe_is_the_committed_rounds_choices_over_the_start():
    """`IMAGES_RECIPE` is what the committed, deciding runs of every round chose (each on
    the other dataset's public rows), applied in round order over the starting recipe; and
    every round's base is the starting recipe the committed rows were made with."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/results"
    short = {"mnist": "mnist", "fashion_mnist": "fmnist"}
    assert all(L.BASES[r] == images.START_RECIPE for r in L.ROUNDS)
    assert images.START_RECIPE["iterations"] == 300
    for public, target in L.PUBLIC_FOR.items():
        recipe = dict(images.START_RECIPE)
        for rnd in sorted(L.ROUNDS):
            tag = "" if rnd == 1 else f"-round{rnd}"
            rows = json.loads((path / f"{L.TABLE}{tag}-{short[public]}-quick.json").read_text())
            assert L.decides(rows["rows"], public), (public, rnd)
            recipe.update(L.ROUNDS[rnd][L.choose(rows["rows"], public)])
        strip = {k: v for k, v in images.IMAGES_RECIPE[target].items() if k != "tuning"}
        assert {k: v for k, v in recipe.items() if k != "tuning"} == strip, target
    assert images.IMAGES_RECIPE["fashion_mnist"]["iterations"] == 1000
    assert images.IMAGES_RECIPE["mnist"]["iterations"] == 300
