"""scikit-learn's input validation behind privkernels' own refusals (no input value in a
message), shared by the estimators (`privkernels.sklearn`) and the private scalers
(`privkernels.preprocessing`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from privkernels._validation import check_fit_rows, check_numeric

__all__ = ["checked_data"]


def checked_data(
    est: Any, X: Any, y: Any = "no_validation", *, reset: bool = True, **kwargs: Any
) -> Any:
    """scikit-learn's ``validate_data`` after privkernels' own refusals, whose messages hold
    no input value (scikit-learn's conversion error echoes the cell it cannot read): fewer
    than `privkernels._validation.MIN_FIT_ROWS` rows at fit (``reset``), ``X`` not 2-D, a
    non-numeric cell of ``X``, or of ``y`` when ``y_numeric``
    (`privkernels._validation.check_numeric`)."""
    check_numeric(X, "X")
    if np.ndim(X) < 2:  # scikit-learn's message would print the array
        raise ValueError(
            f"X must be 2-D (n_samples, n_features), got {np.ndim(X)}-D input. Reshape your "
            "data: X.reshape(-1, 1) for one feature, X.reshape(1, -1) for one sample"
        )
    if reset:
        check_fit_rows(X, "X")
    if _n_is_private(est):
        _check_shapes(X, y, bool(kwargs.get("multi_output")))
    if kwargs.get("y_numeric"):
        check_numeric(y, "y")
    if isinstance(y, str) and y == "no_validation":  # X alone (scikit-learn's convention)
        return validate_data(est, X, reset=reset, **kwargs)
    if y is not None and np.shape(y)[:1] != np.shape(X)[:1]:  # scikit-learn's names both n
        raise ValueError("X and y hold different numbers of rows")
    return validate_data(est, X, y, reset=reset, **kwargs)


def _n_is_private(est: Any) -> bool:
    """Whether ``est`` releases under add-remove, where the row count n is private (under
    replace-one it is public, and scikit-learn's messages, which its estimator checks
    expect, may name it)."""
    relation = getattr(est, "_relation", None)
    return callable(relation) and relation() == "add-remove"


def _check_shapes(X: Any, y: Any, multi_output: bool) -> None:
    """Refuse ``X`` without columns and ``y`` of the wrong rank before scikit-learn does: its
    messages print the whole shape, whose row count is private under add-remove."""
    if np.ndim(X) == 2 and np.shape(X)[1] == 0:
        raise ValueError("X has no features (0 columns)")
    if y is None or (isinstance(y, str) and y == "no_validation"):
        return
    ndim = np.ndim(y)
    if ndim > 2 or (ndim == 2 and not multi_output and np.shape(y)[1] != 1):
        cols = "" if ndim > 2 else f" with {np.shape(y)[1]} columns"
        raise ValueError(
            f"y must be one column of labels (1-D, or 2-D with one column), got a {ndim}-D "
            f"array{cols}"
        )
