"""The s62 attacks on the command line (repros in /work/adv9b/repro and /work/adv9/repro/r2):
each test names the finding it pins and fails on 4ad9dc4."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels import cli
from privkernels.cli import main
from privkernels.data.frames import read_csv
from privkernels.privacy import PrivacyLeakWarning, PrivacyReport
from privkernels.synth import load_table_synth


def _rows(n: int = 30, seed: int = 0) -> list[str]:
    """``n`` CSV rows ``a,b,lab`` (a, b in [0, 1); lab 'n' or 'y')."""
    rng = np.random.default_rng(seed)
    return [f"{rng.random():.3f},{rng.random():.3f},{'ny'[i % 2]}" for i in range(n)]


def _schema(tmp_path: Path, *, nullable: bool = False) -> str:
    """A public schema for ``a,b,lab`` (a nullable when asked)."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"name": "t", "label": "lab", "classes": ["n", "y"],
                                "source": "public", "columns": [
        {"name": "a", "kind": "numeric", "bounds": [0, 1], "nullable": nullable},
        {"name": "b", "kind": "numeric", "bounds": [0, 10]}]}))  # fmt: skip
    return str(path)


def _argv(command: str, data: Path, tmp_path: Path) -> list[str]:
    """The smallest run of ``command`` on ``data`` (outputs in tmp_path/out)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    if command == "schema":
        return ["schema", str(data), "--label", "lab", "--out", str(out / "o.json")]
    if command == "synth":
        return ["synth", str(data), "--schema", _schema(tmp_path), "--iterations", "1",
                "--epsilon", "1", "--quiet", "--out", str(out / "o.csv")]  # fmt: skip
    return ["distill", str(data), "--label", "lab", "--classes", "n,y", "--epochs", "1",
            "--batch-size", "8", "--epsilon", "1", "--quiet", "--out", str(out / "o.npz")]  # fmt: skip


def _refused(argv: list[str], tmp_path: Path, capsys) -> str:
    """Run ``argv``: a one-line refusal, exit 2, nothing written; its stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not list((tmp_path / "out").iterdir())
    return err


@pytest.mark.parametrize("command", ["distill", "synth", "schema"])
def test_a_csv_that_is_not_utf8_is_refused_without_its_bytes(
    tmp_path, monkeypatch, capsys, command
):
    """r2/b4: a Latin-1 'José' printed "'utf-8' codec can't decode byte 0xe9 in position
    299": a byte of a record and its offset."""
    rows = _rows()
    rows[20] = "0.5,0.5,Jos\xe9"
    data = tmp_path / "d.csv"
    data.write_bytes(("a,b,lab\n" + "\n".join(rows) + "\n").encode("latin-1"))
    forbid_noise(monkeypatch)
    err = _refused(_argv(command, data, tmp_path), tmp_path, capsys)
    assert "is not UTF-8 text" in err
    assert "0xe9" not in err and "position" not in err and "Jos" not in err


def test_a_field_over_the_csv_limit_is_a_one_line_refusal(tmp_path, monkeypatch, capsys):
    """r2/b4: a 200000-character field raised an uncaught ``_csv.Error`` (a traceback)."""
    rows = _rows()
    rows[5] = "0.5,0.5," + "x" * 200_000
    data = tmp_path / "d.csv"
    data.write_text("a,b,lab\n" + "\n".join(rows) + "\n")
    forbid_noise(monkeypatch)
    err = _refused(_argv("distill", data, tmp_path), tmp_path, capsys)
    assert "field size limit" in err and "xxx" not in err


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column_name(tmp_path):
    """r2/b4: a BOM stayed in the first header name (synth: "lacks column(s) ['a']")."""
    data = tmp_path / "d.csv"
    data.write_bytes(("\ufeffa,b,lab\n" + "\n".join(_rows()) + "\n").encode())
    assert list(read_csv(data)) == ["a", "b", "lab"]


