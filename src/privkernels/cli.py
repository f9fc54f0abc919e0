"""The ``privkernels`` command line: synthetic tables, distilled sets, reports.

::

    privkernels schema data.csv --label income --out schema.json   # draft (reads the data!)
    privkernels synth data.csv --schema schema.json --epsilon 1 --out syn.csv
    privkernels distill data.csv --label y --epsilon 1 --out support.npz
    privkernels report syn.model.npz

``synth`` and ``distill`` write the privacy report as JSON beside their output
(``<out>.privacy.json``) and print its summary; ``synth`` also saves the fitted
model (``<out>.model.npz``) so more rows can be drawn later without touching the
data. Errors in the input are reported in one line (exit status 2), before any
noise is drawn. The benchmarks are not part of the package: run them from a source
checkout with ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privkernels import checkpoint, dp_kip, dp_ntk, dp_ntk_regression, synth
from privkernels.data.frames import infer_schema, read_csv, write_csv
from privkernels.data.schema import TabularSchema
from privkernels.privacy.accountant import BudgetAccountant
from privkernels.privacy.keys import sample_key, sampling_key, seed_keys, seeded_call, warn_seed
from privkernels.privacy.report import PrivacyReport
from privkernels.synth import fit_table, load_table_synth
from privkernels.tuning import events_of_report, same_events

__all__ = ["main"]


def _report_path(out: Path) -> Path:
    return out.with_name(out.name + ".privacy.json")


def _write_report(report: Any, out: Path) -> Path:
    p = _report_path(out)
    p.write_text(report.to_json(indent=2) + "\n")
    return p


def _cmd_schema(a: argparse.Namespace) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schema = infer_schema(read_csv(a.data), label=a.label, name=Path(a.data).stem)
    schema.save(a.out)
    print(
        f"wrote {a.out}: a DRAFT read from the private data (bounds, categories, classes).\n"
        "Replace them by public values (documentation, domain knowledge) and set "
        '"source": "public"; a fit on a data-derived schema is noted as not private.'
    )
    return 0


def _cmd_synth(a: argparse.Namespace) -> int:
    out = Path(a.out)
    if a.model:  # sampling only: post-processing, no release key
        model = load_table_synth(a.model)
        report, k_sample = model.report, sample_key(a.seed)
    else:
        if a.data is None or a.schema is None:
            raise ValueError("synth needs DATA and --schema (or --model to sample a saved model)")
        schema = TabularSchema.load(a.schema)
        table = read_csv(a.data)
        key, public_key = seed_keys(a.seed, name="--seed")
        if a.tune:
            model, report = _tuned_table(a, schema, table, key, public_key)
        else:
            with seeded_call():
                model = fit_table(key, table, schema, epsilon=a.epsilon, delta=a.delta,
                                  iterations=a.iterations, progress=not a.quiet,
                                  public_key=public_key)  # fmt: skip
            report = model.report
        k_sample = sampling_key(key, public_key)
        model.save(out.with_name(out.name + ".model.npz"))
    n = a.n if a.n is not None else (len(next(iter(table.values()))) if not a.model else 1000)
    write_csv(model.sample(k_sample, n), out)
    rp = _write_report(report, out)
    print(f"wrote {n} synthetic rows to {out}; privacy report {rp}")
    print(report.summary())
    return 0


def _grid(spec: str, estimator: Any) -> dict[str, list[Any]]:
    """``"name=v1,v2;name2=v3"`` as a parameter grid, names checked against ``estimator``."""
    grid: dict[str, list[Any]] = {}
    known = set(estimator.get_params())
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, values = part.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values.strip():
            raise ValueError(f"--tune takes name=v1,v2;name2=v3,...; got {part!r}")
        if name not in known or name in ("epsilon", "delta", "random_state"):
            raise ValueError(
                f"--tune cannot vary {name!r}; it may vary {sorted(known - {'epsilon', 'delta', 'random_state'})}"
            )
        grid[name] = [_value(v.strip()) for v in values.split(",")]
    if not grid:
        raise ValueError("--tune needs at least one name=v1,v2")
    return grid


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _tuned_table(a: argparse.Namespace, schema: Any, table: Any, key: Any,
                 public_key: Any) -> tuple[Any, Any]:  # fmt: skip
    """``synth --tune``: `PrivateSearchCV` over `DPNTKGenerator` s; the model and the search's report."""
    # privkernels.sklearn loads scikit-learn (seconds): only the commands that use it pay
    from privkernels.sklearn import DPNTKGenerator, PrivateSearchCV

    base = DPNTKGenerator(schema=schema, iterations=a.iterations, verbose=False)
    search = PrivateSearchCV(base, _grid(a.tune, base), epsilon=a.epsilon, delta=a.delta,
                             random_state=key if a.seed is not None else None)  # fmt: skip
    with seeded_call():
        search.fit(table)
    return search.best_estimator_.synth_, search.privacy_report_


