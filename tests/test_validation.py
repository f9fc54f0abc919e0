"""The shared argument checks reject bad input with messages naming the argument."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels import _validation as v


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, -math.inf, math.nan])
def test_epsilon_rejects(bad: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        v.check_epsilon(bad)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -1e-9, math.nan])
def test_delta_rejects(bad: float) -> None:
    with pytest.raises(ValueError, match="delta"):
        v.check_delta(bad)


def test_epsilon_and_delta_accept() -> None:
    assert v.check_epsilon(1) == 1.0
    assert v.check_delta(1e-5) == 1e-5


@pytest.mark.parametrize("bad", ["1", None, [1.0], np.ones(2), True])
def test_epsilon_wrong_kind(bad: object) -> None:
    with pytest.raises(TypeError, match="epsilon"):
        v.check_epsilon(bad)


def test_check_array_rank_nan_empty() -> None:
    with pytest.raises(ValueError, match="x must have rank 2"):
        v.check_array(np.ones(3), "x", ndim=2)
    with pytest.raises(ValueError, match="NaN"):
        v.check_array(np.array([[1.0, np.nan]]), "x")
    with pytest.raises(ValueError, match="inf|NaN"):
        v.check_array(jnp.array([[1.0, jnp.inf]]), "x")
    with pytest.raises(ValueError, match="at least 1 row"):
        v.check_array(np.zeros((0, 3)), "x", ndim=2)
    with pytest.raises(TypeError, match="numeric"):
        v.check_array(np.array(["a", "b"]), "x")
    out = v.check_array(jnp.ones((2, 3)), "x", ndim=2)
    assert isinstance(out, jax.Array)


def test_check_labels() -> None:
    assert v.check_labels([0, 1, 2], 3).dtype == np.int32
    with pytest.raises(ValueError, match=r"\[0, n_classes\)"):
        v.check_labels([0, 3], 3)
    with pytest.raises(ValueError, match=r"\[0, n_classes\)"):
        v.check_labels([-1, 0], 3)
    with pytest.raises(ValueError, match="integer"):
        v.check_labels([0.5, 1.0], 3)
    # an empty class is allowed (refusing it would depend on the private data)
    assert v.check_labels([0, 0, 2], 3).tolist() == [0, 0, 2]
    # messages never show label values
    with pytest.raises(ValueError) as err:
        v.check_labels([0, 17], 3)
    assert "17" not in str(err.value)
    with pytest.raises(ValueError, match="2 labels but x has 3 rows"):
        v.check_labels([0, 1], 3, n_rows=3)


def test_check_int_and_key() -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        v.check_int(0, "k")
    with pytest.raises(TypeError, match="k must be an integer"):
        v.check_int(1.5, "k")
    with pytest.raises(TypeError, match="key"):
        v.check_key(0)
    v.check_key(jax.random.key(0))
    v.check_key(jax.random.PRNGKey(0))


def test_a_fresh_key_fills_every_bit_from_os_entropy(monkeypatch):
    """`fresh_key` takes all of the key's bits from ``os.urandom`` (not a 31-bit seed that a
    search against a released, key-derived value could find); ``seed_keys(None)`` draws two
    of them (noise, data-independent draws), an int seed one reproducible key, warned."""
    import os

    from privkernels.privacy import keys as K

    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(K.os, "urandom", spy)
    keys = [np.asarray(jax.random.key_data(K.fresh_key())) for _ in range(4)]
    width = np.asarray(jax.random.key_data(jax.random.key(0))).size
    assert calls == [4 * width] * 4  # every 32-bit word of every key from the OS
    assert len({k.tobytes() for k in keys}) == 4
    assert any(int(k.ravel()[0]) != 0 for k in keys)  # an int seed leaves the high word 0
    calls.clear()
    secret, public = K.seed_keys(None)
    assert calls == [4 * width] * 2 and not K.looks_seeded(secret) and public is not None
    with pytest.warns(K.SeededKeyWarning, match="random_state=7"):
        seeded, none = K.seed_keys(7)
    assert np.asarray(jax.random.key_data(seeded)).tolist() == [0, 7] and none is None
