"""Argument validation shared by every public function.

Privacy code must refuse bad input *before* any noise is drawn or anything is
released, with a message that names the offending argument. Every check here
raises ``ValueError`` (or ``TypeError`` for wrong kinds of objects).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._warnings import warn_privacy_leak

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
    "check_finite",
    "float32_finite",
    "check_fit_rows",
    "check_numeric",
    "infer_n_classes",
    "MIN_FIT_ROWS",
    "N_CLASSES_INFERRED_NOTE",
]

#: Report note of a fit whose ``n_classes`` was read from the private labels.
N_CLASSES_INFERRED_NOTE = (
    "n_classes was inferred as max(y) + 1 from the private labels without noise "
    "(PrivacyLeakWarning); the guarantee does not cover it. Pass n_classes to avoid this."
)


def _is_bool(value: Any) -> bool:
    """A numpy or JAX array (0-d included) of booleans."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and np.dtype(dtype) == np.bool_


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, (bool, str, bytes)) or value is None or _is_bool(value):
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


#: The fewest rows any fit accepts: one rule for the estimators, the function fits
#: (`privkernels.dp_ntk.fit`, `privkernels.dp_kip.fit`, `privkernels.dp_ntk_regression.fit`),
#: `privkernels.synth.fit_table` and the command line. One row teaches a model nothing
#: beyond the noise, and the strictest rule already in use (the regression estimators') was 2.
MIN_FIT_ROWS = 2


def check_fit_rows(x: Any, name: str = "x") -> None:
    """Refuse a fit on fewer than `MIN_FIT_ROWS` rows of ``x`` (before any noise).

    ``x``: anything with a leading row axis (array, list, DataFrame); an input whose shape
    cannot be read (None, a scalar, a ragged list) is left to the caller's own checks.
    The message gives the row count as scikit-learn's estimator checks expect ("1 sample"):
    a count is not a value of any record, the refusal is made on the caller's side before
    anything is released (under add-remove the caller holding the data knows n; under
    replace-one n is public), and the refusal itself already says n < 2.
    """
    try:
        shape = np.shape(x)
    except ValueError:  # ragged: numpy's message names shapes only; the caller refuses it
        return
    if len(shape) >= 1 and shape[0] < MIN_FIT_ROWS:
        n = int(shape[0])
        raise ValueError(
            f"{name} has {n} sample{'' if n == 1 else 's'} (n_samples = {n}): every fit "
            f"needs at least {MIN_FIT_ROWS} rows"
        )


def _unreadable(values: np.ndarray) -> type[Exception] | None:
    """None when ``values`` convert to float64, else the kind of error ``float()`` raises
    on the first cell it cannot read. The errors (which quote the cell) are dropped here,
    so a caller raising afterwards chains none of them."""
    try:
        values.astype(np.float64)
        return None
    except (TypeError, ValueError):
        pass
    for value in values.ravel():
        try:
            float(value)
        except TypeError:
            return TypeError
        except ValueError:
            return ValueError
    return ValueError


def _as_array(x: Any) -> np.ndarray | None:
    """``np.asarray(x)``, or None for a ragged list (numpy's error is dropped)."""
    try:
        return np.asarray(x)
    except ValueError:
        return None


def check_numeric(x: Any, name: str) -> None:
    """Refuse non-numeric input with a message that holds no value from it.

    scikit-learn's conversion echoes the offending cell ("could not convert string to
    float: '...'") and its shape errors print the whole array; this check runs first and
    names only the argument, the column (index, and label for a DataFrame) and the kind
    of problem. ``x``: array-like ``(n,)`` or ``(n, d)``, a DataFrame, or a sparse matrix
    (left to scikit-learn, whose sparse messages hold no values). Raises ``ValueError``
    (a string that is not a number, complex values, a ragged list) or ``TypeError`` (an
    object that is neither a string nor a number, worded as scikit-learn's checks expect).
    """
    if x is None or hasattr(x, "tocsr"):
        return
    if hasattr(x, "columns") and hasattr(x, "iloc"):  # a DataFrame: column by column
        columns = [(f"{j} ({label!r})", x.iloc[:, j]) for j, label in enumerate(x.columns)]
    else:
        arr = _as_array(x)
        if arr is None:
            raise ValueError(f"{name} is ragged (rows of different lengths)")
        if np.iscomplexobj(arr):
            raise ValueError(f"Complex data not supported: {name} holds complex values")
        if arr.dtype.kind not in "OSU":
            return
        if arr.ndim != 2:
            arr = arr.reshape(-1, 1)
        columns = [(str(j), arr[:, j]) for j in range(arr.shape[1])]
    for where, col in columns:
        kind = getattr(col.dtype, "kind", "O")  # pandas' nullable dtypes have a kind too
        if kind == "c":
            raise ValueError(f"Complex data not supported: {name} column {where}")
        if kind not in "OSU":
            continue
        bad = _unreadable(np.asarray(col))
        if bad is TypeError:
            raise TypeError(
                f"{name} column {where} holds an object that is not a number (float() "
                "argument must be a string or a real number; the value is not shown)"
            )
        if bad is not None:
            raise ValueError(
                f"{name} holds a non-numeric value in column {where} (the value is not shown)"
            )


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool; require a Python or NumPy bool (not 0/1 or a string)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return bool(value)


