"""Every table run records the command that regenerates it; ``rerun`` repeats and compares."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import main
from benchmarks.registry import TABLES, RunContext, Table
from benchmarks.rerun import command_of, compare_rows, row_key

REPO = Path(__file__).resolve().parents[1]
NAME = "test-rerun-table"


def _fake_table(ctx: RunContext) -> list[dict[str, Any]]:
    """A cheap table: one row per seed whose value is a function of the seed and an option."""
    shift = float(ctx.options.get("shift", 0.0))
    slope = float(ctx.options.get("slope", 0.01))
    return [
        {"dataset": "toy", "epsilon": 1.0, "metric": "acc", "seed": s,
         "value": 0.5 + slope * s + shift, "seconds": 0.1}
        for s in ctx.seeds
    ]  # fmt: skip


@pytest.fixture
def fake_table(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(TABLES, NAME, Table(NAME, "toy", _fake_table, __name__, ("shift", "slope")))
    return NAME


def test_a_run_records_its_command_and_a_rerun_matches(fake_table, tmp_path):
    out = tmp_path / "run"
    assert main(["run", fake_table, "--seeds", "0", "1", "2", "--out", str(out),
                 "--set", "shift=0.25"]) == 0  # fmt: skip
    path = out / f"{fake_table}-quick.json"
    payload = json.loads(path.read_text())
    command = payload["provenance"]["command"]
    assert command == (
        f"python -m benchmarks run {fake_table} --profile quick --seeds 0 1 2 --set shift=0.25"
    )
    assert payload["rerun"]["options"] == {"shift": "0.25"}
    assert len(payload["provenance"]["git_commit"] or "") == 40
    assert payload["provenance"]["versions"]["jax"]
    assert f"Command: `{command}`" in path.with_suffix(".md").read_text()
    assert main(["rerun", str(path), "--seeds", "0", "--out", str(tmp_path / "again")]) == 0


def test_a_rerun_that_differs_fails(fake_table, tmp_path):
    out = tmp_path / "run"
    main(["run", fake_table, "--seeds", "0", "1", "2", "--out", str(out), "--set", "slope=0"])
    path = out / f"{fake_table}-quick.json"
    payload = json.loads(path.read_text())
    payload["rows"][0]["value"] += 0.05  # the other seeds agree exactly: tolerance is atol
    path.write_text(json.dumps(payload))
    assert main(["rerun", str(path), "--seeds", "0", "--out", str(tmp_path / "again")]) == 1
    assert main(["rerun", str(path), "--seeds", "1", "--out", str(tmp_path / "again")]) == 0


def test_a_file_without_a_rerun_block_is_refused(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"rows": [{"value": 1.0}]}))
    with pytest.raises(SystemExit, match="records no rerun block"):
        main(["rerun", str(path)])


def test_compare_rows_uses_the_seed_spread_and_value_std():
    recorded = [{"metric": "acc", "seed": s, "value": v} for s, v in enumerate((0.5, 0.6, 0.7))]
    ok_rows, ok = compare_rows(recorded, [{"metric": "acc", "seed": 0, "value": 0.7}], [0])
    assert ok and ok_rows[0]["tolerance"] == pytest.approx(3 * 0.0707, abs=1e-3)  # std of 0.6, 0.7
    _, ok = compare_rows(recorded, [{"metric": "acc", "seed": 0, "value": 0.85}], [0])
    assert not ok
    mean = [{"metric": "acc", "value": 0.6, "value_std": 0.01}]
    assert compare_rows(mean, [{"metric": "acc", "value": 0.62}], [0])[1]
    assert not compare_rows(mean, [{"metric": "acc", "value": 0.65}], [0])[1]
    assert not compare_rows(mean, [], [0])[1]  # a missing row fails
    assert row_key({"a": 1, "value": 0.5, "epsilon": 1.0}) == row_key({"a": 1, "epsilon": 1.0})
    # per-seed means are a measurement too; a list of ints or names still identifies
    assert row_key({"a": 1, "seed_values": [0.7, 0.8]}) == row_key({"a": 1, "seed_values": [0.6]})
    assert row_key({"a": 1, "b": [1, 2]}) != row_key({"a": 1, "b": [1, 3]})


def test_rows_that_differ_in_a_float_setting_are_matched_to_their_own_rerun():
    """Table 4's rows differ only in ``corrupt_fraction`` (and other tables' in an ``hp_*``
    float): each is compared with its own rerun row, not with whichever came last."""
    recorded = [
        {"metric": "acc", "corrupt_fraction": c, "hp_lr": 0.1, "seed": s, "value": v + s / 100}
        for c, v in ((0.0, 0.90), (0.05, 0.80)) for s in range(3)
    ]  # fmt: skip
    rerun = [dict(r) for r in recorded if r["seed"] == 0]
    rows, ok = compare_rows(recorded, rerun, [0])
    assert ok and [r["rerun"] for r in rows] == [r["recorded"] for r in rows] == [0.90, 0.80]
    swapped = [{**rerun[0], "value": 0.80}, {**rerun[1], "value": 0.90}]
    assert not compare_rows(recorded, swapped, [0])[1]  # 0.1 apart, spread 0.01
    assert row_key({"hp_lr": 0.1}) != row_key({"hp_lr": 0.03})
    twins = [{"metric": "acc", "seed": 0, "value": 0.9}, {"metric": "acc", "seed": 0, "value": 0.8}]
    with pytest.raises(SystemExit, match="share every identifying field"):
        compare_rows(twins, twins[:1], [0])
    with pytest.raises(SystemExit, match="rerun rows share"):
        compare_rows(twins[:1], twins, [0])
    # seedless means that differ only in a field a subset rerun leaves out (``k``)
    means = [
        {"metric": "acc", "k": k, "value": v, "seed_values": [v]} for k, v in ((1, 0.7), (5, 0.9))
    ]
    with pytest.raises(SystemExit, match="share every identifying field"):
        compare_rows(means, means, [0], recorded_seeds=[0, 1])


def test_a_mean_over_seeds_reruns_for_a_subset_of_its_seeds():
    """A row averaged over the file's seeds with ``seed_values`` is compared, for a rerun of
    some of those seeds, with their recorded values (``runs`` differs and is not matched)."""
    recorded = [{"metric": "acc", "runs": 4, "value": 0.705, "seed_values": [0.70, 0.71]}]
    rerun = [{"metric": "acc", "runs": 2, "value": 0.70, "seed_values": [0.70]}]
    rows, ok = compare_rows(recorded, rerun, [0], recorded_seeds=[0, 1])
    assert ok and rows[0]["recorded"] == pytest.approx(0.70)
    far = [{**rerun[0], "value": 0.75}]  # 3 x std(0.70, 0.71) = 0.021
    assert not compare_rows(recorded, far, [0], recorded_seeds=[0, 1])[1]
    # without the file's seed list (or without seed_values) the old rule applies: no match
    assert not compare_rows(recorded, rerun, [0])[1]
    assert not compare_rows(recorded, rerun, [2], recorded_seeds=[0, 1])[1]


def test_command_of_quotes_options():
    spec = {"table": "t", "profile": "paper", "seeds": [1], "options": {"datasets": "a b"}}
    assert (
        command_of(spec)
        == "python -m benchmarks run t --profile paper --seeds 1 --set 'datasets=a b'"
    )


@pytest.mark.slow
def test_the_committed_intrusion_file_reruns_within_its_seed_spread(tmp_path):
    """The committed DP-NTK Table 4 intrusion file (three seeds, a few seconds a seed)
    re-runs for seed 0 within its seed spread."""
    path = REPO / "benchmarks" / "results" / "dp-ntk-table4-quick-intrusion-3seeds.json"
    if not os.environ.get("PRIVKERNELS_DATA"):
        pytest.fail("set PRIVKERNELS_DATA to the shared data directory (intrusion is needed)")
    assert main(["rerun", str(path), "--seeds", "0", "--out", str(tmp_path)]) == 0


def _part(fake_table: str, out: Path, seeds: list[str], *options: str) -> Path:
    """One per-seed run's file, marked as run on committed code (the suite may run in a
    working tree with edits; the merge refuses parts that did not)."""
    sets = [a for o in options for a in ("--set", o)]
    assert main(["run", fake_table, "--seeds", *seeds, "--out", str(out), *sets]) == 0
    path = out / f"{fake_table}-quick.json"
    payload = json.loads(path.read_text())
    payload["provenance"]["git_dirty"] = False
    path.write_text(json.dumps(payload))
    return path


def test_merge_joins_per_seed_runs_into_the_one_process_file(fake_table, tmp_path):
    one = _part(fake_table, tmp_path / "one", ["0", "1", "2"], "shift=0.25")
    parts = [_part(fake_table, tmp_path / f"s{s}", [s], "shift=0.25") for s in ("2", "0", "1")]
    assert main(["merge", str(tmp_path / "joined"), *map(str, parts)]) == 0
    joined = json.loads((tmp_path / "joined" / f"{fake_table}-quick.json").read_text())
    expected = json.loads(one.read_text())
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in expected["rows"]]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in joined["rows"]] == strip
    assert joined["provenance"]["command"] == expected["provenance"]["command"]
    assert joined["rerun"] == expected["rerun"]
    assert len(joined["provenance"]["assembled_from"]) == 3
    assert "benchmarks merge" in joined["provenance"]["assembled_by"]
    md = (tmp_path / "joined" / f"{fake_table}-quick.md").read_text()
    assert "assembled_by" in md and "--seeds 1 --set shift=0.25" in md
    path = tmp_path / "joined" / f"{fake_table}-quick.json"
    assert main(["rerun", str(path), "--seeds", "1", "--out", str(tmp_path / "again")]) == 0


def test_merge_calls_the_tables_after_merge_hook_with_the_joined_rows(
    fake_table, tmp_path, monkeypatch
):
    """A table module's ``after_merge(out, rows, spec)`` (a summary its run also writes) is
    called once, on the joined file's rows and rerun block; a table without one gets nothing."""
    parts = [_part(fake_table, tmp_path / f"s{s}", [s], "slope=0") for s in ("1", "0")]
    calls = []

    def hook(out, rows, spec):
        calls.append((Path(out), [r["seed"] for r in rows], spec["seeds"]))
        return Path(out) / "summary.md"

    assert main(["merge", str(tmp_path / "plain"), *map(str, parts)]) == 0 and not calls
    monkeypatch.setattr(sys.modules[__name__], "after_merge", hook, raising=False)
    assert main(["merge", str(tmp_path / "hooked"), *map(str, parts)]) == 0
    assert calls == [(tmp_path / "hooked", [0, 1], [0, 1])]


