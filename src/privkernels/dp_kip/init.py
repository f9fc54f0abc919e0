"""Data-independent starting points of the support set (DP-KIP Alg. 1 line 1).

The released support images start from something that depends only on the
key and the public shape; labels are fixed and class-balanced. The authors'
public code starts from real training images, which is not private; nothing
here can (an initialiser sees only ``(key, m, input_shape)``).

* ``"gaussian"`` -- ``N(0, I)`` pixels (the paper's private setting).

`resolve_init` also accepts a callable ``init(key, m, input_shape) ->
(m, *input_shape)``: it must not read private data; the report records it as
a user-supplied initialiser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["INITS", "support_labels", "init_support", "corruption_mask", "resolve_init"]

InitFn = Callable[[Any, int, tuple[int, ...]], jax.Array]


def support_labels(n_classes: int, support_per_class: int) -> np.ndarray:
    """Class-balanced support labels ``(m,)`` int32: ``[0]*spc + [1]*spc + ...`` (data independent)."""
    return np.repeat(np.arange(n_classes, dtype=np.int32), support_per_class)


def init_support(
    key: Any, n_support: int, input_shape: tuple[int, ...], dtype: Any = jnp.float32
) -> jax.Array:
    """Support inputs ``(m, *input_shape)`` drawn i.i.d. from ``N(0, 1)`` (Alg. 1, step 1).

    Depends only on ``key`` and the shape: no real example is ever used.
    """
    return jax.random.normal(key, (n_support, *input_shape), dtype=dtype)


#: Named initialisers and what the report says about them.
INITS: dict[str, tuple[InitFn, str]] = {
    "gaussian": (init_support, "support initialisation: N(0, 1) from the key (no real example)"),
}


def resolve_init(init: str | InitFn) -> tuple[str, InitFn, str]:
    """``(name, fn, report line)`` of a named or user-supplied initialiser."""
    if callable(init):
        name = getattr(init, "__name__", "custom")
        return (
            f"custom:{name}",
            init,
            f"support initialisation: user-supplied function {name!r} (the caller asserts "
            "it reads no private data)",
        )
    if init not in INITS:
        raise ValueError(f"init must be one of {sorted(INITS)} or a callable, got {init!r}")
    fn, line = INITS[init]
    return str(init), fn, line


def corruption_mask(key: Any, shape: tuple[int, ...], fraction: float) -> np.ndarray:
    """Boolean mask (True = corrupted/frozen) with exactly ``round(fraction * size)`` entries.

    Drawn from ``key`` only (data independent); paper Table 4.
    """
    size = int(np.prod(shape))
    k = int(round(fraction * size))
    perm = np.asarray(jax.random.permutation(key, size))
    mask = np.zeros(size, dtype=bool)
    mask[perm[:k]] = True
    return mask.reshape(shape)
