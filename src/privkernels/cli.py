"""The ``privkernels`` command line: synthetic tables, distilled sets, reports.

::

    privkernels schema data.csv --label income --out schema.json   # draft (reads the data!)
    privkernels synth data.csv --schema schema.json --epsilon 1 --out syn.csv
    privkernels distill data.csv --label y --epsilon 1 --out support.npz
    privkernels report syn.csv.privacy.json

``synth`` and ``distill`` write the privacy report as JSON beside their output
(``<out>.privacy.json``) and print its summary; ``synth`` also saves the fitted
model (``<out>.model.npz``) so more rows can be drawn later without touching the
data. ``report`` reads every file the commands write.

Every argument is checked (values, paths, combinations) before any data is read;
the data is then checked before any noise is drawn. A refusal is one line on
stderr naming the flag, exit status 2, and writes nothing. The benchmarks are not
part of the package: run them from a source checkout with ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

import privkernels
from privkernels import checkpoint, dp_kip, dp_ntk, dp_ntk_regression, synth
from privkernels._json import loads_bounded
from privkernels._validation import MIN_FIT_ROWS, check_fit_rows, check_numeric
from privkernels._warnings import user_stacklevel
from privkernels.data.frames import infer_schema, read_csv, write_csv
from privkernels.data.schema import MISSING_TOKENS, TabularSchema
from privkernels.privacy.accountant import LEDGER_FORMAT, BudgetAccountant, ledger_lock
from privkernels.privacy.keys import sample_key, sampling_key, seed_keys, seeded_call, warn_seed
from privkernels.privacy.report import PrivacyReport, printable
from privkernels.privacy.warnings import PrivacyLeakWarning
from privkernels.synth import fit_table, load_table_synth
from privkernels.tuning import events_of_report, same_events

__all__ = ["main"]

#: The smallest number of rows a command fits on: the one rule of every fit.
MIN_ROWS = MIN_FIT_ROWS

#: The note of every ``synth`` fit whose public schema allows missing values (`_read_table`).
MISSING_NOTE = (
    "privkernels synth told its caller, without noise, which of the schema's nullable columns "
    "hold '?' or empty cells in the private data (a PrivacyLeakWarning on stderr, not in any "
    "released file); that message is not covered by the (epsilon, delta) guarantee. This note "
    "is written whenever the schema allows missing values, whatever the data holds"
)

#: Defaults resolved after the checks (``None`` in the parser, so that a value the user
#: gave can be told from the default: ``synth --model`` refuses a given ``--delta``).
DEFAULT_DELTA = 1e-5
DEFAULT_MODEL_ROWS = 1000

_DESCRIPTION = "privkernels: private synthetic tables, distilled support sets and their reports."
_EPILOG = """\
examples:
  privkernels schema data.csv --label income --out schema.json
  privkernels synth data.csv --schema schema.json --epsilon 1 --out syn.csv
  privkernels synth --model syn.csv.model.npz --n 10000 --out more.csv
  privkernels distill train.csv --label y --classes 0,1 --epsilon 1 --out support.npz
  privkernels report syn.csv.privacy.json

synth and distill write <out>.privacy.json beside their output; synth also saves the
model as <out>.model.npz. Every argument is checked before any data is read; a refusal
is one line on stderr (exit status 2) and writes nothing. The benchmarks run from a
source checkout: python -m benchmarks --help."""


class _UsageError(ValueError):
    """A bad command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors as one line (``main`` prints them)."""

    def error(self, message: str) -> Any:  # argparse declares NoReturn
        raise _UsageError(f"{message} (see {self.prog} --help)")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (an explicit "(default: ...)" stays)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "default:" in text:
            return text
        shown = "off" if action.default is False else action.default
        return f"{text} (default: {shown})"


# ----------------------------------------------------------------------- argument types


def _number(text: str, cast: Callable[[str], Any], what: str) -> Any:
    """``cast(text)``, finite; an ``ArgumentTypeError`` (argparse names the flag) otherwise."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = _number(text, int, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(value)


def _seed(text: str) -> int:
    value = _number(text, int, "a whole number >= 0")
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected a whole number in [0, 2^63), got {text!r}")
    return int(value)


def _epsilon(text: str) -> float:
    value = _number(text, float, "a finite number > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return float(value)


def _delta(text: str) -> float:
    value = _number(text, float, "a number in (0, 1)")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return float(value)


def _rate(text: str) -> float:
    value = _number(text, float, "a number in (0, 1]")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return float(value)


def _image_shape(text: str) -> tuple[int, ...]:
    what = "1 to 3 whole numbers >= 1, comma-separated (e.g. 28,28)"
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return tuple(int(p) for p in parts)


def _classes(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"expected 2 or more comma-separated values, got {text!r}")
    if len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"the classes {text!r} repeat a value")
    return parts


# ----------------------------------------------------------------------- the parser


