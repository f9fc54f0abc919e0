"""`privkernels.sklearn.row_map`: the fixed maps of standardised rows into the model's ball."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

import privkernels.sklearn
from privkernels import checkpoint
from privkernels.privacy import SmallSampleWarning
from privkernels.sklearn import ROW_CLIP, ROW_MAPS, DPNTKClassifier, DPNTKRegressor, row_map


def _rows() -> np.ndarray:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 4)) * np.array([[1e-3], [1.0], [10.0], [1e150], [1e-150], [1.0]])
    z[-1] = 0.0
    return z


def test_ball_leaves_the_rows_as_they_are() -> None:
    z = _rows()
    assert row_map(z, "ball", 0.7) is z


def test_sphere_puts_every_nonzero_row_on_the_sphere_in_its_direction() -> None:
    z, r = _rows(), 0.7
    out = row_map(z, "sphere", r)
    assert out.shape == z.shape and np.all(np.isfinite(out))
    np.testing.assert_allclose(np.linalg.norm(out[:-1], axis=1), r, rtol=1e-12)
    np.testing.assert_array_equal(out[-1], 0.0)
    cos = np.sum(out[:-1] * z[:-1], axis=1) / (
        np.linalg.norm(out[:-1], axis=1) * np.linalg.norm(z[:-1], axis=1)
    )
    np.testing.assert_allclose(cos, 1.0, rtol=1e-12)


def test_lift_adds_one_column_and_keeps_the_norm_as_an_angle() -> None:
    z, r = _rows(), 0.7
    out = row_map(z, "lift", r)
    assert out.shape == (z.shape[0], z.shape[1] + 1) and np.all(np.isfinite(out))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), r, rtol=1e-12)
    norms = np.linalg.norm(z[:3], axis=1)  # moderate rows: the closed form
    expect = r * np.concatenate([z[:3], np.full((3, 1), r)], axis=1)
    np.testing.assert_allclose(out[:3], expect / np.sqrt(norms**2 + r**2)[:, None], rtol=1e-12)
    np.testing.assert_allclose(out[-1], [0, 0, 0, 0, r])  # a zero row: the pole
    last = out[:3, -1]  # the larger the row, the smaller its lifted column
    assert np.all(np.diff(last) < 0)


def test_an_unknown_map_is_refused() -> None:
    assert set(ROW_MAPS) == {"ball", "sphere", "lift", "ball-clip3", "sphere-clip3"}
    with pytest.raises(ValueError, match="row map"):
        row_map(_rows(), "cube", 1.0)


def test_the_clip_maps_bound_each_unit_variance_coordinate_at_3() -> None:
    z, r = _rows(), 0.7
    bound = ROW_CLIP * r / np.sqrt(z.shape[1])
    ball = row_map(z, "ball-clip3", r)
    np.testing.assert_array_equal(ball, np.clip(z, -bound, bound))
    assert np.max(np.abs(ball)) <= bound and np.max(np.abs(ball)) == bound  # row 3 hits it
    sphere = row_map(z, "sphere-clip3", r)
    np.testing.assert_allclose(sphere, row_map(ball, "sphere", r), rtol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(sphere[:-1], axis=1), r, rtol=1e-12)


# ------------------------------------------------------------------- the estimators' maps


def _fitted(tmp_path):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 5))
    x[:3, 0] = 1e4  # a few rows far out in one column: clipped at 3 deviations
    y = (x[:, 1] + 0.3 * rng.normal(size=300) > 0).astype(int)
    with pytest.warns(SmallSampleWarning):
        est = DPNTKClassifier(1.0, 1e-5, classes=[0, 1], random_state=jax.random.key(3)).fit(x, y)
    return est, x, est.save(tmp_path / "clf.npz")


def test_the_classifier_maps_rows_by_the_adopted_rule_and_the_regressor_as_before() -> None:
    assert DPNTKClassifier._row_map == "sphere-clip3"  # defaults-ntk-clip-rule.md
    assert DPNTKRegressor._row_map == "ball"


def test_a_fitted_classifier_reads_clipped_rows_on_the_sphere(tmp_path) -> None:  # type: ignore[no-untyped-def]
    est, x, _ = _fitted(tmp_path)
    z = est._scaled(x)
    r = est._row_radius()
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), r, rtol=1e-9)
    raw = (x - est._scaling["x_mean"]) / est._scaling["x_scale"]
    np.testing.assert_allclose(z, row_map(raw, "sphere-clip3", r), rtol=1e-12)


def test_the_map_is_saved_and_a_file_without_one_reads_as_ball(tmp_path) -> None:  # type: ignore[no-untyped-def]
    est, x, path = _fitted(tmp_path)
    back = privkernels.sklearn.load(path)
    assert checkpoint.load(path)[1]["estimator"]["row_map"] == "sphere-clip3"
    np.testing.assert_array_equal(back.decision_function(x), est.decision_function(x))
    arrays, meta = checkpoint.load(path)
    del meta["estimator"]["row_map"]  # as written before the map was saved
    old = privkernels.sklearn.load(checkpoint.save(tmp_path / "old.npz", arrays, meta))
    assert old._row_map == "ball"
    raw = (x - est._scaling["x_mean"]) / est._scaling["x_scale"]
    np.testing.assert_allclose(old._scaled(x), raw, rtol=1e-12)


@pytest.mark.parametrize("kind", ["lift", "sphere", "ball", "cube", None, ["sphere-clip3"]])
def test_a_row_map_no_fit_writes_is_refused_at_load(tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    _, _, path = _fitted(tmp_path)
    arrays, meta = checkpoint.load(path)
    meta["estimator"]["row_map"] = kind
    edited = checkpoint.save(tmp_path / "edited.npz", arrays, meta)
    with pytest.raises(ValueError, match="row_map"):
        privkernels.sklearn.load(edited)


def test_a_pickle_keeps_the_fit_s_map_and_an_old_pickle_reads_as_ball(tmp_path) -> None:  # type: ignore[no-untyped-def]
    est, x, _ = _fitted(tmp_path)
    assert vars(est)["_row_map"] == "sphere-clip3"
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.decision_function(x), est.decision_function(x))
    state = est.__getstate__()
    del state["_row_map"]  # as pickled before the map was kept on the instance
    old = DPNTKClassifier.__new__(DPNTKClassifier)
    old.__setstate__(state)
    assert old._row_map == "ball"


def test_input_bound_too_small_for_the_intercept_is_refused_before_any_noise(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Before: the private scales were drawn (and an accountant charged), then the model's
    ball ``input_bound / sqrt(2)`` was refused (the s65 attack, finding 5)."""
    x = np.random.default_rng(0).normal(size=(40, 3))
    y = np.arange(40) % 2
    forbid_noise(monkeypatch)
    for est in (DPNTKClassifier(classes=[0, 1], input_bound=1e-6, random_state=0),
                DPNTKRegressor(input_bound=1e-6, random_state=0)):  # fmt: skip
        with pytest.raises(ValueError, match="fit_intercept=True"):
            est.fit(x, y)


def test_a_refit_of_a_loaded_old_file_uses_the_class_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    est, x, path = _fitted(tmp_path)
    arrays, meta = checkpoint.load(path)
    del meta["estimator"]["row_map"]
    old = privkernels.sklearn.load(checkpoint.save(tmp_path / "old.npz", arrays, meta))
    assert old._row_map == "ball"
    y = est.predict(x)
    with pytest.warns(SmallSampleWarning):
        old.fit(x, y)
    assert old._row_map == "sphere-clip3"
