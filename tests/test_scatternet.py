"""ScatterNet features: shapes, agreement with kymatio's NumPy backend, gradients, chunking."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.features import scatternet_features
from privkernels.features.scatternet import scatternet_num_features


def _numpy_scattering(x: np.ndarray, J: int, L: int) -> np.ndarray:
    """Independent reference: kymatio's NumPy backend (no JAX involved)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kymatio.scattering2d.frontend.numpy_frontend import (
            ScatteringNumPy2D as Scattering2D,
        )

        s = Scattering2D(J=J, shape=x.shape[-2:], L=L)
    return np.asarray(s(x)).reshape(x.shape[0], -1)


def test_shapes_grayscale_and_rgb():
    rng = np.random.default_rng(0)
    g = scatternet_features(rng.random((2, 28, 28), dtype=np.float32))
    assert g.shape == (2, 81 * 7 * 7) == (2, scatternet_num_features((28, 28)))
    assert g.dtype == jnp.float32
    rgb_first = rng.random((2, 3, 32, 32), dtype=np.float32)
    a = scatternet_features(rgb_first)
    assert a.shape == (2, 3 * 81 * 8 * 8) == (2, scatternet_num_features((3, 32, 32)))
    b = scatternet_features(np.moveaxis(rgb_first, 1, -1))  # (n, h, w, 3)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c = scatternet_features(np.moveaxis(rgb_first, 1, -1), layout="channels_last")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    assert scatternet_num_features((16, 16), J=1, L=4) == (1 + 4) * 8 * 8


def test_matches_kymatio_numpy_backend_and_eager():
    x = np.random.default_rng(1).random((3, 16, 16), dtype=np.float32)
    ours = np.asarray(scatternet_features(x))
    ref = _numpy_scattering(x, J=2, L=8)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    with jax.disable_jit():
        eager = np.asarray(scatternet_features(x))
    np.testing.assert_allclose(ours, eager, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    f_small = scatternet_features(x, J=1, L=4)
    assert f_small.shape == (3, scatternet_num_features((16, 16), J=1, L=4))


def test_chunked_equals_unchunked():
    x = jnp.asarray(np.random.default_rng(2).random((5, 16, 16), dtype=np.float32))
    full = np.asarray(scatternet_features(x))
    for cs in (2, 5):
        np.testing.assert_allclose(
            np.asarray(scatternet_features(x, chunk_size=cs)), full, rtol=1e-6, atol=1e-7
        )


def test_gradient_finite_and_matches_finite_difference():
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        x0 = rng.random((3, 16, 16))
        x0[2] = 0.0  # constant image: modulus of exactly-zero coefficients
        weights = jnp.asarray(rng.normal(size=(3, scatternet_num_features((16, 16)))))

        def loss(x):  # chunk_size=2: exercises the padded lax.map path too
            return jnp.sum(weights * scatternet_features(x, chunk_size=2))

        g = np.asarray(jax.grad(loss)(jnp.asarray(x0)))
        assert np.all(np.isfinite(g))
        h = 1e-5
        for idx in [(0, 3, 4), (1, 8, 11)]:
            plus, minus = x0.copy(), x0.copy()
            plus[idx] += h
            minus[idx] -= h
            fd = (float(loss(jnp.asarray(plus))) - float(loss(jnp.asarray(minus)))) / (2 * h)
            assert abs(fd - g[idx]) <= 1e-5 * max(1.0, abs(fd))


def test_validation():
    x = np.zeros((2, 16, 16), np.float32)
    with pytest.raises(ValueError, match="rank"):
        scatternet_features(np.zeros((16, 16), np.float32))
    with pytest.raises(ValueError, match="J=5"):
        scatternet_features(x, J=5)
    with pytest.raises(ValueError, match="ambiguous"):
        scatternet_features(np.zeros((2, 3, 16, 3), np.float32))
    with pytest.raises(ValueError, match="layout"):
        scatternet_features(x, layout="nhwc")
    with pytest.raises(ValueError, match="chunk_size"):
        scatternet_features(x, chunk_size=0)
    with pytest.raises(TypeError, match="L"):
        scatternet_features(x, L=8.0)
    bad = x.copy()
    bad[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        scatternet_features(bad)


def test_group_norm_standardises_each_group_per_position():
    x = np.random.default_rng(4).random((2, 16, 16), dtype=np.float32)
    raw = np.asarray(scatternet_features(x), np.float64).reshape(2, 81, 4, 4)
    got = np.asarray(scatternet_features(x, group_norm=27)).reshape(2, 81, 4, 4)
    groups = raw.reshape(2, 27, 3, 4, 4)
    mean = groups.mean(axis=2, keepdims=True)
    var = groups.var(axis=2, keepdims=True)
    want = ((groups - mean) / np.sqrt(var + 1e-5)).reshape(2, 81, 4, 4)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    # Per-example: an example's features do not depend on the rest of the batch.
    alone = np.asarray(scatternet_features(x[:1], group_norm=27))
    np.testing.assert_allclose(alone, got[:1].reshape(1, -1), rtol=1e-5, atol=1e-6)
    # RGB: each colour channel's 81 maps are grouped separately.
    rgb = np.random.default_rng(5).random((1, 3, 16, 16), dtype=np.float32)
    g = np.asarray(scatternet_features(rgb, group_norm=9)).reshape(1, 3, 9, 9, 4, 4)
    np.testing.assert_allclose(g.mean(axis=3), 0.0, atol=1e-4)
    with pytest.raises(ValueError, match="group_norm"):
        scatternet_features(x, group_norm=4)
    with pytest.raises(ValueError, match="group_norm"):
        scatternet_features(x, group_norm=81)


def test_group_norm_vjp_batched_over_cotangents_compiles_and_matches_a_loop():
    """Input-space clipping batches per-example cotangents through the feature map's VJP
    (`vmap` under `jit`). jaxlib 0.10.2's CPU compiler crashed on that program for the 6-D
    group view on an AMD EPYC without AVX-512 (a segmentation fault, fixed by the 3-D view);
    the batched VJP must compile and equal one VJP per cotangent."""
    x = jax.random.normal(jax.random.key(0), (3, 16, 16))
    cts = jax.random.normal(jax.random.key(1), (2, 3, 81 * 4 * 4))
    _, vjp = jax.vjp(lambda a: scatternet_features(a, group_norm=27), x)
    batched = np.asarray(jax.jit(jax.vmap(lambda c: vjp(c)[0]))(cts))
    looped = np.stack([np.asarray(vjp(c)[0]) for c in cts])
    assert batched.shape == (2, 3, 16, 16) and np.all(np.isfinite(batched))
    np.testing.assert_allclose(batched, looped, rtol=1e-4, atol=1e-5)