def _add_release_options(c: argparse.ArgumentParser, *, fit_needs_data: bool, example: str) -> None:
    """The options shared by the commands that release something (``synth``, ``distill``);
    ``example`` is a ``--tune`` grid of the command."""
    c.add_argument("data", metavar="DATA", nargs=None if fit_needs_data else "?",
                   help="the private data: a CSV with a header row" +
                   (" or an .npz holding x and y" if fit_needs_data else " (not with --model)"))  # fmt: skip
    c.add_argument("--epsilon", type=_epsilon, default=None, required=fit_needs_data,
                   help="privacy budget epsilon of the whole release, > 0 (default: none, "
                   f"{'required' if fit_needs_data else 'required to fit'})")  # fmt: skip
    c.add_argument("--delta", type=_delta, default=None,
                   help=f"privacy budget delta, in (0, 1) (default: {DEFAULT_DELTA:g})")  # fmt: skip
    c.add_argument("--out", required=True, metavar="PATH",
                   help="output file; <out>.privacy.json is written beside it (default: "
                   "none, required)")  # fmt: skip
    c.add_argument("--seed", type=_seed, default=None,
                   help="int seed: reproducible, so NOT private (warns); leave it out for a "
                   "release (default: none, OS entropy)")  # fmt: skip
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--budget", metavar="LEDGER", default=None,
                   help="a budget ledger ('privkernels budget init') charged this release; "
                   "refused before any data is read when it does not fit (default: none)")  # fmt: skip
    c.add_argument("--tune", metavar="GRID", default=None,
                   help="choose hyperparameters privately inside --epsilon (repeat-and-select, "
                   f"PrivateSearchCV), e.g. {example!r} (default: no search)")  # fmt: skip


def _add_synth(sub: Any) -> None:
    c = sub.add_parser("synth", help="private synthetic table (DP-NTK)",
                       formatter_class=_HelpFormatter)  # fmt: skip
    _add_release_options(c, fit_needs_data=False, example="iterations=200,500;d_code=5,10")
    c.add_argument("--schema", metavar="JSON", default=None,
                   help="public schema JSON, see 'privkernels schema' (default: none, "
                   "required to fit)")  # fmt: skip
    c.add_argument("--n", type=_positive_int, default=None,
                   help=f"rows to draw, >= 1 (default: as many as DATA; {DEFAULT_MODEL_ROWS} "
                   "with --model)")  # fmt: skip
    c.add_argument("--iterations", type=_positive_int, default=None,
                   help="generator training steps, >= 1 (default: "
                   f"{synth.TABLE_DEFAULTS['iterations']})")  # fmt: skip
    c.add_argument("--model", metavar="NPZ", default=None,
                   help="sample a saved <out>.model.npz instead of fitting: no data read, no "
                   "--epsilon (default: none, fit)")  # fmt: skip
    c.add_argument("--calibrate", action="store_true",
                   help="draw the rows from generated pools tilted towards the released "
                   "marginal code (post-processing, no privacy cost; models with released "
                   "class proportions) (default: off, the generator's rows as drawn)")  # fmt: skip


def _add_distill(sub: Any) -> None:
    c = sub.add_parser("distill", help="private distilled support set (DP-KIP)",
                       formatter_class=_HelpFormatter)  # fmt: skip
    _add_release_options(c, fit_needs_data=True, example="epochs=5,10;support_per_class=5,10")
    c.add_argument("--label", default=None,
                   help="label column of a CSV; with an .npz DATA, the label column of a "
                   "CSV --out (default: none; a CSV DATA needs it)")  # fmt: skip
    c.add_argument("--classes", type=_classes, default=None,
                   help="public class values, comma-separated; integers keep integer labels "
                   "(default: none, read from the data without noise, with a warning)")  # fmt: skip
    c.add_argument("--kernel", default="fc_ntk", choices=("fc_ntk", "scatternet", "entk"),
                   help="kernel of the support set")  # fmt: skip
    c.add_argument("--support-per-class", type=_positive_int, default=None,
                   help="support rows per class, >= 1 (default: the estimator's, from the "
                   "public row count and number of classes)")  # fmt: skip
    c.add_argument("--epochs", type=_positive_int, default=10, help="DP-SGD epochs, >= 1")
    c.add_argument("--image-shape", type=_image_shape, default=None,
                   help="row shape of image data, e.g. 28,28; needed by scatternet and entk "
                   "(default: none, flat rows)")  # fmt: skip
    c.add_argument("--neighbouring", choices=("replace-one", "add-remove"), default="replace-one",
                   help="the neighbouring relation (--tune needs add-remove with --batch-size "
                   "and --sampling-rate)")  # fmt: skip
    c.add_argument("--batch-size", type=_positive_int, default=None,
                   help="expected Poisson batch size, >= 1 (default: min(500, n))")  # fmt: skip
    c.add_argument("--sampling-rate", type=_rate, default=None,
                   help="public Poisson rate in (0, 1], add-remove only (default: none)")  # fmt: skip


