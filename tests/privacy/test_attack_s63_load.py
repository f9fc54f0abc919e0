"""The s63 load attacks (repros in /work/adv10/repro, b1, b2, b5): a saved estimator file
(or the ``.privacy.json`` beside a CLI output) edited so that it understates its cost or
drops a caveat must be refused. Each test fails on 595b388 and names the finding it pins."""

from __future__ import annotations

import copy
import json
import shutil
import warnings

import numpy as np
import pytest

from privkernels import checkpoint
from privkernels.cli import main as cli_main
from privkernels.privacy.accounting import gaussian_sigma
from privkernels.privacy.report import PrivacyReport
from privkernels.sklearn import (
    CLASSES_INFERRED_NOTE,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    load,
)
from privkernels.synth import SCHEMA_INFERRED_NOTE


def _edit(path, tmp_path, change, name="edited.npz"):
    """Copy of the file at ``path`` with ``change(arrays, meta)`` applied (no digest)."""
    arrays, meta = checkpoint.load(path)
    meta = copy.deepcopy(meta)
    change(arrays, meta)
    return checkpoint.save(tmp_path / name, arrays, meta)


def _fitted(factory, est, y_of):
    """Save ``est`` fitted on 40 rows of width 4 (default preprocessing: private scales)."""
    x = np.random.default_rng(0).uniform(size=(40, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded key, classes read from y, small n
        est.fit(x, y_of(x))
    return est.save(factory.mktemp("s63") / "m.npz"), x


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A classifier whose classes were read from y and a regressor, both seeded, both with
    ``preprocessing='auto'`` (private scales and their report)."""
    return {
        "classifier": _fitted(tmp_path_factory, DPNTKClassifier(width=16, random_state=0),
                              lambda x: np.arange(40) % 2),
        "regressor": _fitted(tmp_path_factory, DPNTKRegressor(width=16, random_state=0),
                             lambda x: x[:, 0]),
    }  # fmt: skip


KINDS = ["classifier", "regressor"]


@pytest.mark.parametrize("kind", KINDS)
def test_unedited_files_load_with_their_whole_cost(files, kind):
    path, x = files[kind]
    est = load(path)
    assert (est.privacy_report_.epsilon, est.privacy_report_.delta) == pytest.approx((1.0, 1e-5))
    assert np.all(np.isfinite(est.predict(x)))


def _drop_pre(arrays, meta):
    meta["estimator"].pop("preprocessing_report")


@pytest.mark.parametrize("kind", KINDS)
def test_b1_epsilon_none_cannot_hide_the_preprocessing_cost(files, tmp_path, kind):
    """b1: params.epsilon=None and no preprocessing_report loaded, reporting the model's
    (0.9, 9e-06) or (0.7, 7e-06) for a (1, 1e-05) release."""

    def change(arrays, meta):
        _drop_pre(arrays, meta)
        meta["estimator"]["params"]["epsilon"] = None

    with pytest.raises(ValueError, match="epsilon parameter and its model's report"):
        load(_edit(files[kind][0], tmp_path, change))


@pytest.mark.parametrize("kind", KINDS)
def test_b1_preprocessing_none_cannot_hide_the_preprocessing_cost(files, tmp_path, kind):
    """b1 variant: params.preprocessing=None, the scales and their report dropped (3 edits):
    the model's report is epsilon * (1 - share), not the epsilon a raw-data fit spends."""

    def change(arrays, meta):
        _drop_pre(arrays, meta)
        meta["estimator"]["params"]["preprocessing"] = None
        for k in [k for k in arrays if k.startswith("estimator/scaling/")]:
            arrays.pop(k)

    with pytest.raises(ValueError, match="part of its epsilon and delta"):
        load(_edit(files[kind][0], tmp_path, change))


def _reprice(record, epsilon):
    """``record`` at ``epsilon`` with its noise re-derived (from_dict accepts it)."""
    sigma = gaussian_sigma(epsilon, record["delta"])
    record["epsilon"] = epsilon
    record["params"]["sigma"] = sigma
    record["params"]["noise_std"] = sigma * record["sensitivity"]


def test_b2_a_repriced_preprocessing_report_is_refused(files, tmp_path):
    """b2 as found: each record at 0.0005 with a larger sigma, params.epsilon 0.901 so the
    totals add up; the params still plan 'auto' (share 0.1 of the budget)."""

    def change(arrays, meta):
        pre = meta["estimator"]["preprocessing_report"]
        for r in pre["mechanisms"]:
            _reprice(r, 0.0005)
        pre["epsilon"] = 0.001
        meta["estimator"]["params"]["epsilon"] = 0.901

    with pytest.raises(ValueError, match="model report is not the part"):
        load(_edit(files["classifier"][0], tmp_path, change))


def test_b2_budget_moved_between_preprocessing_records_is_refused(files, tmp_path):
    """b2, the sum-only hole: the same total, moved from one record to the other (each
    re-derived), loaded: only the total was compared with the params."""

    def change(arrays, meta):
        first, second = meta["estimator"]["preprocessing_report"]["mechanisms"]
        total = first["epsilon"] + second["epsilon"]
        _reprice(first, total * 0.9)
        _reprice(second, total - first["epsilon"])

    edited = _edit(files["classifier"][0], tmp_path, change)
    _, meta = checkpoint.load(edited)
    PrivacyReport.from_dict(meta["estimator"]["preprocessing_report"])  # consistent alone
    with pytest.raises(ValueError, match="preprocessing records are not the budgets"):
        load(edited)


def test_b5_the_classes_read_from_labels_note_cannot_be_removed(files, tmp_path):
    """b5: a classifier file with classes=None loaded without CLASSES_INFERRED_NOTE."""

    def change(arrays, meta):
        meta["report"]["notes"].remove(CLASSES_INFERRED_NOTE)

    with pytest.raises(ValueError, match="lacks the note that the classes were read"):
        load(_edit(files["classifier"][0], tmp_path, change))


def test_b5_a_file_holding_a_seed_is_refused(files, tmp_path):
    """b5: save never writes random_state; a file holding an int seed loaded (without the
    seed note when stripped), and a refit of ``clone(load(f))`` reused that noise key."""

    def change(arrays, meta):
        meta["estimator"]["params"]["random_state"] = 0

    with pytest.raises(ValueError, match="holds a random_state"):
        load(_edit(files["regressor"][0], tmp_path, change))


def test_b5_a_privacy_json_must_keep_the_notes_of_the_model_beside_it(files, tmp_path, capsys):
    """b5 (CLI): ``<out>.privacy.json`` with the int-seed note stripped printed, rc 0:
    `_check_beside` compared epsilon, delta, relation and records, not notes."""
    out = tmp_path / "o.npz"
    shutil.copy(files["classifier"][0], out)
    _, meta = checkpoint.load(out)
    beside = tmp_path / "o.npz.privacy.json"
    beside.write_text(json.dumps(meta["report"]))
    assert cli_main(["report", str(beside)]) == 0  # the unedited report prints
    data = dict(meta["report"], notes=[n for n in meta["report"]["notes"] if "int seed" not in n])
    assert len(data["notes"]) < len(meta["report"]["notes"])
    beside.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli_main(["report", str(beside)]) == 2
    assert "lacks notes" in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "field", "value"), [
    ("regressor", "input_bound", 0.01), ("classifier", "fit_intercept", False),
    ("classifier", "reg", 50.0),
])  # fmt: skip
def test_c3_a_model_config_edit_against_the_params_is_refused(files, tmp_path, kind, field, value):
    """c3: config.input_bound 0.01 loaded and every prediction became 0 (the report is the
    same); fit_intercept loaded and predict failed; the params still said otherwise."""

    def change(arrays, meta):
        meta["config"][field] = value

    with pytest.raises(ValueError, match=f"model config {field} differs"):
        load(_edit(files[kind][0], tmp_path, change))


