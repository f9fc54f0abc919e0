"""The DP-SGD noise transform (`privkernels.privacy.dpsgd.dpsgd_noise`): its law and its
keys (that it is the one place DP-SGD noise is drawn: tests/test_contract.py)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from privkernels import privacy
from privkernels.privacy.dpsgd import NEXT_KEY_TAG, DPSGDNoiseState, dpsgd_noise
from privkernels.privacy.keys import params_digest

DIGEST = (0x1234_5678, 0x9ABC_DEF0)


def _plan(eps: float) -> privacy.DPSGDPlan:
    return privacy.dpsgd_plan(
        privacy.Budget(eps, 1e-5),
        sampling_rate=0.1,
        steps=10,
        clip_norm=0.5,
        accountant="rdp",
        neighbouring="add-remove",
    )


def _zeros() -> dict[str, jax.Array]:
    return {"a": jnp.zeros((200, 300), jnp.float32), "b": jnp.zeros((40_000,), jnp.bfloat16)}


def _flat(tree: dict[str, jax.Array]) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in tree.values()])


def test_is_an_optax_transformation_with_a_named_tuple_state():
    tx = dpsgd_noise(1.0, DIGEST, key=jax.random.key(0))
    assert isinstance(tx, optax.GradientTransformation)
    state = tx.init({"w": jnp.zeros(3)})
    assert isinstance(state, DPSGDNoiseState)
    _, nxt = tx.update({"w": jnp.zeros(3)}, state)
    want = jax.random.fold_in(jax.random.key(0), NEXT_KEY_TAG)
    np.testing.assert_array_equal(jax.random.key_data(nxt.key), jax.random.key_data(want))
    with pytest.raises(ValueError, match="key"):
        dpsgd_noise(1.0, DIGEST).init({"w": jnp.zeros(3)})


def test_noise_has_std_sigma_c_per_coordinate():
    """100,000 draws (two leaves, one bfloat16: noise is float32 anyway) over five states:
    mean, second moment (5 standard errors) and a KS test against N(0, (sigma C)^2)."""
    std = 0.7 * 1.3
    tx = dpsgd_noise(std, DIGEST, key=jax.random.key(11))
    state, draws = tx.init(None), []
    for _ in range(5):
        out, state = tx.update(_zeros(), state)
        assert all(v.dtype == jnp.float32 for v in out.values())
        draws.append(_flat(out) / std)
    z = np.concatenate(draws)
    n = z.size
    assert abs(z.mean()) < 5.0 / math.sqrt(n)
    assert abs(np.mean(z**2) - 1.0) < 5.0 * math.sqrt(2.0 / n)
    assert stats.kstest(z, "norm").pvalue > 1e-6
    # successive states, and the two leaves of one state, draw independently
    r = np.corrcoef(np.stack([d[:60_000] for d in draws]))
    assert np.max(np.abs(r - np.eye(5))) < 5.0 / math.sqrt(60_000)
    a, b = draws[0][:40_000], draws[0][60_000:]
    assert abs(np.corrcoef(a, b)[0, 1]) < 5.0 / math.sqrt(40_000)


def test_two_plans_from_one_key_draw_independent_noise():
    """Two budgets (two digests) and one key: uncorrelated draws, never the same bits;
    the same plan and key: the same bits (reproducible)."""
    key = jax.random.key(5)
    p1, p2 = _plan(1.0), _plan(2.0)
    assert p1.digest != p2.digest
    z1 = _flat(p1.add_noise(key, _zeros())) / p1.noise_std
    z2 = _flat(p2.add_noise(key, _zeros())) / p2.noise_std
    assert abs(np.corrcoef(z1, z2)[0, 1]) < 5.0 / math.sqrt(z1.size)
    assert not np.any(z1 == z2)
    np.testing.assert_array_equal(_flat(p1.add_noise(key, _zeros())) / p1.noise_std, z1)


def test_noise_key_is_the_digest_folded_into_the_state_key_split_per_leaf():
    """Leaf j of n: ``summed_j + std * normal(split(fold_digest(key, digest), n)[j])``,
    bit for bit, eagerly with Python parameters and compiled with traced ones alike: the
    derivation DP-KIP's same-key results rest on."""
    summed = {"a": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones((4,), jnp.float32)}

    def reference(key, std, digest):
        base = jax.random.fold_in(jax.random.fold_in(key, digest[0]), digest[1])
        ka, kb = jax.random.split(base, 2)
        return {
            "a": summed["a"] + std * jax.random.normal(ka, (2, 3), jnp.float32),
            "b": summed["b"] + std * jax.random.normal(kb, (4,), jnp.float32),
        }

    def transform(key, std, digest):
        return dpsgd_noise(std, digest).update(summed, DPSGDNoiseState(key))[0]

    key, std = jax.random.key(7), 0.37
    traced = (key, jnp.float32(std), jnp.asarray(DIGEST, jnp.uint32))
    pairs = (
        (transform(key, std, DIGEST), reference(key, std, DIGEST)),
        (jax.jit(transform)(*traced), jax.jit(reference)(*traced)),
    )
    for got, want in pairs:
        for name in want:
            np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))


def test_noisy_clipped_sum_key_is_bound_to_its_parameters():
    """The audit's clipped-sum path goes through the transform with a digest of (C, sigma):
    one key at two noise multipliers gives uncorrelated noise."""
    g = {"a": jnp.zeros((3, 20_000), jnp.float32)}
    mask = jnp.ones(3, bool)
    key = jax.random.key(9)
    z = [
        np.asarray(privacy.noisy_clipped_sum(key, g, mask, clip_norm=1.0, noise_multiplier=s)["a"])
        / s
        for s in (1.0, 2.0)
    ]
    assert abs(np.corrcoef(z[0], z[1])[0, 1]) < 5.0 / math.sqrt(z[0].size)
    digest = params_digest("noisy_clipped_sum", clip_norm=1.0, noise_multiplier=1.0)
    want, _ = dpsgd_noise(1.0, digest).update({"a": jnp.zeros(20_000)}, DPSGDNoiseState(key))
    np.testing.assert_array_equal(z[0], np.asarray(want["a"]))
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(
            lambda s: privacy.noisy_clipped_sum(key, g, mask, clip_norm=1.0, noise_multiplier=s)
        )(1.0)
