"""Tables in and out: schema JSON, checks against the public schema, DataFrame synthesis, CLI."""

from __future__ import annotations

import json

import jax
import numpy as np
import pandas as pd
import pytest

from privkernels.cli import main
from privkernels.data.frames import decoded_table, infer_schema, read_csv, split_table, write_csv
from privkernels.data.schema import TabularSchema, categorical, numeric
from privkernels.privacy import PrivacyLeakWarning
from privkernels.synth import SCHEMA_INFERRED_NOTE, fit_table, load_table_synth


def _schema() -> TabularSchema:
    return TabularSchema.from_columns(
        "toy",
        [
            numeric("age", 17, 90, dtype="int"),
            numeric("hours", 0, 99, nullable=True),
            categorical("sex", ["F", "M"]),
            categorical("job", ["a", "b", "c"], nullable=True),
        ],
        label="income",
        classes=["<=50K", ">50K"],
    )


def _frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n)
    hours = rng.uniform(0, 99, n)
    hours[rng.random(n) < 0.1] = np.nan
    job = rng.choice(np.array(["a", "b", "c", None], dtype=object), n)
    income = np.where(age + rng.normal(0, 10, n) > 60, ">50K", "<=50K")
    sex = rng.choice(["F", "M"], n)
    return pd.DataFrame({"age": age, "hours": hours, "sex": sex, "job": job, "income": income})


def test_schema_json_roundtrip_and_label_as_column(tmp_path):
    s = _schema()
    assert TabularSchema.from_dict(s.to_dict()) == s
    s.save(tmp_path / "s.json")
    assert TabularSchema.load(tmp_path / "s.json") == s
    d = s.to_dict()  # the label may be listed as a categorical column instead of 'classes'
    d["columns"].append({"name": "income", "kind": "categorical", "categories": ["<=50K", ">50K"]})
    d.pop("classes")
    assert TabularSchema.from_dict(d).classes == ("<=50K", ">50K")
    with pytest.raises(ValueError, match="unknown schema key"):
        TabularSchema.from_dict({**s.to_dict(), "colums": []})
    with pytest.raises(ValueError, match="unknown key"):
        TabularSchema.from_dict(
            {"columns": [{"name": "a", "kind": "numeric", "bounds": [0, 1], "lo": 0}]}
        )


def test_split_table_refuses_what_the_schema_does_not_allow():
    s, df = _schema(), _frame(50)
    feats, y = split_table(df, s)
    assert set(y.tolist()) <= {0, 1} and feats["job"].dtype == object
    bad = df.copy()
    bad.loc[3, "age"] = 120  # above the public bound: an error, never a silent clip
    with pytest.raises(ValueError, match=r"age.*values outside the public bounds"):
        split_table(bad, s)
    bad = df.copy()
    bad.loc[0, "sex"] = "X"
    with pytest.raises(ValueError, match="sex.*outside the public category list") as err:
        split_table(bad, s)
    assert not any(ch.isdigit() for ch in str(err.value))  # no count or value from the data
    bad = df.copy()
    bad.loc[0, "sex"] = None
    with pytest.raises(ValueError, match="not declare it nullable"):
        split_table(bad, s)
    bad = df.copy()
    bad.loc[0, "income"] = "rich"
    with pytest.raises(ValueError, match="outside the public classes"):
        split_table(bad, s)
    with pytest.raises(ValueError, match="lacks column"):
        split_table(df.drop(columns="hours"), s)


def test_decoded_table_restores_dtypes_and_missing():
    s = _schema()
    feats, y = split_table(_frame(60), s)
    x, _ = s.encode(feats)
    out = decoded_table(x, y, s)
    assert out["age"].dtype == np.int64
    np.testing.assert_array_equal(out["age"], feats["age"].astype(np.int64))
    assert np.isnan(out["hours"]).sum() == np.isnan(feats["hours"]).sum()
    assert all(v is None for v in out["job"][feats["job"] == ""])
    assert set(out["income"].tolist()) <= {"<=50K", ">50K"}


def test_fit_table_dataframe_roundtrip_released_proportions(tmp_path):
    s, df = _schema(), _frame(400)
    m = fit_table(jax.random.key(0), df, s, epsilon=1.0, iterations=30, progress=False)
    assert m.report.private and m.report.epsilon == pytest.approx(1.0)
    assert len(m.report.mechanisms) == 2  # embedding + class proportions (released by default)
    syn = m.sample_df(jax.random.key(1), 300)
    assert list(syn.columns) == ["age", "hours", "sex", "job", "income"]
    assert syn["age"].dtype == np.int64 and syn["age"].between(17, 90).all()
    assert set(syn["sex"]) <= {"F", "M"} and set(syn["income"]) <= {"<=50K", ">50K"}
    again = m.sample_df(jax.random.key(1), 300)
    pd.testing.assert_frame_equal(syn, again)  # same key, same rows
    path = m.save(tmp_path / "m.npz")
    m2 = load_table_synth(path)
    assert m2.schema == s and m2.report == m.report
    pd.testing.assert_frame_equal(m2.sample_df(jax.random.key(1), 300), syn)


