"""Registry of benchmark tables.

A table module defines ``run(ctx: RunContext) -> list[dict]`` and registers it
with `register`. Each row is a dict with at least ``dataset``, ``epsilon``,
``metric``, ``value``, ``paper_value`` (or None) and ``seconds``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RunContext", "Table", "register", "TABLES", "load_all"]


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What a table run gets from the CLI.

    Attributes:
      profile: ``"quick"`` (reduced iterations; minutes a table on 2 CPU cores)
        or ``"paper"`` (the paper's settings).
      seeds: seeds to average over.
      data_dir: where the real data lives (None -> ``PRIVKERNELS_DATA``).
      out: output directory for JSON / Markdown / PNG files.
      options: extra ``--set key=value`` overrides, as strings.
    """

    profile: str
    seeds: tuple[int, ...]
    data_dir: str | None
    out: Path
    options: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    description: str
    run: Callable[[RunContext], list[dict[str, Any]]]
    module: str
    options: tuple[str, ...] = ()

    def check_options(self, options: dict[str, str]) -> None:
        """Refuse ``--set`` keys this table does not read (a typo must not be ignored)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise SystemExit(
                f"unknown --set option(s) {unknown} for table {self.name!r}; "
                f"it accepts: {', '.join(sorted(self.options)) or '(none)'}"
            )


TABLES: dict[str, Table] = {}

# Modules that register tables; each import is cheap (heavy imports happen in run).
_TABLE_MODULES = (
    "benchmarks.dp_ntk_tables",
    "benchmarks.dp_ntk_images",
    "benchmarks.dp_ntk_images_levers",
    "benchmarks.dp_kip_tables",
    "benchmarks.dp_ntk_regression_tables",
    "benchmarks.dp_ntk_regression_solver",
    "benchmarks.audit_tables",
    "benchmarks.peers",
    "benchmarks.dp_ntk_tabular",
)


def register(
    name: str, description: str, options: tuple[str, ...] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(ctx) -> rows`` as benchmark table ``name``.

    ``options`` lists the ``--set`` keys the table reads; any other key is refused.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in TABLES:
            raise ValueError(f"benchmark table {name!r} registered twice")
        TABLES[name] = Table(name, description, fn, fn.__module__, tuple(options))
        return fn

    return deco


def load_all() -> dict[str, Table]:
    """Import every table module (missing modules are skipped) and return the registry."""
    for mod in _TABLE_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise
    return TABLES
