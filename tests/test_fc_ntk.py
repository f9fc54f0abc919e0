"""Closed-form FC-NTK vs the neural-tangents reference fixture, and its properties."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.features import fc_ntk_kernel

FIXTURE = Path(__file__).parent / "fixtures" / "fc_ntk_reference.npz"


@pytest.fixture(scope="module")
def reference() -> dict:
    with np.load(FIXTURE) as z:
        data = {k: z[k] for k in z.files}
    data["meta"] = json.loads(str(data.pop("metadata")))
    return data


def _cases(ref: dict):
    meta = ref["meta"]
    for i, cfg in enumerate(meta["configs"]):
        for p, (a, b) in enumerate(meta["pairs"]):
            yield cfg, ref[a], ref[b], ref[f"k_{i}_{p}"]


def _diag_ntk(x: np.ndarray, depth: int, w: float, b: float) -> np.ndarray:
    """Independent diagonal K(x, x): c = 1 so kappa0 = kappa1 = 1/2 (float64 numpy)."""
    sw, sb = w**2, b**2
    q = sw * np.sum(x * x, axis=-1) / x.shape[-1] + sb
    theta = q
    for _ in range(depth):
        q = sw * q / 2 + sb
        theta = q + sw * theta / 2
    return theta


def test_fixture_metadata(reference):
    meta = reference["meta"]
    assert meta["neural_tangents_version"] and meta["jax_version"]
    assert len(meta["configs"]) == 36
    assert {c["depth"] for c in meta["configs"]} == {1, 2, 3, 5}


def test_matches_neural_tangents_float64(reference):
    worst = 0.0
    with jax.enable_x64(True):
        for cfg, x1, x2, ref in _cases(reference):
            ours = fc_ntk_kernel(x1, x2, **cfg)
            assert ours.dtype == jnp.float64
            ours = np.asarray(ours)
            # Exact zeros (anti-parallel rows with b_std = 0) carry
            # neural-tangents' own ~1e-8 rounding noise: small absolute floor.
            tol = 1e-5 * np.abs(ref) + 1e-7 * np.abs(ref).max()
            assert np.all(np.abs(ours - ref) <= tol), cfg
            big = np.abs(ref) > 1e-6 * np.abs(ref).max()
            worst = max(worst, float(np.max(np.abs(ours - ref)[big] / np.abs(ref[big]))))
    assert worst < 1e-5


def test_matches_neural_tangents_float32(reference):
    for cfg, x1, x2, ref in _cases(reference):
        ours = fc_ntk_kernel(x1.astype(np.float32), x2.astype(np.float32), **cfg)
        assert ours.dtype == jnp.float32
        # arccos near c = +-1 is only sqrt(eps32) ~ 3e-4 accurate.
        np.testing.assert_allclose(
            np.asarray(ours), ref, rtol=2e-4, atol=1e-3 * np.abs(ref).max(), err_msg=str(cfg)
        )


def test_diagonal_matches_independent_formula():
    x = np.random.default_rng(0).normal(size=(7, 9))
    with jax.enable_x64(True):
        for depth, w, b in [(1, 1.0, 0.0), (3, 1.5, 0.5), (4, 2**0.5, 0.1)]:
            k = np.asarray(fc_ntk_kernel(x, x, depth=depth, W_std=w, b_std=b))
            np.testing.assert_allclose(np.diag(k), _diag_ntk(x, depth, w, b), rtol=1e-10)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_self_comparison_diagonal_is_exact_in_float32(chunk_size):
    """K(x, x) in float32, d = 784: the diagonal at c = 1, not at a c one ulp below it.

    The general path (x2 a different object holding the same values) gives the
    same off-diagonal entries; on this CPU its diagonal is 8e-5 to 3e-4 off."""
    x = np.random.default_rng(3).normal(size=(7, 784)).astype(np.float32)
    for depth in (1, 3):
        ref = _diag_ntk(x.astype(np.float64), depth, 1.0, 0.0)
        k = np.asarray(fc_ntk_kernel(x, x, depth=depth, chunk_size=chunk_size))
        k_none = np.asarray(fc_ntk_kernel(x, None, depth=depth, chunk_size=chunk_size))
        general = np.asarray(fc_ntk_kernel(x, x.copy(), depth=depth, chunk_size=chunk_size))
        np.testing.assert_array_equal(k, k_none)
        np.testing.assert_allclose(np.diag(k), ref, rtol=1e-6)
        off = ~np.eye(7, dtype=bool)
        np.testing.assert_array_equal(k[off], general[off])


def test_self_gram_diagonal_is_exact_under_jit_at_every_depth():
    """``fc_ntk_kernel_from_gram(same=True)``, jitted as DP-KIP's Gram-form clipping
    runs it: c = 1 on the diagonal at every layer (without the mask, XLA's fused
    recursion let c drift an ulp below 1 from the second layer on)."""
    from privkernels.features import fc_ntk_kernel_from_gram

    x = np.random.default_rng(4).normal(size=(7, 784)).astype(np.float32)
    gram = x @ x.T
    diag = np.diagonal(gram).copy()
    for depth in (1, 2, 3):
        ref = _diag_ntk(x.astype(np.float64), depth, 2**0.5, 0.1)
        fn = jax.jit(lambda g, q, d=depth: fc_ntk_kernel_from_gram(
            g, q, q, dim=784, depth=d, W_std=2**0.5, b_std=0.1, same=True))  # fmt: skip
        np.testing.assert_allclose(np.diag(np.asarray(fn(gram, diag))), ref, rtol=1e-6)
    copy = fc_ntk_kernel(x, x.copy(), depth=2, same=True)  # another object, declared one set
    np.testing.assert_array_equal(np.asarray(copy), np.asarray(fc_ntk_kernel(x, x, depth=2)))
    with pytest.raises(ValueError, match="same=True"):
        fc_ntk_kernel(x, x[:3], depth=1, same=True)
    with pytest.raises(ValueError, match="same=True"):
        fc_ntk_kernel_from_gram(gram[:3], diag[:3], diag, dim=784, depth=1, same=True)


def test_symmetry_and_psd():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(24, 6))
    z = rng.normal(size=(5, 6))
    with jax.enable_x64(True):
        k = np.asarray(fc_ntk_kernel(x, x, depth=3, W_std=1.3, b_std=0.2))
        np.testing.assert_allclose(k, k.T, rtol=1e-12, atol=0)
        eig = np.linalg.eigvalsh(k)
        assert eig.min() >= -1e-10 * eig.max()
        kxz = np.asarray(fc_ntk_kernel(x, z, depth=3, W_std=1.3, b_std=0.2))
        kzx = np.asarray(fc_ntk_kernel(z, x, depth=3, W_std=1.3, b_std=0.2))
        np.testing.assert_allclose(kxz, kzx.T, rtol=1e-12)


@pytest.mark.parametrize("x64", [False, True])
def test_gradients_finite_including_diagonal(x64):
    rng = np.random.default_rng(2)
    x0 = rng.normal(size=(5, 4))
    z0 = np.concatenate([x0[:2], -x0[2:3], rng.normal(size=(2, 4))])  # shares rows with x

    def loss(x, z):
        return (
            jnp.sum(fc_ntk_kernel(x, x, depth=3, W_std=1.5, b_std=0.1))
            - 2.0 * jnp.sum(fc_ntk_kernel(x, z, depth=3, W_std=1.5, b_std=0.1))
            + jnp.sum(fc_ntk_kernel(z, z, depth=3, W_std=1.5, b_std=0.1) ** 2)
        )

    with jax.enable_x64(x64):
        dt = jnp.float64 if x64 else jnp.float32
        gx, gz = jax.grad(loss, argnums=(0, 1))(jnp.asarray(x0, dt), jnp.asarray(z0, dt))
        assert gx.dtype == dt
        assert bool(jnp.all(jnp.isfinite(gx))) and bool(jnp.all(jnp.isfinite(gz)))


def test_gradient_of_diagonal_matches_independent_formula():
    """d/dx sum_i K(x_i, x_i): the c = 1 kink must not pollute the gradient."""
    x0 = np.random.default_rng(3).normal(size=(4, 5))
    with jax.enable_x64(True):
        g = jax.grad(lambda x: jnp.trace(fc_ntk_kernel(x, x, depth=3, W_std=1.5, b_std=0.3)))(
            jnp.asarray(x0)
        )

        def diag(x):
            sw, sb = 1.5**2, 0.3**2
            q = sw * jnp.sum(x * x, axis=-1) / x.shape[-1] + sb
            theta = q
            for _ in range(3):
                q = sw * q / 2 + sb
                theta = q + sw * theta / 2
            return jnp.sum(theta)

        np.testing.assert_allclose(
            np.asarray(g), np.asarray(jax.grad(diag)(jnp.asarray(x0))), rtol=1e-6
        )


def test_gradient_matches_finite_difference_off_diagonal():
    rng = np.random.default_rng(4)
    x0, z0 = rng.normal(size=(3, 4)), rng.normal(size=(2, 4))
    weights = rng.normal(size=(3, 2))
    with jax.enable_x64(True):

        def f(x, z):
            return jnp.sum(
                jnp.asarray(weights) * fc_ntk_kernel(x, z, depth=2, W_std=1.2, b_std=0.1)
            )

        gx, gz = jax.grad(f, argnums=(0, 1))(jnp.asarray(x0), jnp.asarray(z0))
        h = 1e-6
        for arr, g, which in ((x0, gx, 0), (z0, gz, 1)):
            for idx in [(0, 0), (1, 3)]:
                plus, minus = arr.copy(), arr.copy()
                plus[idx] += h
                minus[idx] -= h
                args_p = (plus, z0) if which == 0 else (x0, plus)
                args_m = (minus, z0) if which == 0 else (x0, minus)
                fd = (float(f(*args_p)) - float(f(*args_m))) / (2 * h)
                assert abs(fd - float(g[idx])) <= 1e-6 * max(1.0, abs(fd))


def test_chunked_equals_unchunked_and_jit_vmap():
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(11, 6)), jnp.float32)
    z = jnp.asarray(rng.normal(size=(7, 6)), jnp.float32)
    full = fc_ntk_kernel(x, z, depth=2, W_std=1.4, b_std=0.1)
    for cs in (1, 4, 11, 50):
        np.testing.assert_allclose(
            np.asarray(fc_ntk_kernel(x, z, depth=2, W_std=1.4, b_std=0.1, chunk_size=cs)),
            np.asarray(full),
            rtol=1e-6,
            atol=1e-7,
        )
    jitted = jax.jit(lambda a, b: fc_ntk_kernel(a, b, depth=2, W_std=1.4, b_std=0.1, chunk_size=4))
    np.testing.assert_allclose(np.asarray(jitted(x, z)), np.asarray(full), rtol=1e-6, atol=1e-7)
    zs = jnp.stack([z, 2.0 * z])
    batched = jax.vmap(lambda b: fc_ntk_kernel(x, b, depth=2, W_std=1.4, b_std=0.1))(zs)
    np.testing.assert_allclose(np.asarray(batched[0]), np.asarray(full), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        np.asarray(batched[1]),
        np.asarray(fc_ntk_kernel(x, 2.0 * z, depth=2, W_std=1.4, b_std=0.1)),
        rtol=1e-6,
    )


def test_flattens_trailing_dims_and_zero_input():
    rng = np.random.default_rng(6)
    imgs = rng.normal(size=(3, 2, 4)).astype(np.float32)
    flat = imgs.reshape(3, 8)
    np.testing.assert_allclose(
        np.asarray(fc_ntk_kernel(imgs, imgs, depth=1)),
        np.asarray(fc_ntk_kernel(flat, flat, depth=1)),
    )
    x = np.zeros((2, 3), np.float32)
    x[1] = 1.0
    k = fc_ntk_kernel(x, x, depth=2)
    assert bool(jnp.all(jnp.isfinite(k))) and float(k[0, 0]) == 0.0
    g = jax.grad(lambda a: jnp.sum(fc_ntk_kernel(a, a, depth=2, b_std=0.1)))(jnp.asarray(x))
    assert bool(jnp.all(jnp.isfinite(g)))


def test_validation():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="depth"):
        fc_ntk_kernel(x, x, depth=0)
    with pytest.raises(TypeError, match="depth"):
        fc_ntk_kernel(x, x, depth=2.0)
    with pytest.raises(ValueError, match="W_std"):
        fc_ntk_kernel(x, x, depth=1, W_std=0.0)
    with pytest.raises(ValueError, match="b_std"):
        fc_ntk_kernel(x, x, depth=1, b_std=-0.1)
    with pytest.raises(ValueError, match="same feature dimension"):
        fc_ntk_kernel(x, np.ones((2, 5)), depth=1)
    with pytest.raises(ValueError, match="x2"):
        fc_ntk_kernel(x, np.ones(4), depth=1)
    with pytest.raises(ValueError, match="x1"):
        fc_ntk_kernel(np.zeros((0, 4)), x, depth=1)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="x1.*NaN"):
        fc_ntk_kernel(bad, x, depth=1)
    with pytest.raises(ValueError, match="chunk_size"):
        fc_ntk_kernel(x, x, depth=1, chunk_size=0)
    with pytest.raises(ValueError, match="backend"):
        fc_ntk_kernel(x, x, depth=1, backend="torch")


def test_neural_tangents_backend_error_is_clear():
    try:
        import neural_tangents  # noqa: F401
    except Exception:
        pass
    else:  # pragma: no cover - only in the reference environment
        pytest.skip("neural_tangents imports here; the backend is exercised by the fixture script")
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ImportError) as info:
        fc_ntk_kernel(x, x, depth=1, backend="neural_tangents")
    msg = str(info.value)
    assert "jax<=0.5.3" in msg and "0.4.25" in msg and jax.__version__ in msg
    assert "closed_form" in msg