def test_merge_refuses_parts_of_different_runs(fake_table, tmp_path):
    a = _part(fake_table, tmp_path / "a", ["0"], "shift=0.25")
    b = _part(fake_table, tmp_path / "b", ["1"], "shift=0.5")
    c = _part(fake_table, tmp_path / "c", ["0"], "shift=0.25")
    with pytest.raises(SystemExit, match="options differs"):
        main(["merge", str(tmp_path / "j"), str(a), str(b)])
    with pytest.raises(SystemExit, match="share seeds"):
        main(["merge", str(tmp_path / "j"), str(a), str(c)])
    d = _part(fake_table, tmp_path / "d", ["1"], "shift=0.25")
    _edit(d, lambda p: p["provenance"].update(git_dirty=True))
    with pytest.raises(SystemExit, match="uncommitted"):
        main(["merge", str(tmp_path / "j"), str(a), str(d)])
    with pytest.raises(SystemExit, match="at least two"):
        main(["merge", str(tmp_path / "j"), str(a)])
    assert not (tmp_path / "j").exists()


def _edit(path: Path, change: Any) -> Path:
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))
    return path


def test_merge_refuses_inconsistent_averaged_or_merged_parts(fake_table, tmp_path):
    a = _part(fake_table, tmp_path / "a", ["0"])
    b = _part(fake_table, tmp_path / "b", ["1"])
    j = str(tmp_path / "j")
    bad = {
        "rerun block disagree": lambda p: p["rerun"].update(seeds=[2]),
        "rows' seeds": lambda p: p["rows"][0].update(seed=0),
        "averages over seeds": lambda p: p["rows"][0].pop("seed"),
        "whose runs": lambda p: p["provenance"].update(assembled_by="x"),
        "another machine": lambda p: p["machine"].update(cpu_count=64),
    }
    for message, change in bad.items():
        c = tmp_path / "c.json"
        c.write_text(b.read_text())
        with pytest.raises(SystemExit, match=message):
            main(["merge", j, str(a), str(_edit(c, change))])
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read"):
        main(["merge", j, str(a), str(tmp_path / "junk.json")])
    with pytest.raises(SystemExit, match="holds one of the parts"):
        main(["merge", str(tmp_path / "a"), str(a), str(b)])
    assert main(["merge", j, str(a), str(b)]) == 0
    with pytest.raises(SystemExit, match="pass --force"):
        main(["merge", j, str(a), str(b)])
    assert main(["merge", j, str(a), str(b), "--force"]) == 0


