"""Shared helpers for the privacy test-suite (spies on randomness and mechanisms)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class NoiseDrawn(BaseException):
    """Raised by a sentinel when code under test draws randomness / releases noise.

    A BaseException so that a broad ``except Exception`` in the code under
    test cannot swallow it.
    """


#: jax.random samplers that produce noise; validation must happen before any of them.
NOISE_SAMPLERS = (
    "normal",
    "laplace",
    "uniform",
    "truncated_normal",
    "bernoulli",
    "multivariate_normal",
    "gamma",
    "exponential",
    "randint",
    "permutation",
    "choice",
)

#: privkernels.privacy mechanisms that release noise.
MECHANISMS = (
    "gaussian_mechanism",
    "truncated_laplace",
    "gaussian_sampling_mechanism",
    "noisy_clipped_sum",
    "poisson_batch",
)


def forbid_noise(monkeypatch: Any, *, samplers: bool = True, mechanisms: bool = True) -> None:
    """Make every noise sampler (and privacy mechanism) raise `NoiseDrawn`."""
    from privkernels import privacy

    def sentinel(name: str):
        def fn(*args: Any, **kwargs: Any) -> Any:
            raise NoiseDrawn(f"{name} was called before the input was rejected")

        return fn

    if samplers:
        for name in NOISE_SAMPLERS:
            if hasattr(jax.random, name):
                monkeypatch.setattr(jax.random, name, sentinel(f"jax.random.{name}"))
    for name in MECHANISMS if mechanisms else ():
        try:
            getattr(privacy, name)
        except AttributeError:
            continue
        monkeypatch.setattr(privacy, name, sentinel(f"privacy.{name}"))
        # also patch the defining module, in case a caller imported it directly
        mod = privacy._EXPORTS.get(name)
        if mod is not None:
            import importlib

            m = importlib.import_module(f"privkernels.privacy.{mod}")
            if hasattr(m, name):
                monkeypatch.setattr(m, name, sentinel(f"privacy.{mod}.{name}"))


def key_bytes(key: Any) -> tuple[int, ...]:
    """Hashable raw data of a (typed or raw) PRNG key."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return tuple(int(v) for v in np.asarray(key).ravel())


@dataclasses.dataclass
class Call:
    args: tuple
    kwargs: dict
    result: Any = None


def spy(monkeypatch: Any, module: Any, name: str) -> list[Call]:
    """Wrap ``module.name`` so every call (args, kwargs, result) is recorded."""
    original = getattr(module, name)
    calls: list[Call] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = Call(args, kwargs)
        calls.append(call)
        call.result = original(*args, **kwargs)
        return call.result

    monkeypatch.setattr(module, name, wrapper)
    return calls


def patch_privacy(monkeypatch: Any, name: str, replacement: Any) -> None:
    """Replace ``privkernels.privacy.<name>`` (lazy export and defining module)."""
    import importlib

    from privkernels import privacy

    monkeypatch.setattr(privacy, name, replacement)
    mod = privacy._EXPORTS.get(name)
    if mod is not None:
        m = importlib.import_module(f"privkernels.privacy.{mod}")
        if hasattr(m, name):
            monkeypatch.setattr(m, name, replacement)


def spy_privacy(monkeypatch: Any, name: str) -> list[Call]:
    """Spy on ``privkernels.privacy.<name>`` wherever it is looked up."""
    from privkernels import privacy

    original = getattr(privacy, name)
    calls: list[Call] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = Call(args, kwargs)
        calls.append(call)
        call.result = original(*args, **kwargs)
        return call.result

    patch_privacy(monkeypatch, name, wrapper)
    return calls
