"""`PrivatePipeline` refuses a later step's data-free settings before an earlier private
scaler draws noise (adversary s60, B3: ``random_state`` of a wrong type, empty or repeated
``classes``, every `DPNTKGenerator` setting and `PrivateSearchCV`'s fractions were found
only when their own step fitted, after the scaler had released and been charged; C4: so
was a label outside a later step's public ``classes``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels.privacy import BudgetAccountant
from privkernels.search import PrivateSearchCV
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    PrivateMinMaxScaler,
    PrivateStandardScaler,
    make_private_pipeline,
)

#: A small model: these tests check refusals and the ledger, not accuracy.
SMALL = {"width": 16, "preprocessing": None, "fit_options": {"features": 32}}


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(60, 3))
    return x, (x[:, 0] > 0).astype(int)


def _scaler(acc: BudgetAccountant, x: np.ndarray) -> PrivateMinMaxScaler:
    """The private scaler in front of each pipeline, fitted (charged once to ``acc``)."""
    return PrivateMinMaxScaler(0.5, 1e-6, bounds=(-4.0, 4.0), random_state=jax.random.key(0),
                               budget_accountant=acc).fit(x)  # fmt: skip


def _classifier(acc: BudgetAccountant) -> DPNTKClassifier:
    """A small classifier with public classes [0, 1], charged to ``acc``."""
    return DPNTKClassifier(0.5, 1e-6, classes=[0, 1], random_state=jax.random.key(1),
                           budget_accountant=acc, **SMALL)  # fmt: skip


def _search(**kw: object) -> PrivateSearchCV:
    reg = DPNTKRegressor(0.5, 1e-6, **SMALL)  # type: ignore[arg-type]
    return PrivateSearchCV(reg, {"reg": [0.1, 1.0]}, epsilon=1.0, delta=1e-6, **kw)  # type: ignore[arg-type]


#: (step, setting, expected error): each refused by the step's own fit on its settings.
CASES = [
    (DPNTKGenerator, {"label_mode": "bogus"}, ValueError),
    (DPNTKGenerator, {"iterations": 0}, ValueError),
    (DPNTKGenerator, {"d_code": -1}, ValueError),
    (DPNTKGenerator, {"batch_size": 0}, ValueError),
    (DPNTKGenerator, {"fit_options": {"learnin_rate": 0.1}}, TypeError),  # a typo
    (DPNTKGenerator, {"fit_options": {"learning_rate": -1.0}}, ValueError),
    (DPNTKGenerator, {"fit_options": {"split": (0.5,)}}, ValueError),
    (DPNTKGenerator, {"fit_options": {"chunk_size": 0}}, ValueError),
    (DPNTKGenerator, {"fit_options": {"iterations": 2}}, ValueError),  # the fit passes its own
    (DPNTKGenerator, {"fit_options": {"progress": False}}, ValueError),
    (DPNTKGenerator, {"fit_options": {"groups": "x"}}, ValueError),
    (DPNTKGenerator, {"image_shape": (5, 5)}, ValueError),  # 25 values, X has 3 columns
    (DPNTKGenerator, {"classes": [0, 0]}, ValueError),
    (DPNTKGenerator, {"classes": []}, ValueError),
    (DPNTKGenerator, {"random_state": "x"}, TypeError),
    (DPNTKClassifier, {**SMALL, "classes": []}, ValueError),
    (DPNTKClassifier, {**SMALL, "classes": [0, 0]}, ValueError),
    (DPNTKClassifier, {**SMALL, "random_state": "x"}, TypeError),
    (DPNTKRegressor, {**SMALL, "random_state": 1.5}, TypeError),
    (DPNTKRegressor, {**SMALL, "random_state": 2**64}, ValueError),  # past jax.random.key
    (DPNTKClassifier, {**SMALL, "random_state": -(2**70)}, ValueError),
    (DPKIPClassifier, {"classes": [0, 1], "epochs": 1, "random_state": "x"}, TypeError),
    (PrivateStandardScaler, {"random_state": "x"}, TypeError),
    (_search, {"score_share": 1.5}, ValueError),
    (_search, {"validation_fraction": 0.0}, ValueError),
    (_search, {"mean_runs": 0.5}, ValueError),
    (_search, {"shape": -1.0}, ValueError),
    (_search, {"random_state": "x"}, TypeError),
]


@pytest.mark.parametrize(
    ("step", "params", "error"),
    CASES,
    ids=[
        f"{c.__name__.strip('_')}-"
        + "-".join(f"{k}={v}" for k, v in p.items() if SMALL.get(k) != v)
        for c, p, _ in CASES
    ],
)
def test_a_later_steps_setting_is_refused_before_the_scalers_noise(
    step, params, error, monkeypatch
):
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    scaler = _scaler(acc, x)
    kw = {"random_state": jax.random.key(1), "budget_accountant": acc, **params}
    est = step(**kw) if step is _search else step(0.5, 1e-6, **kw)
    pipe = make_private_pipeline(scaler, est)
    spent, state = acc.spent(), dict(scaler.__dict__)
    forbid_noise(monkeypatch)
    with pytest.raises(error):
        pipe.fit(x, y)
    assert acc.spent() == spent
    assert scaler.__dict__ == state  # not refitted


#: (step, its settings): classifiers and an array generator with public classes [0, 1].
LABELLED = [
    (DPNTKClassifier, {**SMALL, "classes": [0, 1]}),
    (DPKIPClassifier, {"classes": [0, 1], "epochs": 1}),
    (DPNTKGenerator, {"classes": [0, 1], "iterations": 1}),
]


@pytest.mark.parametrize(("step", "params"), LABELLED, ids=[c.__name__ for c, _ in LABELLED])
def test_a_label_outside_a_later_steps_classes_is_refused_before_the_scalers_noise(
    step, params, monkeypatch
):
    """C4: the label is read by the pipeline's pre-check with the step's own check and
    message (no label value in it), not when the step fits after the scaler released."""
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    scaler = _scaler(acc, x)
    est = step(0.5, 1e-6, random_state=jax.random.key(1), budget_accountant=acc, **params)
    pipe = make_private_pipeline(scaler, est)
    spent, state = acc.spent(), dict(scaler.__dict__)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="^y holds a label outside classes$"):
        pipe.fit(x, np.where(y == 1, 7, y))
    assert acc.spent() == spent
    assert scaler.__dict__ == state


@pytest.mark.parametrize("grid", [{"reg": [-1.0, 1.0]}, {"width": [0, 16]}], ids=["reg", "width"])
def test_a_bad_grid_value_is_refused_before_any_noise(grid, monkeypatch) -> None:
    """Every candidate's own settings checks run before the search (or a pipeline holding
    it) draws noise: before, a ``reg=-1`` or ``width=0`` in the grid was found only when
    that candidate fitted, after the scaler (and earlier candidates) had released."""
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    reg = DPNTKRegressor(0.5, 1e-6, **SMALL)  # type: ignore[arg-type]
    search = PrivateSearchCV(reg, grid, epsilon=1.0, delta=1e-6, random_state=jax.random.key(1),
                             budget_accountant=acc)  # fmt: skip
    scaler = _scaler(acc, x)
    spent = acc.spent()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError):
        make_private_pipeline(scaler, search).fit(x, y)
    with pytest.raises(ValueError):
        search.fit(x, y)
    assert acc.spent() == spent


#: A search step whose candidates refuse on their own settings or labels (third attack of
#: s61, B1): each was found only after the scaler in front had released.
SEARCH_STEPS = {
    "label_outside_classes": (
        lambda: PrivateSearchCV(
            DPNTKClassifier(classes=[0, 1], **SMALL), {"reg": [0.1, 1.0]}, epsilon=1.0, delta=1e-6
        ),  # fmt: skip
        True,
    ),
    "dp_kip_replace_one": (
        lambda: PrivateSearchCV(
            DPKIPClassifier(classes=[0, 1], epochs=1), {"epochs": [1, 2]}, epsilon=1.0, delta=1e-6
        ),  # fmt: skip
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(SEARCH_STEPS))
def test_a_search_steps_candidates_are_checked_before_the_scalers_noise(name, monkeypatch):
    make, bad_label = SEARCH_STEPS[name]
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    scaler = _scaler(acc, x)
    search = make().set_params(random_state=jax.random.key(1), budget_accountant=acc)
    spent, state = acc.spent(), dict(scaler.__dict__)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError):
        make_private_pipeline(scaler, search).fit(x, np.where(y == 1, 7, y) if bad_label else y)
    assert acc.spent() == spent
    assert scaler.__dict__ == state


@pytest.mark.parametrize("labels", ["two_columns", "one_short", "none"])
def test_labels_of_the_wrong_shape_are_refused_before_the_scalers_noise(labels, monkeypatch):
    """Third attack of s61, C5: the shape of ``y`` is public; it was refused only by the
    classifier's fit, after the scaler in front had released."""
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    y = {"two_columns": np.stack([y, y], 1), "one_short": y[:-1], "none": None}[labels]
    scaler = _scaler(acc, x)
    est = _classifier(acc)
    spent = acc.spent()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError):
        make_private_pipeline(scaler, est).fit(x, y)
    assert acc.spent() == spent


