"""Tests of privkernels.linalg: the one ridge Cholesky solve and its fallback policy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.linalg import psd_solve, ridge_cholesky, ridge_solve


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
    assert bool(res.ok) and float(res.shift) == 0.5


def test_vector_rhs_and_residual() -> None:
    k = _spd(25, 2, cond=100.0).astype(np.float32)
    y = np.random.default_rng(3).standard_normal(25).astype(np.float32)
    res = psd_solve(k, y)
    assert res.x.shape == (25,)
    np.testing.assert_allclose(k @ np.asarray(res.x), y, atol=1e-3)


def test_singular_psd_takes_the_fallback_and_reports_it() -> None:
    v = np.arange(1.0, 6.0, dtype=np.float32)
    k = jnp.asarray(np.outer(v, v))  # rank 1: the plain factor breaks down
    assert not bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(k))))
    rf = ridge_cholesky(k, 0.0, fallback=1e-3)
    assert not bool(rf.ok) and float(rf.shift) == pytest.approx(1e-3)
    assert bool(jnp.all(jnp.isfinite(rf.factor)))
    np.testing.assert_allclose(
        np.asarray(rf.factor @ rf.factor.T), np.asarray(k) + 1e-3 * np.eye(5), atol=1e-3
    )
    sol = psd_solve(k, jnp.ones(5), reg=0.0)
    assert bool(jnp.all(jnp.isfinite(sol.x))) and not bool(sol.ok)


def test_no_fallback_means_no_retry() -> None:
    k = jnp.zeros((3, 3))
    rf = ridge_cholesky(k, 0.0)
    assert not bool(rf.ok) and not bool(jnp.all(jnp.isfinite(rf.factor)))


def test_differentiable_and_jittable() -> None:
    k = jnp.asarray(_spd(6, 4), jnp.float32)
    y = jnp.ones((6, 2))

    def loss(a):
        return jnp.sum(ridge_solve(a @ a.T, y, 0.1, fallback=1e-4) ** 2)

    g = jax.jit(jax.grad(loss))(k)
    eps = 1e-3
    e = jnp.zeros_like(k).at[0, 1].set(eps)
    fd = (loss(k + e) - loss(k - e)) / (2 * eps)
    assert float(g[0, 1]) == pytest.approx(float(fd), rel=2e-2)


@pytest.mark.parametrize(
    "kw",
    [
        dict(K=np.ones((3, 4)), Y=np.ones(3)),
        dict(K=np.eye(3), Y=np.ones(4)),
        dict(K=np.full((2, 2), np.nan), Y=np.ones(2)),
        dict(K=np.eye(2), Y=np.ones(2), reg=-1.0),
    ],
)
def test_bad_input_raises(kw) -> None:
    with pytest.raises(ValueError):
        psd_solve(**kw)