def _add_budget(sub: Any) -> None:
    b = sub.add_parser("budget", help="create or show a budget ledger for --budget",
                       formatter_class=_HelpFormatter)  # fmt: skip
    b.add_argument("action", choices=("init", "show"),
                   help="init: write a new ledger; show: print what it spent and has left")  # fmt: skip
    b.add_argument("ledger", metavar="LEDGER", help="the ledger file (JSON)")
    b.add_argument("--epsilon", type=_epsilon, default=None,
                   help="init: the total epsilon, > 0 (default: none, required by init)")  # fmt: skip
    b.add_argument("--delta", type=float, default=None,
                   help="init: the total delta, in [0, 1) (default: none, required by init)")  # fmt: skip
    b.add_argument("--neighbouring", choices=("replace-one", "add-remove"),
                   default="replace-one", help="init: the relation every charge is under")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="privkernels", description=_DESCRIPTION, epilog=_EPILOG,
                formatter_class=_HelpFormatter)  # fmt: skip
    p.add_argument("--version", action="version",
                   version=f"%(prog)s {privkernels.__version__}")  # fmt: skip
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    s = sub.add_parser("schema", help="draft a schema from a CSV (reads the data: edit it!)",
                       formatter_class=_HelpFormatter)  # fmt: skip
    s.add_argument("data", metavar="DATA", help="a CSV with a header row (read without noise)")
    s.add_argument("--label", required=True, help="the label column (default: none, required)")
    s.add_argument("--out", required=True, metavar="JSON",
                   help="schema file to write (default: none, required)")  # fmt: skip
    _add_synth(sub)
    _add_distill(sub)
    _add_budget(sub)
    r = sub.add_parser("report", help="print the privacy report of any file the commands write",
                       formatter_class=_HelpFormatter)  # fmt: skip
    r.add_argument("file", metavar="FILE",
                   help="<out>.privacy.json, <out>.model.npz, a distilled .npz, a synthetic or "
                   "support CSV (its report beside it) or a schema JSON")  # fmt: skip
    r.add_argument("--json", action="store_true", help="print the report's JSON")
    return p


# ----------------------------------------------------------------------- checks before reading


def _report_path(out: Path) -> Path:
    return out.with_name(out.name + ".privacy.json")


def _model_path(out: Path) -> Path:
    return out.with_name(out.name + ".model.npz")


def _check_paths(inputs: dict[str, str | None], outputs: Sequence[Path]) -> None:
    """Inputs exist; outputs go to an existing directory and overwrite no input."""
    for flag, name in inputs.items():
        if name is not None and not Path(name).is_file():
            raise _UsageError(f"{flag}: no file {name}")
    given = {Path(n).resolve(): flag for flag, n in inputs.items() if n is not None}
    for out in outputs:
        if not out.parent.is_dir():
            raise _UsageError(f"--out: the directory {out.parent} does not exist")
        if out.is_dir():
            raise _UsageError(f"--out: {out} is a directory, not a file name")
        if out.resolve() in given:
            raise _UsageError(f"--out: {out} would overwrite {given[out.resolve()]}")


def _check_schema_args(a: argparse.Namespace) -> None:
    """``schema``: DATA exists; ``--out`` is writable and is not DATA."""
    _check_paths({"DATA": a.data}, [Path(a.out)])


def _check_synth_args(a: argparse.Namespace) -> None:
    """``synth``: ``--model`` alone (nothing it would ignore), or DATA, ``--schema`` (loaded:
    public) and ``--epsilon``; the paths; the ``--tune`` grid. No data is read."""
    out = Path(a.out)
    if a.model is not None:
        given = [flag for flag, v in (("DATA", a.data), ("--epsilon", a.epsilon),
                                      ("--delta", a.delta), ("--schema", a.schema),
                                      ("--iterations", a.iterations), ("--tune", a.tune))
                 if v is not None]  # fmt: skip
        if given:
            raise _UsageError(
                f"--model samples a saved model (no fit, no data read): {', '.join(given)} "
                "would be ignored; leave it out (or them), or leave out --model to fit"
            )
        _check_paths({"--model": a.model}, [out])
        if not zipfile.is_zipfile(a.model):
            raise _UsageError(f"--model: {a.model} is not a saved model (<out>.model.npz)")
        return
    missing = [flag for flag, v in (("DATA", a.data), ("--schema", a.schema),
                                    ("--epsilon", a.epsilon)) if v is None]  # fmt: skip
    if missing:
        raise _UsageError(f"synth needs {', '.join(missing)} to fit (or --model to sample)")
    _check_paths({"DATA": a.data, "--schema": a.schema}, [out, _report_path(out), _model_path(out)])
    a.table_schema = _load_schema(a.schema)
    if a.tune:
        _grid(a.tune, _table_estimator(a, a.table_schema))


def _load_schema(path: str) -> TabularSchema:
    """The public schema file, or a one-line refusal naming ``--schema``."""
    try:
        return TabularSchema.load(path)
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError, ValueError) as err:
        detail = f": {err}" if isinstance(err, ValueError) else ""
        raise _UsageError(f"--schema: {path} is not a table schema{detail}") from None


