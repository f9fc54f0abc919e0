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

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from privkernels._validation import check_key
from privkernels._warnings import user_stacklevel
from privkernels.privacy.warnings import SeededKeyWarning

__all__ = [
    "SEEDED_KEY_NOTE",
    "check_seed",
    "fold_digest",
    "fresh_key",
    "looks_seeded",
    "mechanism_key",
    "params_digest",
    "public_key_of",
    "release_key",
    "sample_key",
    "sampling_key",
    "seed_keys",
    "seeded_call",
    "warn_seed",
]

#: Folded into a key to start a sampling (post-processing) stream apart from a fit's keys.
SAMPLE_TAG = 0x53414D50

#: Report note of a release whose key visibly came from a small int (or an int seed).
SEEDED_KEY_NOTE = (
    "the noise key came from an int seed (jax.random.key(s), random_state=s or --seed s): "
    "that makes the release reproducible, not secret; whoever learns or guesses the seed "
    "recomputes the noise, so the guarantee holds only while the seed stays secret "
    "(use random_state=None, or privkernels.fresh_key(), for a release)"
)


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


def fold_digest(key: jax.Array, digest: tuple[Any, Any]) -> jax.Array:
    """Fold a `params_digest` into ``key`` (jit-friendly: ``key`` may be traced)."""
    return jax.random.fold_in(jax.random.fold_in(key, digest[0]), digest[1])


def mechanism_key(key: jax.Array, mechanism: str, **params: Any) -> jax.Array:
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


def fresh_key() -> jax.Array:
    """A typed key of the default PRNG whose every bit comes from ``os.urandom``.

    Use it for a release: nothing about it can be guessed, so no released value
    that depends on it (NTK weights, sketches, the noise) narrows it down.

    Returns:
      A ``jax.random.key`` (the default implementation: threefry, 64 bits).
    """
    shape = jax.random.key_data(jax.random.key(0)).shape
    bits = np.frombuffer(os.urandom(4 * int(np.prod(shape))), np.uint32).reshape(shape)
    return jax.random.wrap_key_data(jax.numpy.asarray(bits))


def looks_seeded(key: jax.Array) -> bool:
    """True when ``key`` visibly comes from a small int.

    ``jax.random.key(s)`` for ``0 <= s < 2**32`` is the key of its implementation seeded
    with its last 32-bit word: ``[0, s]`` for threefry, ``[0, s, 0, s]`` for ``rbg`` and
    ``unsafe_rbg``. A key from `fresh_key` (or a split of any key) matches that pattern
    with probability ``2**-32`` or less. Only concrete (not traced) keys can be checked;
    a key derived from a seed (``split``, ``fold_in``) is not seen (a heuristic).
    """
    try:
        typed = _typed(key)
        data = _key_bits(key)
        if data.dtype != np.uint32 or data.ndim != 1 or data.size < 2:
            return False
        impl = jax.random.key_impl(key) if typed else "threefry2x32"
        seed = int(data[-1])
        ref = np.asarray(jax.random.key_data(jax.random.key(seed, impl=impl)))
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        return False
    return ref.shape == data.shape and bool(np.all(ref == data))


def _typed(key: jax.Array) -> bool:
    return bool(jax.numpy.issubdtype(key.dtype, jax.dtypes.prng_key))


def _key_bits(key: jax.Array) -> np.ndarray:
    """The raw bits of a typed or raw (uint32) key."""
    return np.asarray(jax.random.key_data(key) if _typed(key) else key)


def release_key(key: jax.Array, *, what: str = "key") -> tuple[jax.Array, tuple[str, ...]]:
    """Check the key of a release and return it with the report notes it needs.

    A key that `looks_seeded` draws reproducible, not secret, noise: a
    `SeededKeyWarning` (a `PrivacyLeakWarning`) says so, and the returned
    notes hold `SEEDED_KEY_NOTE` for the release's report.

    Returns:
      ``(key, notes)``.
    """
    key = check_key(key, what)
    if not looks_seeded(key):
        return key, ()
    warnings.warn(
        f"{what} looks like jax.random.key(s) for a small int s (its high word is 0): the "
        "noise is a reproducible function of s, and a search over small ints finds it in "
        "seconds; use privkernels.fresh_key() for a release",
        SeededKeyWarning,
        stacklevel=user_stacklevel(),
    )
    return key, (SEEDED_KEY_NOTE,)


