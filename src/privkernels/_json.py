"""JSON read from files with a nesting limit of its own, the same on every Python.

Files the package writes nest a few levels deep (a report inside metadata, a search's
planned events inside a record). A crafted file nested thousands of levels deep is
refused here with a ``ValueError``: Python 3.11's parser raised ``RecursionError`` on
it, 3.12's parses it, and code that walks the result could then recurse past the limit.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "depth", "loads_bounded"]

#: Deeper than anything the package writes (its reports nest about 5 levels).
MAX_DEPTH = 32


def depth(obj: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of parsed JSON (a scalar is 0; stops counting past ``limit``), without
    recursion."""
    deepest, stack = 0, [(obj, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, d + 1)
            if d + 1 > limit:
                break
            stack.extend((child, d + 1) for child in node)
    return deepest


def loads_bounded(text: str, what: str) -> Any:
    """``json.loads(text)``, or a ``ValueError`` naming ``what`` (never the text) when it is
    malformed or nested deeper than `MAX_DEPTH`."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{what} is not readable JSON") from None
    if depth(data) > MAX_DEPTH:
        raise ValueError(f"{what} is JSON nested deeper than {MAX_DEPTH} levels")
    return data
