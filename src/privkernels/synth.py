"""Private synthetic tables: DP-NTK on a DataFrame with a public schema, in one call.

``fit_table(key, df, schema, epsilon=1.0)`` encodes the table with the public
`TabularSchema` (per-record and data-independent: no privacy cost), checks every
value against it (out-of-range values are an error, never clipped silently),
fits DP-NTK (Algorithm 1 of Yang et al.) with a tabular generator whose heads
follow the schema (sigmoid numeric columns, softmax categorical blocks) and,
by default, released class proportions (``label_mode="released"``: the Gaussian
mechanism on the class counts, its own share of the budget), so an imbalanced
table gets imbalanced synthetic labels. `TableSynth.sample_df` returns the same
columns, in the same order and dtypes, as a DataFrame.

The report is DP-NTK's (replace-one; embedding + proportions composed). A
schema inferred from the data (`privkernels.data.frames.infer_schema`) is noted
in it: its bounds and categories were read without noise.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from privkernels import checkpoint, dp_ntk
from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_fit_rows,
    check_int,
    check_key,
    infer_n_classes,
)
from privkernels.data.frames import decoded_table, split_table, to_frame
from privkernels.data.schema import TabularSchema
from privkernels.dp_ntk.calibrate import sample_rows
from privkernels.dp_ntk.result import DPNTKResult, release_arrays, release_meta, result_from
from privkernels.features.marginal import MarginalSkip
from privkernels.generators import TabularGenerator, column_groups_from_schema
from privkernels.privacy.report import PrivacyReport

__all__ = [
    "FORMAT",
    "TableSynth",
    "check_table",
    "default_table_network",
    "fit_table",
    "load_table_synth",
    "SCHEMA_INFERRED_NOTE",
]

#: File format name and version of `TableSynth.save`.
FORMAT = "privkernels.synth.table/1"

SCHEMA_INFERRED_NOTE = (
    "the table schema (numeric bounds, category lists, classes) was inferred from the "
    "private data without noise: not covered by the (epsilon, delta) guarantee"
)

#: Defaults of `fit_table`: code size 11 (DP-NTK Appendix A, adult); 2000 iterations, the
#: paper's own MNIST count (training is post-processing: more costs no privacy, and the
#: paper's 50 leave the generator far from the release); 1000-row generator batches (the
#: paper's adult uses 200; a larger batch estimates the generated embedding better, and
#: reached a lower loss against the release itself, a post-processing criterion).
TABLE_DEFAULTS: dict[str, Any] = {"iterations": 2000, "batch_size": 1000, "d_code": 11}

#: Share of the e-NTK feature's squared norm that `default_table_network` gives the
#: marginal code (`privkernels.features.marginal`): an even split, fixed a priori.
MARGINAL_WEIGHT = dp_ntk.MARGINAL_WEIGHT


@dataclasses.dataclass(frozen=True)
class TableSynth:
    """A fitted synthetic-table model.

    Attributes:
      result: the underlying `privkernels.dp_ntk.DPNTKResult`.
      schema: the public `TabularSchema` the table was encoded with.
    """

    result: DPNTKResult
    schema: TabularSchema

    @property
    def report(self) -> PrivacyReport:
        return self.result.report

    def sample(self, key: jax.Array, n: int, *, calibrate: bool = False) -> dict[str, np.ndarray]:
        """``n`` synthetic rows as ``{column: array}`` (label column last).

        ``calibrate``: draw them from generated pools tilted towards the released marginal
        code (`privkernels.dp_ntk.calibrate.sample_calibrated`, its default penalty;
        post-processing, no privacy cost; releases with released proportions)."""
        x, y = sample_rows(check_key(key), self.result, check_int(n, "n", minimum=1),
                           calibrate=calibrate)  # fmt: skip
        return decoded_table(self.schema.project(x), y, self.schema)

    def sample_df(self, key: jax.Array, n: int, *, calibrate: bool = False) -> Any:
        """``n`` synthetic rows as a pandas DataFrame with the schema's columns and dtypes."""
        return to_frame(self.sample(key, n, calibrate=calibrate), self.schema)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write model, schema and report to one ``.npz`` (no pickle)."""
        meta = release_meta(self.result, FORMAT)
        meta["schema"] = self.schema.to_dict()
        return checkpoint.save(path, release_arrays(self.result), meta)


def load_table_synth(path: str | os.PathLike[str]) -> TableSynth:
    """Read a `TableSynth` written by `TableSynth.save` (format and report checked)."""
    arrays, meta = checkpoint.load(path, format=FORMAT)
    result = result_from(arrays, meta, generator=None, network=None)
    return TableSynth(result, TabularSchema.from_dict(meta["schema"]))


def default_table_generator(schema: TabularSchema, n_classes: int) -> nn.Module:
    """`TabularGenerator` with heads from the schema and hidden widths ``(4d, 2d)``."""
    d = schema.n_features
    groups = column_groups_from_schema(schema, d)
    hidden = (max(4 * d, 32), max(2 * d, 16))
    return TabularGenerator(n_classes=n_classes, n_features=d, groups=groups, hidden=hidden)


def default_table_network(
    schema: TabularSchema, n_classes: int, *, marginal_bins: int = 16,
    marginal_indicators: bool = False,
) -> MarginalSkip:  # fmt: skip
    """`privkernels.dp_ntk.default_network` with the schema's marginal code beside it.

    The code (every column, and ``marginal_bins + 1``, by default 17, hats per numeric
    column; ``marginal_indicators``: and its ``marginal_bins`` bin indicators) carries
    `MARGINAL_WEIGHT`
    of the feature's squared norm, measured on `reference_rows` of the schema's shapes:
    public rows, no data read. Without it the e-NTK barely sees a numeric column's shape,
    and the generator piles numeric columns at their bounds. `fit_table` builds this
    network inside `privkernels.dp_ntk.fit`, after every check (its public draws follow
    them).
    """
    groups = column_groups_from_schema(schema, schema.n_features)
    network = dp_ntk.default_network(n_classes, groups=groups, marginal_bins=marginal_bins,
                                     marginal_indicators=marginal_indicators)  # fmt: skip
    assert isinstance(network, MarginalSkip)  # a schema always has column groups
    return network


def _a_column(table: Any) -> Any:
    """One column of ``table`` (a DataFrame or a column mapping), for its row count; None
    when there is none to read (`split_table` then refuses the table)."""
    try:
        name = next(iter(table), None)
        return None if name is None else table[name]
    except (TypeError, KeyError, IndexError):
        return None


def check_table(table: Any, schema: TabularSchema) -> tuple[np.ndarray, np.ndarray | None]:
    """``(x (n, d) float32 codes, y (n,) labels)`` of a private table, refused
    (``ValueError``, no value named, before any noise) where it does not match the public
    ``schema``: too few rows, a missing column, a value out of bounds or unknown, a label
    outside the schema's classes."""
    check_fit_rows(_a_column(table), "table")
    feats, y = split_table(table, schema)
    x, _ = schema.encode(feats, unknown="error")
    return x, y


