"""Support-image smoothing (post-processing prior for DP-KIP, issue 16)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from privkernels import dp_kip
from privkernels.dp_kip.smoothing import blur_matrix, smooth_images, smooth_updates


@pytest.mark.parametrize("size, sigma", [(8, 0.5), (28, 1.0), (28, 3.0), (5, 4.0)])
def test_blur_matrix_is_row_stochastic_and_nonnegative(size, sigma):
    b = blur_matrix(size, sigma)
    assert b.shape == (size, size) and np.all(b >= 0)
    np.testing.assert_allclose(b.sum(1), 1.0, atol=1e-6)


def test_smoothing_keeps_constants_and_removes_high_frequencies():
    rng = np.random.default_rng(0)
    const = np.full((2, 28, 28), 0.7, np.float32)
    np.testing.assert_allclose(smooth_images(const, 1.5), const, atol=1e-6)
    checker = np.indices((28, 28)).sum(0) % 2 * 2.0 - 1.0  # the highest frequency
    out = smooth_images(checker[None].astype(np.float32), 1.0)
    assert np.abs(out[:, 3:-3, 3:-3]).max() < 0.01
    noise = rng.normal(size=(4, 28, 28, 3)).astype(np.float32)  # channels pass through
    assert smooth_images(noise, 1.0).shape == noise.shape
    with pytest.raises(ValueError, match="images"):
        smooth_images(np.zeros((4, 784), np.float32), 1.0)
    with pytest.raises(ValueError, match="sigma"):
        smooth_images(const, 0.0)


def test_smooth_updates_blurs_x_only():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 8, 8)), jnp.float32)
    params = {"x": x, "y": jnp.ones((3, 2))}
    tx = smooth_updates(1.0)
    upd, _ = tx.update(params, tx.init(params))
    np.testing.assert_allclose(upd["x"], smooth_images(x, 1.0), atol=1e-6)
    np.testing.assert_array_equal(upd["y"], params["y"])


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_fit_with_a_smoothing_optimizer_keeps_the_support_smooth():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images[:300] / 16.0 * 2 - 1).astype(np.float32)
    start = np.full((20, 8, 8), 0.0, np.float32)
    kw = dict(epsilon=1.0, n_classes=10, support_per_class=2, epochs=1, batch_size=60,
              progress=False, init=lambda k, m, s: jnp.asarray(start))  # fmt: skip
    plain = dp_kip.fit(jax.random.key(0), x, d.target[:300], **kw)
    smooth = dp_kip.fit(jax.random.key(0), x, d.target[:300],
                        optimizer=optax.chain(optax.adam(0.1), smooth_updates(1.0)), **kw)  # fmt: skip

    def roughness(a):  # mean squared difference of neighbouring pixels
        return float(np.mean(np.diff(a, axis=1) ** 2) + np.mean(np.diff(a, axis=2) ** 2))

    assert roughness(smooth.support_x) < 0.5 * roughness(plain.support_x)
    assert smooth.report.epsilon == plain.report.epsilon  # post-processing: same release cost
