"""The s62 attacks (repros in /work/adv9b/repro and /work/adv9/repro/r2): each test fails on
f4f2a9b and names the finding it pins."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels.privacy import BudgetAccountant
from privkernels.sklearn import DPKIPClassifier, DPNTKGenerator, DPNTKRegressor


@pytest.mark.parametrize("value", [1e39, 1e300])
def test_regressor_targets_beyond_float32_are_refused_before_the_private_scales(monkeypatch, value):
    """b1/b2: one target of 1e300 was refused only after the feature scales' noise (charged
    1), with a message naming X."""
    x = np.random.default_rng(0).uniform(size=(30, 4))
    y = x[:, 0].copy()
    y[0] = value
    acc = BudgetAccountant(10.0, 1e-3)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="^y contains NaN or infinite"):
        DPNTKRegressor(width=16, budget_accountant=acc).fit(x, y)
    assert acc.spent().epsilon == 0.0


def _add_remove_estimators():
    return [
        DPKIPClassifier(classes=[0, 1], batch_size=10,
                        fit_options=dict(neighbouring="add-remove", sampling_rate=0.3)),
        DPNTKGenerator(classes=[0, 1], iterations=1, fit_options=dict(neighbouring="add-remove")),
    ]  # fmt: skip


@pytest.mark.parametrize("which", ["y_two_columns", "x_no_columns"])
@pytest.mark.parametrize("est", _add_remove_estimators(), ids=["kip", "generator"])
def test_shape_refusals_name_no_row_count(monkeypatch, est, which):
    """b5: under add-remove n is private; scikit-learn's messages printed the shape (37, 2)."""
    n = 37
    x = np.random.default_rng(0).uniform(size=(n, 3))
    y = np.arange(n) % 2
    if which == "y_two_columns":
        y = np.stack([y, y], 1)
    else:
        x = x[:, :0]
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError) as err:
            est.fit(x, y)
    assert str(n) not in str(err.value)


@pytest.mark.parametrize("bad", ["--7", "7\u00b2", "9" * 30])
def test_cli_labels_that_look_like_integers_are_never_echoed(tmp_path, bad):
    """b6: '--7' and '7²' passed ``str.isdigit`` and numpy's int parse quoted them; 30 digits
    raised an uncaught OverflowError."""
    rng = np.random.default_rng(0)
    rows = [f"{rng.normal():.3f},{rng.normal():.3f},{bad if i == 4 else i % 2}" for i in range(30)]
    (tmp_path / "d.csv").write_text("a,b,y\n" + "\n".join(rows) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "privkernels", "distill", "d.csv", "--label", "y", "--out",
         "o.npz", "--epsilon", "1", "--quiet", "--classes", "0,1"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert bad not in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- searches


def _search_case(kind, row):
    from privkernels.sklearn import DPNTKClassifier

    rng = np.random.default_rng(0)
    x = rng.random((40, 3))
    if kind == "label":
        y = np.arange(40) % 2
        y[row] = 5
        return DPNTKClassifier(classes=[0, 1], width=16), x, y
    if kind == "nan_target":
        y = rng.random(40)
        y[row] = np.nan
        return DPNTKRegressor(width=16), x, y
    return DPNTKClassifier(classes=[0, 1], width=16), x, (np.arange(40) % 2)[:39]


@pytest.mark.parametrize("row", [3, 35], ids=["training_row", "validation_row"])
@pytest.mark.parametrize("kind", ["label", "nan_target", "short_y"])
def test_a_search_checks_every_row_before_its_first_candidate(monkeypatch, kind, row):
    """r2/b1: a bad row the split put in the validation part was found after the first
    candidate's noise: a label outside classes was scored as a miss and released."""
    from privkernels.sklearn import PrivateSearchCV

    est, x, y = _search_case(kind, row)
    acc = BudgetAccountant(100.0, 1e-2)
    forbid_noise(monkeypatch, samplers=False)  # the split and the picks are public draws
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            PrivateSearchCV(est, {"reg": [0.1, 1.0]}, epsilon=1.0, random_state=0,
                            budget_accountant=acc).fit(x, y)  # fmt: skip
    assert acc.spent().epsilon == 0.0


@pytest.mark.parametrize("col,value", [("lab", "zz"), ("a", 7.0), ("a", "?")])
def test_a_table_search_checks_every_row_against_the_schema_first(monkeypatch, col, value):
    """r2/b1b: the same for a generator's table (row 35 is a validation row)."""
    from privkernels.data.schema import TabularSchema
    from privkernels.sklearn import PrivateSearchCV

    schema = TabularSchema.from_dict({
        "name": "t", "label": "lab", "classes": ["n", "y"], "source": "public", "columns": [
            {"name": "a", "kind": "numeric", "bounds": [0, 1]},
            {"name": "b", "kind": "numeric", "bounds": [0, 1]}]})  # fmt: skip
    rng = np.random.default_rng(0)
    table = {"a": rng.random(40).round(3).astype(object), "b": rng.random(40).round(3),
             "lab": np.where(np.arange(40) % 2, "y", "n").astype(object)}  # fmt: skip
    table[col][35] = value
    acc = BudgetAccountant(100.0, 1e-2)
    forbid_noise(monkeypatch, samplers=False)
    with pytest.raises(ValueError):
        PrivateSearchCV(DPNTKGenerator(schema=schema), {"iterations": [2, 3]}, epsilon=1.0,
                        random_state=0, budget_accountant=acc).fit(table)  # fmt: skip
    assert acc.spent().epsilon == 0.0


def test_a_classifier_search_on_a_dataframe_still_needs_public_classes(monkeypatch):
    """r2/c12: any X with columns was taken for a table, so the classes= check was skipped."""
    pd = pytest.importorskip("pandas")
    from privkernels.sklearn import DPNTKClassifier, PrivateSearchCV

    x = pd.DataFrame(np.random.default_rng(0).random((40, 3)), columns=list("abc"))
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="classes="):
        PrivateSearchCV(DPNTKClassifier(width=16), {"reg": [0.1, 1.0]}, epsilon=1.0,
                        random_state=0).fit(x, np.arange(40) % 2)  # fmt: skip


