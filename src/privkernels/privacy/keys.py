"""Noise keys bound to the release they serve.

A Gaussian (or truncated-Laplace) release is ``value + scale * z`` with ``z`` a
deterministic function of the PRNG key. If one key served two releases that
differ only in their budget, the same ``z`` would appear in both and two
equations in two unknowns give the exact ``value`` back: releases at epsilon
1 and 10 from one key reveal the un-noised embedding (to ~1e-8).

`mechanism_key` therefore folds a digest of the mechanism's name and
parameters into the caller's key: the same call gives the same key (so the
same output: reproducibility), while a different budget, sensitivity, shape or
mechanism gives an independent key. It does not protect a user who reuses one
key for two *datasets* at the same parameters: that is still key reuse, and
the docs say to use a fresh key per release.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax

from privkernels._validation import check_key

__all__ = ["fold_digest", "mechanism_key", "params_digest"]


def _canonical(value: Any) -> Any:
    """JSON-stable form of a parameter (floats by ``repr``: exact, platform independent)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)


def params_digest(mechanism: str, **params: Any) -> tuple[int, int]:
    """Two 32-bit words of a BLAKE2b digest of ``(mechanism, sorted params)``."""
    text = json.dumps(
        [str(mechanism), sorted((str(k), _canonical(v)) for k, v in params.items())],
        separators=(",", ":"),
    )
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")


def fold_digest(key: Any, digest: tuple[Any, Any]) -> Any:
    """Fold a `params_digest` into ``key`` (jit-friendly: ``key`` may be traced)."""
    return jax.random.fold_in(jax.random.fold_in(key, digest[0]), digest[1])


def mechanism_key(key: Any, mechanism: str, **params: Any) -> Any:
    """``key`` with the digest of ``(mechanism, params)`` folded in (64 bits).

    Args:
      key: the caller's JAX PRNG key for this release.
      mechanism: the mechanism's name (``"gaussian"``, ``"dpsgd"``, ...).
      **params: its public parameters (epsilon, delta, sensitivity, sigma,
        shape, ...), Python scalars, strings or tuples of them.

    Returns:
      A key of the same kind as ``key``; equal inputs give an equal key.
    """
    return fold_digest(check_key(key), params_digest(mechanism, **params))
