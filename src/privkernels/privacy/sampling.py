"""Poisson subsampling for DP-SGD, matching the accountant exactly.

The accountants in `privkernels.privacy.accounting` analyse
``PoissonSampledDpEvent(q, ...)``: every example enters each batch
independently with probability ``q``, so the batch size is random,
``Binomial(n, q)``. Truncating or resampling batches to a fixed size is a
*different* mechanism and would void the accounting, so batches here are
never truncated; they are *padded* to a fixed shape with masked rows
(``mask == False``, index 0) so that ``jit`` sees few distinct shapes.

Inclusion test: ``bits_i < floor(q * 2^32)`` on 32 uniform random bits, so the
inclusion probability is ``floor(q 2^32) / 2^32`` in ``(q - 2^-32, q]``: never
above the ``q`` given to the accountant (privacy amplification by Poisson
subsampling is monotone in q, so the accounted bound still holds).

Two padding modes of `poisson_batch`:

* ``pad_to=None`` (default, eager): the size is read on the host and the batch
  is padded to the next multiple of ``pad_multiple`` (at least one multiple);
  with batch size ~ ``q n +- 3 sqrt(q n)`` this compiles only a handful of
  shapes. Never truncates.
* ``pad_to=B`` (fixed shape, usable inside ``jit``): at most ``B`` indices fit.
  Called eagerly, an overflowing sample raises ``ValueError``. Under ``jit`` no
  error can be raised: ``batch.size`` is the *untruncated* count, so
  ``size > B`` marks a truncated batch; choose ``B`` with
  `poisson_pad_to` so that overflow is negligible and account for it
  (see there).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_delta, check_int, check_key
from privkernels.privacy.accounting import check_sampling_rate

__all__ = [
    "PoissonBatch",
    "PoissonSchedule",
    "poisson_batch",
    "poisson_batches",
    "poisson_schedule",
    "poisson_inclusion",
    "compact_indices",
    "poisson_pad_to",
    "bucket_size",
]

#: Default bucket granularity of the eager (``pad_to=None``) mode.
DEFAULT_PAD_MULTIPLE = 64


class PoissonBatch(NamedTuple):
    """A padded Poisson sample.

    Attributes:
      indices: int32 ``(pad,)``; the sampled example indices in increasing
        order, then padding entries equal to ``pad_index`` (default 0).
      mask: bool ``(pad,)``; True exactly on the first ``size`` entries.
      size: number of sampled examples (Python int in eager mode; int32 scalar
        array under ``jit``). In ``pad_to`` mode it may exceed ``pad``, which
        means the batch was truncated (see the module docstring).
    """

    indices: jax.Array
    mask: jax.Array
    size: Any


def _threshold(q: float) -> int:
    """``floor(q * 2^32)``: inclusion iff 32 random bits < threshold (q < 1)."""
    return min(int(math.floor(q * 2.0**32)), 2**32 - 1)


@partial(jax.jit, static_argnames=("n", "threshold", "full"))
def _inclusion(key: jax.Array, n: int, threshold: int, full: bool) -> tuple[jax.Array, jax.Array]:
    if full:
        include = jnp.ones((n,), bool)
    else:
        bits = jax.random.bits(key, (n,), jnp.uint32)
        include = bits < jnp.uint32(threshold)
    return include, jnp.sum(include, dtype=jnp.int32)


@partial(jax.jit, static_argnames=("pad", "pad_index"))
def _compact(
    include: jax.Array, size: jax.Array, pad: int, pad_index: int = 0
) -> tuple[jax.Array, jax.Array]:
    (idx,) = jnp.nonzero(include, size=pad, fill_value=pad_index)
    mask = jnp.arange(pad) < size
    return idx.astype(jnp.int32), mask


def bucket_size(size: int, pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> int:
    """Eager-mode padded length: ``max(1, ceil(size / m)) * m``."""
    m = check_int(pad_multiple, "pad_multiple", minimum=1)
    return max(1, -(-int(size) // m)) * m


def poisson_batch(
    key: jax.Array,
    n: int,
    sampling_rate: float,
    *,
    pad_to: int | None = None,
    pad_multiple: int = DEFAULT_PAD_MULTIPLE,
    pad_index: int = 0,
) -> PoissonBatch:
    """Poisson-sample ``{0, ..., n-1}`` with rate ``q``, padded, never truncated.

    O(n) vectorized work (one ``uint32`` draw per example); no Python loop over
    examples.

    Args:
      key: JAX PRNG key (one draw of ``n`` random words).
      n: dataset size (Python int >= 1; static).
      sampling_rate: q in (0, 1] (static).
      pad_to: fixed padded length (jit-compatible); ``None`` for eager
        bucketing (see the module docstring).
      pad_multiple: bucket granularity of the eager mode.
      pad_index: index written into padding entries. Use the index of a fixed
        *public* row (e.g. ``n``, with one zero row appended to the data): the
        default 0 repeats a private example, and although padding is masked,
        a hostile example 0 whose gradient is NaN would reach every step
        through ``0 * NaN`` in any product that forgets to use ``where``.

    Returns:
      `PoissonBatch`.
    """
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    q = check_sampling_rate(sampling_rate)
    full = q >= 1.0
    pad_index = check_int(pad_index, "pad_index", minimum=0)
    include, size = _inclusion(key, n, 0 if full else _threshold(q), full)
    if pad_to is None:
        pad = bucket_size(int(size), pad_multiple)
        idx, mask = _compact(include, size, pad, pad_index)
        return PoissonBatch(idx, mask, int(size))
    pad = check_int(pad_to, "pad_to", minimum=1)
    if not isinstance(size, jax.core.Tracer) and int(size) > pad:
        raise ValueError(
            f"Poisson sample of size {int(size)} exceeds pad_to={pad}; truncating it would "
            "break the privacy accounting (use a larger pad_to, see poisson_pad_to, or pad_to=None)"
        )
    idx, mask = _compact(include, size, pad, pad_index)
    return PoissonBatch(idx, mask, size)


def poisson_batches(
    key: jax.Array, n: int, sampling_rate: float, steps: int, **kwargs: Any
) -> Iterator[PoissonBatch]:
    """Yield ``steps`` independent `poisson_batch` samples.

    Step ``t`` uses ``jax.random.split(key, steps)[t]``; ``kwargs`` go to
    `poisson_batch` (``pad_to``, ``pad_multiple``).
    """
    key = check_key(key)
    steps = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    check_sampling_rate(sampling_rate)
    keys = jax.random.split(key, steps)
    for t in range(steps):
        yield poisson_batch(keys[t], n, sampling_rate, **kwargs)


def poisson_pad_to(
    n: int,
    sampling_rate: float,
    *,
    failure_prob: float = 1e-9,
    pad_multiple: int = 1,
) -> int:
    """Smallest fixed length ``B`` with ``P[Binomial(n, q) > B] <= failure_prob``.

    For the ``pad_to`` (jit) mode of `poisson_batch`. If a run of ``T``
    steps pads to ``B`` and silently truncates on overflow, it coincides with
    the accounted (eps, delta) mechanism except on an event of probability
    ``p <= T * failure_prob``, so it is ``(eps, delta + (1 + e^eps) p)``-DP;
    add that to delta, or check ``batch.size <= B`` after each step and stop.

    Args:
      n: dataset size >= 1. sampling_rate: q in (0, 1].
      failure_prob: per-step overflow probability allowed, in (0, 1).
      pad_multiple: round ``B`` up to a multiple of this.

    Returns:
      B (int), ``<= n`` rounded up to ``pad_multiple``.
    """
    from scipy import stats  # heavy (seconds to import): loaded on first use

    n = check_int(n, "n", minimum=1)
    q = check_sampling_rate(sampling_rate)
    p = check_delta(failure_prob, "failure_prob")
    m = check_int(pad_multiple, "pad_multiple", minimum=1)
    if q >= 1.0:
        b = n
    else:
        b = int(stats.binom.isf(p, n, q))
        while b > 0 and stats.binom.sf(b - 1, n, q) <= p:  # make it the smallest
            b -= 1
        while stats.binom.sf(b, n, q) > p:
            b += 1
        b = max(b, 1)
    return -(-b // m) * m


def _inclusion_probability(sampling_rate: float) -> float:
    """The exact inclusion probability used for rate ``q`` (<= q)."""
    q = check_sampling_rate(sampling_rate)
    return 1.0 if q >= 1.0 else _threshold(q) / 2.0**32


class PoissonSchedule(NamedTuple):
    """The Poisson samples of ``T`` consecutive steps, padded to one length.

    Attributes:
      indices: int32 ``(T, pad)``; step ``t``'s sampled indices in increasing
        order, then ``pad_index``.
      mask: bool ``(T, pad)``; True on the first ``sizes[t]`` entries of row ``t``.
      sizes: int32 ``(T,)`` numpy; never larger than ``pad`` (nothing is truncated).
    """

    indices: jax.Array
    mask: jax.Array
    sizes: Any


@partial(jax.jit, static_argnames=("n", "threshold", "full"))
def _schedule_sizes(
    keys: jax.Array, n: int, threshold: int, full: bool
) -> tuple[jax.Array, jax.Array]:
    return jax.vmap(lambda k: _inclusion(k, n, threshold, full))(keys)


@partial(jax.jit, static_argnames=("pad", "pad_index"))
def _schedule_compact(
    include: jax.Array, sizes: jax.Array, pad: int, pad_index: int
) -> tuple[jax.Array, jax.Array]:
    return jax.vmap(lambda i, s: _compact(i, s, pad, pad_index))(include, sizes)


def poisson_inclusion(keys: jax.Array, n: int, sampling_rate: float) -> tuple[jax.Array, jax.Array]:
    """``(include (T, n) bool, sizes (T,) int32)``: who is in each of ``T`` Poisson samples.

    Row ``t`` is exactly the inclusion test of ``poisson_batch(keys[t], n, q)``.
    """
    n = check_int(n, "n", minimum=1)
    q = check_sampling_rate(sampling_rate)
    full = q >= 1.0
    return _schedule_sizes(keys, n, 0 if full else _threshold(q), full)


def compact_indices(
    include: jax.Array, size: jax.Array, pad: int, pad_index: int
) -> tuple[jax.Array, jax.Array]:
    """``(indices (pad,), mask (pad,))`` of the included rows, padded with ``pad_index``.

    Traceable (``pad`` and ``pad_index`` static); ``size`` must not exceed ``pad``.
    """
    return _compact(include, size, pad, pad_index)


def poisson_schedule(
    keys: jax.Array,
    n: int,
    sampling_rate: float,
    *,
    min_pad: int = 1,
    pad_multiple: int = 1,
    pad_index: int = 0,
) -> PoissonSchedule:
    """Poisson samples for a batch of step keys ``(T,)``, padded to a common length.

    Step ``t``'s sample equals ``poisson_batch(keys[t], n, q)`` exactly (same
    bits, same inclusion test). The padded length is the smallest multiple of
    ``pad_multiple`` that is ``>= max(min_pad, max_t size_t)``: the batch sizes
    depend only on the keys (never on the data), so choosing the length costs
    one small device-to-host read per schedule and no sample is ever truncated.
    A training loop draws one schedule per epoch and scans over it.

    Args:
      keys: ``(T,)`` PRNG keys (one per step).
      n: dataset size. sampling_rate: q in (0, 1].
      min_pad: the usual padded length (e.g. `poisson_pad_to`), so the
        shapes (and compilations) repeat from one schedule to the next.
      pad_multiple: round the length up to a multiple of this (a chunk size).
      pad_index: index written into padding entries (a public row).

    Returns:
      `PoissonSchedule`.
    """
    n = check_int(n, "n", minimum=1)
    q = check_sampling_rate(sampling_rate)
    m = check_int(pad_multiple, "pad_multiple", minimum=1)
    full = q >= 1.0
    include, sizes = _schedule_sizes(keys, n, 0 if full else _threshold(q), full)
    sizes_np = np.asarray(sizes)
    need = max(int(check_int(min_pad, "min_pad", minimum=1)), int(sizes_np.max(initial=1)))
    pad = -(-need // m) * m
    idx, mask = _schedule_compact(include, sizes, pad, check_int(pad_index, "pad_index", minimum=0))
    return PoissonSchedule(idx, mask, sizes_np)
