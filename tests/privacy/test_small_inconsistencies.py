"""Issue 52, item 8: one minimum-n rule for every fit, no input value in any message,
``compose`` of a list. Each refusal comes before any noise (`forbid_noise`)."""

from __future__ import annotations

import re
import warnings
from typing import Any

import jax
import numpy as np
import pandas as pd
import pytest
from _privacy_helpers import NoiseDrawn, forbid_noise

from privkernels import cli, dp_kip, dp_ntk
from privkernels import dp_ntk_regression as R
from privkernels.data.schema import TabularSchema, categorical, numeric
from privkernels.privacy import accounting, mechanisms
from privkernels.privacy.report import REPLACE_ONE, PrivacyReport, compose
from privkernels.sklearn import DPKIPClassifier, DPNTKClassifier, DPNTKGenerator, DPNTKRegressor
from privkernels.synth import fit_table

SECRET = "SECRET-ab71c"


def _xy(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform(0, 0.5, size=(n, 4)).astype(np.float32), np.arange(n) % 2


def _schema() -> TabularSchema:
    cols = [numeric("age", 17, 90), categorical("sex", ["F", "M"])]
    return TabularSchema.from_columns("toy", cols, label="income", classes=["lo", "hi"])


def _table(n: int) -> pd.DataFrame:
    return pd.DataFrame({"age": [30.0, 50.0, 70.0][:n], "sex": ["F", "M", "F"][:n],
                         "income": ["lo", "hi", "lo"][:n]})  # fmt: skip


KEY = jax.random.key(0)
PRIVATE = {"epsilon": 1.0, "delta": 1e-5}
#: Every fit entry point but the CLI: name -> fit on n rows.
FITS: dict[str, Any] = {
    "DPNTKRegressor": lambda n: DPNTKRegressor(width=16).fit(_xy(n)[0], _xy(n)[1] * 0.5),
    "DPNTKClassifier": lambda n: DPNTKClassifier(classes=[0, 1], width=16).fit(*_xy(n)),
    "DPKIPClassifier": lambda n: DPKIPClassifier(classes=[0, 1], epochs=1).fit(*_xy(n)),
    "DPNTKGenerator arrays": lambda n: DPNTKGenerator(classes=[0, 1], iterations=1).fit(*_xy(n)),
    "DPNTKGenerator table": lambda n: DPNTKGenerator(schema=_schema(), iterations=1).fit(_table(n)),
    "dp_ntk.fit": lambda n: dp_ntk.fit(KEY, *_xy(n), n_classes=2, iterations=1, **PRIVATE),
    "dp_kip.fit": lambda n: dp_kip.fit(
        KEY, *_xy(n), n_classes=2, kernel="fc_ntk", epochs=1, **PRIVATE
    ),
    "dp_ntk_regression.fit": lambda n: R.fit(KEY, _xy(n)[0], _xy(n)[1] * 0.5, **PRIVATE),
    "fit_table": lambda n: fit_table(KEY, _table(n), _schema(), iterations=1, **PRIVATE),
}

ROWS = r"(X|x|table|DATA) has \d samples? \(n_samples = \d\): every fit needs at least 2 rows"


@pytest.mark.parametrize("n", [0, 1])
@pytest.mark.parametrize("entry", sorted(FITS))
def test_every_fit_refuses_fewer_than_two_rows_with_one_message(entry, n, monkeypatch):
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=ROWS):
            FITS[entry](n)


@pytest.mark.parametrize("entry", sorted(FITS))
def test_two_rows_pass_the_rule(entry, monkeypatch):
    """Two rows are accepted: the fit goes on to its first random draw."""
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NoiseDrawn):
            FITS[entry](2)


@pytest.mark.parametrize("cmd", ["distill", "synth"])
@pytest.mark.parametrize("n", [1])  # an empty CSV is refused when read: "the table is empty"
def test_the_cli_refuses_fewer_than_two_rows(cmd, n, tmp_path, capsys, monkeypatch):
    data, schema = tmp_path / "data.csv", tmp_path / "schema.json"
    _table(n).to_csv(data, index=False)
    _schema().save(schema)
    args = ["--label", "income", "--classes", "lo,hi"]
    if cmd == "distill":  # numeric features only
        data.write_text("age,income\n" + "".join(f"{30 + a},lo\n" for a in range(n)))
    else:
        args = ["--schema", str(schema), "--iterations", "1"]
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main([cmd, str(data), *args, "--epsilon", "1", "--out", str(tmp_path / "o.npz")])
    assert rc == 2
    assert re.search(ROWS, capsys.readouterr().err)


