"""The s63 attacks on ``fit_options`` (repros in /work/adv10/repro: b9, b7, c2): each test
fails on 595b388 and names the finding it pins. Settings that need no data are refused
before any noise (standalone, with the private scales of ``preprocessing='auto'`` drawn
first, and behind a private scaler in a `PrivatePipeline`), and charge nothing."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

import privkernels.sklearn as sk
from privkernels import dp_kip, dp_ntk
from privkernels import dp_ntk_regression as R
from privkernels.preprocessing import PrivateStandardScaler
from privkernels.privacy import BudgetAccountant
from privkernels.sharding import example_mesh
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    PrivateSearchCV,
    load,
    make_private_pipeline,
)

X = np.random.default_rng(1).uniform(size=(40, 4))
Y = np.arange(40) % 2


def _refused_at_zero(monkeypatch, est, y, match, *, behind_scaler=False):
    """Fit ``est`` (behind a private scaler when asked) under `forbid_noise`: it must raise
    ``ValueError`` matching ``match``, with the shared accountant charged nothing."""
    acc = BudgetAccountant(3.0, 3e-5)
    est.set_params(budget_accountant=acc)
    model = est
    if behind_scaler:
        scaler = PrivateStandardScaler(0.3, 5e-6, bounds=(0, 1), budget_accountant=acc)
        model = make_private_pipeline(scaler, est)
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=match):
            model.fit(X, y)
    assert acc.spent().epsilon == 0.0


def _kip(**fit_options):
    return DPKIPClassifier(0.7, 5e-6, classes=[0, 1], epochs=1, support_per_class=2,
                           fit_options=fit_options)  # fmt: skip


# --------------------------------------------------------------------------- b9: owned keys


@pytest.mark.parametrize("option", ["public_key", "n_classes", "budget_accountant", "width"])
@pytest.mark.parametrize("make", [DPNTKClassifier, DPNTKRegressor])
def test_regression_fit_options_owned_keys_refused_before_the_private_scales(
    monkeypatch, make, option
):
    """b9: with preprocessing='auto' the scales were drawn and 0.7 charged, then a TypeError
    (got multiple values); 'width' was a TypeError at 0."""
    value = {"public_key": jax.random.key(1), "n_classes": 2, "width": 16}.get(option)
    est = make(0.7, 5e-6, width=16, fit_options={option: value})
    if make is DPNTKClassifier:
        est.set_params(classes=[0, 1])
    y = Y if make is DPNTKClassifier else X[:, 0]
    _refused_at_zero(monkeypatch, est, y, rf"fit_options may not set \['{option}'\]")


@pytest.mark.parametrize("option", ["progress", "public_key", "n_classes", "epochs"])
def test_kip_fit_options_owned_keys_refused_before_the_scaler(monkeypatch, option):
    """b9: behind a private scaler the scaler's noise was drawn and 0.3 charged, then the
    call raised TypeError; 'epochs' was a TypeError at 0."""
    value = {"progress": False, "public_key": jax.random.key(1), "n_classes": 2, "epochs": 1}
    est = _kip(**{option: value[option]})
    _refused_at_zero(monkeypatch, est, Y, rf"fit_options may not set \['{option}'\]",
                     behind_scaler=True)  # fmt: skip


class _Called(BaseException):
    """Raised by the spy in place of the method's fit."""


def _spied(monkeypatch, module, name="fit"):
    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        raise _Called

    monkeypatch.setattr(module, name, spy)
    return seen


