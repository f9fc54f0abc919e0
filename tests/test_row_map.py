"""`privkernels.sklearn.row_map`: the fixed maps of standardised rows into the model's ball."""

from __future__ import annotations

import numpy as np
import pytest

from privkernels.sklearn import ROW_CLIP, ROW_MAPS, row_map


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
