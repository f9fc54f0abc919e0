"""The command line's traps (issue #52, items 7 and 8): every argument is checked before
any data is read, ``report`` reads every file the commands write, labels keep their type,
every option shows its help and default, messages name flags, nothing is ignored silently.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privkernels import cli
from privkernels.cli import main
from privkernels.data import TabularSchema
from privkernels.data.schema import categorical, numeric
from privkernels.privacy import PrivacyLeakWarning


def forbid_noise(monkeypatch) -> None:
    """tests/privacy/_privacy_helpers.py's ``forbid_noise``: any noise raises ``NoiseDrawn``."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "privacy"))
    importlib.import_module("_privacy_helpers").forbid_noise(monkeypatch)


class DataRead(BaseException):
    """Raised by a sentinel when the CLI reads the data (a BaseException: nothing swallows it)."""


def _write_inputs(tmp_path: Path, n: int = 40) -> dict[str, str]:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.integers(18, 80, n), "smoker": rng.choice(["no", "yes"], n)})
    df["claim"] = np.where(df["age"] > 50, "high", "low")
    df.to_csv(tmp_path / "data.csv", index=False)
    TabularSchema.from_columns(
        "claims", [numeric("age", 18, 100, dtype="int"), categorical("smoker", ["no", "yes"])],
        label="claim", classes=["low", "high"],
    ).save(tmp_path / "schema.json")  # fmt: skip
    x = rng.normal(size=(n, 3))
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": (x[:, 0] > 0).astype(int)}).to_csv(
        tmp_path / "xy.csv", index=False
    )
    return {k: str(tmp_path / f) for k, f in
            (("data", "data.csv"), ("schema", "schema.json"), ("xy", "xy.csv"))}  # fmt: skip


def _synth(p: dict[str, str], out: str, *extra: str) -> list[str]:
    return ["synth", p["data"], "--schema", p["schema"], "--epsilon", "1", "--out", out, *extra]


def _distill(p: dict[str, str], out: str, *extra: str) -> list[str]:
    return ["distill", p["xy"], "--label", "y", "--epsilon", "1", "--out", out, *extra]


def _tune(*extra: str) -> tuple[str, ...]:
    return ("--classes", "0,1", "--neighbouring", "add-remove", "--sampling-rate", "0.5",
            "--batch-size", "10", *extra)  # fmt: skip


# (command builder, extra args, the flag the one-line refusal must name)
BAD_ARGS = [
    (_synth, ("--n", "-5"), "--n"),
    (_synth, ("--n", "0"), "--n"),
    (_synth, ("--iterations", "0"), "--iterations"),
    (_synth, ("--delta", "1"), "--delta"),
    (_synth, ("--delta", "0"), "--delta"),
    (_synth, ("--delta", "-0.1"), "--delta"),
    (_synth, ("--seed", "-1"), "--seed"),
    (_synth, ("--tune", "bogus=1,2"), "--tune"),
    (_synth, ("--model", "m.npz"), "--model"),
    (_distill, ("--epsilon", "0"), "--epsilon"),
    (_distill, ("--epsilon", "-1"), "--epsilon"),
    (_distill, ("--epsilon", "nan"), "--epsilon"),
    (_distill, ("--epsilon", "inf"), "--epsilon"),
    (_distill, ("--image-shape", "3,x"), "--image-shape"),
    (_distill, ("--image-shape", "0,3"), "--image-shape"),
    (_distill, ("--kernel", "rbf"), "--kernel"),
    (_distill, ("--kernel", "entk"), "--image-shape"),
    (_distill, ("--epochs", "0"), "--epochs"),
    (_distill, ("--support-per-class", "-2"), "--support-per-class"),
    (_distill, ("--batch-size", "0"), "--batch-size"),
    (_distill, ("--neighbouring", "add-remove", "--sampling-rate", "0"), "--sampling-rate"),
    (_distill, ("--neighbouring", "add-remove", "--sampling-rate", "1.5"), "--sampling-rate"),
    (_distill, ("--sampling-rate", "0.5"), "--sampling-rate"),
    (_distill, ("--classes", "0,0"), "--classes"),
    (_distill, _tune("--tune", "bogus=1,2"), "--tune"),
]


@pytest.mark.parametrize(("build", "extra", "flag"), BAD_ARGS,
                         ids=[f"{b.__name__[1:]}{' '.join(e)}" for b, e, _ in BAD_ARGS])  # fmt: skip