@pytest.mark.parametrize("case", ["kip", "classifier", "regressor", "generator"])
def test_owned_options_are_exactly_what_each_fit_passes(monkeypatch, case):
    """b9: only DPNTKGenerator had a list (_GENERATOR_OWNS); each estimator's list must be
    the keywords its fit hands the method, so that none can be given twice."""
    y = Y
    if case == "kip":
        seen, est = _spied(monkeypatch, dp_kip), _kip()
    elif case == "generator":
        seen = _spied(monkeypatch, dp_ntk)
        est = DPNTKGenerator(classes=[0, 1], iterations=1, batch_size=8, d_code=2,
                             budget_accountant=BudgetAccountant(5.0, 1e-4))  # fmt: skip
    else:
        seen = _spied(monkeypatch, R)
        est = DPNTKClassifier(classes=[0, 1]) if case == "classifier" else DPNTKRegressor()
        est.set_params(width=16, preprocessing=None)
        y = Y if case == "classifier" else X[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(_Called):
            est.fit(X, y)
    tables_only = {"groups"} if case == "generator" else set()  # a schema's, not an array's
    # DP-KIP's kernel_options default is merged beneath the caller's, so not owned
    merged = {"kernel_options"} if case == "kip" else set()
    assert (set(seen) - merged) | tables_only == set(type(est)._owned_options)


# --------------------------------------------------------------------------- b9: no-data options


def _kip_no_data_cases(tmp_path):
    exists = tmp_path / "exists.npz"
    exists.write_text("x")
    blocked = tmp_path / "file"
    blocked.write_text("x")
    x4 = np.zeros((5, 4), np.float32)
    return {
        "eval_every": ({"eval_every": 0}, "eval_every"),
        "max_steps": ({"max_steps": 0}, "max_steps"),
        "checkpoint_exists": ({"checkpoint_path": str(exists)}, "exists; pass resume=True"),
        "checkpoint_unwritable": ({"checkpoint_path": str(blocked / "c.npz")}, "cannot be written"),
        "x_test_width": ({"x_test": x4[:, :3], "y_test": np.zeros(5, int)}, "x_test must have"),
        "y_test_label": ({"x_test": x4, "y_test": np.full(5, 9)}, "y_test must lie"),
    }


@pytest.mark.parametrize(
    "case",
    ["eval_every", "max_steps", "checkpoint_exists", "checkpoint_unwritable", "x_test_width",
     "y_test_label"],
)  # fmt: skip
def test_kip_fit_options_needing_no_data_refused_before_the_scaler(monkeypatch, tmp_path, case):
    """b9: the pipeline's pre-check ran none of these: the scaler's noise was drawn and 0.3
    charged before dp_kip.fit refused them."""
    options, match = _kip_no_data_cases(tmp_path)[case]
    _refused_at_zero(monkeypatch, _kip(**options), Y, match, behind_scaler=True)
    assert not (tmp_path / "file").is_dir()


def test_generator_existing_checkpoint_refused_before_the_scaler(monkeypatch, tmp_path):
    """b9: DPNTKGenerator's checkpoint that exists was refused after the scaler's noise."""
    path = tmp_path / "exists.npz"
    path.write_text("x")
    est = DPNTKGenerator(0.7, 5e-6, classes=[0, 1], iterations=1,
                         fit_options={"checkpoint_path": str(path)})  # fmt: skip
    _refused_at_zero(monkeypatch, est, Y, "exists; pass resume=True", behind_scaler=True)


@pytest.mark.parametrize("behind_scaler", [False, True], ids=["auto", "pipeline"])
@pytest.mark.parametrize("make", [DPNTKClassifier, DPNTKRegressor])
def test_kernel_mean_settings_refused_before_any_noise(monkeypatch, make, behind_scaler):
    """b9: solver='kernel-mean' with width 16 (classifier), or at all (a regressor's real
    targets), was refused after the private scales (0.7 charged) or the scaler (0.3)."""
    est = make(0.7, 5e-6, width=16, fit_options={"solver": "kernel-mean"})
    match = "width does not apply"
    if make is DPNTKClassifier:
        est.set_params(classes=[0, 1])
    else:
        est.set_params(width=256)  # the default: refused all the same
        match = "needs class labels"
    y = Y if make is DPNTKClassifier else X[:, 0]
    _refused_at_zero(monkeypatch, est, y, match, behind_scaler=behind_scaler)


@pytest.mark.parametrize("behind_scaler", [False, True], ids=["auto", "pipeline"])
@pytest.mark.parametrize("case", ["exists", "resume"])
def test_regression_checkpoint_refused_before_any_noise(monkeypatch, tmp_path, case,
                                                        behind_scaler):  # fmt: skip
    """b9 (same path): an existing checkpoint_path, or resume=True (which the estimator
    cannot do: it always passes its data), was refused by dp_ntk_regression.fit after the
    private scales (0.7 charged) or the scaler (0.3)."""
    path = tmp_path / "m.npz"
    options = {"checkpoint_path": str(path)}
    if case == "exists":
        path.write_text("x")
    else:
        options["resume"] = True
    est = DPNTKClassifier(0.7, 5e-6, classes=[0, 1], width=16, fit_options=options)
    match = "exists: a fit would overwrite it" if case == "exists" else "cannot resume"
    _refused_at_zero(monkeypatch, est, Y, match, behind_scaler=behind_scaler)


# --------------------------------------------------------------------------- b7: searches


def _search_estimators(path):
    kip = DPKIPClassifier(classes=[0, 1], epochs=1, support_per_class=2, batch_size=10,
                          fit_options={"neighbouring": "add-remove", "sampling_rate": 0.25,
                                       "checkpoint_path": path})  # fmt: skip
    gen = DPNTKGenerator(classes=[0, 1], iterations=1, fit_options={"checkpoint_path": path})
    return {"kip": (kip, {"epochs": [1, 2]}), "generator": (gen, {"iterations": [1, 2]})}


@pytest.mark.parametrize("where", ["estimator", "grid"])
@pytest.mark.parametrize("kind", ["kip", "generator"])
def test_search_refuses_a_checkpoint_before_its_charge(monkeypatch, tmp_path, kind, where):
    """b7: the search was charged 1.0, its first run wrote its release to disk and the
    second refused 'checkpoint exists' (nothing chosen, an unchosen run kept on disk)."""
    path = str(tmp_path / "c.npz")
    est, grid = _search_estimators(path)[kind]
    if where == "grid":  # a candidate's fit_options name it
        opts = dict(est.fit_options)
        est.set_params(fit_options={k: v for k, v in opts.items() if k != "checkpoint_path"})
        grid = {**grid, "fit_options": [opts]}
    acc = BudgetAccountant(3.0, 3e-5, neighbouring=est._relation())
    search = PrivateSearchCV(est, grid, epsilon=1.0, budget_accountant=acc)
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="not supported in a search"):
            search.fit(X, Y)
    assert acc.spent().epsilon == 0.0
    assert not (tmp_path / "c.npz").exists()


# --------------------------------------------------------------------------- c2: a mesh


def test_saved_params_drop_a_mesh():
    """c2: the parameters ``save`` writes refused fit_options holding a Mesh (TypeError,
    not JSON) after the fit; the mesh is this session's devices, dropped like the
    accountant, and the other options are kept."""
    est = _kip(mesh=example_mesh(), eval_every=2)
    assert sk._json_params(est.get_params())["fit_options"] == {"eval_every": 2}
    assert est.fit_options["mesh"] is not None  # the estimator itself is left as it was


@pytest.mark.slow
def test_kip_fitted_with_a_mesh_saves_and_loads(tmp_path):
    """c2: fit_options={'mesh': ...} fitted, then save() raised TypeError (a Mesh is not
    JSON). Slow: one DP-KIP fit (about 8 s on 2 shared cores)."""
    est = _kip(mesh=example_mesh(), eval_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X.astype(np.float32), Y)
    back = load(est.save(tmp_path / "k.npz"))
    assert back.get_params()["fit_options"] == {"eval_every": 1}
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
