"""Discrete quadratic NTK (Gu et al. Def. 3.5): loop reference, PSD, chunking, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels.features import quadratic_ntk_kernel
from privkernels.features.quadratic_ntk import quadratic_ntk_features, random_ntk_weights


def _loop_kernel(x1: np.ndarray, x2: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Def. 3.5 literally: (1/m) sum_r << w_r, x_i > x_i, < w_r, x_j > x_j >."""
    out = np.zeros((len(x1), len(x2)))
    for i, xi in enumerate(x1):
        for j, xj in enumerate(x2):
            out[i, j] = np.mean([np.dot(np.dot(wr, xi) * xi, np.dot(wr, xj) * xj) for wr in w])
    return out


def test_matches_loop_and_features():
    rng = np.random.default_rng(0)
    x1, x2, w = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(7, 3))
    ref = _loop_kernel(x1, x2, w)
    with jax.enable_x64(True):
        k = quadratic_ntk_kernel(x1, x2, w)
        assert k.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(k), ref, rtol=1e-12, atol=1e-12)
        phi1, phi2 = quadratic_ntk_features(x1, w), quadratic_ntk_features(x2, w)
        assert phi1.shape == (4, 7 * 3)
        np.testing.assert_allclose(np.asarray(phi1 @ phi2.T), ref, rtol=1e-12, atol=1e-12)
    k32 = quadratic_ntk_kernel(x1.astype(np.float32), x2.astype(np.float32), w.astype(np.float32))
    assert k32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(k32), ref, rtol=1e-5, atol=1e-5)


def test_symmetric_psd_and_chunked():
    key_w, key_x = jax.random.split(jax.random.key(1))
    x = jax.random.normal(key_x, (30, 6))
    w = random_ntk_weights(key_w, 256, 6)
    k = np.asarray(quadratic_ntk_kernel(x, x, w), dtype=np.float64)
    np.testing.assert_allclose(k, k.T, rtol=1e-6, atol=1e-6)
    eig = np.linalg.eigvalsh((k + k.T) / 2)
    assert eig.min() >= -1e-5 * eig.max()
    for cs in (1, 7, 30):
        np.testing.assert_allclose(
            np.asarray(quadratic_ntk_kernel(x, x, w, chunk_size=cs)), k, rtol=1e-6, atol=1e-5
        )
    g = jax.grad(lambda a: jnp.sum(quadratic_ntk_kernel(a, x, w, chunk_size=7)))(x)
    assert bool(jnp.all(jnp.isfinite(g)))


def test_random_weights_distribution_and_determinism():
    key = jax.random.key(2)
    w = random_ntk_weights(key, 200, 10, sigma=2.5)
    assert w.shape == (200, 10) and w.dtype == jnp.float32
    np.testing.assert_array_equal(
        np.asarray(w), np.asarray(random_ntk_weights(key, 200, 10, sigma=2.5))
    )
    p = stats.kstest(np.asarray(w).ravel() / 2.5, "norm").pvalue
    assert p > 1e-3
    assert not np.array_equal(
        np.asarray(w), np.asarray(random_ntk_weights(jax.random.key(3), 200, 10, sigma=2.5))
    )


def test_continuous_limit():
    """With many neurons H^dis -> H^cts = sigma^2 <x_i, x_j>^2 (Def. 3.6)."""
    key_w, key_x = jax.random.split(jax.random.key(4))
    x = jax.random.normal(key_x, (5, 4)) / 2.0
    w = random_ntk_weights(key_w, 20000, 4, sigma=1.5)
    k = np.asarray(quadratic_ntk_kernel(x, x, w))
    cts = 1.5**2 * np.asarray(x @ x.T) ** 2
    np.testing.assert_allclose(k, cts, atol=0.05 * np.abs(cts).max())


def test_validation():
    x = np.ones((3, 4), np.float32)
    w = np.ones((5, 4), np.float32)
    with pytest.raises(ValueError, match="w must have shape"):
        quadratic_ntk_kernel(x, x, np.ones((5, 3)))
    with pytest.raises(ValueError, match="same dimension"):
        quadratic_ntk_kernel(x, np.ones((2, 3)), w)
    with pytest.raises(ValueError, match="w must have rank 2"):
        quadratic_ntk_kernel(x, x, np.ones(4))
    with pytest.raises(ValueError, match="x1"):
        quadratic_ntk_kernel(np.full((2, 4), np.nan), x, w)
    with pytest.raises(ValueError, match="chunk_size"):
        quadratic_ntk_kernel(x, x, w, chunk_size=0)
    with pytest.raises(TypeError, match="key"):
        random_ntk_weights(0, 5, 4)
    with pytest.raises(ValueError, match="sigma"):
        random_ntk_weights(jax.random.key(0), 5, 4, sigma=0.0)
    with pytest.raises(ValueError, match="m"):
        random_ntk_weights(jax.random.key(0), 0, 4)