def test_every_argument_is_checked_before_the_data_is_read(
    tmp_path, monkeypatch, capsys, build, extra, flag
):
    p = _write_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()

    def read(*args, **kwargs):
        raise DataRead("the data was read before the arguments were checked")

    monkeypatch.setattr(cli, "read_csv", read)
    forbid_noise(monkeypatch)
    assert main(build(p, str(out / "o.csv"), *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("privkernels: error:"), err
    assert flag in err[0]
    assert not re.search(r"\b[a-z_]+=(\s|$)", err[0])  # no Python keyword (n=, epsilon=)
    assert list(out.iterdir()) == []  # nothing written


@pytest.mark.parametrize("where", ["missing_dir", "input", "schema"])
def test_an_output_path_is_checked_before_the_data_is_read(tmp_path, monkeypatch, capsys, where):
    p = _write_inputs(tmp_path)
    out = {"missing_dir": str(tmp_path / "nope" / "o.csv"), "input": p["data"],
           "schema": p["schema"]}[where]  # fmt: skip
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()}
    monkeypatch.setattr(cli, "read_csv", lambda *a, **k: (_ for _ in ()).throw(DataRead()))
    forbid_noise(monkeypatch)
    assert main(_synth(p, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0]
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()} == before


@pytest.mark.parametrize("extra", [("--epsilon", "1"), ("DATA",)])
def test_model_with_epsilon_or_data_is_refused(tmp_path, capsys, extra):
    p = _write_inputs(tmp_path)
    model = tmp_path / "m.model.npz"
    model.write_bytes(b"")  # never opened: the refusal comes first
    args = ["synth", "--model", str(model), "--out", str(tmp_path / "more.csv")]
    args += [p["data"]] if extra == ("DATA",) else list(extra)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--model" in err and ("--epsilon" in err or "DATA" in err) and "ignored" in err
    assert not (tmp_path / "more.csv").exists()


@pytest.mark.parametrize("what", ["schema", "model"])
def test_a_file_given_by_flag_that_is_not_one_is_named(tmp_path, monkeypatch, capsys, what):
    p = _write_inputs(tmp_path)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"columns": [{"name": "a"}]}) if what == "schema" else "{}")
    argv = (_synth(p, str(tmp_path / "o.csv"), "--schema", str(wrong)) if what == "schema"
            else ["synth", "--model", str(wrong), "--out", str(tmp_path / "o.csv")])  # fmt: skip
    monkeypatch.setattr(cli, "read_csv", lambda *a, **k: (_ for _ in ()).throw(DataRead()))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--{what}" in err[0] and "pickle" not in err[0]
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("command", ["synth", "distill"])
def test_one_row_is_refused_before_any_noise(tmp_path, monkeypatch, capsys, command):
    p = _write_inputs(tmp_path)
    for name in ("data", "xy"):
        df = pd.read_csv(p[name])
        df.iloc[:1].to_csv(p[name], index=False)
    forbid_noise(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    build = _synth if command == "synth" else _distill
    assert main(build(p, str(out / "o.csv"), "--quiet")) == 2
    err = capsys.readouterr().err
    assert "every fit needs at least 2 rows" in err
    assert list(out.iterdir()) == []


def test_extra_columns_and_missing_markers_are_said(tmp_path, halt_table_fit, capsys):
    """Columns outside the schema are named as dropped; '?' cells are said to be missing,
    in a PrivacyLeakWarning (column names only: no value, no count)."""
    p = _write_inputs(tmp_path)
    df = pd.read_csv(p["data"])
    df["ssn"] = np.arange(len(df))
    df["smoker"] = df["smoker"].astype(object)
    df.loc[3, "smoker"] = "?"
    df.to_csv(p["data"], index=False)

    # which columns hold a missing value is read from the records: a PrivacyLeakWarning
    with pytest.warns(PrivacyLeakWarning, match=r"\['smoker'\] hold '\?' or empty cells"):
        with pytest.raises(halt_table_fit):
            main(_synth(p, str(tmp_path / "o.csv"), "--quiet"))
    err = capsys.readouterr().err
    assert "['ssn']" in err and "dropped" in err


def test_distill_names_a_column_with_missing_cells(tmp_path, monkeypatch, capsys):
    p = _write_inputs(tmp_path)
    df = pd.read_csv(p["xy"])
    df[["b", "c"]] = df[["b", "c"]].astype(object)
    df.loc[2, "b"] = "?"
    df.loc[5, "c"] = "secret-value"
    df.to_csv(p["xy"], index=False)
    forbid_noise(monkeypatch)
    assert main(_distill(p, str(tmp_path / "s.npz"))) == 2
    err = capsys.readouterr().err
    assert "'b'" in err and "missing" in err and "secret-value" not in err
    df.loc[2, "b"] = 0.5
    df.to_csv(p["xy"], index=False)
    assert main(_distill(p, str(tmp_path / "s.npz"))) == 2
    err = capsys.readouterr().err
    assert "'c'" in err and "non-numeric" in err and "secret-value" not in err
    assert not (tmp_path / "s.npz").exists()


# ----------------------------------------------------------------------------- help


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action.choices, dict):
            return list(action.choices.values())
    return []