@pytest.mark.parametrize("form", ["y_list", "x_list", "both_lists"])
def test_a_row_count_mismatch_in_lists_is_refused_before_the_scalers_noise(form, monkeypatch):
    """Fourth attack of s61, F1: with ``X`` or ``y`` a list the row counts were not
    compared; the scaler released, then scikit-learn named both counts."""
    acc = BudgetAccountant(10.0, 1e-3)
    x, y = _data()
    xs, ys = {"y_list": (x, list(y[:-1])), "x_list": (x.tolist(), y[:-1]),
              "both_lists": (x.tolist(), list(y[:-1]))}[form]  # fmt: skip
    scaler = _scaler(acc, x)
    est = _classifier(acc)
    spent = acc.spent()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="^X and y hold different numbers of rows$"):
        make_private_pipeline(scaler, est).fit(xs, ys)
    assert acc.spent() == spent


def test_an_add_remove_fit_with_y_of_another_length_names_no_count(monkeypatch):
    """F2: under add-remove n is private; scikit-learn's message named both counts."""
    x, y = _data()
    est = DPKIPClassifier(1.0, 1e-6, classes=[0, 1], epochs=1, batch_size=8,
                          random_state=jax.random.key(1),
                          fit_options={"neighbouring": "add-remove", "sampling_rate": 0.5})  # fmt: skip
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError) as err:
        est.fit(x, y[:-1])
    assert not any(c.isdigit() for c in str(err.value))


def test_a_generators_own_options_are_refused_by_a_plain_fit(monkeypatch):
    """F4: a standalone fit accepted ``fit_options={"iterations": 2}`` and saved a file its
    own `load` then refused."""
    x, y = _data()
    gen = DPNTKGenerator(1.0, 1e-6, classes=[0, 1], random_state=jax.random.key(1),
                         fit_options={"iterations": 2})  # fmt: skip
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="fit_options may not set"):
        gen.fit(x, y)