def _compute_dtype(dtype: Any) -> np.dtype:
    """The dtype JAX computes in for ``dtype`` (float64 -> float32 unless x64 is on)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


@functools.cache
def _reductions() -> dict[str, Any]:
    """Module-level jitted reductions (one compilation per dtype and shape)."""
    return {
        "finite": jax.jit(lambda a, t: jnp.all(jnp.isfinite(a.astype(t))), static_argnums=1),
        "range": jax.jit(lambda a: (jnp.min(a), jnp.max(a))),
        "whole": jax.jit(lambda a: jnp.all(a == jnp.round(a))),
    }


def _scalar(a: Any) -> Any:
    """The value of a (possibly global, replicated) 0-d JAX array, on this process."""
    if hasattr(a, "is_fully_addressable") and not a.is_fully_addressable:
        return np.asarray(a.addressable_data(0)).item()
    return np.asarray(a).item()


def float32_finite(z: np.ndarray) -> np.ndarray:
    """``z`` (any shape, float64) clipped to float32's finite range, NaN mapped to 0: a
    fixed map of each value, so that a far outlier scaled by private scales (or a 0 / 0 or
    inf - inf of degenerate public bounds) cannot reach a later float32 step as inf or NaN
    and be refused after those scales' release. Finite values inside are unchanged."""
    big = float(np.finfo(np.float32).max)
    return np.nan_to_num(np.clip(z, -big, big), nan=0.0)


def check_finite(arr: Any, name: str, *, dtype: Any = None) -> None:
    """Raise ``ValueError`` unless every entry of ``arr`` is finite in ``dtype``.

    The check runs in the dtype the computation will use (default: JAX's
    canonical dtype of ``arr``, i.e. float32 for float64 input unless x64 is
    enabled): a float64 ``1e39`` is finite in float64 but ``inf`` once cast, so
    it is refused here instead of poisoning a float32 computation. JAX arrays
    are reduced where they live (a sharded global array is never fetched);
    tracers cannot be checked (the caller validates before ``jit``).
    """
    if not np.issubdtype(arr.dtype, np.floating):
        return
    target = _compute_dtype(arr.dtype if dtype is None else dtype)
    if isinstance(arr, jax.core.Tracer):
        return
    if isinstance(arr, jax.Array):
        with jax.ensure_compile_time_eval():  # concrete even while a caller is being traced
            ok = bool(_scalar(_reductions()["finite"](arr, target)))
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            ok = bool(np.all(np.isfinite(np.asarray(arr).astype(target, copy=False))))
    if not ok:
        raise ValueError(
            f"{name} contains NaN or infinite values (checked in {target.name}, the dtype "
            "it is computed in: values beyond its range overflow to inf)"
        )


def check_array(
    x: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    min_rows: int = 1,
    finite: bool = True,
    dtype: Any = None,
) -> Any:
    """Validate an array-like: kind, rank, non-emptiness and finiteness.

    Returns the input unchanged when it is already a NumPy or JAX array (so JAX
    arrays stay on device), else ``np.asarray(x)``. Real numbers and booleans
    only: complex, object and string arrays are refused. Finiteness is checked
    on concrete values in the compute dtype (see `check_finite`; ``dtype``
    overrides it); inside ``jit`` the caller validates beforehand. Messages
    name the argument and its shape, never its values.
    """
    if x is None:
        raise ValueError(f"{name} must be an array, got None")
    arr = x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)
    dt = np.dtype(arr.dtype) if not hasattr(arr.dtype, "kind") else arr.dtype
    if (
        dt == np.dtype(object)
        or np.issubdtype(dt, np.complexfloating)
        or not (np.issubdtype(dt, np.number) or np.issubdtype(dt, np.bool_))
    ):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
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
    if finite:
        check_finite(arr, name, dtype=dtype)
    return arr