def seed_keys(seed: jax.Array | int | None, *, name: str = "random_state") -> tuple[Any, Any]:
    """``(key, public_key)`` of an estimator's or the CLI's ``random_state`` / ``--seed``.

    * None: two independent `fresh_key` s, one for the noise and the batches, one
      for data-independent draws (weights, sketches, inits), so nothing a saved
      file reveals of the second says anything about the first.
    * an int: ``(jax.random.key(seed), None)``, reproducible and therefore not
      secret: a `SeededKeyWarning` names the seed (the fit's report notes it).
    * a JAX key: ``(key, None)``; the fit checks it (`release_key`).

    ``public_key=None`` tells a fit to derive its data-independent draws from ``key``.
    """
    check_seed(seed, name=name)  # a wrong type: refused before any key is drawn
    if seed is None:
        return fresh_key(), fresh_key()
    if warn_seed(seed, name=name):
        return jax.random.key(int(seed)), None
    return seed, None


def check_seed(seed: Any, *, name: str = "random_state") -> None:
    """Refuse a ``random_state`` that is neither None, an int nor a JAX key (``TypeError``,
    `privkernels._validation.check_key`): reads no data and draws nothing, so a pipeline
    can run it before any step's noise (`seed_keys` runs it first too). An int must fit
    ``jax.random.key``'s signed 64 bits (``ValueError``; the CLI's ``--seed`` takes
    ``[0, 2**63)``). With 64-bit JAX types off, ``jax.random.key`` keeps an int's low 32
    bits: ints that differ only above them give one key (an int seed is public anyway)."""
    if seed is None:
        return
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if not -(2**63) <= int(seed) < 2**63:
            raise ValueError(f"{name} must be an int in [-2**63, 2**63) or a jax.random key")
        return
    check_key(seed, name)


def warn_seed(seed: Any, *, name: str = "random_state") -> bool:
    """Raise the `SeededKeyWarning` that names an int ``seed``; True if it was an int.

    ``name`` is what the user typed: a keyword (``random_state``) or a flag (``--seed``).
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        return False
    given, advice = (
        (f"{name} {int(seed)}", f"omit {name}")
        if name.startswith("--")
        else (f"{name}={int(seed)}", f"use {name}=None")
    )
    warnings.warn(
        f"{given} is an int seed: the noise is a reproducible function of it, so anyone "
        "who learns or guesses it (a search over small ints takes seconds) recomputes the "
        f"noise and undoes the privacy; {advice} (OS entropy) for a release",
        SeededKeyWarning,
        stacklevel=user_stacklevel(),
    )
    return True


@contextlib.contextmanager
def seeded_call() -> Iterator[None]:
    """Silence the fit's own `SeededKeyWarning` after `seed_keys` has named the seed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=SeededKeyWarning)
        yield


def sampling_key(key: jax.Array, public_key: jax.Array | None) -> jax.Array:
    """The base of a generator's sampling (post-processing) stream after a fit.

    The data-independent ``public_key`` when the fit had one (fresh entropy), else
    ``fold_in(key, SAMPLE_TAG)``: never a key that drew noise.
    """
    return public_key if public_key is not None else jax.random.fold_in(key, SAMPLE_TAG)


def sample_key(seed: jax.Array | int | None) -> Any:
    """A key for sampling a fitted generator (post-processing, not a release key): fresh
    entropy for None, ``jax.random.key(seed)`` for an int, a JAX key as it is."""
    if seed is None:
        return fresh_key()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return jax.random.key(int(seed))
    return seed


def public_key_of(
    public_key: jax.Array, key: jax.Array, *, forbidden: jax.Array | None = None
) -> jax.Array:
    """``public_key`` checked as the key of a fit's data-independent draws: a JAX key, and
    not the release key itself (its draws would then be siblings of the noise keys), nor
    one of ``forbidden (m,)``, keys derived from ``key`` that draw secrets (a search's run
    keys, `privkernels.tuning.select`; in JAX's default PRNG ``split(key, n)[j]`` is
    ``fold_in(key, j)``, so a split-off key is among them).

    A key derived from ``key`` any other way cannot be recognised here; pass a fresh key
    (`fresh_key`), as the methods' docstrings say.
    """
    public_key = check_key(public_key, "public_key")
    bits = _key_bits(public_key)
    if np.array_equal(bits, _key_bits(key)):
        raise ValueError(
            "public_key is the release key itself: pass an independent key "
            "(privkernels.fresh_key()) or None"
        )
    if forbidden is not None:
        secret = _key_bits(forbidden)
        if bits.shape == secret.shape[1:] and np.any(np.all(secret == bits, axis=-1)):
            raise ValueError(
                "public_key is a key split or folded off the release key (one the search "
                "draws secrets from): pass an independent key (privkernels.fresh_key()) or None"
            )
    return public_key