def fit_table(
    key: jax.Array,
    table: Any,
    schema: TabularSchema,
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    label_mode: str = "released",
    iterations: int | None = None,
    batch_size: int | None = None,
    d_code: int | None = None,
    network: nn.Module | None = None,
    generator: nn.Module | None = None,
    progress: bool = True,
    budget_accountant: Any = None,
    **fit_options: Any,
) -> TableSynth:
    """Fit a private synthetic-table model on ``table`` (DataFrame or column mapping).

    Args:
      key: ``jax.random.key``.
      table: the private table: the schema's columns plus ``schema.label``.
      schema: the public `TabularSchema` (classes from ``schema.classes``; integer
        labels ``0..C-1`` when empty, then C is read from the data with a warning).
      epsilon, delta: the budget of the whole release (embedding and, in
        ``"released"`` mode, class proportions; ``split`` in ``fit_options``).
      label_mode: ``"released"`` (default: noisy class proportions) or ``"uniform"``.
      iterations, batch_size, d_code: generator training (`TABLE_DEFAULTS` when None).
      network: the e-NTK network; default `default_table_network`.
      generator: default `default_table_generator`.
      progress: progress bar.
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged (None: the
        default accountant of an open ``with`` block, or none); refuses before any noise.
      fit_options: passed to `privkernels.dp_ntk.fit` (``learning_rate``, ``split``, ``mesh``...).

    Returns:
      `TableSynth`.

    Raises:
      ValueError: the table does not match the schema (before any noise).
    """
    key = check_key(key)
    if not isinstance(schema, TabularSchema):
        raise TypeError(f"schema must be a TabularSchema, got {type(schema).__name__}")
    if "groups" in fit_options:  # a table's column groups come from its schema
        raise ValueError("fit_table takes the column groups from the schema, not groups=")
    x, y = check_table(table, schema)
    # the one read of the label range (warned, noted below) when the schema lists no classes
    n_classes, inferred = infer_n_classes(y, len(schema.classes) or None)
    # the schema's column groups: `dp_ntk.fit` builds `default_table_network` from them
    groups = column_groups_from_schema(schema, x.shape[1])
    opts: dict[str, Any] = {**TABLE_DEFAULTS, "groups": groups}
    for name, value in (("iterations", iterations), ("batch_size", batch_size), ("d_code", d_code)):
        if value is not None:
            opts[name] = value
    result = dp_ntk.fit(
        key, x, y, epsilon=epsilon, delta=delta, n_classes=n_classes, label_mode=label_mode,
        network=network,  # None: `default_table_network`, built after every check
        generator=generator if generator is not None else default_table_generator(schema, n_classes),
        progress=progress, budget_accountant=budget_accountant, **opts, **fit_options,
    )  # fmt: skip
    report = result.report
    if inferred:
        report = report.with_note(N_CLASSES_INFERRED_NOTE)
    if schema.source == "data":
        report = report.with_note(SCHEMA_INFERRED_NOTE)
    return TableSynth(dataclasses.replace(result, report=report), schema)
