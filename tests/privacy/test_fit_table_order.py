"""`fit_table` refuses every bad setting before any `jax.random` draw (second attack, C3).

Before, the default table network drew its public reference weights (`with_marginals`)
before `dp_ntk.fit` checked the settings: a bad ``label_mode`` or ``iterations`` was
refused after a draw. The network is now built inside `dp_ntk.fit`, after its plan.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from test_synth import _frame, _schema

from privkernels.synth import fit_table

BAD_SETTINGS = {
    "label_mode": dict(label_mode="bogus"),
    "iterations": dict(iterations=-1),
    "batch_size": dict(batch_size=0),
    "d_code": dict(d_code=0),
    "split_scalar": dict(split=5.0),
    "split_length": dict(split=(0.5, 0.3, 0.2)),
    "learning_rate": dict(learning_rate=-1.0),
    "neighbouring": dict(neighbouring="bogus"),
    "min_proportion": dict(min_proportion=0.0),
    "method": dict(method="bogus"),
}


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_a_bad_setting_is_refused_before_any_draw(name: str, monkeypatch) -> None:
    forbid_noise(monkeypatch)
    kw = {"iterations": 2, "progress": False, **BAD_SETTINGS[name]}
    with pytest.raises(ValueError):
        fit_table(jax.random.key(0), _frame(50), _schema(), epsilon=1.0, **kw)


def test_the_default_network_is_the_schema_table_network() -> None:
    """`fit_table`'s default network (built in `dp_ntk.fit`) is `default_table_network`."""
    from privkernels.synth import default_table_network

    res = fit_table(jax.random.key(1), _frame(60), _schema(), epsilon=1.0, iterations=1,
                    batch_size=8, progress=False)  # fmt: skip
    assert res.result.network == default_table_network(_schema(), 2)


def _groups_cases() -> dict[str, object]:
    from privkernels.generators import ColumnGroup as G

    return {
        "past_the_row": ((G("numeric", 0, 8),), ValueError),
        "far_past": ((G("numeric", 0, 3), G("numeric", 40, 50)), ValueError),
        "overlapping": ((G("numeric", 0, 4), G("numeric", 2, 5)), ValueError),
        "tuples": ((("numeric", 0, 5),), TypeError),
        "a_string": ("numeric", TypeError),
        "an_int": (5, TypeError),
    }


@pytest.mark.parametrize("name", sorted(_groups_cases()))
def test_malformed_groups_are_refused_before_any_draw(name: str, monkeypatch) -> None:
    """Second attack of s61, C1: `dp_ntk.fit(groups=)` never checked the groups; the
    marginal network gathered columns past the row (clamped), the release was charged,
    and its own model file then failed to load. Now refused before any draw."""
    from privkernels import dp_ntk

    groups, error = _groups_cases()[name]  # type: ignore[misc]
    rng = np.random.default_rng(0)
    x, y = rng.uniform(size=(40, 5)).astype(np.float32), rng.integers(0, 2, 40)
    forbid_noise(monkeypatch)
    with pytest.raises(error):
        dp_ntk.fit(jax.random.key(0), x, y, epsilon=1.0, n_classes=2, groups=groups,
                   iterations=2, batch_size=8, progress=False)  # fmt: skip


def test_fit_table_refuses_groups_in_its_options(monkeypatch) -> None:
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="schema"):
        fit_table(jax.random.key(0), _frame(50), _schema(), epsilon=1.0, groups=())
