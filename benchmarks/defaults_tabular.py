"""The classifiers' defaults on the real tabular sets of the data directory (issue #52).

Post-hoc: selects nothing. The rule, written before the run, is
``benchmarks/results/defaults-tabular-rule.md``: adult, cervical, epileptic and intrusion
(20,000-row subsamples) encoded with public bounds; ``DPKIPClassifier`` on standardised
inputs (``kip-std``) and behind a `PrivateStandardScaler` (``kip-private``), and
``DPNTKClassifier`` with its own private preprocessing (``ntk``), each at (1, 1e-5) in
total, scored by the ratio of ROC-AUC lifts against a non-private LogisticRegression.

``--lift`` runs the two DP-KIP routes with the FC-NTK on plain and on sphere-lifted rows
(K5 and K5L of ``benchmarks/results/defaults-dp-kip-lift-rule.md``) and writes
``defaults-tabular-lift.{json,md}``.

Usage: ``python -m benchmarks.defaults_tabular [--sets adult ...] [--seeds 0 1 2] [--lift]
[--data-dir DIR] [--out DIR]``; writes ``defaults-tabular.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from benchmarks.common import write_results
from benchmarks.defaults_dp_kip import LIFT_CANDIDATES, RESULTS, TARGET, _meta, t_interval
from privkernels.data.tabular import load_tabular
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    PrivateStandardScaler,
    make_private_pipeline,
)

SETS = ("adult", "cervical", "epileptic", "intrusion")
#: rows kept of each intrusion split (run time only; the rule file)
INTRUSION_ROWS = 20_000
RATIO = "(AUC - 0.5) / (AUC_LogReg - 0.5) of each route; target >= 0.8"
ROUTES = ("kip-std", "kip-private", "ntk")
#: whether a route's whole pipeline is (1, 1e-5)-DP (kip-std reads the exact training
#: mean and std to standardise; the rule file)
PRIVATE = {"kip-std": "no: exact train mean/std", "kip-private": "yes", "ntk": "yes"}


def load(name: str, root: Path) -> tuple[np.ndarray, ...]:
    """``(x_train, x_test, y_train, y_test, classes)`` of ``name``, public-bound encoded."""
    sub = INTRUSION_ROWS if name == "intrusion" else None
    tr, te = (load_tabular(name, root, s, subsample=sub) for s in ("train", "test"))
    classes = np.arange(tr.n_classes)  # the schema's class codes: public
    x = [np.asarray(d.x, np.float64) for d in (tr, te)]
    return x[0], x[1], np.asarray(tr.y), np.asarray(te.y), classes


def standardise(xtr: np.ndarray, xte: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both splits scaled by the training split's mean and std (the defaults' convention)."""
    mu, sd = xtr.mean(0), xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (xtr - mu) / sd, (xte - mu) / sd


