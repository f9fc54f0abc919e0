"""Package surface: lazy exports resolve, the three method modules import."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import privkernels
from benchmarks.common import MAX_PNG_BYTES, shrink_png


def test_version() -> None:
    assert privkernels.__version__.count(".") == 2


@pytest.mark.parametrize(
    "package",
    ["privkernels", "privkernels.features", "privkernels.privacy"],
)
def test_lazy_exports_resolve(package: str) -> None:
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"


def test_methods_import() -> None:
    from privkernels import dp_kip, dp_ntk, dp_ntk_regression

    for mod in (dp_ntk, dp_kip, dp_ntk_regression):
        assert callable(mod.fit)


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError):
        privkernels.not_a_module  # noqa: B018


# ----------------------------------------------------------------------------- layering

SRC = Path(privkernels.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _owner(module: str) -> str:
    """The subpackage a module belongs to (``""`` for modules directly in privkernels)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (SRC / parts[1]).is_dir() else ""


def _source(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``import from`` reads (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _runtime_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module loads: its top level, ``if`` and ``try`` blocks, not
    ``if TYPE_CHECKING:`` blocks and not function bodies."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            out += _runtime_imports(node.body) + _runtime_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                out += _runtime_imports(block)
    return out


def _edges(module: str, tree: ast.Module) -> set[str]:
    """The privkernels modules ``module`` imports when it loads."""
    out = set()
    for node in _runtime_imports(tree.body):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
            continue
        src = _source(module, node)
        for alias in node.names:
            sub = f"{src}.{alias.name}"
            out.add(sub if sub in MODULES else src)
    return out & MODULES.keys()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a self-import)."""
    order, low, stack, found = {}, {}, [], []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            comp = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_private_name_is_imported_across_subpackages() -> None:
    """``from privkernels.X import _y`` only inside X's own subpackage: a name another
    subpackage needs is public (or moved lower, e.g. ``privkernels._numerics``)."""
    bad = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            src = _source(module, node)
            if src.split(".")[0] != "privkernels" or _owner(src) == _owner(module):
                continue
            bad += [f"{module}: {src}.{a.name}" for a in node.names if a.name[:1] == "_"
                    and not a.name.startswith("__")]  # fmt: skip
    assert not bad, bad


def test_no_import_cycle_among_modules() -> None:
    """The module-level imports of privkernels form no cycle."""
    graph = {m: _edges(m, ast.parse(p.read_text())) for m, p in MODULES.items()}
    assert not _cycles(graph)


def test_the_layering_checks_see_a_cycle_and_a_private_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    tree = ast.parse("from privkernels.privacy.clipping import _x\nimport privkernels.linalg")
    assert _edges("privkernels.features.entk", tree) == {
        "privkernels.privacy.clipping",
        "privkernels.linalg",
    }
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _owner(_source("privkernels.features.entk", node)) == "privacy"


#: Comments that are tool directives (noqa, type: ignore, pragma, fmt), not a reason.
PRAGMA = re.compile(r"^(noqa\b|type:\s*ignore|pragma:|fmt:)")


def _reasons(source: str) -> dict[int, str]:
    """Line number -> the text of its comment, tool directives left out."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text and not PRAGMA.match(text):
                out[tok.start[0]] = text
    return out


def _deferred_imports(node: ast.AST, in_function: bool = False) -> list[list[ast.stmt]]:
    """Each import inside a function body, as the run of adjacent imports that ends at it."""
    out = []
    inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(node, field, None)
        if not isinstance(block, list):
            continue
        start = 0
        for i, stmt in enumerate(block):
            if not isinstance(stmt, ast.Import | ast.ImportFrom):
                start = i + 1
            elif inner:
                out.append(block[start : i + 1])
            out += _deferred_imports(stmt, inner)
    return out


def _uncommented_imports(source: str) -> list[int]:
    """Lines of function-level imports with no reason: none on the import's own lines
    and none in the comment lines right above its run of imports."""
    runs = _deferred_imports(ast.parse(source))
    lines, reasons = source.splitlines(), _reasons(source) if runs else {}
    bad = []
    for run in runs:
        stmt = run[-1]
        own = range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
        above, k = [], run[0].lineno - 1
        while k >= 1 and lines[k - 1].lstrip().startswith("#"):
            above.append(k)
            k -= 1
        if not any(n in reasons for n in (*own, *above)):
            bad.append(stmt.lineno)
    return sorted(set(bad))


def test_every_function_level_import_says_why() -> None:
    """Issue 51: an import inside a function only for an optional or heavy dependency (or
    an import cycle), each with a comment saying which; every other import is at the top."""
    bad = [f"{module}:{line}" for module, path in MODULES.items()
           for line in _uncommented_imports(path.read_text())]  # fmt: skip
    assert not bad, bad


def test_the_import_check_sees_an_uncommented_import() -> None:
    source = (
        "def f():\n"
        "    import json  # noqa: PLC0415\n"
        "    return json\n"
        "\n"
        "def g():\n"
        "    # heavy: loaded on first use\n"
        "    import scipy\n"
        "    from scipy import stats\n"
        "    try:\n"
        "        import pandas  # optional\n"
        "    except ImportError:\n"
        "        import csv\n"
        "    return scipy, stats, pandas, csv\n"
    )
    assert _uncommented_imports(source) == [2, 12]


REPO = Path(__file__).resolve().parents[1]


def test_the_results_tree_stays_lean() -> None:
    """Committed results are numbers plus thumbnails: the tree at most 4 MB, each PNG at
    most 60 KB (`python -m benchmarks thumbnails` shrinks them), one-off scripts gone."""
    results = [p for p in (REPO / "benchmarks" / "results").rglob("*") if p.is_file()]
    assert results, "benchmarks/results is empty"
    assert sum(p.stat().st_size for p in results) <= 4_000_000
    big = [p.name for p in results if p.suffix == ".png" and p.stat().st_size > 60_000]
    assert not big, big
    scripts = [p for p in (REPO / "scripts").iterdir() if p.is_file()]
    assert sum(len(p.read_text().splitlines()) for p in scripts) < 500


def test_shrink_png_makes_a_thumbnail(tmp_path: Path) -> None:
    """A large grey grid becomes a thumbnail under the cap; a small file is left alone."""
    rng = np.random.default_rng(0)
    big = tmp_path / "grid.png"
    Image.fromarray(rng.integers(0, 256, (900, 900), dtype=np.uint8)).save(big)
    assert big.stat().st_size > MAX_PNG_BYTES
    shrink_png(big)
    assert big.stat().st_size <= MAX_PNG_BYTES
    with Image.open(big) as img:
        assert max(img.size) <= 400
    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(small)
    before = small.read_bytes()
    shrink_png(small)
    assert small.read_bytes() == before