@pytest.mark.parametrize("x", [
    np.where(np.arange(60).reshape(30, 2) == 9, "SECRET42", "1.5"),
    np.array([[b"SECRET42", b"1"]] * 30),
    np.ones((30, 2)) + 1j * np.arange(60).reshape(30, 2),
], ids=["str", "bytes", "complex"])  # fmt: skip
def test_an_npz_x_that_is_not_real_numbers_is_refused_without_a_value(
    tmp_path, monkeypatch, capsys, x
):
    """adv9b/b7: x holding 'SECRET42' printed "could not convert string to float:
    np.str_('SECRET42')"; a complex x was cast to float32 silently and released."""
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=np.arange(30) % 2)
    argv = ["distill", str(data), "--classes", "0,1", "--epochs", "1", "--batch-size", "8",
            "--epsilon", "1", "--quiet", "--out", str(tmp_path / "out" / "o.npz")]  # fmt: skip
    (tmp_path / "out").mkdir()
    forbid_noise(monkeypatch)
    err = _refused(argv, tmp_path, capsys)
    assert "DATA's x" in err and "SECRET" not in err


def test_rows_of_the_wrong_length_are_refused_without_row_numbers(tmp_path, monkeypatch, capsys):
    """adv9b/b3: "rows [43] do not have 3 fields": a truncated last line printed n + 2, and n
    is private under add-remove."""
    n = 41
    rng = np.random.default_rng(3)
    rows = [f"{rng.normal():.3f},{rng.normal():.3f},{i % 2}" for i in range(n)]
    data = tmp_path / "d.csv"
    data.write_text("a,b,y\n" + "\n".join(rows) + "\n0.1,0.")
    (tmp_path / "out").mkdir()
    argv = ["distill", str(data), "--label", "y", "--classes", "0,1", "--epsilon", "1",
            "--neighbouring", "add-remove", "--sampling-rate", "0.3", "--batch-size", "10",
            "--quiet", "--out", str(tmp_path / "out" / "o.npz")]  # fmt: skip
    forbid_noise(monkeypatch)
    err = _refused(argv, tmp_path, capsys)
    assert "some rows do not have 3 fields" in err
    assert str(n + 2) not in err and "[" not in err


def test_missing_markers_are_a_privacy_leak_warning(tmp_path, halt_table_fit, capsys):
    """adv9b/b4: synth printed "note: column(s) ['a'] hold '?' or empty cells" as a plain
    stderr line: a fact read from the private data without noise, unwarned."""
    rows = _rows()
    rows[5] = "?," + rows[5].split(",", 1)[1]
    data = tmp_path / "d.csv"
    data.write_text("a,b,lab\n" + "\n".join(rows) + "\n")

    with pytest.warns(PrivacyLeakWarning, match=r"\['a'\] hold '\?' or empty cells"):
        with pytest.raises(halt_table_fit):
            main(_argv("synth", data, tmp_path))
    assert "hold '?'" not in capsys.readouterr().err  # not also a plain line


@pytest.mark.slow
def test_a_nullable_schema_notes_the_missing_marker_read_whatever_the_data(tmp_path):
    """adv9b/b4: the report of a synth fit says that the CLI told its caller which columns
    hold missing values; the note hangs on the public schema (nullable), so two neighbouring
    tables (one '?' replaced by a number) get the same notes, in the report and the model."""
    rows = _rows()
    tables = {"full": rows, "with_q": [*rows[:5], "?," + rows[5].split(",", 1)[1], *rows[6:]]}
    notes = {}
    for name, table in tables.items():
        data, out = tmp_path / f"{name}.csv", tmp_path / f"{name}_syn.csv"
        data.write_text("a,b,lab\n" + "\n".join(table) + "\n")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["synth", str(data), "--schema", _schema(tmp_path, nullable=True),
                         "--iterations", "1", "--epsilon", "1", "--quiet", "--seed", "0",
                         "--out", str(out)]) == 0  # fmt: skip
        report = PrivacyReport.from_json(Path(f"{out}.privacy.json").read_text())
        assert cli.MISSING_NOTE in report.notes
        assert load_table_synth(f"{out}.model.npz").report.notes == report.notes
        notes[name] = report.notes
    assert notes["full"] == notes["with_q"]


