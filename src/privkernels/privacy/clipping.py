"""Per-example clipping and the noisy clipped sum of DP-SGD (Abadi et al. 2016).

``clip_per_example`` bounds each example's contribution to L2 norm ``C``;
``noisy_clipped_sum`` sums the clipped contributions of the sampled (unmasked)
examples and adds ``N(0, (sigma C)^2)`` per coordinate -- one step of the
Poisson-subsampled Gaussian mechanism that
:func:`~privkernels.privacy.accounting.dpsgd_noise_multiplier` accounts for
(add/remove relation: adding or removing one example moves the sum by at most
``C`` in L2).

Both functions are jit/vmap friendly (no Python control flow on values);
argument checks on concrete Python numbers happen at trace time.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from privkernels._validation import check_key, check_positive

__all__ = ["clip_factors", "clip_per_example", "noisy_clipped_sum", "per_example_norms"]


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _leading_size(leaves: list[Any], name: str) -> int:
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


def per_example_norms(grads: Any) -> jax.Array:
    """Global L2 norm of each example across all leaves.

    Args:
      grads: pytree of arrays, each ``(b, ...)``.

    Returns:
      (b,) float array, ``||(g_leaf1[i], g_leaf2[i], ...)||_2``.
    """
    leaves = jax.tree_util.tree_leaves(grads)
    b = _leading_size(leaves, "grads")
    sq = [
        jnp.sum(jnp.square(jnp.reshape(leaf, (b, -1)).astype(jnp.float32)), axis=1)
        for leaf in leaves
    ]
    return jnp.sqrt(sum(sq[1:], sq[0]))


def clip_factors(norms: jax.Array, clip_norm: float | jax.Array) -> jax.Array:
    """Per-example clip factors ``min(1, C / ||g_i||)`` from the norms ``(b,)``.

    Written as ``1 / max(1, ||g_i|| / C)`` so a zero norm gives 1; a non-finite
    norm gives **0** (the example is dropped; its contribution stays bounded by
    ``C``). ``factor_i * g_i`` is the clipped gradient of
    :func:`clip_per_example`; callers that never form ``g_i`` (closed-form
    clipped sums) use this to get the same bound.

    Args:
      norms: ``(b,)`` float per-example L2 norms.
      clip_norm: C > 0 (Python number or traced scalar).

    Returns:
      ``(b,)`` float32 factors in ``[0, 1]``.
    """
    if _is_concrete(clip_norm):
        clip_norm = check_positive(clip_norm, "clip_norm")
    finite = jnp.isfinite(norms)
    c = jnp.asarray(clip_norm, jnp.float32)
    return jnp.where(finite, 1.0 / jnp.maximum(1.0, jnp.where(finite, norms, 0.0) / c), 0.0)


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
      ``(clipped, norms)``: a pytree like ``grads`` and the (b,) pre-clipping
      norms (float32).
    """
    if _is_concrete(clip_norm):
        clip_norm = check_positive(clip_norm, "clip_norm")
    _leading_size(jax.tree_util.tree_leaves(grads), "grads")
    return _clip_impl(grads, jnp.asarray(clip_norm, jnp.float32))


@jax.jit
def _clip_impl(grads: Any, clip_norm: jax.Array) -> tuple[Any, jax.Array]:
    norms = per_example_norms(grads)
    finite = jnp.isfinite(norms)
    scale = clip_factors(norms, clip_norm)

    def clip_leaf(leaf: jax.Array) -> jax.Array:
        shape = (leaf.shape[0],) + (1,) * (leaf.ndim - 1)
        s = jnp.reshape(scale, shape).astype(leaf.dtype)
        ok = jnp.reshape(finite, shape)
        return jnp.where(ok, leaf * s, jnp.zeros((), leaf.dtype))

    return jax.tree_util.tree_map(clip_leaf, grads), norms


def noisy_clipped_sum(
    key: Any,
    clipped: Any,
    mask: Any,
    *,
    clip_norm: float,
    noise_multiplier: float,
) -> Any:
    """Sum of clipped per-example values over ``mask`` plus Gaussian noise.

    ``sum_{i: mask_i} g_i + N(0, (sigma C)^2 I)`` per leaf (Abadi et al. 2016,
    Alg. 1 "add noise"), with one independent draw per leaf from
    ``jax.random.split(key, n_leaves)``. Padding rows (``mask == False``) are
    excluded with ``where`` (so even NaN padding cannot leak in). The caller
    guarantees each ``g_i`` has global norm ``<= C`` (use
    :func:`clip_per_example`); that is the sensitivity this noise covers.

    Args:
      key: JAX PRNG key.
      clipped: pytree of ``(b, ...)`` arrays.
      mask: (b,) bool (or 0/1) array: which rows are real sampled examples.
      clip_norm: C > 0.
      noise_multiplier: sigma > 0 (noise std = sigma * C).

    Returns:
      Pytree like ``clipped`` with the leading axis summed out.
    """
    key = check_key(key)
    if _is_concrete(clip_norm):
        clip_norm = check_positive(clip_norm, "clip_norm")
    if _is_concrete(noise_multiplier):
        noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    leaves, treedef = jax.tree_util.tree_flatten(clipped)
    b = _leading_size(leaves, "clipped")
    mask = jnp.asarray(mask)
    if mask.shape != (b,):
        raise ValueError(f"mask must have shape ({b},) to match clipped, got {tuple(mask.shape)}")
    std = jnp.asarray(noise_multiplier, jnp.float32) * jnp.asarray(clip_norm, jnp.float32)
    return _noisy_sum_impl(key, clipped, mask, std)


@jax.jit
def _noisy_sum_impl(key: Any, clipped: Any, mask: jax.Array, std: jax.Array) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(clipped)
    b = leaves[0].shape[0]
    keep = mask.astype(bool)
    keys = jax.random.split(key, len(leaves))
    out = []
    for leaf, k in zip(leaves, keys, strict=True):
        shape = (b,) + (1,) * (leaf.ndim - 1)
        total = jnp.sum(
            jnp.where(jnp.reshape(keep, shape), leaf, jnp.zeros((), leaf.dtype)), axis=0
        )
        noise = jax.random.normal(k, leaf.shape[1:], leaf.dtype)
        out.append(total + std.astype(leaf.dtype) * noise)
    return jax.tree_util.tree_unflatten(treedef, out)
