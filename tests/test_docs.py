"""Every ```python block of the README and every docs page runs, in order, one namespace per page.

Blocks meant only for reading use another fence (```bash, ```text, ```py).
Pages get ``OUT_DIR`` pointing at a temporary directory.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from privkernels.privacy import PrivacyLeakWarning

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _pages_with_code() -> list[Path]:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return [p for p in pages if FENCE.search(p.read_text())]


def test_docs_have_tutorials() -> None:
    tutorials = sorted((DOCS / "tutorials").glob("*.md"))
    assert tutorials, "docs/tutorials/ has no pages"
    for page in tutorials:
        assert FENCE.search(page.read_text()), f"{page.name} has no runnable ```python block"


#: pages whose code trains end to end (searches, generators, estimators, tables, CLI): -m slow
SLOW_PAGES = {
    "docs/tutorials/tuning.md",
    "docs/tutorials/dp_ntk.md",
    "docs/tutorials/estimators.md",
    "docs/tutorials/cli.md",
    "docs/tutorials/dp_ntk_regression.md",
    "docs/tutorials/tables.md",
    "docs/tutorials/preprocessing.md",
    "docs/tutorials/accountant.md",
}


#: a newcomer's first run (the README's quick example, the quickstart page): a
#: PrivacyLeakWarning there is an error, since the example should pass public facts
#: (n_classes, classes=) rather than have them read off the private data
NO_LEAK_PAGES = {"README.md", "docs/quickstart.md"}


def _page_params() -> list[object]:
    out: list[object] = []
    for page in _pages_with_code():
        name = str(page.relative_to(ROOT))
        marks = (pytest.mark.slow,) if name in SLOW_PAGES else ()
        out.append(pytest.param(page, id=name, marks=marks))
    return out


@pytest.mark.parametrize("page", _page_params())
def test_docs_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}", "OUT_DIR": str(tmp_path)}
    with warnings.catch_warnings():
        if str(page.relative_to(ROOT)) in NO_LEAK_PAGES:
            warnings.simplefilter("error", PrivacyLeakWarning)
        for i, match in enumerate(FENCE.finditer(page.read_text())):
            code = compile(match.group(1), f"{page.name}[block {i}]", "exec")
            exec(code, namespace)
