"""Every privkernels warning names the caller's line, not a line inside the package.

The fit paths differ in depth (an estimator, the functional API, a scaler, a search), so
fixed ``stacklevel`` numbers pointed into ``sklearn.py`` or ``preprocessing.py`` for some of
them. `privkernels._warnings.user_stacklevel` counts the package's own frames instead, and
then scikit-learn's and joblib's, so a fit under ``cross_validate`` names the user's line.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from sklearn.model_selection import cross_validate

from privkernels import dp_ntk_regression
from privkernels._warnings import user_stacklevel
from privkernels.data.frames import infer_schema
from privkernels.pipeline import make_private_pipeline
from privkernels.privacy import SeededKeyWarning
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKRegressor,
    PrivateStandardScaler,
)

RNG = np.random.default_rng(0)
X = RNG.random((80, 4)).astype(np.float32)
Y = np.arange(80) % 2


def _recorded(
    call: Callable[[], object], *, ignore_module: str | None = None
) -> list[warnings.WarningMessage]:
    """The warnings ``call()`` raises, all shown, less those a user's module filter drops."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if ignore_module is not None:
            warnings.filterwarnings("ignore", module=ignore_module)
        call()
    return caught


CALLS: dict[str, Callable[[], object]] = {
    "DPKIPClassifier int seed": lambda: DPKIPClassifier(epsilon=1.0, random_state=0).fit(X, Y),
    "DPNTKClassifier int seed": lambda: DPNTKClassifier(epsilon=1.0, random_state=0).fit(X, Y),
    "DPNTKRegressor int seed": lambda: DPNTKRegressor(epsilon=1.0, random_state=0).fit(
        X, Y.astype(float)
    ),
    "PrivateStandardScaler int seed": lambda: PrivateStandardScaler(
        epsilon=1.0, bounds=(0.0, 1.0), random_state=0
    ).fit(X),
    "functional beta-close, key(0), rows outside the ball": lambda: dp_ntk_regression.fit(
        jax.random.key(0),
        3.0 * X,
        Y.astype(float),
        epsilon=1.0,
        delta=1e-5,
        neighbouring="beta-close",
    ),
    "cross_validate of an int-seeded classifier": lambda: cross_validate(
        DPNTKClassifier(epsilon=1.0, random_state=0), X, Y, cv=2
    ),
    "PrivatePipeline of int-seeded steps": lambda: make_private_pipeline(
        PrivateStandardScaler(epsilon=0.5, bounds=(0.0, 1.0), random_state=0),
        DPNTKClassifier(epsilon=0.5, random_state=0),
    ).fit(X, Y),
    "infer_schema": lambda: infer_schema({"a": ["1", "2", "3"], "y": ["0", "1", "0"]}, label="y"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_warning_points_at_this_file(name: str) -> None:
    caught = _recorded(CALLS[name])
    assert caught, f"{name}: expected at least one warning"
    wrong = {(w.category.__name__, w.filename) for w in caught if w.filename != __file__}
    assert not wrong, wrong


def test_a_filter_on_scikit_learn_does_not_hide_a_privacy_warning() -> None:
    # The common way to quiet scikit-learn's own warnings must not quiet a seed warning
    # raised under cross-validation: scikit-learn's and joblib's frames are skipped too.
    caught = _recorded(CALLS["cross_validate of an int-seeded classifier"], ignore_module="sklearn")
    seeded = [w for w in caught if issubclass(w.category, SeededKeyWarning)]
    assert seeded and all(w.filename == __file__ for w in seeded)


def test_the_helper_names_a_calling_line_outside_the_package() -> None:
    # Called from a test (outside the package), the warn call's own line is the target.
    assert user_stacklevel() == 1


def test_every_warn_call_in_the_package_uses_the_helper() -> None:
    # A fixed number would point into the package again as soon as a fit path changes depth.
    package = Path(user_stacklevel.__code__.co_filename).parent
    fixed = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.warn"):
                continue
            level = {k.arg: ast.unparse(k.value) for k in node.keywords}.get("stacklevel")
            if level != "user_stacklevel()":
                fixed.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not fixed, fixed