def _rename(payload: dict[str, Any], table: str, profile: str) -> None:
    """Give a part another table and profile, its command following (as a crafted file would)."""
    payload["rerun"].update(table=table, profile=profile)
    payload["table"] = f"{table}-{profile}"
    payload["provenance"]["command"] = command_of(payload["rerun"])


def test_merge_refuses_crafted_names_and_writes_nothing_it_cannot_finish(
    fake_table, tmp_path, monkeypatch
):
    """Table and profile names with path parts, a file name that is not the run's, an
    unregistered table, and rows the table's ``after_merge`` cannot read: each ends in one
    line (SystemExit) and leaves the output folder unwritten."""
    a = _part(fake_table, tmp_path / "a", ["0"])
    b = _part(fake_table, tmp_path / "b", ["1"])
    j = tmp_path / "j"
    crafted = {
        "not one run's names": [
            lambda p: _rename(p, fake_table, "q/../../escaped"),
            lambda p: _rename(p, "../escaped", "quick"),
            lambda p: p.update(table="../escaped-json"),
        ],
        "unknown table": [lambda p: _rename(p, "no-such-table", "quick")],
    }
    for message, changes in crafted.items():
        for change in changes:
            parts = [_edit(Path(str(x)), change) for x in (a, b)]
            with pytest.raises(SystemExit, match=message):
                main(["merge", str(j), *map(str, parts)])
            for x in (a, b):  # back to the runs' own files
                _edit(x, lambda p: _rename(p, fake_table, "quick"))

    def broken(out, rows, spec):
        return rows[0]["no such field"]

    monkeypatch.setattr(sys.modules[__name__], "after_merge", broken, raising=False)
    with pytest.raises(SystemExit, match="do not fit"):
        main(["merge", str(j), str(a), str(b)])
    assert not j.exists() or not any(j.iterdir())


