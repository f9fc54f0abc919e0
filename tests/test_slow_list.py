"""The list of tests the default run leaves to ``-m slow`` names tests that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import SLOW_LIST, slow_node_ids

ROOT = Path(__file__).parent.parent


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_listed_slow_test_exists_once() -> None:
    ids = slow_node_ids()
    assert ids, f"{SLOW_LIST} lists no test"
    assert len(ids) == len(set(ids)), "a node id is listed twice"
    for node in ids:
        m = re.fullmatch(r"(tests/[\w/]+\.py)::(\w+)(\[.+\])?", node)
        assert m, f"not a node id: {node}"
        path = ROOT / m.group(1)
        assert path.is_file(), f"{node}: no such file"
        assert m.group(2) in _test_names(path), f"{node}: no such test"


def test_the_listed_tests_are_marked_slow(request: pytest.FixtureRequest) -> None:
    """Every collected test the list names carries the ``slow`` marker, so the default
    run (``-m 'not slow'``) has deselected it."""
    listed = set(slow_node_ids())
    items = request.session.items
    assert items, "no collected tests"
    for item in items:
        if item.nodeid in listed:
            assert item.get_closest_marker("slow") is not None, item.nodeid
    if (request.config.option.markexpr or "").strip() == "not slow":
        assert not listed & {item.nodeid for item in items}, "a listed test runs by default"
