"""The API reference renders: no Sphinx roles (``:func:`` etc.) anywhere mkdocstrings reads.

mkdocstrings renders Markdown; a reStructuredText role would show up literally
in the built site. Every module of the package is imported and the docstrings
of its module, classes, functions and methods are checked, and so are the docs pages.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import privkernels

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj|py:\w+):`")
ROOT = Path(__file__).resolve().parents[1]


def _modules() -> list[str]:
    names = [privkernels.__name__]
    for info in pkgutil.walk_packages(privkernels.__path__, prefix="privkernels."):
        names.append(info.name)
    return sorted(names)


def _docstrings(module: object) -> list[tuple[str, str]]:
    out = [(getattr(module, "__name__", "?"), inspect.getdoc(module) or "")]
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != getattr(module, "__name__", None):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out.append((f"{module.__name__}.{name}", inspect.getdoc(obj) or ""))
        if inspect.isclass(obj):
            for meth_name, meth in vars(obj).items():
                fn = getattr(meth, "__func__", meth)
                if inspect.isfunction(fn) or isinstance(meth, property):
                    doc = inspect.getdoc(meth) or ""
                    out.append((f"{module.__name__}.{name}.{meth_name}", doc))
    return out


@pytest.mark.parametrize("name", _modules())
def test_no_sphinx_roles_in_docstrings(name: str) -> None:
    module = importlib.import_module(name)
    bad = [where for where, doc in _docstrings(module) if ROLE.search(doc)]
    assert not bad, f"reStructuredText roles render literally in the API docs: {bad}"


def test_no_sphinx_roles_in_docs_pages() -> None:
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    bad = [str(p.relative_to(ROOT)) for p in pages if ROLE.search(p.read_text())]
    assert not bad, f"reStructuredText roles in {bad}"


def test_the_checker_sees_a_role() -> None:
    """The pattern matches what it must refuse (a checker that matches nothing passes vacuously)."""
    assert ROLE.search("see :func:`privkernels.dp_kip.fit`")
    assert ROLE.search("a :class:`~x.Y`")
    assert not ROLE.search("see `privkernels.dp_kip.fit`")