@pytest.fixture(scope="module")
def beta_close_file(tmp_path_factory):
    return _fitted(tmp_path_factory, DPNTKClassifier(classes=[0, 1], width=16,
                                                     neighbouring="beta-close"),
                   lambda x: np.arange(40) % 2)[0]  # fmt: skip


@pytest.mark.slow  # a beta-close fit (Gaussian sampling)
@pytest.mark.parametrize(("field", "value"), [("eta_min", 1.0), ("kernel_shift", 5.0)])
def test_c3_beta_close_config_must_be_its_records(beta_close_file, tmp_path, field, value):
    """c3: config eta_min / kernel_shift contradicting the report's own gaussian_sampling
    record (the M its guarantee rests on) loaded."""

    def change(arrays, meta):
        meta["config"][field] = value

    with pytest.raises(ValueError, match=f"model config {field} differs"):
        load(_edit(beta_close_file, tmp_path, change))


@pytest.mark.slow  # a DP-NTK table fit
def test_b5_a_table_generator_keeps_its_schema_note(tmp_path):
    """b5 (generator): the note that the schema was read from the data could be removed
    from a DPNTKGenerator file fitted without a schema."""
    x = np.random.default_rng(0).uniform(size=(40, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = DPNTKGenerator(label="y", iterations=2, d_code=4, batch_size=10)
        gen.fit({"a": x[:, 0], "b": x[:, 1], "y": np.arange(40) % 2})
    path = gen.save(tmp_path / "g.npz")
    assert SCHEMA_INFERRED_NOTE in load(path).privacy_report_.notes

    def change(arrays, meta):
        meta["report"]["notes"].remove(SCHEMA_INFERRED_NOTE)

    with pytest.raises(ValueError, match="schema was read from the data"):
        load(_edit(path, tmp_path, change))
