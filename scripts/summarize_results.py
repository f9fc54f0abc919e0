"""Regenerate the docs' result snippets from the JSON files in benchmarks/results/.

Usage: python scripts/summarize_results.py
Writes docs/_snippets/dp-ntk-results.md and docs/_snippets/dp-kip-results.md.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SNIPPETS = ROOT / "docs" / "_snippets"

SETTINGS_KEYS = (
    "kernel",
    "width",
    "network",
    "iterations",
    "epochs",
    "batch_size",
    "support_per_class",
    "profile",
    "corrupt_fraction",
    "hp_epochs",
    "hp_batch_size",
    "hp_lr",
    "hp_lr_schedule",
    "hp_clip_space",
    "hp_group_norm",
    "hp_preprocess",
    "hp_init",
    "hp_init_fraction",
    "hp_init_iterations",
    "hp_init_code",
    "hp_smooth",
    "hp_learn_labels",
    "hp_relation",
    "convnet_steps",
    "convnet_augment",
    "convnet_teacher",
    "release",
)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def summarize(prefix: str) -> str:
    files = sorted(RESULTS.glob(f"{prefix}*.json"))
    if not files:
        return f"No `{prefix}*` results are committed yet.\n"
    lines = [
        "| results file | dataset | epsilon | metric | measured | paper | settings | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in files:
        payload = json.loads(f.read_text())
        for r in payload["rows"]:
            settings = ", ".join(f"{k}={_fmt(r[k])}" for k in SETTINGS_KEYS if k in r)
            lines.append(
                f"| `{f.stem}` | {r.get('dataset', '-')} | {_fmt(r.get('epsilon'))} | "
                f"{r.get('metric', '-')} | {_fmt(r.get('value'))} | {_fmt(r.get('paper_value'))} | "
                f"{settings} | {_fmt(r.get('seconds'))} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    SNIPPETS.mkdir(parents=True, exist_ok=True)
    for prefix, name in (
        ("dp-ntk-table", "dp-ntk-results.md"),
        ("dp-kip-table", "dp-kip-results.md"),
    ):
        (SNIPPETS / name).write_text(summarize(prefix))
        print(f"wrote {SNIPPETS / name}")


if __name__ == "__main__":
    main()