def test_fit_table_out_of_range_draws_no_noise(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "privacy"))
    from _privacy_helpers import forbid_noise

    df = _frame(50)
    df.loc[0, "hours"] = 1e6
    forbid_noise(monkeypatch)  # NoiseDrawn (a BaseException) if anything is released first
    with pytest.raises(ValueError, match="hours"):
        fit_table(jax.random.key(0), df, _schema(), epsilon=1.0, iterations=2, progress=False)


def test_inferred_schema_warns_and_is_noted():
    df = _frame(200)
    with pytest.warns(PrivacyLeakWarning):
        s = infer_schema(df, label="income")
    assert s.source == "data" and s.column("age").dtype == "int"
    assert s.column("job").nullable and s.classes == ("<=50K", ">50K")
    m = fit_table(jax.random.key(0), df, s, epsilon=1.0, iterations=5, progress=False)
    assert SCHEMA_INFERRED_NOTE in m.report.notes


def test_csv_roundtrip(tmp_path):
    cols = {"a": np.array([1.0, np.nan, 3.5]), "b": np.array(["x", None, "z"], dtype=object)}
    write_csv(cols, tmp_path / "t.csv")
    back = read_csv(tmp_path / "t.csv")
    assert back["a"].tolist() == ["1.0", "", "3.5"] and back["b"].tolist() == ["x", "", "z"]


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_cli_schema_synth_report_distill(tmp_path, capsys):
    df = _frame(300)
    df.to_csv(tmp_path / "data.csv", index=False)
    _schema().save(tmp_path / "schema.json")
    out = tmp_path / "syn.csv"
    rc = main(["synth", str(tmp_path / "data.csv"), "--schema", str(tmp_path / "schema.json"),
               "--epsilon", "1", "--out", str(out), "--iterations", "10", "--seed", "0",
               "--n", "50", "--quiet"])  # fmt: skip
    assert rc == 0
    syn = pd.read_csv(out)
    assert list(syn.columns) == list(df.columns) and len(syn) == 50
    report = json.loads((tmp_path / "syn.csv.privacy.json").read_text())
    assert report["epsilon"] == pytest.approx(1.0)
    assert main(["report", str(tmp_path / "syn.csv.model.npz")]) == 0
    # sampling a saved model reads no data
    rc = main(["synth", "--model", str(tmp_path / "syn.csv.model.npz"), "--out",
               str(tmp_path / "more.csv"), "--n", "20", "--seed", "1"])  # fmt: skip
    assert rc == 0 and len(pd.read_csv(tmp_path / "more.csv")) == 20
    rc = main(["synth", "--model", str(tmp_path / "syn.csv.model.npz"), "--out",
               str(tmp_path / "cal.csv"), "--n", "20", "--seed", "1", "--calibrate"])  # fmt: skip
    cal = pd.read_csv(tmp_path / "cal.csv")
    assert rc == 0 and list(cal.columns) == list(df.columns) and len(cal) == 20
    # a value outside the schema: one error line, exit 2, nothing written
    df.loc[0, "age"] = 200
    df.to_csv(tmp_path / "bad.csv", index=False)
    rc = main(["synth", str(tmp_path / "bad.csv"), "--schema", str(tmp_path / "schema.json"),
               "--epsilon", "1", "--out", str(tmp_path / "bad_syn.csv")])  # fmt: skip
    assert rc == 2 and "outside the public bounds" in capsys.readouterr().err
    assert not (tmp_path / "bad_syn.csv").exists()
    # draft schema from data (warned in its output)
    assert main(["schema", str(tmp_path / "data.csv"), "--label", "income", "--out",
                 str(tmp_path / "draft.json")]) == 0  # fmt: skip
    assert "DRAFT" in capsys.readouterr().out
    assert TabularSchema.load(tmp_path / "draft.json").source == "data"
    # distill: numeric CSV -> support set file + report
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-1, 0.3, (60, 4)), rng.normal(1, 0.3, (60, 4))])
    pd.DataFrame({**{f"f{i}": x[:, i] for i in range(4)}, "y": np.repeat(["u", "v"], 60)}).to_csv(
        tmp_path / "xy.csv", index=False
    )
    rc = main(["distill", str(tmp_path / "xy.csv"), "--label", "y", "--classes", "u,v",
               "--epsilon", "2", "--epochs", "2", "--support-per-class", "3",
               "--out", str(tmp_path / "support.csv"), "--quiet", "--seed", "0"])  # fmt: skip
    assert rc == 0
    sup = pd.read_csv(tmp_path / "support.csv")
    assert sup.shape == (6, 5) and set(sup["y"]) == {"u", "v"}
    assert json.loads((tmp_path / "support.csv.privacy.json").read_text())["private"]


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "nope.csv"), "--schema", "x.json", "--epsilon", "1",
                 "--out", str(tmp_path / "o.csv")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("privkernels: error:") and "Traceback" not in err