def test_a_merged_file_gains_seeds_as_the_runs_it_was_made_of(fake_table, tmp_path):
    """A merged file (seeds 0 and 2) merged with a new part (seed 1) gives the file the three
    parts give at once: its runs interleave with the new one by seed, each listed once."""
    a, b, c = (_part(fake_table, tmp_path / f"s{s}", [s], "shift=0.25") for s in "012")
    name = f"{fake_table}-quick.json"
    assert main(["merge", str(tmp_path / "ac"), str(a), str(c)]) == 0
    assert main(["merge", str(tmp_path / "again"), str(tmp_path / "ac" / name), str(b)]) == 0
    assert main(["merge", str(tmp_path / "once"), str(a), str(b), str(c)]) == 0
    again, once = (json.loads((tmp_path / d / name).read_text()) for d in ("again", "once"))
    assert again["rows"] == once["rows"] and again["rerun"] == once["rerun"]
    assert again["provenance"]["command"] == once["provenance"]["command"]
    runs, expected = (f["provenance"]["assembled_from"] for f in (again, once))
    assert [r["command"] for r in runs] == [r["command"] for r in expected]
    assert [("merged_by" in r) for r in runs] == [True, False, True]
    assert again["created"] == once["created"]
    with pytest.raises(SystemExit, match="share seeds"):
        main(["merge", str(tmp_path / "x"), str(tmp_path / "again" / name), str(c)])


def test_a_merged_part_whose_runs_do_not_make_it_up_is_refused(fake_table, tmp_path):
    """Tampered ``assembled_from`` lists (a run dropped, a seedless or unreadable command, a
    run without a time) and a part without a machine block end in one line, never a
    traceback and never a file."""
    a, b, c = (_part(fake_table, tmp_path / f"s{s}", [s], "shift=0.25") for s in "012")
    merged = tmp_path / "ab" / f"{fake_table}-quick.json"
    assert main(["merge", str(merged.parent), str(a), str(b)]) == 0
    seedless = "python -m benchmarks run t --seeds --set shift=0.25"

    def runs(change: Any) -> Any:
        return lambda p: change(p["provenance"]["assembled_from"])

    bad = {
        "dropped": runs(lambda r: r.pop()),
        "seedless": runs(lambda r: r.append({"command": seedless, "created": "2020"})),
        "unreadable": runs(lambda r: r[0].update(command=r[0]["command"] + " '")),
        "odd digit": runs(
            lambda r: r[0].update(command=r[0]["command"].replace("--seeds 0", "--seeds \u00b2"))
        ),
        "timeless": runs(lambda r: r[0].pop("created")),
    }
    for label, change in bad.items():
        copy = tmp_path / f"{label}.json"
        copy.write_text(merged.read_text())
        with pytest.raises(SystemExit, match="whose runs"):
            main(["merge", str(tmp_path / "x"), str(_edit(copy, change)), str(c)])
    copy = tmp_path / "seeds.json"
    copy.write_text(merged.read_text())
    with pytest.raises(SystemExit, match="disagree"):
        main(
            [
                "merge",
                str(tmp_path / "x"),
                str(_edit(copy, lambda p: p["rerun"].update(seeds=3))),
                str(c),
            ]
        )
    with pytest.raises(SystemExit, match="no machine block"):
        main(["merge", str(tmp_path / "x"), str(a), str(_edit(c, lambda p: p.pop("machine")))])
    assert not (tmp_path / "x").exists()
