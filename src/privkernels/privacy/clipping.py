"""Per-example clipping for DP-SGD (Abadi et al. 2016) and the norms it rests on.

``clip_per_example`` bounds each example's contribution to L2 norm ``C`` (float32 norms
from short summation chains, `privkernels._numerics`); the noisy sum of the clipped
contributions is `privkernels.privacy.dpsgd.noisy_clipped_sum`, through the one DP-SGD
noise transform.

Every function is jit/vmap friendly (no Python control flow on values); argument checks
on concrete Python numbers happen at trace time.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from privkernels._numerics import ONE_REDUCTION, TWO_LEVELS, blocked_sum
from privkernels._validation import check_positive

__all__ = [
    "MIN_CLIP_NORM",
    "NORM_MARGIN",
    "check_clip_norm",
    "clip_factors",
    "clip_per_example",
    "leading_size",
    "masked_clip_factors",
    "masked_sum",
    "per_example_norms",
    "rounding_bound",
    "rounding_error",
    "safe_norms",
]

#: Relative safety margin of every norm that bounds a sensitivity: a vector is
#: scaled to norm ``C / (1 + NORM_MARGIN)`` (computed), so float32 rounding of
#: the scaling and of a recomputed norm (relative ~1e-7 each, ``n u`` at worst for
#: ``n <= 4096`` summands) never takes it above ``C``. It shrinks clipped
#: contributions by 0.024%, far below the noise.
NORM_MARGIN = 2.0**-12


#: Smallest clip norm accepted: per-example norms are float32 sums of squares, which
#: underflow for entries below ~1e-19 (a norm computed as 0 would leave an example
#: unclipped against a C that small). Far below any useful C.
MIN_CLIP_NORM = 1e-12


def check_clip_norm(value: Any, name: str = "clip_norm") -> float:
    """``value`` as a float; require ``MIN_CLIP_NORM <= value < inf``."""
    c = check_positive(value, name)
    if c < MIN_CLIP_NORM:
        raise ValueError(
            f"{name} must be at least {MIN_CLIP_NORM:g} (float32 norms underflow below it), "
            f"got {value!r}"
        )
    return c


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def leading_size(leaves: list[Any], name: str) -> int:
    """The common leading (example) axis size of ``leaves``; ``ValueError`` when there is
    none, or the leaves disagree."""
    if not leaves:
        raise ValueError(f"{name} has no array leaves")
    sizes = set()
    for leaf in leaves:
        if not hasattr(leaf, "shape") or len(leaf.shape) < 1:
            raise ValueError(
                f"every leaf of {name} needs a leading example axis, got shape "
                f"{getattr(leaf, 'shape', None)}"
            )
        sizes.add(int(leaf.shape[0]))
    if len(sizes) != 1:
        raise ValueError(f"leaves of {name} disagree on the number of examples: {sorted(sizes)}")
    return sizes.pop()


def _blocked_sumsq(flat: jax.Array) -> jax.Array:
    """Row sums of squares ``(b, d) -> (b,)`` whose float32 chains stay short.

    A reduction's worst-case rounding error grows with its length (Higham,
    Sec. 3.1: ``gamma_n``, ``n`` terms in any order), and XLA compiles two
    nested sums into one reduction over both axes unless a barrier separates
    them. Up to `privkernels._numerics.ONE_REDUCTION` entries one reduction is
    kept (its error, at most ``gamma_4096 / 2`` on the norm, is inside
    `NORM_MARGIN`); beyond, `privkernels._numerics.blocked_sum` (chains of about
    ``2 sqrt(d)``, at most `privkernels._numerics.TWO_LEVELS`, or ``64 ceil(log_64 d)``
    for rows too long for two levels).
    """
    return blocked_sum(jnp.square(flat), ONE_REDUCTION, TWO_LEVELS)


def per_example_norms(grads: Any) -> jax.Array:
    """Global L2 norm of each example across all leaves, in float32.

    Args:
      grads: pytree of arrays, each ``(b, ...)``.

    Returns:
      (b,) float32 array, ``||(g_leaf1[i], g_leaf2[i], ...)||_2`` (blocked
      sums of squares, see `_blocked_sumsq`).
    """
    leaves = jax.tree_util.tree_leaves(grads)
    b = leading_size(leaves, "grads")
    sq = [_blocked_sumsq(jnp.reshape(leaf, (b, -1)).astype(jnp.float32)) for leaf in leaves]
    return jnp.sqrt(sum(sq[1:], sq[0]))


def clip_factors(norms: jax.Array, clip_norm: float | jax.Array) -> jax.Array:
    """Per-example clip factors ``min(1, C / (||g_i|| (1 + m)))``, ``m = NORM_MARGIN``.

    A zero norm gives 1; a non-finite norm gives **0** (the example is
    dropped; its contribution stays bounded by ``C``). ``factor_i * g_i`` is the
    clipped gradient of `clip_per_example`; callers that never form
    ``g_i`` (closed-form clipped sums) use this to get the same bound. The
    margin keeps the *computed* norm of a clipped vector at or below ``C`` in
    float32 (Abadi et al. 2016, Alg. 1 "clip gradient", with rounding).

    Args:
      norms: ``(b,)`` float per-example L2 norms.
      clip_norm: C > 0 (Python number or traced scalar).

    Returns:
      ``(b,)`` float32 factors in ``[0, 1]``.
    """
    if _is_concrete(clip_norm):
        clip_norm = check_clip_norm(clip_norm)
    finite = jnp.isfinite(norms)
    c = jnp.asarray(clip_norm, jnp.float32)
    ratio = jnp.where(finite, norms, 0.0).astype(jnp.float32) * (1.0 + NORM_MARGIN) / c
    return jnp.where(finite, jnp.where(ratio > 1.0, 1.0 / ratio, 1.0), 0.0)


def masked_clip_factors(
    norms: jax.Array, mask: jax.Array, clip_norm: float | jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``(factors, keep)``: clip factors of the kept rows and which rows are kept.

    ``keep = mask & isfinite(norms)``; the factor is 0 elsewhere. Callers zero
    every per-example quantity of a row that is not kept with ``where`` BEFORE
    any product, since ``0 * NaN`` is NaN: a padding row or a hostile example
    whose gradient overflows must contribute exactly nothing.
    """
    keep = (jnp.asarray(mask) > 0) & jnp.isfinite(norms)
    return jnp.where(keep, clip_factors(norms, clip_norm), 0.0), keep