def _check_distill_args(a: argparse.Namespace) -> None:
    """``distill``: the paths, ``--label`` for a CSV, the kernel's ``--image-shape``, the
    relation's ``--sampling-rate``, ``--tune``'s needs and grid. No data is read."""
    out = Path(a.out)
    _check_paths({"DATA": a.data}, [out, _report_path(out)])
    npz = a.data.endswith(".npz")
    if not npz and a.label is None:
        raise _UsageError("a CSV DATA needs --label (the label column)")
    if npz and a.label is not None and out.suffix != ".csv":
        raise _UsageError("--label names a CSV column: an .npz DATA holds x and y, and --out is "
                          "not a CSV; leave --label out")  # fmt: skip
    if a.kernel in ("scatternet", "entk") and a.image_shape is None:
        raise _UsageError(f"--kernel {a.kernel} needs --image-shape (e.g. 28,28)")
    add_remove = a.neighbouring == "add-remove"
    if add_remove and a.sampling_rate is None:
        raise _UsageError("--neighbouring add-remove needs --sampling-rate (the public rate)")
    if not add_remove and a.sampling_rate is not None:
        raise _UsageError("--sampling-rate is for --neighbouring add-remove only (replace-one "
                          "uses --batch-size / n)")  # fmt: skip
    if a.tune:
        if a.classes is None or not add_remove or a.batch_size is None:
            raise _UsageError(
                "distill --tune needs --classes (a search reads no label without noise) and "
                "--neighbouring add-remove with --batch-size and --sampling-rate "
                "(repeat-and-select is accounted with RDP, which covers Poisson-sampled DP-SGD "
                "under add-remove)"
            )
        _grid(a.tune, _kip_estimator(a, None))


def _grid(spec: str, estimator: Any) -> dict[str, list[Any]]:
    """``"name=v1,v2;name2=v3"`` as a parameter grid, names checked against ``estimator``."""
    grid: dict[str, list[Any]] = {}
    fixed = {"epsilon", "delta", "random_state"}
    known = set(estimator.get_params())
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, values = part.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values.strip():
            raise _UsageError(f"--tune takes name=v1,v2;name2=v3,...; got {part!r}")
        if name not in known or name in fixed:
            raise _UsageError(f"--tune cannot vary {name!r}; it may vary {sorted(known - fixed)}")
        grid[name] = [_value(v.strip()) for v in values.split(",")]
    if not grid:
        raise _UsageError("--tune needs at least one name=v1,v2")
    return grid


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


# ----------------------------------------------------------------------- reading the data


def _say(text: str) -> None:
    """One line to the caller on stderr (never into a released file)."""
    print(f"privkernels: {printable(text)}", file=sys.stderr)


def _read_rows(path: str) -> dict[str, np.ndarray]:
    """``read_csv``, refusing fewer than `MIN_ROWS` rows (the count is not echoed)."""
    cols = read_csv(path)
    _check_rows(len(next(iter(cols.values()))))
    return cols


def _check_rows(n: int) -> None:
    """The one minimum-rows rule of every fit (`privkernels._validation.check_fit_rows`)."""
    check_fit_rows(np.empty((n, 0)), name="DATA")


def _missing_columns(cols: dict[str, np.ndarray], names: Sequence[str]) -> list[str]:
    """The columns among ``names`` holding a missing-value marker (``?`` or an empty cell)."""
    markers = np.array(sorted(MISSING_TOKENS), dtype=object)
    return [n for n in names if n in cols and np.isin(cols[n], markers).any()]


def _read_table(path: str, schema: TabularSchema) -> dict[str, np.ndarray]:
    """The CSV's schema columns and label; says which columns are dropped (public: the
    header) and warns which hold missing-value markers (read from the private records
    without noise: a `PrivacyLeakWarning`; column names only, no value, no count)."""
    cols = _read_rows(path)
    used = [c.name for c in schema.columns] + [schema.label]
    extra = [c for c in cols if c not in used]
    if extra:
        _say(f"warning: DATA column(s) {extra} are not in the schema: dropped, not read")
    missing = _missing_columns(cols, used)
    if missing:
        warnings.warn(f"column(s) {missing} hold '?' or empty cells (read as missing values): "
                      "which columns hold them was read from the private data without noise; "
                      "the privacy guarantee does not cover it", PrivacyLeakWarning,
                      stacklevel=user_stacklevel())  # fmt: skip
    return {c: cols[c] for c in used if c in cols}


def _with_missing_note(model: Any, report: PrivacyReport) -> tuple[Any, PrivacyReport]:
    """``model`` and ``report`` with `MISSING_NOTE` when the public schema allows a missing
    value in some column (then `_read_table` may have warned): keyed on the schema, never on
    the data, so the released report carries no bit read without noise."""
    if not any(c.nullable for c in model.schema.columns):
        return model, report
    result = dataclasses.replace(model.result, report=model.report.with_note(MISSING_NOTE))
    return dataclasses.replace(model, result=result), report.with_note(MISSING_NOTE)