def test_a_pipeline_checks_a_regressor_s_targets_before_the_scaler_s_noise(monkeypatch):
    """r2/b2: PrivatePipeline(scaler, regressor) with a target of 1e39 drew the scaler's noise."""
    from privkernels.sklearn import PrivateStandardScaler, make_private_pipeline

    x = np.random.default_rng(0).uniform(size=(30, 4))
    y = x[:, 0].copy()
    y[4] = 1e39
    acc = BudgetAccountant(10.0, 1e-3)
    pipe = make_private_pipeline(
        PrivateStandardScaler(epsilon=0.3, bounds=(0.0, 1.0), budget_accountant=acc),
        DPNTKRegressor(width=16, preprocessing=None, budget_accountant=acc),
    )
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="^y contains"):
        pipe.fit(x, y)
    assert acc.spent().epsilon == 0.0


# --------------------------------------------------------------------------- estimator files


@pytest.fixture(scope="module")
def scaled_file(tmp_path_factory):
    """A DPNTKClassifier file fitted with the default private preprocessing (eps 1)."""
    from privkernels.sklearn import DPNTKClassifier

    x = np.random.default_rng(0).normal(size=(40, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKClassifier(classes=[0, 1], width=16, random_state=0).fit(x, np.arange(40) % 2)
    return est.save(tmp_path_factory.mktemp("scaled") / "c.npz")


def test_cli_report_of_an_estimator_file_includes_its_private_preprocessing(scaled_file, capsys):
    """adv9b/b2: `privkernels report` printed the model's (0.9, 9e-06) only, not the whole
    (1, 1e-05) the estimator's `privacy_report_` says."""
    from privkernels.cli import main
    from privkernels.sklearn import load

    assert load(scaled_file).privacy_report_.epsilon == pytest.approx(1.0)
    assert main(["report", str(scaled_file)]) == 0
    assert capsys.readouterr().out.startswith("(1, 1e-05)-DP")


def _drop_report(arrays, meta):
    meta["estimator"].pop("preprocessing_report")


def _drop_scales(arrays, meta):
    for k in [k for k in arrays if k.startswith("estimator/scaling/")]:
        arrays.pop(k)


def _zero_scale(arrays, meta):
    arrays["estimator/scaling/x_scale"] = np.zeros_like(arrays["estimator/scaling/x_scale"])


def _small_epsilon(arrays, meta):
    meta["estimator"]["params"]["epsilon"] = 0.1


@pytest.mark.parametrize("change", [_drop_report, _drop_scales, _zero_scale, _small_epsilon])
def test_an_estimator_file_cannot_hide_or_change_its_preprocessing(scaled_file, tmp_path, change):
    """adv9b/c6, c10: without its preprocessing report the file loaded and said eps 0.9 for a
    1.0 release; dropped or zeroed scales loaded and changed every prediction; an edited
    epsilon parameter loaded beside reports that add up to another."""
    from privkernels import checkpoint
    from privkernels.sklearn import load

    arrays, meta = checkpoint.load(scaled_file)
    change(arrays, meta)
    with pytest.raises(ValueError):
        load(checkpoint.save(tmp_path / "e.npz", arrays, meta))


def _public_releases():
    import jax

    from privkernels import dp_ntk, preprocessing
    from privkernels.privacy.budget import Budget

    k = jax.random.key(0)
    x = np.random.default_rng(0).uniform(size=(40, 3))
    y = np.arange(40) % 2
    b = Budget(0.5, 1e-6)
    return {
        "private_standardize": lambda: preprocessing.private_standardize(k, x, b),
        "column_bounds": lambda: preprocessing.column_bounds(k, x, b),
        "column_moments": lambda: preprocessing.column_moments(
            k, x, np.array([[0.0, 1.0]] * 3), b),
        "private_class_proportions": lambda: dp_ntk.private_class_proportions(
            k, y, n_classes=2, epsilon=0.5, delta=1e-6),
        "private_class_counts": lambda: dp_ntk.private_class_counts(
            k, y, n_classes=2, epsilon=0.5, delta=1e-6),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(_public_releases()))
def test_public_release_functions_charge_the_open_accountant(name):
    """r2/b3: inside ``with BudgetAccountant(...)`` these drew noise on private data and
    charged nothing."""
    relation = "add-remove" if name == "private_class_counts" else "replace-one"
    with BudgetAccountant(1.0, 1e-5, neighbouring=relation) as acc:
        _public_releases()[name]()
    assert acc.spent().epsilon == pytest.approx(0.5)


def test_an_array_generator_samples_label_values_not_codes():
    """r2/c5: with classes=['cat', 'dog'] ``sample`` returned y in {0, 1} (the codes), and a
    search's train-on-synthetic score compared those codes with the validation labels."""
    x = np.random.default_rng(0).uniform(size=(40, 3))
    y = np.where(np.arange(40) % 2, "dog", "cat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = DPNTKGenerator(classes=["cat", "dog"], iterations=1, random_state=0).fit(x, y)
    _, ys = gen.sample(50)
    assert set(ys.tolist()) <= {"cat", "dog"}


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory):
    """A DPNTKClassifier file without private preprocessing (no scales to compare with)."""
    from privkernels.sklearn import DPNTKClassifier

    x = np.random.default_rng(0).normal(size=(40, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKClassifier(classes=[0, 1], width=16, preprocessing=None, random_state=0)
        est.fit(x, np.arange(40) % 2)
    return est.save(tmp_path_factory.mktemp("plain") / "c.npz")


@pytest.mark.parametrize("value", [-1, "4", 4.5, True])
def test_an_estimator_file_with_a_bad_feature_count_is_refused(plain_file, tmp_path, value):
    """adv9b/c10: n_features_in_ of -1, '4', 4.5 or True loaded; a missing one was a
    KeyError traceback in ``privkernels report``."""
    from privkernels import checkpoint
    from privkernels.sklearn import load

    arrays, meta = checkpoint.load(plain_file)
    meta["estimator"]["n_features_in_"] = value
    with pytest.raises(ValueError):
        load(checkpoint.save(tmp_path / "e.npz", arrays, meta))