def _read_xy(path: str, label: str | None) -> tuple[np.ndarray, np.ndarray]:
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            if "x" not in z.files or "y" not in z.files:
                raise ValueError(f"{path} must hold arrays 'x' and 'y'")
            return np.asarray(z["x"], np.float32), np.asarray(z["y"])
    if label is None:
        raise ValueError("a CSV input needs --label (the label column)")
    cols = read_csv(path)
    if label not in cols:
        raise ValueError(f"{path} has no column {label!r}")
    y = cols.pop(label)
    try:
        x = np.column_stack([c.astype(np.float64) for c in cols.values()]).astype(np.float32)
    except ValueError:
        raise ValueError("distill needs numeric feature columns") from None
    return x, y


def _cmd_distill(a: argparse.Namespace) -> int:
    # privkernels.sklearn loads scikit-learn (seconds): only the commands that use it pay
    from privkernels.sklearn import DPKIPClassifier, PrivateSearchCV

    if a.tune and (a.classes is None or a.neighbouring != "add-remove"):  # before any read
        raise ValueError(
            "distill --tune needs --classes (a search reads no label without noise) and "
            "--neighbouring add-remove with --batch-size and --sampling-rate (repeat-and-select "
            "is accounted with RDP, which covers Poisson-sampled DP-SGD under add-remove)"
        )
    x, y = _read_xy(a.data, a.label)
    classes = a.classes.split(",") if a.classes else None
    if classes is not None and np.asarray(y).dtype.kind in "iu":
        classes = [int(c) for c in classes]
    shape = tuple(int(s) for s in a.image_shape.split(",")) if a.image_shape else None
    opts = {"neighbouring": a.neighbouring}
    if a.sampling_rate is not None:
        opts["sampling_rate"] = a.sampling_rate
    est = DPKIPClassifier(epsilon=a.epsilon, delta=a.delta, classes=classes, kernel=a.kernel,
                          support_per_class=a.support_per_class, epochs=a.epochs,
                          batch_size=a.batch_size, image_shape=shape, random_state=a.seed,
                          verbose=not a.quiet and not a.tune, fit_options=opts)  # fmt: skip
    grid = _grid(a.tune, est) if a.tune else None
    warn_seed(a.seed, name="--seed")
    labels = np.asarray(y).astype(str) if classes and isinstance(classes[0], str) else y
    with seeded_call():
        if grid is None:
            est.fit(x.reshape(len(x), -1), labels)
            report = est.privacy_report_
        else:
            search = PrivateSearchCV(est, grid, epsilon=a.epsilon, delta=a.delta,
                                     random_state=a.seed).fit(x.reshape(len(x), -1), labels)  # fmt: skip
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
    print(report.summary())
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
    spent, left = acc.spent(), acc.remaining()
    print(f"{a.ledger}: total ({acc.epsilon:.6g}, {acc.delta:.3g}) under {acc.neighbouring}; "
          f"spent ({spent.epsilon:.6g}, {spent.delta:.3g}) in {len(acc.reports)} release(s); "
          f"remaining ({left.epsilon:.6g}, {left.delta:.3g})")  # fmt: skip
    return 0


