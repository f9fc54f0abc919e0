"""Every results file says how it was made (issue 53 item 5): a JSON written by
``python -m benchmarks`` carries its command, clean git commit, versions and machine.

Files from before the provenance block (written up to 2026-11-28) are listed here by name
and ``docs/benchmarks.md`` gives their number: a new file without a complete block fails
unless someone adds it to the list by hand (rerun an old file to take it off).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.rerun import command_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Older than the provenance block: their Markdown says how they were run.
LEGACY = set(
    """
audit-quick defaults-dp-kip-coarse-bounds defaults-dp-kip-grid defaults-regression
dp-kip-table2-scatternet-mnist-eps1-round11 dp-ntk-regression-fig1-quick
dp-ntk-table2-2000iter dp-ntk-table2-fmnist-2000iter gpu-h100-perf-quick
gpu-h200-perf-quick peers-adult-aim peers-mnist-regression-full peers-quick
""".split()
)
#: Run on a lent GPU from uncommitted code; the Markdown names the three files that differed.
DIRTY = {"gpu-h200-paper-cells", "gpu-h200-logs/paper-cells-chunk500"}
SHA = re.compile(r"^[0-9a-f]{7,40}$")


def _files() -> dict[str, dict]:
    """Every results JSON, subfolders included, by its path under ``RESULTS`` less ``.json``."""
    paths = sorted(RESULTS.rglob("*.json"))
    return {str(p.relative_to(RESULTS).with_suffix("")): json.loads(p.read_text()) for p in paths}


FILES = _files()  # read once: every case below looks one file up


def test_the_legacy_lists_name_existing_files_only() -> None:
    names = set(FILES)
    assert LEGACY | DIRTY <= names


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_results_file_records_how_it_was_made(name: str) -> None:
    payload = FILES[name]
    if name in LEGACY:
        assert "provenance" not in payload, f"{name} has provenance now: drop it from LEGACY"
        return
    prov = payload.get("provenance")
    assert isinstance(prov, dict), f"{name}: no provenance block"
    assert isinstance(payload.get("machine"), dict) and payload["machine"], name
    assert SHA.match(str(prov.get("git_commit"))), name
    assert isinstance(prov.get("versions"), dict) and prov["versions"].get("jax"), name
    # the estimator-defaults benchmarks (issue 52) keep their command in ``meta``
    command = prov.get("command") or payload.get("meta", {}).get("command")
    assert str(command).startswith("python -m benchmarks"), name
    if payload.get("rerun"):  # the command `rerun` repeats is the one recorded
        assert command == command_of(payload["rerun"]), name
    if name not in DIRTY:
        assert prov.get("git_dirty") is False, f"{name}: run from uncommitted code"


def test_the_docs_give_the_number_of_legacy_files() -> None:
    text = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    assert f"older files ({len(LEGACY)})" in text