def _help_blocks(parser) -> dict[str, str]:
    """``{option: its help text}`` as ``--help`` prints it."""
    blocks: dict[str, str] = {}
    current = None
    for line in parser.format_help().splitlines():
        m = re.match(r"^  (-[-\w]+)", line)
        if m:
            current = m[1]
            blocks[current] = line
        elif current and line.startswith("      "):
            blocks[current] += " " + line.strip()
        else:
            current = None
    return blocks


def test_every_option_has_help_and_its_default():
    parser = cli._parser()
    bare = []
    for sub in _subparsers(parser):
        blocks = _help_blocks(sub)
        for action in sub._actions:
            name = action.option_strings[0] if action.option_strings else None
            if name in (None, "-h"):
                continue
            text = re.sub(r"\s+", " ", blocks.get(name, ""))
            if "(default:" not in text:
                bare.append(f"{sub.prog} {name}")
    assert bare == []
    for argv in (["--help"], ["synth", "--help"], ["distill", "--help"], ["report", "--help"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        assert "``" not in out.getvalue() and ":mod:" not in out.getvalue()


def test_version(capsys):
    """``--version`` prints the project's version (pyproject.toml's, which an installed
    copy's metadata repeats; a tree run from source, as on a lent GPU, has no metadata)."""
    assert main(["--version"]) == 0
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert capsys.readouterr().out.strip() == f"privkernels {project['project']['version']}"
    try:
        installed = importlib.metadata.version("privkernels")
    except importlib.metadata.PackageNotFoundError:
        return
    assert installed == project["project"]["version"]


def test_python_dash_m_privkernels_is_the_command():
    out = subprocess.run([sys.executable, "-m", "privkernels", "--version"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("privkernels ")


def test_the_cli_runs_from_a_checkout_without_package_metadata(monkeypatch, capsys):
    """Run from a source tree on PYTHONPATH (no installed distribution, as on a lent GPU
    machine), the CLI still parses: its version is the package's ``__version__``."""

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip().startswith("privkernels ")
    assert main(["report", "/no/such/file"]) == 2


# ----------------------------------------------------------------------------- report


def test_report_says_what_a_file_is_that_it_cannot_read(tmp_path, capsys):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not an archive")
    assert main(["report", str(junk)]) == 2
    err = capsys.readouterr().err
    assert "pickle" not in err and "not a file the privkernels commands write" in err
    bare = tmp_path / "xy.npz"
    np.savez(bare, x=np.zeros((2, 2)), y=np.zeros(2))
    assert main(["report", str(bare)]) == 2
    err = capsys.readouterr().err
    assert "pickle" not in err and "not a privkernels file" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    assert main(["report", str(other)]) == 2  # before: a KeyError traceback
    assert "not a privacy report" in capsys.readouterr().err
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n1,2\n")
    assert main(["report", str(rows)]) == 2
    err = capsys.readouterr().err
    assert "pickle" not in err and "rows.csv.privacy.json" in err


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """One synth and two distill runs (small, fast settings), their files and messages."""
    tmp = tmp_path_factory.mktemp("cli")
    p = _write_inputs(tmp, n=60)
    runs = {
        "synth": _synth(p, str(tmp / "syn.csv"), "--iterations", "2", "--quiet"),
        "distill": _distill(
            p, str(tmp / "sup.npz"), "--epochs", "1", "--support-per-class", "1", "--quiet"
        ),  # fmt: skip
        "distill_csv": _distill(
            p,
            str(tmp / "sup.csv"),
            "--epochs",
            "1",
            "--classes",
            "0,1",
            "--support-per-class",
            "1",
            "--quiet",
        ),  # fmt: skip
    }
    done = {}
    for name, argv in runs.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rc = main(argv)
        assert rc == 0, err.getvalue()
        done[name] = (out.getvalue(), [str(w.message) for w in caught
                                       if issubclass(w.category, PrivacyLeakWarning)])  # fmt: skip
    return tmp, p, done


@pytest.mark.slow
@pytest.mark.parametrize("name", ["syn.csv", "syn.csv.privacy.json", "syn.csv.model.npz",
                                  "sup.npz", "sup.npz.privacy.json", "sup.csv",
                                  "sup.csv.privacy.json", "schema.json"])  # fmt: skip
def test_report_reads_every_file_the_commands_write(released, capsys, name):
    tmp, _, _ = released
    assert main(["report", str(tmp / name)]) == 0
    captured = capsys.readouterr()
    if name == "schema.json":
        assert "no privacy report" in captured.out
        return
    assert "-DP under replace-one" in captured.out
    if name.startswith("syn"):  # the model beside the report was found and checked
        assert "no model beside" not in captured.err


@pytest.mark.slow
def test_distill_keeps_integer_labels(released):
    from privkernels.sklearn import load

    tmp, p, _ = released
    df = pd.read_csv(p["xy"])
    model = load(tmp / "sup.npz")
    assert model.classes_.dtype.kind == "i"
    assert 0.0 <= model.score(df[["a", "b", "c"]].to_numpy(), df["y"].to_numpy()) <= 1.0
    support = pd.read_csv(tmp / "sup.csv")
    assert support["y"].dtype.kind == "i"


@pytest.mark.slow
def test_the_leak_warning_names_the_flag(released):
    _, _, done = released
    out, leaks = done["distill"]  # no --classes: read from the data, with a warning
    assert leaks and all("--classes" in m and "classes=" not in m for m in leaks)
    assert "--classes" in out and "classes=" not in out  # the printed summary too
    out, leaks = done["distill_csv"]
    assert not leaks


def test_distill_keeps_string_labels(tmp_path, monkeypatch):
    """String labels stay strings and integer labels integers (checked up to the fit)."""
    p = _write_inputs(tmp_path)
    seen = []

    class Stop(BaseException):
        pass

    def fit(self, X, y):
        seen.append((np.asarray(y).dtype.kind, self.classes))
        raise Stop

    from privkernels.sklearn import DPKIPClassifier

    monkeypatch.setattr(DPKIPClassifier, "fit", fit)
    df = pd.read_csv(p["xy"])
    for labels, classes in ((df["y"], "0,1"), (df["y"].map({0: "u", 1: "v"}), "u,v")):
        df.assign(y=labels).to_csv(p["xy"], index=False)
        with pytest.raises(Stop):
            main(_distill(p, str(tmp_path / "s.npz"), "--classes", classes))
    assert seen == [("i", [0, 1]), ("U", ["u", "v"])]


def test_synth_warnings_name_what_a_cli_user_changes(tmp_path, monkeypatch):
    """A schema without classes: the fit reads the label range (`infer_n_classes`, a
    PrivacyLeakWarning); the CLI's wording asks for the schema's classes, not n_classes."""
    from privkernels._validation import infer_n_classes

    p = _write_inputs(tmp_path)

    class Stop(BaseException):
        pass

    def fit(key, table, schema, **kwargs):
        infer_n_classes(np.array([0, 1]), None)
        raise Stop

    monkeypatch.setattr(cli, "fit_table", fit)
    with pytest.warns(PrivacyLeakWarning) as rec, pytest.raises(Stop):
        main(_synth(p, str(tmp_path / "o.csv"), "--quiet"))
    texts = [str(w.message) for w in rec if issubclass(w.category, PrivacyLeakWarning)]
    assert texts and all("n_classes" not in t and '"classes"' in t for t in texts)


def test_report_json_prints_json_alone(tmp_path, capsys):
    """``report --json`` writes JSON alone on stdout for a schema and an empty ledger too
    (the description goes to stderr), so it can be piped to a JSON reader."""
    schema = Path(_write_inputs(tmp_path)["schema"])
    ledger = tmp_path / "ledger.json"
    assert main(["budget", "init", str(ledger), "--epsilon", "1", "--delta", "1e-5"]) == 0
    capsys.readouterr()
    for path in (schema, ledger):
        assert main(["report", str(path), "--json"]) == 0
        printed = capsys.readouterr()
        assert isinstance(json.loads(printed.out), dict) and printed.err