# --------------------------------------------------------------------- no value in a message


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and every exception chained to it (cause or context)."""
    out: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _assert_hidden(err: BaseException, *secrets: str) -> None:
    for e in _chain(err):
        text = f"{e!s} {e!r} {getattr(e, 'args', '')}"
        assert not any(s in text for s in secrets), f"{type(e).__name__} shows a value: {text}"


def _with_cell(value: Any) -> list[list[Any]]:
    x, _ = _xy(6)
    rows: list[list[Any]] = x.tolist()
    rows[3][2] = value
    return rows


ESTIMATORS = {
    "DPNTKRegressor": lambda: DPNTKRegressor(width=16),
    "DPNTKClassifier": lambda: DPNTKClassifier(classes=[0, 1], width=16),
    "DPKIPClassifier": lambda: DPKIPClassifier(classes=[0, 1], epochs=1),
    "DPNTKGenerator": lambda: DPNTKGenerator(classes=[0, 1], iterations=1),
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_non_numeric_cell_is_refused_without_its_value(name, monkeypatch):
    forbid_noise(monkeypatch)
    y = _xy(6)[1]
    with pytest.raises(ValueError, match="column 2") as info:
        ESTIMATORS[name]().fit(_with_cell(SECRET), y)
    _assert_hidden(info.value, SECRET)
    if name != "DPNTKGenerator":  # a DataFrame is a table there (its schema checks values)
        frame = pd.DataFrame(_with_cell(SECRET), columns=["a", "b", "c", "d"])
        with pytest.raises(ValueError, match="column 2 \\('c'\\)") as info:
            ESTIMATORS[name]().fit(frame, y)
        _assert_hidden(info.value, SECRET)
    # an object that is neither a string nor a number: scikit-learn's TypeError wording
    with pytest.raises(TypeError, match="argument must be a string.* number") as info:
        ESTIMATORS[name]().fit(_with_cell({SECRET: 1}), y)
    _assert_hidden(info.value, SECRET)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_one_dimensional_x_is_refused_without_its_values(name, monkeypatch):
    """scikit-learn's "Expected 2D array" message prints the whole array."""
    forbid_noise(monkeypatch)
    x = np.array([0.4142135, 0.2718281, 0.3141592, 0.1618033])
    with pytest.raises(ValueError, match="2-D") as info:
        ESTIMATORS[name]().fit(x, np.arange(4) % 2)
    _assert_hidden(info.value, "4142", "2718", "3141", "1618")


def test_a_regression_target_that_is_not_a_number_is_refused_without_its_value(monkeypatch):
    forbid_noise(monkeypatch)
    x, _ = _xy(6)
    y = np.array([0.1, 0.2, SECRET, 0.3, 0.1, 0.2], dtype=object)
    with pytest.raises(ValueError, match="y holds a non-numeric value") as info:
        DPNTKRegressor(width=16).fit(x, y)
    _assert_hidden(info.value, SECRET)


# --------------------------------------------------------------------------------- compose


def _report(eps: float) -> PrivacyReport:
    sigma = accounting.gaussian_sigma(eps, 1e-6)
    rec = mechanisms.gaussian_record(
        f"stat-{eps}", epsilon=eps, delta=1e-6, sensitivity=1.0, sigma=sigma
    )
    return PrivacyReport.from_mechanisms([rec], REPLACE_ONE)


def test_compose_takes_a_list_or_tuple_like_arguments():
    a, b, c = _report(0.5), _report(0.25), _report(1.0)
    assert compose([a, b]) == compose(a, b) == compose((a, b))
    assert compose([a, b, c]).epsilon == pytest.approx(1.75)
    assert compose([a]) == compose(a)
    with pytest.raises(ValueError, match="at least one report"):
        compose([])
    for bad in ((a, [b]), ("report",), ([a, 1.0],), ({"a": a},)):
        with pytest.raises(TypeError, match="privacy reports"):
            compose(*bad)
