"""Tests of the Poisson sampler: exact Poisson law (what the accountant assumes),
never truncated, bucketed shapes, determinism, validation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels.privacy import sampling
from privkernels.privacy.sampling import (
    PoissonBatch,
    poisson_batch,
    poisson_batches,
    poisson_pad_to,
)

KEY = jax.random.key(2024)


def _check_batch(b: PoissonBatch, n: int) -> np.ndarray:
    idx, mask = np.asarray(b.indices), np.asarray(b.mask)
    size = int(b.size)
    assert b.indices.dtype == jnp.int32 and b.mask.dtype == jnp.bool_
    assert idx.shape == mask.shape and idx.ndim == 1
    assert size <= idx.shape[0]  # never truncated
    assert mask.sum() == size and np.all(mask[:size]) and not np.any(mask[size:])
    real = idx[:size]
    assert np.all(np.diff(real) > 0) and (size == 0 or (real[0] >= 0 and real[-1] < n))
    assert np.all(idx[size:] == 0)  # padding points to 0
    return real


def test_inclusion_frequency_and_batch_size_law():
    """Per-index inclusion counts ~ Bin(T, q) (chi-square over indices); batch
    sizes ~ Bin(n, q) (chi-square goodness of fit)."""
    n, q, t = 300, 0.07, 3000
    keys = jax.random.split(KEY, t)
    f = jax.jit(jax.vmap(lambda k: poisson_batch(k, n, q, pad_to=n)))
    batches = f(keys)
    masks = np.asarray(batches.mask)
    idx = np.asarray(batches.indices)
    inc = np.zeros((t, n), bool)
    rows = np.repeat(np.arange(t), masks.sum(1))
    inc[rows, idx[masks]] = True
    counts = inc.sum(0)
    chi2 = np.sum((counts - t * q) ** 2 / (t * q * (1 - q)))
    assert stats.chi2.sf(chi2, n) > 1e-3 and stats.chi2.cdf(chi2, n) > 1e-3
    sizes = np.asarray(batches.size)
    np.testing.assert_array_equal(sizes, masks.sum(1))
    lo, hi = int(stats.binom.ppf(0.01, n, q)), int(stats.binom.ppf(0.99, n, q))
    edges = np.arange(lo, hi + 2)
    obs = np.array(
        [np.sum(sizes < lo)] + [np.sum(sizes == s) for s in edges[:-1]] + [np.sum(sizes > hi)]
    )
    exp = (
        np.array(
            [stats.binom.cdf(lo - 1, n, q)]
            + [stats.binom.pmf(s, n, q) for s in edges[:-1]]
            + [stats.binom.sf(hi, n, q)]
        )
        * t
    )
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3
    # different indices are independent: pairwise co-inclusion ~ q^2
    co = (inc[:, :-1] & inc[:, 1:]).mean()
    assert abs(co - q * q) < 5 * math.sqrt(q * q / (t * (n - 1)))


def test_inclusion_probability_never_exceeds_q():
    for q in (1 / 120, 0.1, 1 / 3, 0.999999, 1e-9):
        p = sampling._inclusion_probability(q)
        assert q - 2.0**-32 < p <= q
    assert sampling._inclusion_probability(1.0) == 1.0


def test_eager_batches_never_truncated_and_bucketed():
    n, q = 60000, 1 / 120
    shapes, sizes = set(), []
    for b in poisson_batches(KEY, n, q, 25):
        _check_batch(b, n)
        assert isinstance(b.size, int)
        shapes.add(b.indices.shape[0])
        sizes.append(b.size)
        assert b.indices.shape[0] % sampling.DEFAULT_PAD_MULTIPLE == 0
        assert b.indices.shape[0] - b.size < sampling.DEFAULT_PAD_MULTIPLE
    assert len(shapes) <= 4  # ~500 +- 3*22 spans at most 3-4 buckets of 64
    assert len(set(sizes)) > 5  # sizes really are random
    # high rate: the whole range, still never truncated
    big = poisson_batch(KEY, 1000, 0.95, pad_multiple=100)
    _check_batch(big, 1000)
    assert big.indices.shape == (1000,)


def test_full_batch_and_tiny_rate():
    b = poisson_batch(KEY, 37, 1.0)
    real = _check_batch(b, 37)
    np.testing.assert_array_equal(real, np.arange(37))
    e = poisson_batch(KEY, 50, 1e-9, pad_multiple=8)
    _check_batch(e, 50)
    assert e.size == 0 and e.indices.shape == (8,)


def test_pad_to_mode_refuses_truncation_eagerly_and_flags_it_under_jit():
    with pytest.raises(ValueError, match="pad_to"):
        poisson_batch(KEY, 1000, 0.5, pad_to=100)
    b = jax.jit(lambda k: poisson_batch(k, 1000, 0.5, pad_to=100))(KEY)
    assert int(b.size) > 100  # untruncated count reveals the overflow
    assert b.indices.shape == (100,) and bool(jnp.all(b.mask))
    ok = poisson_batch(KEY, 1000, 0.05, pad_to=poisson_pad_to(1000, 0.05))
    _check_batch(ok, 1000)


def test_sample_does_not_depend_on_padding():
    """Same key -> same Poisson sample whatever pad_to / pad_multiple (callers
    redo an overflowing fixed-shape step with a longer padding)."""
    n, q = 2000, 0.05
    ref = poisson_batch(KEY, n, q, pad_multiple=7)
    for kw in (dict(pad_to=ref.size), dict(pad_to=n), dict(pad_multiple=512)):
        b = poisson_batch(KEY, n, q, **kw)
        assert int(b.size) == ref.size
        np.testing.assert_array_equal(
            np.asarray(b.indices)[: ref.size], np.asarray(ref.indices)[: ref.size]
        )
    small = jax.jit(lambda k: poisson_batch(k, n, q, pad_to=10))(KEY)  # truncated view
    np.testing.assert_array_equal(np.asarray(small.indices), np.asarray(ref.indices)[:10])


def test_eager_and_jit_agree_and_determinism():
    n, q = 5000, 0.02
    a = poisson_batch(KEY, n, q)
    b = poisson_batch(KEY, n, q)
    np.testing.assert_array_equal(a.indices, b.indices)
    j = jax.jit(lambda k: poisson_batch(k, n, q, pad_to=400))(KEY)
    np.testing.assert_array_equal(np.asarray(j.indices)[: a.size], np.asarray(a.indices)[: a.size])
    assert int(j.size) == a.size
    c = poisson_batch(jax.random.key(1), n, q)
    assert not np.array_equal(np.asarray(a.indices)[:50], np.asarray(c.indices)[:50])
    s1 = [np.asarray(x.indices) for x in poisson_batches(KEY, n, q, 4)]
    s2 = [np.asarray(x.indices) for x in poisson_batches(KEY, n, q, 4)]
    for x, y in zip(s1, s2, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(s1[0][:20], s1[1][:20])  # fresh key per step
    raw = poisson_batch(jax.random.PRNGKey(0), n, q)  # raw uint32 key
    _check_batch(raw, n)


@pytest.mark.parametrize("n,q,p", [(60000, 1 / 120, 1e-9), (1000, 0.3, 1e-6), (10, 0.5, 1e-3)])
def test_poisson_pad_to_is_smallest_safe_length(n, q, p):
    b = poisson_pad_to(n, q, failure_prob=p)
    assert stats.binom.sf(b, n, q) <= p < stats.binom.sf(b - 1, n, q)
    assert poisson_pad_to(n, q, failure_prob=p, pad_multiple=64) % 64 == 0
    assert poisson_pad_to(n, 1.0) == n


def test_bucket_size():
    assert sampling.bucket_size(0, 64) == 64
    assert sampling.bucket_size(64, 64) == 64
    assert sampling.bucket_size(65, 64) == 128


def test_validation():
    with pytest.raises(ValueError, match="n"):
        poisson_batch(KEY, 0, 0.1)
    for q in (0.0, 1.5, -0.1, math.nan):
        with pytest.raises(ValueError, match="sampling_rate"):
            poisson_batch(KEY, 10, q)
        with pytest.raises(ValueError, match="sampling_rate"):
            poisson_pad_to(10, q)
    with pytest.raises(ValueError, match="steps"):
        next(poisson_batches(KEY, 10, 0.1, 0))
    with pytest.raises(ValueError, match="pad_to"):
        poisson_batch(KEY, 10, 0.1, pad_to=0)
    with pytest.raises(ValueError, match="pad_multiple"):
        poisson_batch(KEY, 10, 0.1, pad_multiple=0)
    with pytest.raises(TypeError, match="key"):
        poisson_batch(3, 10, 0.1)
    with pytest.raises(TypeError, match="n"):
        poisson_batch(KEY, 10.0, 0.1)
    with pytest.raises(ValueError, match="failure_prob"):
        poisson_pad_to(10, 0.1, failure_prob=0.0)