def _charged(run: Callable[[argparse.Namespace], int], a: argparse.Namespace) -> int:
    """``--budget LEDGER``: check the planned ``(--epsilon, --delta)`` against the ledger
    before the command reads any data, run it with the ledger as the default accountant,
    and write the ledger back (atomically) whatever happened after that check: a release
    that failed midway is charged its plan (`privkernels.privacy.BudgetAccountant`)."""
    ledger = getattr(a, "budget", None)
    if ledger is None or (a.cmd == "synth" and a.model):  # sampling a saved model: no release
        return run(a)
    if not Path(ledger).is_file():
        raise ValueError(f"--budget: no ledger {ledger} (create it with `privkernels budget init`)")
    acc = BudgetAccountant.load(ledger)
    if a.epsilon is None:
        raise ValueError(f"--budget needs --epsilon (a {a.cmd} run without one is not private)")
    acc.check(a.epsilon, a.delta, getattr(a, "neighbouring", "replace-one"))
    try:
        with acc:
            return run(a)
    finally:
        acc.save(ledger)


def _cmd_report(a: argparse.Namespace) -> int:
    if str(a.file).endswith(".json"):  # the <out>.privacy.json that synth and distill write
        report = PrivacyReport.from_json(Path(a.file).read_text())
        _check_beside(Path(a.file), report)
    else:
        _, meta = checkpoint.load(a.file)
        if "report" not in meta:
            raise ValueError(f"{a.file} holds no privacy report")
        report = PrivacyReport.from_dict(meta["report"])
        _load_checked(a.file, meta)  # the method's own checks (records against the config)
    print(report.to_json(indent=2) if a.json else report.summary())
    return 0


def _check_beside(path: Path, report: Any) -> None:
    """A ``<out>.privacy.json`` holds no configuration: check it against the model saved
    beside it (``<out>`` for distill, ``<out>.model.npz`` for synth), which its method's
    loader checks; say so on stderr when there is none. A search's report is checked
    against the chosen model's own fit (`_check_search_beside`)."""
    out = path.with_name(path.name.removesuffix(".privacy.json"))
    model = next((p for p in (out, out.with_name(out.name + ".model.npz")) if p.is_file()), None)
    if model is None or not model.name.endswith(".npz"):
        print("privkernels: note: no model beside the report; its records were checked, not "
              "their configuration", file=sys.stderr)  # fmt: skip
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


def _check_search_beside(path: Path, search: Any, saved: Any) -> None:
    """A search's report against the chosen model beside it: the model's own releases must
    be the chosen candidate's planned fit (events, budget, relation). The mean and shape of
    the number of runs cannot be checked from files (reports carry no signature)."""
    p = search.mechanisms[0].param_dict
    planned = json.loads(str(p["events"]))[int(p["chosen"])][:-1]  # the score comes last
    same = same_events(events_of_report(saved), planned)
    if not (
        same
        and saved.neighbouring == search.neighbouring
        and saved.epsilon <= float(p["fit_epsilon"]) * (1 + 1e-9)  # spent within its budget
        and math.isclose(saved.delta, float(p["fit_delta"]), rel_tol=1e-6)
    ):
        raise ValueError(f"{path} does not match the search that chose the model beside it")