def rounding_bound(n_terms: int, dtype: Any = jnp.float32) -> float:
    """``gamma_n = n u / (1 - n u)``: relative error bound of an ``n``-term dot product.

    ``u`` is the unit roundoff of ``dtype`` (``2^-24`` in float32); Higham,
    *Accuracy and Stability of Numerical Algorithms*, Sec. 3.1. Used to bound
    the cancellation error of closed-form norms (`safe_norms`).
    """
    u = float(jnp.finfo(dtype).eps) / 2.0
    nu = int(n_terms) * u
    return nu / (1.0 - nu) if nu < 0.5 else math.inf


def safe_norms(
    sq: jax.Array, bound: jax.Array, rho: float, err: jax.Array | None = None
) -> jax.Array:
    """Upper bounds on per-example norms from a closed form that may cancel.

    ``sq`` is ``||g_i||^2`` computed as a signed sum of terms whose magnitudes
    are at most ``bound_i^2`` (``bound_i >= ||g_i||`` computed from sums of
    squares only, hence accurate). ``err`` bounds its rounding error; by
    default ``3 rho bound_i^2`` with ``rho = rounding_bound(n)``, right when
    every term comes from an ``n``-operation chain (the factor 3 covers the
    few additions joining the terms and ``bound``'s own rounding). Callers
    whose terms have chains of different lengths pass ``err`` built with
    `rounding_error`. The result ``sqrt(max(sq, 0) + err) + rho bound`` is at
    least the exact norm, and at least the norm of the contribution as
    actually computed (whose own rounding error is at most ``rho bound``).
    Where the closed form is well conditioned this adds a relative
    ``~ rho (bound/norm)^2``; where it cancels catastrophically the example is
    clipped against ``sqrt(err)`` instead of a spuriously tiny norm.
    """
    bound = jnp.abs(bound)
    if err is None:
        err = 3.0 * rho * bound * bound
    return jnp.sqrt(jnp.maximum(sq, 0.0) + err) + rho * bound