@pytest.mark.parametrize("header", ["a,lab,lab", "a,b,b,lab"])
@pytest.mark.parametrize("command", ["distill", "synth"])
def test_a_repeated_header_name_is_refused(tmp_path, monkeypatch, capsys, header, command):
    """adv9b/c9, r2/c10: a header 'a,y,y' or 'a,b,b,lab' kept the last column of the name
    and dropped the other silently."""
    rng = np.random.default_rng(0)
    width = len(header.split(",")) - 1
    rows = [",".join([*(f"{rng.random():.3f}" for _ in range(width)), "ny"[i % 2]])
            for i in range(30)]  # fmt: skip
    data = tmp_path / "d.csv"
    data.write_text(header + "\n" + "\n".join(rows) + "\n")
    forbid_noise(monkeypatch)
    err = _refused(_argv(command, data, tmp_path), tmp_path, capsys)
    assert "header repeats a column name" in err


def test_a_repeated_header_name_is_refused_before_the_rows_are_read(tmp_path):
    """c9: the refusal says nothing of the rows (here of the wrong length)."""
    data = tmp_path / "d.csv"
    data.write_text("a,a\n1,2,3\n4\n")
    with pytest.raises(ValueError, match="header repeats a column name"):
        read_csv(data)


@pytest.mark.parametrize(("labels", "classes", "seen"), [
    (["1", "01"], None, ("U", ["01", "1"])),
    (["-3", "0", "7"], None, ("i", [-3, 0, 7])),
    (["7", "+7"], None, ("U", ["+7", "7"])),
    (["1", "2", "01"], "1,2", None),
], ids=["leading_zero", "canonical", "plus_sign", "classes_refused"])  # fmt: skip
def test_labels_are_integers_only_in_canonical_form(tmp_path, monkeypatch, capsys, labels,
                                                    classes, seen):  # fmt: skip
    """r2/c11: '1' and '01' were both read as 1: one class (refused as '1 class(es)'), or,
    with --classes 1,2, the '01' rows were fitted as class 1."""
    from privkernels.sklearn import DPKIPClassifier

    got = []

    class Stop(BaseException):
        pass

    def fit(self, X, y):
        got.append((np.asarray(y).dtype.kind, sorted(set(np.asarray(y).tolist()))))
        raise Stop

    monkeypatch.setattr(DPKIPClassifier, "fit", fit)
    rng = np.random.default_rng(0)
    rows = [f"{rng.random():.3f},{rng.random():.3f},{labels[i % len(labels)]}" for i in range(30)]
    data = tmp_path / "d.csv"
    data.write_text("a,b,lab\n" + "\n".join(rows) + "\n")
    argv = ["distill", str(data), "--label", "lab", "--epsilon", "1", "--quiet",
            "--out", str(tmp_path / "out" / "o.npz")]  # fmt: skip
    (tmp_path / "out").mkdir()
    if seen is None:
        err = _refused([*argv, "--classes", classes], tmp_path, capsys)
        assert "01" not in err
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Stop):
            main(argv)
    assert got == [seen]


def test_the_command_line_prints_no_traceback_for_a_long_field(tmp_path):
    """r2/b4 through ``python -m privkernels``: one line on stderr, exit 2."""
    rows = _rows()
    rows[3] = "0.5,0.5," + "x" * 200_000
    (tmp_path / "d.csv").write_text("a,b,lab\n" + "\n".join(rows) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "privkernels", "schema", "d.csv", "--label", "lab", "--out",
         "o.json"], capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o.json").exists()