def check_in_range(arr: Any, name: str, lo: float, hi: float, hint: str) -> None:
    """Raise ``ValueError`` when any entry of ``arr`` lies outside ``[lo, hi]``.

    Only the fact is reported, never a value from the data; reduced where the
    array lives (host or device, global arrays included).
    """
    if isinstance(arr, jax.Array):
        with jax.ensure_compile_time_eval():
            a_lo, a_hi = (float(_scalar(v)) for v in _reductions()["range"](arr))
    else:
        a_lo, a_hi = float(np.min(arr)), float(np.max(arr))
    if a_lo < lo or a_hi > hi:
        raise ValueError(f"{name} has values outside [{lo:g}, {hi:g}]: {hint}")


def _label_range(arr: Any) -> tuple[int, int]:
    """``(min, max)`` of a label array, reduced where it lives (host or device)."""
    if isinstance(arr, jax.Array):
        with jax.ensure_compile_time_eval():
            lo, hi = _reductions()["range"](arr)
            return int(_scalar(lo)), int(_scalar(hi))
    return int(np.min(arr)), int(np.max(arr))


def check_labels(
    y: Any,
    n_classes: int,
    name: str = "y",
    *,
    n_rows: int | None = None,
) -> Any:
    """Validate integer class labels in ``[0, n_classes)``; return them as int32.

    NumPy/list input comes back as a NumPy int32 array; a JAX array stays a JAX
    array (a global array sharded over processes is checked by a device-side
    reduction and never fetched). A class with no example is allowed: refusing
    it would be a refusal that depends on the private data (a neighbour with
    one more example of that class would be accepted). Error messages never
    contain label values.
    """
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    arr = y if isinstance(y, jax.Array) else np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integer labels, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if np.issubdtype(arr.dtype, np.floating):
        check_finite(arr, name)
        if isinstance(arr, jax.Array):
            with jax.ensure_compile_time_eval():
                whole = bool(_scalar(_reductions()["whole"](arr)))
        else:
            whole = bool(np.all(arr == np.round(arr)))
        if not whole:
            raise ValueError(f"{name} must hold integer class labels")
        arr = arr.astype(np.int32) if isinstance(arr, jax.Array) else arr.astype(np.int64)
    elif not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    if n_rows is not None and arr.shape[0] != n_rows:
        raise ValueError(f"{name} has {arr.shape[0]} labels but x has {n_rows} rows")
    lo, hi = _label_range(arr)
    if lo < 0 or hi >= n_classes:
        raise ValueError(
            f"{name} must lie in [0, n_classes) = [0, {n_classes}) (some labels do not; "
            "values are not shown because they are private)"
        )
    return arr.astype(np.int32)


def infer_n_classes(y: Any, n_classes: Any, *, minimum: int = 1) -> tuple[int, bool]:
    """``(n_classes, inferred)``: the given count, or ``max(y) + 1`` with a warning.

    Reading ``max(y)`` uses the private labels without noise, so it emits a
    `PrivacyLeakWarning`; callers add
    `N_CLASSES_INFERRED_NOTE` to their report when ``inferred`` is True.
    The only place in privkernels that reads the label range from data.
    """
    if n_classes is not None:
        return check_int(n_classes, "n_classes", minimum=minimum), False
    arr = y if isinstance(y, jax.Array) else np.asarray(y)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"y must be a non-empty 1-D array of labels, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"y must hold integer class labels, got dtype {arr.dtype}")
    check_finite(arr, "y")
    warn_privacy_leak("n_classes (inferred as max(y) + 1; pass n_classes explicitly)")
    return max(int(_label_range(arr)[1]) + 1, minimum), True


def check_key(key: Any, name: str = "key") -> jax.Array:
    """Require a JAX PRNG key (typed ``jax.random.key`` or raw uint32[2]).

    ``key`` is typed ``Any`` on purpose: this is the check that turns an unchecked value
    (an int, None, an array of the wrong dtype) into a key or a ``TypeError``.
    """
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
