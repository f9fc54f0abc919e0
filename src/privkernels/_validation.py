"""Argument validation shared by every public function.

Privacy code must refuse bad input *before* any noise is drawn or anything is
released, with a message that names the offending argument. Every check here
raises ``ValueError`` (or ``TypeError`` for wrong kinds of objects).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "check_epsilon",
    "check_delta",
    "check_positive",
    "check_nonnegative",
    "check_fraction",
    "check_int",
    "check_array",
    "check_labels",
    "check_key",
]


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}") from err
    if np.ndim(value) != 0:
        raise TypeError(f"{name} must be a scalar, got an array of shape {np.shape(value)}")
    return out


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float; require ``0 < epsilon < inf``."""
    eps = _as_float(epsilon, name)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return eps


def check_delta(delta: Any, name: str = "delta") -> float:
    """Return ``delta`` as a float; require ``0 < delta < 1``."""
    d = _as_float(delta, name)
    if not (0.0 < d < 1.0):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {delta!r}")
    return d


def check_positive(value: Any, name: str) -> float:
    """Return ``value`` as a float; require a finite number ``> 0``."""
    v = _as_float(value, name)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def check_nonnegative(value: Any, name: str) -> float:
    """Return ``value`` as a float; require a finite number ``>= 0``."""
    v = _as_float(value, name)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def check_fraction(value: Any, name: str, *, closed: bool = False) -> float:
    """Return ``value`` as a float in (0, 1), or [0, 1] when ``closed``."""
    v = _as_float(value, name)
    ok = (0.0 <= v <= 1.0) if closed else (0.0 < v < 1.0)
    if not ok:
        interval = "[0, 1]" if closed else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return v


def check_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int; require an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_array(
    x: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    min_rows: int = 1,
    finite: bool = True,
) -> Any:
    """Validate an array-like: rank, non-emptiness and finiteness.

    Returns the input unchanged when it is already a NumPy or JAX array (so JAX
    arrays stay on device), else ``np.asarray(x)``. Finiteness is checked on
    concrete values only (inside ``jit`` the caller validates beforehand).
    """
    if x is None:
        raise ValueError(f"{name} must be an array, got None")
    arr = x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(
                f"{name} must have rank {' or '.join(map(str, allowed))}, "
                f"got shape {tuple(arr.shape)}"
            )
    if arr.ndim >= 1 and arr.shape[0] < min_rows:
        raise ValueError(
            f"{name} must have at least {min_rows} row(s), got shape {tuple(arr.shape)}"
        )
    if arr.size == 0 and min_rows > 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)})")
    if finite and np.issubdtype(arr.dtype, np.floating):
        try:
            all_finite = bool(np.all(np.isfinite(np.asarray(arr))))
        except Exception:  # tracer: cannot check concretely
            all_finite = True
        if not all_finite:
            raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def check_labels(
    y: Any,
    n_classes: int,
    name: str = "y",
    *,
    n_rows: int | None = None,
    require_all_classes: bool = False,
) -> np.ndarray:
    """Validate integer class labels in ``[0, n_classes)``; return them as int32.

    ``require_all_classes`` rejects a class with no example (a class-conditional
    method cannot release a meaningful embedding for it, and silently dropping
    it would change the output shape depending on private data).
    """
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integer labels, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integer class labels")
    elif not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    if n_rows is not None and arr.shape[0] != n_rows:
        raise ValueError(f"{name} has {arr.shape[0]} labels but x has {n_rows} rows")
    if arr.min() < 0 or arr.max() >= n_classes:
        raise ValueError(
            f"{name} must lie in [0, n_classes) = [0, {n_classes}), "
            f"got values in [{arr.min()}, {arr.max()}]"
        )
    out = arr.astype(np.int32)
    if require_all_classes:
        counts = np.bincount(out, minlength=n_classes)
        if np.any(counts == 0):
            missing = np.flatnonzero(counts == 0).tolist()
            raise ValueError(f"{name} has no example of class(es) {missing}")
    return out


def check_key(key: Any, name: str = "key") -> Any:
    """Require a JAX PRNG key (typed ``jax.random.key`` or raw uint32[2])."""
    import jax
    import jax.numpy as jnp

    if isinstance(key, (int, np.integer)):
        raise TypeError(
            f"{name} must be a jax.random key (e.g. jax.random.key(0)), got an int; "
            "explicit keys keep every random draw reproducible and never reused"
        )
    if not hasattr(key, "dtype"):
        raise TypeError(f"{name} must be a jax.random key, got {type(key).__name__}")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if key.dtype == jnp.uint32 and key.shape == (2,):
        return key
    raise TypeError(f"{name} must be a jax.random key, got dtype {key.dtype} shape {key.shape}")