def _load_checked(path: str, meta: dict[str, Any]) -> None:
    """Load a result file with its method's loader, which checks the report against the
    saved configuration (relation, sensitivities, budget shares): ``ValueError`` otherwise.
    Checkpoints (resumable runs) are checked by the fit that resumes them."""
    if "estimator" in meta:
        # privkernels.sklearn loads scikit-learn (seconds): only estimator files pay
        from privkernels.sklearn import load as load_estimator

        load_estimator(path)
        return
    loaders: dict[str, Callable[[str], Any]] = {
        dp_kip.result.FORMAT: dp_kip.load,
        dp_ntk.result.FORMAT: dp_ntk.load,
        dp_ntk_regression.model.FORMAT: dp_ntk_regression.load,
        synth.FORMAT: synth.load_table_synth,
    }
    loader = loaders.get(str(meta.get("format", "")))
    if loader is not None:
        loader(path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="privkernels", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("schema", help="draft a schema from a CSV (reads the data: edit it!)")
    s.add_argument("data")
    s.add_argument("--label", required=True)
    s.add_argument("--out", required=True)
    for name, helptext in (("synth", "private synthetic table (DP-NTK)"),
                           ("distill", "private distilled support set (DP-KIP)")):  # fmt: skip
        c = sub.add_parser(name, help=helptext)
        c.add_argument("data", nargs="?" if name == "synth" else None)
        c.add_argument("--epsilon", type=float, required=name == "distill")
        c.add_argument("--delta", type=float, default=1e-5)
        c.add_argument("--out", required=True)
        c.add_argument("--seed", type=int, default=None)
        c.add_argument("--quiet", action="store_true", help="no progress bar")
        c.add_argument("--budget", metavar="LEDGER", default=None,
                       help="a budget ledger (`privkernels budget init`) charged this release; "
                       "refused before the data is read when it does not fit (default: none)")  # fmt: skip
    synth = sub.choices["synth"]
    synth.add_argument("--schema", help="public schema JSON (see `privkernels schema`)")
    synth.add_argument(
        "--n", type=int, default=None, help="rows to draw (default: as many as DATA)"
    )
    synth.add_argument("--iterations", type=int, default=None)
    synth.add_argument("--model", help="sample a saved <out>.model.npz instead of fitting")
    for c in (synth, sub.choices["distill"]):
        c.add_argument(
            "--tune", metavar="GRID", default=None,
            help="choose hyperparameters privately inside --epsilon (repeat-and-select, "
            "PrivateSearchCV), e.g. 'iterations=200,500;d_code=5,10' (default: no search)",
        )  # fmt: skip
    d = sub.choices["distill"]
    d.add_argument("--label", help="label column of a CSV")
    d.add_argument("--classes", help="public class values, comma-separated")
    d.add_argument("--kernel", default="fc_ntk", choices=("fc_ntk", "scatternet", "entk"))
    d.add_argument("--support-per-class", type=int, default=10)
    d.add_argument("--epochs", type=int, default=10)
    d.add_argument("--image-shape", help="e.g. 28,28 (needed by scatternet / entk)")
    d.add_argument("--neighbouring", choices=("replace-one", "add-remove"), default="replace-one",
                   help="the neighbouring relation (default: replace-one; --tune needs "
                   "add-remove with --batch-size and --sampling-rate)")  # fmt: skip
    d.add_argument("--batch-size", type=int, default=None,
                   help="expected Poisson batch size (default: min(500, n))")  # fmt: skip
    d.add_argument("--sampling-rate", type=float, default=None,
                   help="public Poisson rate (add-remove only; default: none)")  # fmt: skip
    b = sub.add_parser("budget", help="create or show a budget ledger for --budget")
    b.add_argument("action", choices=("init", "show"), help="init: a new ledger; show: print it")
    b.add_argument("ledger", help="the ledger file (JSON)")
    b.add_argument("--epsilon", type=float, default=None, help="init: the total epsilon")
    b.add_argument("--delta", type=float, default=None, help="init: the total delta")
    b.add_argument("--neighbouring", choices=("replace-one", "add-remove"),
                   default="replace-one", help="init: the relation (default: replace-one)")  # fmt: skip
    r = sub.add_parser("report", help="print the privacy report of a saved file")
    r.add_argument("file")
    r.add_argument("--json", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privkernels`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = _parser().parse_args(argv)
        if a.cmd == "synth" and a.epsilon is None and not a.model:
            raise ValueError("synth needs --epsilon (or --model)")
        run = {"schema": _cmd_schema, "synth": _cmd_synth, "distill": _cmd_distill,
               "report": _cmd_report, "budget": _cmd_budget}[a.cmd]  # fmt: skip
        return _charged(run, a)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"privkernels: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
