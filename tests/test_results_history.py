"""The tuning and test-read history of the benchmark cells (issue 53).

`benchmarks/results/history/` holds one JSONL file per headline cell (one line per
configuration scored on validation rows, one per test-set read) and a README whose
summary table counts them; `docs/benchmarks.md` repeats that table. These tests hold
the files, the README and the docs page to each other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "benchmarks" / "results" / "history"
REQUIRED = ("kind", "round", "settings", "score", "split", "commit", "source", "rule")
KINDS = ("validation", "test")
PROVENANCE = (
    "public data (",
    "privkernels.tuning (accounted)",
    "private validation, unaccounted",
    "fixed settings, no search",
)
ROW = re.compile(r"^\| `(?P<cell>[a-z0-9.-]+)` \|")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def _cells() -> dict[str, list[dict[str, object]]]:
    return {
        path.stem: [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(HISTORY.glob("*.jsonl"))
    }


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match and line.count("|") == 7:
            rows[match["cell"]] = [c.strip() for c in line.strip("|").split("|")]
    return rows


def _readme() -> str:
    return (HISTORY / "README.md").read_text()


def test_every_line_parses_with_the_required_fields() -> None:
    cells = _cells()
    assert cells, "no history files"
    for cell, lines in cells.items():
        assert lines, cell
        for i, line in enumerate(lines):
            where = f"{cell}.jsonl line {i + 1}"
            missing = [f for f in REQUIRED if f not in line]
            assert not missing, f"{where}: missing {missing}"
            assert line["kind"] in KINDS, where
            assert line.get("cell", cell) == cell, where
            assert isinstance(line["settings"], dict) and line["settings"], where
            assert isinstance(line["score"], (int, float)), where
            assert isinstance(line["rule"], str) and line["rule"], where
            commits = str(line["commit"]).split()
            assert commits and all(COMMIT.match(c) for c in commits), where
            if line["kind"] == "test":
                assert line["split"] == "test", where
            else:
                assert str(line["split"]).startswith("unnoised private validation rows"), where


def test_every_readme_cell_has_a_file_and_every_file_a_row() -> None:
    rows = _table_rows(_readme())
    assert set(rows) == set(_cells())


def test_the_readme_counts_equal_the_line_counts() -> None:
    rows = _table_rows(_readme())
    for cell, lines in _cells().items():
        _, _, provenance, validation, test, _ = rows[cell]
        assert provenance.startswith(PROVENANCE), cell
        val = [d for d in lines if d["kind"] == "validation"]
        reruns = sum("rerun_of" in d for d in val)
        expected = str(len(val))
        if reruns:
            plural = "" if reruns == 1 else "s"
            expected += f" ({len(val) - reruns} configurations + {reruns} rerun{plural})"
        assert validation == expected, cell
        tests = [d for d in lines if d["kind"] == "test"]
        settings = {json.dumps(d["settings"], sort_keys=True) for d in tests}
        plural = "" if len(settings) == 1 else "s"
        assert test == f"{len(tests)} ({len(settings)} setting{plural})", cell


def test_the_last_column_repeats_the_test_counts() -> None:
    """The counts in the last column agree with the test-lines column."""
    for cell, (_, _, _, _, test, covers) in _table_rows(_readme()).items():
        counts = re.match(r"(\d+) \((\d+) settings?\)", test)
        assert counts, cell
        said = re.search(r"(\d+) test reads? of (\d+) settings?", covers)
        pick = re.search(r"the pick among (\d+) settings?", covers)
        assert said or pick, f"{cell}: the last column gives no count"
        if said:
            assert said.groups() == counts.groups(), cell
        if pick:
            assert pick[1] == counts[2], cell


def test_the_readme_lists_every_test_read() -> None:
    text = _readme()
    for cell, lines in _cells().items():
        (bullet,) = [ln for ln in text.splitlines() if ln.startswith(f"- `{cell}`: ")]
        reads = [d for d in lines if d["kind"] == "test"]
        listed = bullet.split(": ", 1)[1].split("; ")
        assert len(listed) == len(reads), cell
        for entry, read in zip(listed, reads, strict=True):
            assert entry.startswith(f"`{str(read['commit']).split()[0]}` {read['round']}: "), cell


@pytest.mark.parametrize("page", ["docs/benchmarks.md"])
def test_the_docs_section_repeats_the_readme_table(page: str) -> None:
    text = (ROOT / page).read_text()
    assert "## How these numbers were chosen" in text
    assert _table_rows(text) == _table_rows(_readme())


@pytest.mark.parametrize(
    "page",
    [
        "dp-kip-scatternet-validation.md",
        "dp-kip-convnet-protocol-validation.md",
        "dp-kip-fcntk-dp-ntk-init-validation.md",
    ],
)
def test_the_condensed_pages_stay_short_and_point_to_the_history(page: str) -> None:
    text = (ROOT / "benchmarks" / "results" / page).read_text()
    assert len(text.splitlines()) < 60
    assert f"git show 94647e1:benchmarks/results/{page}" in text
    assert "history/" in text


def test_the_readme_stays_short() -> None:
    assert len(_readme().splitlines()) < 150