def rounding_error(
    bound: jax.Array, n_terms: int, pieces: tuple[tuple[jax.Array, int], ...], dtype: Any
) -> jax.Array:
    """`safe_norms`' ``err`` when some terms come from longer chains than ``n_terms``.

    ``bound^2`` is a sum of non-negative pieces, one per term of the closed
    form (its squares and cross terms), each at least that term's absolute
    value expression; most come from chains of about ``n_terms`` float32
    operations, piece ``A_k`` (``(b,)``, ``0 <= A_k <= bound^2``) from a longer
    chain of ``n_k`` (Higham, Sec. 3.1: a nested dot product errs by at most
    ``gamma`` of its total length times its absolute-value expression). The
    error is then at most ``gamma_n bound^2 + sum_k gamma_{n_k} A_k``, up to
    the rounding of ``bound`` and ``A_k`` themselves; returned is::

        max(3 gamma_n bound^2,  2 (gamma_n bound^2 + sum_k gamma_{n_k} A_k))

    The first form is the default of `safe_norms`, kept (to the bit) where it
    already covers the long pieces; the factor 2 of the second covers the
    rounding of ``bound`` and ``A_k`` and the few additions joining the terms.
    """
    chains = (n_terms, *(n_k for _, n_k in pieces))
    if any(math.isinf(rounding_bound(n, dtype)) for n in chains):
        # gamma_n is vacuous (n u >= 1/2): inf * 0 would turn every norm into NaN and
        # silently drop every example. Callers split such sums (`blocked_sum`) instead.
        raise ValueError(f"float chains {chains} are too long for a rounding bound in {dtype}")
    rho = rounding_bound(n_terms, dtype)
    bound = jnp.abs(bound)
    charged = rho * bound * bound
    for piece, n_k in pieces:
        charged = charged + rounding_bound(n_k, dtype) * piece
    # the default exactly as `safe_norms` writes it, so its bits are unchanged
    return jnp.maximum(3.0 * rho * bound * bound, 2.0 * charged)


def clip_per_example(grads: Any, clip_norm: float) -> tuple[Any, jax.Array]:
    """Scale every example to global L2 norm at most ``clip_norm``.

    ``g_i <- g_i / max(1, ||g_i|| / C)`` (Abadi et al. 2016, Alg. 1 "clip
    gradient"). A zero gradient stays zero (no NaN). An example whose norm is
    not finite (NaN/inf anywhere in its gradient) is replaced by **zero**: its
    contribution is still bounded by ``C``, so the sensitivity, and hence the
    guarantee, is unaffected; its reported norm stays non-finite so callers
    can count such examples.

    Args:
      grads: pytree whose leaves are ``(b, ...)`` arrays (leading example axis).
      clip_norm: C > 0 (Python number or traced scalar).

    Returns:
      ``(clipped, norms)``: a pytree like ``grads`` with **float32** leaves (whatever
      the input dtype: a clip factor rounded to bfloat16 or float16 could round up and
      leave an example above ``C``), and the (b,) pre-clipping norms (float32).
    """
    if _is_concrete(clip_norm):
        clip_norm = check_clip_norm(clip_norm)
    leading_size(jax.tree_util.tree_leaves(grads), "grads")
    return _clip_impl(grads, jnp.asarray(clip_norm, jnp.float32))


@jax.jit
def _clip_impl(grads: Any, clip_norm: jax.Array) -> tuple[Any, jax.Array]:
    norms = per_example_norms(grads)
    finite = jnp.isfinite(norms)
    scale = clip_factors(norms, clip_norm)

    def clip_leaf(leaf: jax.Array) -> jax.Array:  # float32 whatever the leaf's dtype
        shape = (leaf.shape[0],) + (1,) * (leaf.ndim - 1)
        s = jnp.reshape(scale, shape)
        ok = jnp.reshape(finite, shape)
        return jnp.where(ok, leaf.astype(jnp.float32) * s, jnp.zeros((), jnp.float32))

    return jax.tree_util.tree_map(clip_leaf, grads), norms


def masked_sum(tree: Any, keep: jax.Array) -> Any:
    """``sum_{i: keep_i} x_i`` over the leading (example) axis of every leaf, in float32.

    ``tree``: pytree of ``(b, ...)`` arrays; ``keep``: ``(b,)`` bool. Rows not kept are
    excluded with ``where``, so even NaN in a padding row cannot leak into the sum.
    """

    def one(leaf: jax.Array) -> jax.Array:
        shape = (leaf.shape[0],) + (1,) * (leaf.ndim - 1)
        values = leaf.astype(jnp.float32)
        return jnp.sum(jnp.where(jnp.reshape(keep, shape), values, 0.0), axis=0)

    return jax.tree_util.tree_map(one, tree)
