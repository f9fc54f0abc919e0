"""`fit_table` refuses every bad setting before any `jax.random` draw (second attack, C3).

Before, the default table network drew its public reference weights (`with_marginals`)
before `dp_ntk.fit` checked the settings: a bad ``label_mode`` or ``iterations`` was
refused after a draw. The network is now built inside `dp_ntk.fit`, after its plan.
"""

from __future__ import annotations

import jax
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
