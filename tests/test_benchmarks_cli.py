"""The benchmark CLI refuses ``--set`` keys a table does not read (before running anything)."""

from __future__ import annotations

import pytest

from benchmarks.registry import load_all


@pytest.mark.parametrize("name", sorted(load_all()))
def test_every_table_refuses_unknown_options(name):
    table = load_all()[name]
    with pytest.raises(SystemExit, match="unknown --set option"):
        table.check_options({"definitely_not_an_option": "1"})
    table.check_options({k: "1" for k in table.options})  # its own keys are accepted
