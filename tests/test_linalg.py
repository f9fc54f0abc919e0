"""Tests of privkernels.linalg: Cholesky PSD solves with the jitter policy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.linalg import psd_cholesky, psd_solve


def _spd(n: int, seed: int, cond: float = 10.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    evals = np.geomspace(1.0, cond, n)
    return (q * evals) @ q.T


def test_well_conditioned_solve_matches_numpy() -> None:
    k = _spd(40, 0)
    y = np.random.default_rng(1).standard_normal((40, 3))
    res = psd_solve(k.astype(np.float32), y.astype(np.float32), reg=0.5)
    expected = np.linalg.solve(k + 0.5 * np.eye(40), y)
    np.testing.assert_allclose(np.asarray(res.x), expected, rtol=2e-4, atol=2e-5)
    assert bool(res.ok)
    assert float(res.jitter) == 0.0
    assert int(res.tries) == 0


def test_vector_rhs_and_residual() -> None:
    k = _spd(25, 2, cond=100.0).astype(np.float32)
    y = np.random.default_rng(3).standard_normal(25).astype(np.float32)
    res = psd_solve(k, y)
    assert res.x.shape == (25,)
    np.testing.assert_allclose(k @ np.asarray(res.x), y, atol=1e-3)


def test_singular_psd_gets_jitter_and_finite_result() -> None:
    # rank-1 PSD matrix: the plain Cholesky breaks down (zero pivot -> NaN).
    v = np.arange(1, 11, dtype=np.float32)
    k = np.outer(v, v)
    assert not np.all(np.isfinite(np.asarray(jnp.linalg.cholesky(jnp.asarray(k)))))
    y = np.ones((10, 2), np.float32)
    res = psd_solve(k, y)
    assert bool(res.ok)
    assert int(res.tries) >= 1
    scale = float(np.mean(np.diag(k)))
    eps = float(np.finfo(np.float32).eps)
    # jitter follows the documented geometric schedule e * 10**t * mean(diag)
    np.testing.assert_allclose(float(res.jitter), eps * 10.0 ** int(res.tries) * scale, rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(res.x)))
    # and it is a backward-stable solution of the jittered system:
    # ||Kj x - y|| <= c * eps * ||Kj|| * ||x|| (Kj itself is ill-conditioned)
    kj = k.astype(np.float64) + float(res.jitter) * np.eye(10)
    x = np.asarray(res.x, np.float64)
    resid = np.linalg.norm(kj @ x - y)
    assert resid <= 100 * eps * np.linalg.norm(kj, 2) * np.linalg.norm(x)


def test_zero_matrix_and_exhausted_tries() -> None:
    k = np.zeros((4, 4), np.float32)
    res = psd_solve(k, np.ones(4, np.float32))
    assert bool(res.ok) and np.all(np.isfinite(np.asarray(res.x)))
    # no retries allowed: singular matrix -> not ok, NaN solution, no exception
    bad = psd_solve(np.ones((4, 4), np.float32), np.ones(4, np.float32), max_tries=0)
    assert not bool(bad.ok)
    assert np.all(np.isnan(np.asarray(bad.x)))


def test_float64_path() -> None:
    with jax.enable_x64(True):
        k = _spd(30, 4, cond=1e8)
        y = np.random.default_rng(5).standard_normal((30, 2))
        res = psd_solve(jnp.asarray(k), jnp.asarray(y))
        assert res.x.dtype == jnp.float64
        expected = np.linalg.solve(k, y)
        np.testing.assert_allclose(np.asarray(res.x), expected, rtol=1e-6, atol=1e-8)
        assert float(res.jitter) == 0.0
        # a singular float64 matrix gets a float64-sized jitter
        v = np.arange(1.0, 7.0)
        sing = psd_cholesky(jnp.asarray(np.outer(v, v)))
        assert bool(sing.ok) and int(sing.tries) >= 1
        assert float(sing.jitter) < 1e-6 * np.mean(v * v)


def test_under_jit_with_traced_reg() -> None:
    k = _spd(12, 6).astype(np.float32)
    y = np.ones((12, 1), np.float32)

    @jax.jit
    def f(kk: jax.Array, yy: jax.Array, reg: jax.Array) -> jax.Array:
        return psd_solve(kk, yy, reg=reg).x

    out = f(jnp.asarray(k), jnp.asarray(y), jnp.float32(0.1))
    np.testing.assert_allclose(
        np.asarray(out), np.linalg.solve(k + 0.1 * np.eye(12), y), rtol=1e-4, atol=1e-5
    )


def test_validation_errors() -> None:
    with pytest.raises(ValueError, match="square"):
        psd_solve(np.ones((3, 4), np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="rows"):
        psd_solve(np.eye(3, dtype=np.float32), np.ones(4, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        psd_solve(np.full((2, 2), np.nan, np.float32), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="reg"):
        psd_solve(np.eye(2, dtype=np.float32), np.ones(2, np.float32), reg=-1.0)
    with pytest.raises(ValueError, match="growth"):
        psd_solve(np.eye(2, dtype=np.float32), np.ones(2, np.float32), growth=1.0)