def _read_xy(path: str, label: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``x`` ``(n, d)`` float32 and the labels ``(n,)`` (CSV: str tokens) of DATA."""
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            if "x" not in z.files or "y" not in z.files:
                raise ValueError(f"{path} must hold arrays 'x' and 'y'")
            x, y = _npz_features(z["x"]), np.asarray(z["y"])
        _check_rows(len(x))
        return x, y
    cols = _read_rows(path)
    if label not in cols:
        raise ValueError(f"DATA has no column {label!r} (--label)")
    missing = _missing_columns(cols, list(cols))
    if missing:
        raise ValueError(f"column(s) {missing} hold '?' or empty cells (missing values): "
                         "distill needs complete numeric features and labels")  # fmt: skip
    y = cols.pop(label)
    if not cols:
        raise ValueError("DATA has no feature column besides --label")
    feats = []
    for name, col in cols.items():
        try:
            feats.append(col.astype(np.float64))
        except ValueError:
            raise ValueError(f"column {name!r} holds non-numeric values: distill needs "
                             "numeric features") from None  # fmt: skip
    return np.column_stack(feats).astype(np.float32), y


def _npz_features(x: np.ndarray) -> np.ndarray:
    """An ``.npz``'s ``x`` as float32, refused without a value in the message when it holds
    text that is not a number (numpy's parse quotes the cell), complex numbers (a cast
    would drop their imaginary parts, as the Python API refuses) or no numbers at all."""
    check_numeric(x, "DATA's x")
    if x.dtype.kind not in "biufSU":  # dates, durations, records: no number to read
        raise ValueError(f"DATA's x must hold numbers, not {x.dtype.kind!r}-kind values")
    return np.asarray(x, np.float32)


#: A label the CLI reads as an integer: the canonical ASCII decimal form of an int64
#: (``str(int(t)) == t``: no sign but a leading '-', no leading zero, no '-0').
_INT_LABEL = re.compile(r"0|-?[1-9][0-9]{0,17}")


def _is_int(text: str) -> bool:
    """Whether ``text`` is an int64 label written as ``str(int(text))`` writes it, so that
    reading it as an int merges no two labels ('1' and '01' stay two classes, as strings);
    ``str.isdigit`` also accepts superscripts, which ``int`` refuses; 19+ digits may
    overflow int64."""
    return _INT_LABEL.fullmatch(text) is not None


def _typed_labels(y: np.ndarray, classes: list[str] | None) -> tuple[np.ndarray, list[Any] | None]:
    """Labels and ``--classes`` of one type: integers when the classes (or, without them,
    all labels) are integers, else strings; an ``.npz``'s numeric ``y`` keeps its type."""
    if y.dtype.kind in "iuf":
        if classes is None:
            return y, None
        cast = int if y.dtype.kind in "iu" else float
        try:
            return y, [cast(c) for c in classes]
        except ValueError:
            raise ValueError(
                f"--classes must be numbers: DATA's y holds {y.dtype} labels"
            ) from None
    tokens = y.astype(str)
    ints = all(_is_int(c) for c in classes) if classes is not None else all(map(_is_int, tokens))
    if not ints:
        return tokens, classes
    if not all(map(_is_int, tokens)):
        raise ValueError("--classes are integers but the label column holds other values")
    return tokens.astype(np.int64), None if classes is None else [int(c) for c in classes]


# ----------------------------------------------------------------------- messages in flag names

#: Python wording in warnings and notes, and what a CLI user types instead.
_PHRASES = (
    ("n_classes (inferred as max(y) + 1; pass n_classes explicitly)",
     'the number of classes (read as the largest label + 1; list the classes in the schema, '
     '"classes")'),
    ("n_classes was inferred as max(y) + 1", "the number of classes was read as the largest label + 1"),
    ("Pass n_classes to avoid this", 'List the classes in the schema ("classes") to avoid this'),
)  # fmt: skip
_KEYWORDS = {"classes": "--classes", "random_state": "--seed", "epsilon": "--epsilon",
             "delta": "--delta", "batch_size": "--batch-size", "epochs": "--epochs",
             "support_per_class": "--support-per-class", "image_shape": "--image-shape",
             "iterations": "--iterations", "sampling_rate": "--sampling-rate"}  # fmt: skip


def _flags(text: str) -> str:
    """``text`` with Python keywords (``classes=``) named as the CLI flags (``--classes``)."""
    for python, cli in _PHRASES:
        text = text.replace(python, cli)
    return re.sub(r"\b(\w+)=(?=[\s),;:]|$)", lambda m: _KEYWORDS.get(m[1], m[0]), text)


@contextlib.contextmanager
def _flag_wording() -> Iterator[None]:
    """Re-emit the warnings raised inside the block with `_flags` wording (same category)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:  # a refusal inside the block keeps its warnings too
        for w in caught:
            warnings.warn_explicit(_flags(str(w.message)), w.category, w.filename, w.lineno)


# ----------------------------------------------------------------------- commands


def _write_report(report: Any, out: Path) -> Path:
    p = _report_path(out)
    p.write_text(report.to_json(indent=2) + "\n")
    return p


def _cmd_schema(a: argparse.Namespace) -> int:
    """Draft a schema from the data (not private: the output says so)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schema = infer_schema(_read_rows(a.data), label=a.label, name=Path(a.data).stem)
    schema.save(a.out)
    print(
        f"wrote {a.out}: a DRAFT read from the private data (bounds, categories, classes).\n"
        "Replace them by public values (documentation, domain knowledge) and set "
        '"source": "public"; a fit on a data-derived schema is noted as not private.'
    )
    return 0


def _table_estimator(a: argparse.Namespace, schema: TabularSchema | None) -> Any:
    # privkernels.sklearn loads scikit-learn (seconds): only the commands that use it pay
    from privkernels.sklearn import DPNTKGenerator

    return DPNTKGenerator(schema=schema, iterations=a.iterations, verbose=False)


def _cmd_synth(a: argparse.Namespace) -> int:
    """Fit (or, with ``--model``, only sample) a synthetic table; write rows, model, report."""
    out = Path(a.out)
    if a.model:  # sampling only: post-processing, no release key
        model = load_table_synth(a.model)
        report, k_sample, n = model.report, sample_key(a.seed), a.n or DEFAULT_MODEL_ROWS
    else:
        schema = a.table_schema  # loaded and checked by _check_synth_args
        table = _read_table(a.data, schema)
        n = a.n or len(next(iter(table.values())))
        key, public_key = seed_keys(a.seed, name="--seed")
        with _flag_wording():
            if a.tune:
                model, report = _tuned_table(a, schema, table, key)
            else:
                with seeded_call():
                    model = fit_table(key, table, schema, epsilon=a.epsilon, delta=a.delta,
                                      iterations=a.iterations, progress=not a.quiet,
                                      public_key=public_key)  # fmt: skip
                report = model.report
        model, report = _with_missing_note(model, report)
        k_sample = sampling_key(key, public_key)
        model.save(_model_path(out))
    write_csv(model.sample(k_sample, n, calibrate=a.calibrate), out)
    rp = _write_report(report, out)
    print(f"wrote {n} synthetic rows to {out}; privacy report {rp}")
    print(_flags(report.summary()))
    return 0


def _tuned_table(a: argparse.Namespace, schema: Any, table: Any, key: jax.Array) -> tuple[Any, Any]:
    """``synth --tune``: `PrivateSearchCV` over `DPNTKGenerator` s; the model and the search's report."""
    from privkernels.sklearn import PrivateSearchCV  # scikit-learn: see _table_estimator

    base = _table_estimator(a, schema)
    search = PrivateSearchCV(base, _grid(a.tune, base), epsilon=a.epsilon, delta=a.delta,
                             random_state=key if a.seed is not None else None)  # fmt: skip
    with seeded_call():
        search.fit(table)
    return search.best_estimator_.synth_, search.privacy_report_


def _kip_estimator(a: argparse.Namespace, classes: list[Any] | None) -> Any:
    # privkernels.sklearn loads scikit-learn (seconds): only the commands that use it pay
    from privkernels.sklearn import DPKIPClassifier

    opts: dict[str, Any] = {"neighbouring": a.neighbouring}
    if a.sampling_rate is not None:
        opts["sampling_rate"] = a.sampling_rate
    return DPKIPClassifier(epsilon=a.epsilon, delta=a.delta, classes=classes, kernel=a.kernel,
                           support_per_class=a.support_per_class, epochs=a.epochs,
                           batch_size=a.batch_size, image_shape=a.image_shape,
                           random_state=a.seed, verbose=not a.quiet and not a.tune,
                           fit_options=opts)  # fmt: skip


def _cmd_distill(a: argparse.Namespace) -> int:
    """Fit DP-KIP (``DPKIPClassifier``) and write the support set (or model) and report."""
    from privkernels.sklearn import PrivateSearchCV  # scikit-learn: see _kip_estimator

    x, y = _read_xy(a.data, a.label)
    labels, classes = _typed_labels(y, a.classes)
    est = _kip_estimator(a, classes)
    warn_seed(a.seed, name="--seed")
    x = x.reshape(len(x), -1)
    with _flag_wording(), seeded_call():
        if not a.tune:
            report = est.fit(x, labels).privacy_report_
        else:
            search = PrivateSearchCV(est, _grid(a.tune, est), epsilon=a.epsilon, delta=a.delta,
                                     random_state=a.seed).fit(x, labels)  # fmt: skip
            est, report = search.best_estimator_, search.privacy_report_
            print(f"chose {search.best_params_}")
    out = Path(a.out)
    if out.suffix == ".csv":
        cols = {f"x{i}": est.support_[:, i] for i in range(est.support_.shape[1])}
        cols[a.label or "label"] = est.support_labels_
        write_csv(cols, out)
    else:
        est.save(out)
    rp = _write_report(report, out)
    print(f"wrote the private support set ({est.support_.shape[0]} rows) to {out}; report {rp}")
    print(_flags(report.summary()))
    return 0


def _cmd_budget(a: argparse.Namespace) -> int:
    """``budget init LEDGER --epsilon E --delta D`` / ``budget show LEDGER``."""
    if a.action == "init":
        if a.epsilon is None or a.delta is None:
            raise ValueError("budget init needs --epsilon and --delta (the total)")
        if Path(a.ledger).exists():
            raise ValueError(f"{a.ledger} exists: a ledger is never reset (choose a new file)")
        acc = BudgetAccountant(a.epsilon, a.delta, neighbouring=a.neighbouring)
        acc.save(a.ledger)
    else:
        acc = BudgetAccountant.load(a.ledger)
    print(_ledger_line(a.ledger, acc))
    return 0


def _ledger_line(path: Any, acc: BudgetAccountant) -> str:
    """One line on a budget ledger: its total, what was spent and what remains."""
    spent, left = acc.spent(), acc.remaining()
    return (f"{path}: budget ledger, total ({acc.epsilon:.6g}, {acc.delta:.3g}) under "
            f"{acc.neighbouring}; spent ({spent.epsilon:.6g}, {spent.delta:.3g}) in "
            f"{len(acc.reports)} release(s); remaining ({left.epsilon:.6g}, {left.delta:.3g})")  # fmt: skip


def _charged(run: Callable[[argparse.Namespace], int], a: argparse.Namespace) -> int:
    """``--budget LEDGER``: check the planned ``(--epsilon, --delta)`` against the ledger
    before the command reads any data, run it with the ledger as the default accountant,
    and write the ledger back (atomically) whatever happened after that check: a release
    that failed midway is charged its plan (`privkernels.privacy.BudgetAccountant`). All
    of it holds an exclusive lock on ``<ledger>.lock`` (`ledger_lock`): concurrent runs
    take turns, each checking the ledger the previous one saved."""
    ledger = getattr(a, "budget", None)
    if ledger is None:
        return run(a)
    if getattr(a, "model", None) is not None:  # nothing is ignored silently
        raise _UsageError("--budget: --model samples a saved model (no release, nothing to "
                          "charge); leave --budget out")  # fmt: skip
    if not Path(ledger).is_file():
        raise ValueError(f"--budget: no ledger {ledger} (create it with `privkernels budget init`)")
    if a.epsilon is None:
        raise ValueError(f"--budget needs --epsilon (a {a.cmd} run without one is not private)")
    with ledger_lock(ledger):  # a concurrent run waits, then checks the updated ledger
        acc = BudgetAccountant.load(ledger)
        acc.check(a.epsilon, a.delta, getattr(a, "neighbouring", "replace-one"))
        try:
            with acc:
                return run(a)
        finally:
            acc.save(ledger)


# ----------------------------------------------------------------------- report


def _cmd_report(a: argparse.Namespace) -> int:
    """Print the report of any file the commands write (a CSV output: the report beside it)."""
    path = Path(a.file)
    report: PrivacyReport | None
    if not path.is_file():
        raise ValueError(f"no file {path}")
    # with --json, stdout holds JSON alone: the descriptions go to stderr
    with contextlib.redirect_stdout(sys.stderr) if a.json else contextlib.nullcontext():
        try:
            report = _file_report(path)
        except (ArithmeticError, LookupError, AttributeError, MemoryError) as err:
            # a malformed file past the loaders' own checks: one line, not a traceback
            raise ValueError(f"{path} is malformed ({type(err).__name__})") from None
    if report is not None:
        print(report.to_json(indent=2) if a.json else _flags(report.summary()))
    elif a.json:  # a schema or an empty ledger: the file's own (checked) JSON
        print(json.dumps(_read_json(path), indent=2))
    return 0


def _file_report(path: Path) -> PrivacyReport | None:
    """The checked report of ``path`` (`_cmd_report`), None for a schema or an empty ledger."""
    if zipfile.is_zipfile(path):
        return _npz_report(path)
    if path.suffix == ".csv":
        beside = _report_path(path)
        if not beside.is_file():
            raise ValueError(f"{path} is a CSV (rows, no report inside) and no "
                             f"{beside.name} lies beside it")  # fmt: skip
        return _json_report(beside)
    return _json_report(path)


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        text = "\x00"  # not text: refused below like malformed JSON
    try:
        return loads_bounded(text, str(path))
    except ValueError:
        raise ValueError(f"{path} is neither readable JSON nor an .npz archive: not a file "
                         "the privkernels commands write") from None  # fmt: skip


def _json_report(path: Path) -> PrivacyReport | None:
    """A ``<out>.privacy.json`` (checked against the model beside it), or a schema file
    (described: it carries no report); None when nothing is left to print."""
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == LEDGER_FORMAT:
        acc = BudgetAccountant.from_dict(data)  # every entry re-verified
        print(_ledger_line(path, acc))
        return acc.report if acc.reports else None
    if isinstance(data, dict) and "columns" in data and "epsilon" not in data:
        schema = TabularSchema.from_dict(data)
        print(f"{path}: a table schema ({len(schema.columns)} columns, label {schema.label!r}), "
              "no release and no privacy report. " + (
                  "Its source is the private data (privkernels schema): its bounds, categories "
                  "and classes were read without noise; a fit on it is not private with respect "
                  "to them." if schema.source == "data" else "It is marked public."))  # fmt: skip
        return None
    if not isinstance(data, dict) or not {"epsilon", "delta", "neighbouring"} <= set(data):
        raise ValueError(f"{path} is JSON but not a privacy report (no epsilon, delta, "
                         "neighbouring and mechanisms)")  # fmt: skip
    report = PrivacyReport.from_dict(data)  # a malformed one: a ValueError naming what
    _check_beside(path, report)
    return report


def _npz_report(path: Path) -> PrivacyReport:
    """The report inside a privkernels ``.npz``, checked by its method's loader."""
    try:
        _, meta = checkpoint.load(path)
    except (ValueError, OSError):
        raise ValueError(f"{path} is an .npz archive but not a privkernels file (no "
                         "metadata); a distill DATA .npz holds x and y, no report") from None  # fmt: skip
    if "report" not in meta:
        raise ValueError(f"{path} holds no privacy report (format {meta.get('format')!r})")
    loaded = _load_checked(str(path), meta)  # the method's own checks (records against the config)
    report = PrivacyReport.from_dict(meta["report"])
    # an estimator's whole cost: its private preprocessing composed with its model's release
    return getattr(loaded, "privacy_report_", report)


def _check_beside(path: Path, report: Any) -> None:
    """A ``<out>.privacy.json`` holds no configuration: check it against the model saved
    beside it (``<out>`` for distill, ``<out>.model.npz`` for synth), which its method's
    loader checks, and it must keep every note (caveat) of the model's report; say so on
    stderr when there is none. A search's report is checked against the chosen model's own
    fit (`_check_search_beside`)."""
    out = path.with_name(path.name.removesuffix(".privacy.json"))
    candidates = (out, _model_path(out))
    model = next((p for p in candidates if p.is_file() and zipfile.is_zipfile(p)), None)
    if model is None:
        _say("note: no model beside the report; its records were checked, not their "
             "configuration")  # fmt: skip
        return
    _, meta = checkpoint.load(model)
    _load_checked(str(model), meta)
    saved = PrivacyReport.from_dict(meta["report"])
    if [m.name for m in report.mechanisms] == ["repeat_and_select"]:
        _check_search_beside(path, report, saved)
    elif (saved.epsilon, saved.delta, saved.neighbouring, saved.mechanisms) != (
        report.epsilon, report.delta, report.neighbouring, report.mechanisms
    ):  # fmt: skip
        raise ValueError(f"{path} does not match the report of {model}")
    elif any(note not in report.notes for note in saved.notes):  # a caveat removed
        raise ValueError(f"{path} lacks notes of the report of {model}")


def _check_search_beside(path: Path, search: Any, saved: Any) -> None:
    """A search's report against the chosen model beside it: the model's own releases must
    be the chosen candidate's planned fit (events, budget, relation). The mean and shape of
    the number of runs cannot be checked from files (reports carry no signature)."""
    p = search.mechanisms[0].param_dict
    planned = loads_bounded(str(p["events"]), f"the search events of {path}")
    planned = planned[int(p["chosen"])][:-1]  # the score comes last
    same = same_events(events_of_report(saved), planned)
    if not (
        same
        and saved.neighbouring == search.neighbouring
        and saved.epsilon <= float(p["fit_epsilon"]) * (1 + 1e-9)  # spent within its budget
        and math.isclose(saved.delta, float(p["fit_delta"]), rel_tol=1e-6)
    ):
        raise ValueError(f"{path} does not match the search that chose the model beside it")


def _load_checked(path: str, meta: dict[str, Any]) -> Any:
    """Load a result file with its method's loader, which checks the report against the
    saved configuration (relation, sensitivities, budget shares): ``ValueError`` otherwise,
    and for any other format (a checkpoint is checked by the fit that resumes it). Returns
    what the loader read."""
    if "estimator" in meta:
        # privkernels.sklearn loads scikit-learn (seconds): only estimator files pay
        from privkernels.sklearn import load as load_estimator

        return load_estimator(path)
    loaders: dict[str, Callable[[str], Any]] = {
        dp_kip.result.FORMAT: dp_kip.load,
        dp_ntk.result.FORMAT: dp_ntk.load,
        dp_ntk_regression.model.FORMAT: dp_ntk_regression.load,
        synth.FORMAT: synth.load_table_synth,
    }
    loader = loaders.get(str(meta.get("format", "")))
    if loader is None:  # a checkpoint, or a format no loader checks: its records would go unchecked
        raise ValueError(
            f"{path} holds {str(meta.get('format'))!r}, not a result file whose records can be "
            "checked against its configuration (privkernels report reads the files of "
            "synth, distill, the estimators and the three methods' save; a checkpoint is "
            "checked by the fit that resumes it)"
        )
    return loader(path)


# ----------------------------------------------------------------------- entry point

_CHECKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "schema": _check_schema_args,
    "synth": _check_synth_args,
    "distill": _check_distill_args,
    "report": lambda a: None,
    "budget": lambda a: None,  # _cmd_budget reads no data: it checks its own arguments
}
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "schema": _cmd_schema,
    "synth": _cmd_synth,
    "distill": _cmd_distill,
    "report": _cmd_report,
    "budget": _cmd_budget,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privkernels`` console script: the exit status (0, or 2 after a
    one-line error on stderr; ``--help`` and ``--version`` print and return 0)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = _parser().parse_args(argv)
        _CHECKS[a.cmd](a)  # every argument, before any data is read
        if a.cmd in ("synth", "distill") and a.delta is None and getattr(a, "model", None) is None:
            a.delta = DEFAULT_DELTA
        return _charged(_COMMANDS[a.cmd], a)  # --budget: the ledger, before any data
    except SystemExit as done:  # --help, --version
        return int(done.code or 0)
    except BrokenPipeError:  # stdout closed early (| head): no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, OSError) as err:  # OSError: a file missing or unwritable
        print(f"privkernels: error: {printable(_flags(str(err)))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
