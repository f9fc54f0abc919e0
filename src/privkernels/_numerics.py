"""Float32 row sums whose rounding stays inside a known bound.

A reduction's worst-case rounding error grows with its length (Higham, Sec.
3.1: ``gamma_n`` for ``n`` terms in any order), and XLA compiles two nested
sums into one reduction over both axes unless a barrier separates them.
`blocked_sum` keeps every float32 chain short; `ONE_REDUCTION` and
`TWO_LEVELS` are the chain lengths the norm margin
(`privkernels.privacy.clipping.NORM_MARGIN`) covers. Per-example clipping
(`privkernels.privacy.clipping`) and the e-NTK feature normalisation
(`privkernels.features.entk`) both sum squares through here.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["ONE_REDUCTION", "TWO_LEVELS", "blocked_sum"]

#: Longest float32 sum left to one reduction: its worst-case relative error,
#: ``gamma_4096 ~ 2.4e-4``, moves a norm by half that, inside ``NORM_MARGIN``.
ONE_REDUCTION = 4096
#: Longest chain the two levels may leave: ``gamma_8000 / 2 = 2.38e-4 < NORM_MARGIN``.
TWO_LEVELS = 8000


def blocked_sum(terms: jax.Array, one: int, limit: int) -> jax.Array:
    """Row sums ``(b, d) -> (b,)``: one reduction up to ``one`` terms, else in levels.

    Two levels: blocks of ``isqrt(d)`` terms, an optimisation barrier, then
    the block sums, so the longest float32 chain is ``isqrt(d) + ceil(d /
    isqrt(d)) ~ 2 sqrt(d)``, if that is at most ``limit`` (the longest chain
    the caller's rounding bound covers; ``d`` up to about ``limit^2 / 4``).
    Longer rows are summed 64 terms at a time, level by level, each level
    behind a barrier: a chain of ``64 ceil(log_64 d)``.
    """
    b, d = terms.shape
    blk = max(1, math.isqrt(d))
    n_blk = -(-d // blk)
    if blk + n_blk > limit:
        return _sum_by_64(terms)
    pad = n_blk * blk - d
    if pad:
        terms = jnp.concatenate([terms, jnp.zeros((b, pad), terms.dtype)], axis=1)
    blocks = terms.reshape(b, n_blk, blk)
    if d <= one:  # compiled as one reduction of d terms (see above)
        return jnp.sum(jnp.sum(blocks, axis=2), axis=1)
    return jnp.sum(jax.lax.optimization_barrier(jnp.sum(blocks, axis=2)), axis=1)


def _sum_by_64(terms: jax.Array) -> jax.Array:
    while terms.shape[1] > 64:
        b, d = terms.shape
        pad = -d % 64
        if pad:
            terms = jnp.concatenate([terms, jnp.zeros((b, pad), terms.dtype)], axis=1)
        terms = jax.lax.optimization_barrier(jnp.sum(terms.reshape(b, -1, 64), axis=2))
    return jnp.sum(terms, axis=1)
