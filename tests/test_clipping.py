"""Tests of per-example clipping and the noisy clipped sum (DP-SGD step)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels.privacy.clipping import (
    NORM_MARGIN,
    clip_per_example,
    noisy_clipped_sum,
    per_example_norms,
)

KEY = jax.random.key(42)


def _grads(b: int = 16, seed: int = 0, scale: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": jnp.asarray(scale * rng.normal(size=(b, 3, 4)), jnp.float32),
        "b": jnp.asarray(scale * rng.normal(size=(b, 4)), jnp.float32),
        "nested": [jnp.asarray(scale * rng.normal(size=(b,)), jnp.float32)],
    }


def _np_norms(g: dict) -> np.ndarray:
    leaves = jax.tree_util.tree_leaves(g)
    b = leaves[0].shape[0]
    return np.sqrt(
        sum(np.sum(np.asarray(x, np.float64).reshape(b, -1) ** 2, axis=1) for x in leaves)
    )


def test_norms_are_global_across_leaves():
    g = _grads()
    np.testing.assert_allclose(per_example_norms(g), _np_norms(g), rtol=1e-5)


@pytest.mark.parametrize("clip", [0.1, 1.0, 3.0, 100.0])
def test_clip_bounds_norm_preserves_direction(clip):
    g = _grads(b=32, scale=0.8)
    clipped, norms = clip_per_example(g, clip)
    before = _np_norms(g)
    after = _np_norms(clipped)
    np.testing.assert_allclose(norms, before, rtol=1e-5)
    assert np.all(after <= clip)  # never above C, even in float64 arithmetic on float32 data
    target = clip / (1.0 + NORM_MARGIN)  # clipped norms land on C / (1 + margin)
    below = before <= target
    np.testing.assert_allclose(after[below], before[below], rtol=1e-6)  # unchanged below
    np.testing.assert_allclose(after[~below], target, rtol=1e-5)
    # same direction: clipped = s_i * g_i with s_i = min(1, C/(||g_i|| (1 + margin)))
    s = np.minimum(1.0, target / before)
    for a, c in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(clipped), strict=True):
        a = np.asarray(a, np.float64)
        np.testing.assert_allclose(
            np.asarray(c), a * s.reshape((-1,) + (1,) * (a.ndim - 1)), rtol=1e-5, atol=1e-7
        )


def test_zero_and_nonfinite_examples():
    g = _grads(b=4)
    g = jax.tree_util.tree_map(lambda x: x.at[0].set(0.0), g)  # zero gradient
    g["w"] = g["w"].at[1, 0, 0].set(jnp.nan)
    g["b"] = g["b"].at[2, 1].set(jnp.inf)
    clipped, norms = clip_per_example(g, 1.0)
    for leaf in jax.tree_util.tree_leaves(clipped):
        assert np.all(np.isfinite(np.asarray(leaf)))
        np.testing.assert_array_equal(np.asarray(leaf[:3]), 0.0)  # zero stays zero; bad -> 0
    assert norms[0] == 0.0 and not np.isfinite(norms[1]) and not np.isfinite(norms[2])
    assert _np_norms(clipped)[3] <= 1.0 + 1e-6


def test_clip_under_jit_and_vmap_with_traced_clip_norm():
    g = _grads(b=8)
    eager, _ = clip_per_example(g, 0.5)
    jitted, _ = jax.jit(clip_per_example)(g, jnp.float32(0.5))
    for a, b in zip(
        jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_noisy_sum_noise_std_and_mask():
    b, d = 12, 20000
    rng = np.random.default_rng(1)
    g = {
        "a": jnp.asarray(rng.normal(size=(b, d)) / math.sqrt(d), jnp.float32),
        "c": jnp.asarray(rng.normal(size=(b, 50, 40)) / 40.0, jnp.float32),
    }
    clipped, _ = clip_per_example(g, 1.0)
    mask = np.zeros(b, bool)
    mask[[0, 3, 4, 9]] = True
    # padding rows hold garbage (NaN/huge): they must not leak into the sum
    clipped = {
        "a": clipped["a"].at[1].set(jnp.nan).at[2].set(1e30),
        "c": clipped["c"].at[5].set(jnp.inf),
    }
    sigma, c = 0.7, 1.0
    out = noisy_clipped_sum(KEY, clipped, jnp.asarray(mask), clip_norm=c, noise_multiplier=sigma)
    assert out["a"].shape == (d,) and out["c"].shape == (50, 40)
    noises = []
    for name in ("a", "c"):
        exact = np.asarray(clipped[name], np.float64)[mask].sum(0)
        noise = (np.asarray(out[name], np.float64) - exact).ravel() / (sigma * c)
        assert np.all(np.isfinite(noise))
        assert stats.kstest(noise, "norm").pvalue > 1e-3
        noises.append(noise)
    # leaves get independent draws (no shared key)
    m = min(noises[0].size, noises[1].size)
    assert abs(np.corrcoef(noises[0][:m], noises[1][:m])[0, 1]) < 4 / math.sqrt(m)


def test_noisy_sum_determinism_and_int_mask():
    g, _ = clip_per_example(_grads(b=6), 1.0)
    mask = jnp.array([1, 1, 0, 1, 0, 0])
    a = noisy_clipped_sum(KEY, g, mask, clip_norm=1.0, noise_multiplier=1.1)
    b = noisy_clipped_sum(KEY, g, mask.astype(bool), clip_norm=1.0, noise_multiplier=1.1)
    c = noisy_clipped_sum(jax.random.key(3), g, mask, clip_norm=1.0, noise_multiplier=1.1)
    for x, y, z in zip(*(jax.tree_util.tree_leaves(t) for t in (a, b, c)), strict=True):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(np.asarray(x), np.asarray(z))
    f = jax.jit(lambda k, gg, mm: noisy_clipped_sum(k, gg, mm, clip_norm=1.0, noise_multiplier=1.1))
    for x, y in zip(
        jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(f(KEY, g, mask)), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_validation(bad):
    g = _grads(b=3)
    with pytest.raises(ValueError, match="clip_norm"):
        clip_per_example(g, bad)
    with pytest.raises(ValueError, match="clip_norm"):
        noisy_clipped_sum(KEY, g, jnp.ones(3, bool), clip_norm=bad, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        noisy_clipped_sum(KEY, g, jnp.ones(3, bool), clip_norm=1.0, noise_multiplier=bad)


def test_structure_validation():
    g = _grads(b=3)
    with pytest.raises(ValueError, match="mask"):
        noisy_clipped_sum(KEY, g, jnp.ones(4, bool), clip_norm=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="disagree"):
        clip_per_example({"a": jnp.ones((3, 2)), "b": jnp.ones((4,))}, 1.0)
    with pytest.raises(ValueError, match="leading example axis"):
        clip_per_example({"a": jnp.ones(())}, 1.0)
    with pytest.raises(ValueError, match="no array leaves"):
        clip_per_example({}, 1.0)
    with pytest.raises(TypeError, match="key"):
        noisy_clipped_sum(1, g, jnp.ones(3, bool), clip_norm=1.0, noise_multiplier=1.0)