def auc_lift(y: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> float:
    """ROC-AUC - 0.5: binary on ``s1 - s0``, else macro one-vs-rest over the classes with
    both positives and negatives in ``y``."""
    scores = np.asarray(scores, np.float64)
    if len(classes) == 2:
        s = scores[:, 1] - scores[:, 0] if scores.ndim == 2 else scores
        return float(roc_auc_score(y == classes[1], s)) - 0.5
    present = [i for i, k in enumerate(classes) if 0 < np.sum(y == k) < len(y)]
    return float(np.mean([roc_auc_score(y == classes[i], scores[:, i]) for i in present])) - 0.5


#: the lift rule's routes: ``(route, fit_options of its DPKIPClassifier)`` by label, one
#: per DP-KIP route and candidate of `benchmarks.defaults_dp_kip.LIFT_CANDIDATES`
LIFT_ROUTES = {
    f"{r}-{cid}": (r, cand["fit_options"])
    for r in ("kip-std", "kip-private")
    for cid, cand in LIFT_CANDIDATES.items()
}


def _base_route(name: str) -> str:
    """The rule file's route a route label runs (a lift rule label's, or itself)."""
    return LIFT_ROUTES.get(name, (name, None))[0]


def route(name: str, classes: np.ndarray, seed: int) -> Any:
    """The estimator (or private pipeline) of one route of the rule file (or of the lift
    rule's, `LIFT_ROUTES`)."""
    opts = LIFT_ROUTES.get(name, (name, None))[1]
    name = _base_route(name)
    if name == "kip-std":
        return DPKIPClassifier(1.0, 1e-5, classes=classes, random_state=seed, fit_options=opts)
    if name == "kip-private":
        return make_private_pipeline(
            PrivateStandardScaler(0.3, 5e-6, bounds=(0.0, 1.0), random_state=seed),
            DPKIPClassifier(0.7, 5e-6, classes=classes, random_state=seed, fit_options=opts),
        )
    return DPNTKClassifier(1.0, 1e-5, classes=classes, random_state=seed)


def run_route(data: tuple[np.ndarray, ...], name: str, seed: int) -> dict[str, float]:
    """One fit and one read of the test split: AUC lift, accuracy and wall seconds."""
    xtr, xte, ytr, yte, classes = data
    if _base_route(name) == "kip-std":
        xtr, xte = standardise(xtr, xte)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = route(name, classes, seed).fit(xtr, ytr)
    scores = est.decision_function(xte)
    acc = float(np.mean(est.predict(xte) == yte))
    return {"lift": auc_lift(yte, scores, classes), "acc": acc, "sec": time.perf_counter() - t}


def evaluate(
    name: str,
    root: Path,
    seeds: list[int],
    log: Callable[[str], None],
    routes: tuple[str, ...] = ROUTES,
) -> list[dict[str, Any]]:
    """The rows of one set: one per route."""
    data = load(name, root)
    xtr, xte, ytr, yte, classes = data
    s_tr, s_te = standardise(xtr, xte)
    lr = LogisticRegression(max_iter=5000).fit(s_tr, ytr)
    if not np.array_equal(lr.classes_, classes):  # both scored over the schema's classes
        raise SystemExit(f"{name}: a class of the schema has no training row; the rule's "
                         "reference is undefined")  # fmt: skip
    ref = auc_lift(yte, lr.decision_function(s_te), classes)
    majority = float(np.max(np.unique(yte, return_counts=True)[1]) / len(yte))
    rows = []
    for r in routes:
        runs = [run_route(data, r, s) for s in seeds]
        mean, half = t_interval([x["lift"] / ref for x in runs])
        rows.append({
            "set": name, "route": r, "private": PRIVATE[_base_route(r)], "n_train": len(ytr), "d": xtr.shape[1],
            "classes": len(classes), "ratio": mean, "ratio_ci95": half,
            "meets": bool(mean >= TARGET), "gap": max(0.0, TARGET - mean),
            "auc": 0.5 + float(np.mean([x["lift"] for x in runs])), "logreg_auc": 0.5 + ref,
            "acc": float(np.mean([x["acc"] for x in runs])), "majority_acc": majority,
            "ratios": [round(x["lift"] / ref, 4) for x in runs],
            "sec": float(np.mean([x["sec"] for x in runs])),
        })  # fmt: skip
        log(f"  {name} {r}: ratio {mean:.3f} ± {half:.3f}, acc {rows[-1]['acc']:.3f} "
            f"(majority {majority:.3f}), {rows[-1]['sec']:.0f} s per fit")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS), help="default: all four")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default: 0 1 2")
    ap.add_argument("--lift", action="store_true", help="the lift rule's DP-KIP routes")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="default: $PRIVKERNELS_DATA")  # fmt: skip
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"default: {RESULTS}")
    args = ap.parse_args(argv)
    root = args.data_dir or Path(os.environ.get("PRIVKERNELS_DATA", "data"))
    rows: list[dict[str, Any]] = []
    routes = tuple(LIFT_ROUTES) if args.lift else ROUTES
    for name in args.sets:
        rows += evaluate(name, root, args.seeds, lambda m: print(m, flush=True), routes)
    command = " ".join(["python -m benchmarks.defaults_tabular", *sys.argv[1:]])
    rule = "defaults-dp-kip-lift-rule.md" if args.lift else "defaults-tabular-rule.md"
    meta = {**_meta(args.seeds), "rule": f"benchmarks/results/{rule}",
            "command": command, "ratio": RATIO}  # fmt: skip
    cols = ["set", "route", "private", "n_train", "d", "classes", "ratio", "ratio_ci95", "meets", "gap",
            "auc", "logreg_auc", "acc", "majority_acc", "sec"]  # fmt: skip
    stem = "defaults-tabular-lift" if args.lift else "defaults-tabular"
    write_results(args.out, stem, rows, meta=meta, columns=cols, command=command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
