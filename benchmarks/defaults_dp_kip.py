"""DPKIPClassifier defaults on public tabular data (issue #52, item 4).

The rule (candidates, data, metric, selection) is ``benchmarks/results/defaults-dp-kip-rule.md``,
committed before any run. ``--grid`` runs the candidate grid and applies the rule;
without it, the estimator's defaults are checked on the same sets and the final table
``benchmarks/results/defaults-dp-kip.{json,md}`` is written.

``--lift`` runs K5 and K5L (K5 with the FC-NTK on sphere-lifted rows) side by side for the
decision of ``benchmarks/results/defaults-dp-kip-lift-rule.md``.

``--coarse`` (post-hoc, selects nothing) measures the defaults on breast cancer scaled by
coarse public bounds instead of standardised.

``--rare`` runs ``DPKIPClassifier`` and ``DPNTKClassifier`` with their defaults on
make_classification sets with a rare class, for the rare-class validated n of
``benchmarks/results/defaults-rare-class-rule.md``; writes ``defaults-rare-class.{json,md}``.

Usage: ``python -m benchmarks.defaults_dp_kip [--grid | --lift | --coarse | --rare] [--seeds 0 1 2]
[--out DIR]``.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats
import sklearn
from sklearn import datasets
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

import privkernels
from benchmarks.common import write_results
from privkernels import dp_kip
from privkernels.sklearn import DPKIPClassifier, DPNTKClassifier

EPSILON, DELTA = 1.0, 1e-5
TARGET = 0.8
MAKE_NS = (300, 1000, 5000, 20000)
RESULTS = Path(__file__).parent / "results"


def _steps(n: int, epochs: int) -> int:
    """DP-SGD steps ``epochs * round(n / min(500, n))`` of a replace-one fit."""
    return epochs * max(1, round(n / min(500, n)))


def _spc_scaled(n: int, c: int) -> int:
    """``S(n, c) = clip(n // (200 c), 1, 10)``."""
    return int(min(10, max(1, n // (200 * c))))


def _cand(spc: Any, epochs: int, lr: Any) -> Callable[[int, int, int], dict[str, Any]]:
    def settings(n: int, d: int, c: int) -> dict[str, Any]:
        s = _spc_scaled(n, c) if spc == "S" else spc
        rate = 1.0 / math.sqrt(_steps(n, epochs)) if lr == "1/sqrt(T)" else lr
        return {"support_per_class": int(s), "epochs": epochs, "learning_rate": float(rate)}

    settings.label = f"spc={spc}, epochs={epochs}, lr={lr}"  # type: ignore[attr-defined]
    return settings


#: The candidates of the rule file, in its order.
CANDIDATES: dict[str, Callable[[int, int, int], dict[str, Any]]] = {
    "K0": _cand(10, 10, 0.03),
    "K1": _cand(1, 10, 0.03),
    "K2": _cand(1, 10, 0.1),
    "K3": _cand(1, 10, "1/sqrt(T)"),
    "K4": _cand("S", 10, 0.1),
    "K5": _cand("S", 10, "1/sqrt(T)"),
    "K6": _cand(1, 30, 0.1),
    "K7": _cand("S", 30, 0.1),
}


def tuning_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The public tuning sets of the rule: name -> (X, y)."""
    sets = {
        "iris": datasets.load_iris(return_X_y=True),
        "wine": datasets.load_wine(return_X_y=True),
        "breast_cancer": datasets.load_breast_cancer(return_X_y=True),
        "digits": datasets.load_digits(return_X_y=True),
    }
    for n in MAKE_NS:
        sets[f"make_classification_{n}"] = datasets.make_classification(
            n_samples=n, n_features=20, n_informative=6, n_redundant=2, n_classes=2,
            class_sep=1.0, random_state=12345,
        )  # fmt: skip
    return {k: (np.asarray(x, np.float64), np.asarray(y)) for k, (x, y) in sets.items()}


def split(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Stratified 70/30 split (seed 0), standardised by the public training split's statistics."""
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    mu, sd = xtr.mean(0), xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (xtr - mu) / sd, (xte - mu) / sd, ytr, yte


def auc(y: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> float:
    """Binary AUC of ``s1 - s0``, or the macro one-vs-rest AUC of the score columns."""
    scores = np.asarray(scores, np.float64)
    if len(classes) == 2:
        s = scores[:, 1] - scores[:, 0] if scores.ndim == 2 else scores
        return float(roc_auc_score(y == classes[1], s))
    return float(np.mean([roc_auc_score(y == k, scores[:, i]) for i, k in enumerate(classes)]))


def logreg_auc(xtr: np.ndarray, xte: np.ndarray, ytr: np.ndarray, yte: np.ndarray) -> float:
    """Test AUC of the non-private reference, LogisticRegression(max_iter=5000)."""
    lr = LogisticRegression(max_iter=5000).fit(xtr, ytr)
    return auc(yte, lr.decision_function(xte), lr.classes_)


def kip_run(data: tuple[np.ndarray, ...], seed: int, params: dict[str, Any]) -> dict[str, float]:
    """One fit at (1, 1e-5): test AUC from the released support's KRR scores, accuracy."""
    xtr, xte, ytr, yte = data
    classes = np.unique(ytr)  # public: the tuning sets are public
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPKIPClassifier(EPSILON, DELTA, classes=classes, random_state=seed, **params)
        est.fit(xtr, ytr)
    scores = dp_kip.predict(est.result_, xte.astype(np.float32))
    acc = float(np.mean(classes[np.argmax(scores, 1)] == yte))
    return {"auc": auc(yte, scores, classes), "acc": acc, "sec": time.perf_counter() - t}


def t_interval(v: list[float]) -> tuple[float, float]:
    """Mean and 95% t half-width of ``v``."""
    a = np.asarray(v, np.float64)
    if len(a) < 2:
        return float(a.mean()), float("nan")
    half = scipy.stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))
    return float(a.mean()), float(half)


def evaluate(params_of: Callable[[int, int, int], dict[str, Any]] | None,
             seeds: list[int], sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:  # fmt: skip
    """Rows (one per set) for a candidate (None: the estimator's own defaults)."""
    rows = []
    for name, (x, y) in sets.items():
        data = split(x, y)
        xtr, _, ytr, yte = data
        n, d, c = xtr.shape[0], xtr.shape[1], len(np.unique(ytr))
        params = {} if params_of is None else params_of(n, d, c)
        ref = logreg_auc(*data)
        runs = [kip_run(data, s, params) for s in seeds]
        ratios = [(r["auc"] - 0.5) / (ref - 0.5) for r in runs]
        mean, half = t_interval(ratios)
        majority = float(np.max(np.unique(yte, return_counts=True)[1]) / len(yte))
        rows.append({
            "set": name, "n_train": n, "d": d, "classes": c, "logreg_auc": ref,
            "kip_auc": float(np.mean([r["auc"] for r in runs])), "ratio": mean,
            "ratio_ci95": half, "kip_acc": float(np.mean([r["acc"] for r in runs])),
            "majority_acc": majority, "meets": bool(mean >= TARGET),
            "gap": max(0.0, TARGET - mean), "sec": float(np.mean([r["sec"] for r in runs])),
            **{f"p_{k}": v for k, v in params.items()},
        })  # fmt: skip
        print(f"  {name}: ratio {mean:.3f} ± {half:.3f} (auc {rows[-1]['kip_auc']:.3f} vs "
              f"{ref:.3f})", flush=True)  # fmt: skip
    return rows


def monotone(rows: list[dict[str, Any]], slack: float = 0.05) -> bool:
    """make_classification's mean ratio never drops by more than ``slack`` as n grows."""
    r = [row["ratio"] for row in rows if row["set"].startswith("make_classification")]
    return all(r[j] >= r[i] - slack for i in range(len(r)) for j in range(i + 1, len(r)))


def validated_n(rows: list[dict[str, Any]]) -> int | None:
    """The rule's validated n: the smallest training row count whose set meets the target
    and every larger make_classification set does too (None: no such row)."""
    make = [r for r in rows if r["set"].startswith("make_classification")]
    ok = [
        r["n_train"] for r in rows
        if r["meets"] and all(m["meets"] for m in make if m["n_train"] > r["n_train"])
    ]  # fmt: skip
    return min(ok) if ok else None


def select(by_cand: dict[str, list[dict[str, Any]]]) -> str:
    """The rule file's selection: monotone filter, best worst-set ratio, ties by mean."""
    keep = [k for k, rows in by_cand.items() if monotone(rows)] or list(by_cand)
    worst = {k: min(r["ratio"] for r in by_cand[k]) for k in keep}
    best = max(worst.values())
    tied = [k for k in keep if worst[k] >= best - 0.02]
    mean = {k: float(np.mean([r["ratio"] for r in by_cand[k]])) for k in tied}
    return max(tied, key=lambda k: (mean[k], -list(by_cand).index(k)))


def _meta(seeds: list[int]) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    return {
        "command": "python -m benchmarks.defaults_dp_kip " + " ".join(sys.argv[1:]),
        "git_commit": commit, "privkernels": privkernels.__version__,
        "sklearn": sklearn.__version__, "epsilon": EPSILON, "delta": DELTA,
        "seeds": " ".join(map(str, seeds)), "rule": "benchmarks/results/defaults-dp-kip-rule.md",
        "ratio": "(AUC_KIP - 0.5) / (AUC_LogReg - 0.5); target >= 0.8",
    }  # fmt: skip


def run_grid(seeds: list[int], out: Path) -> str:
    """Every candidate on every set; write the grid table and return the chosen id."""
    sets = tuning_sets()
    by_cand: dict[str, list[dict[str, Any]]] = {}
    for cid, fn in CANDIDATES.items():
        print(f"{cid}: {fn.label}", flush=True)  # type: ignore[attr-defined]
        by_cand[cid] = evaluate(fn, seeds, sets)
    chosen = select(by_cand)
    rows = [{"candidate": k, "rule": CANDIDATES[k].label, **r}  # type: ignore[attr-defined]
            for k, rs in by_cand.items() for r in rs]  # fmt: skip
    summary = {k: {"worst": min(r["ratio"] for r in rs), "monotone": monotone(rs),
                   "mean": float(np.mean([r["ratio"] for r in rs]))}
               for k, rs in by_cand.items()}  # fmt: skip
    meta = {**_meta(seeds), "chosen": chosen, "summary": summary}
    cols = ["candidate", "rule", "set", "n_train", "ratio", "ratio_ci95", "kip_auc",
            "logreg_auc", "kip_acc", "majority_acc", "sec"]  # fmt: skip
    write_results(out, "defaults-dp-kip-grid", rows, meta=meta, columns=cols)
    return chosen


#: the two candidates of the lift rule, as explicit ``fit_options`` (the estimator's own
#: default may be either)
LIFT_CANDIDATES = {
    name: {"fit_options": {"kernel_options": {"sphere_lift": lift}}}
    for name, lift in (("K5", False), ("K5L", True))
}


def run_lift(seeds: list[int], out: Path) -> None:
    """K5 and K5L on the tuning sets, and the lift rule's conditions 1 and 2."""
    sets = tuning_sets()
    by_cand = {}
    for cid, extra in LIFT_CANDIDATES.items():
        print(cid, flush=True)

        def params(n: int, d: int, c: int, e: dict[str, Any] = extra) -> dict[str, Any]:
            return dict(e)

        by_cand[cid] = evaluate(params, seeds, sets)
    worst = {k: min(r["ratio"] for r in rs) for k, rs in by_cand.items()}
    meta = {
        **_meta(seeds), "rule": "benchmarks/results/defaults-dp-kip-lift-rule.md",
        "worst": worst, "monotone": {k: monotone(rs) for k, rs in by_cand.items()},
        "conditions_1_2": bool(worst["K5L"] >= worst["K5"] - 0.02 and monotone(by_cand["K5L"])),
    }  # fmt: skip
    rows = [{"candidate": k, **{c: v for c, v in r.items() if not c.startswith("p_")}}
            for k, rs in by_cand.items() for r in rs]  # fmt: skip
    cols = ["candidate", "set", "n_train", "ratio", "ratio_ci95", "kip_auc", "logreg_auc",
            "kip_acc", "majority_acc", "sec"]  # fmt: skip
    write_results(out, "defaults-dp-kip-lift", rows, meta=meta, columns=cols)


def run_check(seeds: list[int], out: Path) -> None:
    """The estimator's defaults on the tuning sets: the final table."""
    rows = evaluate(None, seeds, tuning_sets())
    meta = {**_meta(seeds), "make_classification_no_worse_as_n_grows": monotone(rows),
            "validated_n": validated_n(rows)}  # fmt: skip
    cols = ["set", "n_train", "d", "classes", "ratio", "ratio_ci95", "meets", "gap",
            "kip_auc", "logreg_auc", "kip_acc", "majority_acc", "sec"]  # fmt: skip
    write_results(out, "defaults-dp-kip", rows, meta=meta, columns=cols)


def run_coarse(seeds: list[int], out: Path) -> None:
    """Post-hoc (selects nothing): breast cancer under coarse public bounds ``[0, 10^k]`` per
    feature (``k`` the ceiling of log10 of the feature's maximum), mapped to [0, 1] or
    [-1, 1] instead of standardised: the estimator's defaults off their input convention."""
    x, y = datasets.load_breast_cancer(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    hi = 10.0 ** np.ceil(np.log10(x.max(0)))
    maps = {"[0, 1]": lambda a: a / hi, "[-1, 1]": lambda a: 2 * a / hi - 1}
    rows = []
    for name, f in maps.items():
        data = (f(xtr), f(xte), ytr, yte)
        ref = logreg_auc(*data)
        runs = [kip_run(data, s, {}) for s in seeds]
        mean, half = t_interval([(r["auc"] - 0.5) / (ref - 0.5) for r in runs])
        rows.append({"map": name, "ratio": mean, "ratio_ci95": half, "meets": mean >= TARGET,
                     "kip_acc": float(np.mean([r["acc"] for r in runs])),
                     "majority_acc": float(np.mean(yte == 1)), "logreg_auc": ref})  # fmt: skip
    write_results(out, "defaults-dp-kip-coarse-bounds", rows, meta=_meta(seeds))


#: the rare-class rule's minority shares and set sizes (70% of each is trained on)
RARE_SHARES = (0.10, 0.05)
RARE_NS = (1000, 2000, 5000, 10000, 20000, 40000)
#: the rule's estimators, with their defaults at (1, 1e-5) on classes [0, 1]
RARE_ESTIMATORS: dict[str, Callable[[int], Any]] = {
    "DPKIPClassifier": lambda seed: DPKIPClassifier(EPSILON, DELTA, classes=[0, 1], random_state=seed),
    "DPNTKClassifier": lambda seed: DPNTKClassifier(EPSILON, DELTA, classes=[0, 1], random_state=seed),
}  # fmt: skip


def rare_set(n: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """The rule's public set: `tuning_sets`' generator with class 1 at ``share`` of the rows."""
    x, y = datasets.make_classification(
        n_samples=n, n_features=20, n_informative=6, n_redundant=2, n_classes=2,
        class_sep=1.0, weights=[1.0 - share, share], random_state=12345,
    )  # fmt: skip
    return np.asarray(x, np.float64), np.asarray(y)


def rare_run(est: Any, data: tuple[np.ndarray, ...]) -> dict[str, float]:
    """One fit on the standardised training split; the test split's AUC from the
    estimator's ``decision_function`` and the share of test rows predicted as class 1."""
    xtr, xte, ytr, yte = data
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(xtr, ytr)
    scores = est.decision_function(xte)
    pred = est.predict(xte)
    return {"auc": auc(yte, scores, np.array([0, 1])), "pred_rare": float(np.mean(pred == 1)),
            "sec": time.perf_counter() - t}  # fmt: skip


def rare_validated_n(rows: list[dict[str, Any]]) -> int | None:
    """The rule's rare-class validated n of one estimator and share (None: not reached)."""
    return min((r["n_train"] for r in rows
                if all(m["meets"] for m in rows if m["n_train"] >= r["n_train"])),
               default=None)  # fmt: skip


def run_rare(seeds: list[int], out: Path) -> None:
    """The rare-class rule's runs and its validated n per estimator and share."""
    rows: list[dict[str, Any]] = []
    found: dict[str, dict[str, int | None]] = {}
    for name, make in RARE_ESTIMATORS.items():
        for share in RARE_SHARES:
            these = []
            for n in RARE_NS:
                data = split(*rare_set(n, share))
                ref = logreg_auc(*data)
                runs = [rare_run(make(s), data) for s in seeds]
                mean, half = t_interval([(r["auc"] - 0.5) / (ref - 0.5) for r in runs])
                these.append({
                    "estimator": name, "share": share, "n_train": len(data[2]),
                    "rare_train_rows": int(np.sum(data[2] == 1)), "ratio": mean,
                    "ratio_ci95": half, "meets": bool(mean >= TARGET),
                    "auc": float(np.mean([r["auc"] for r in runs])), "logreg_auc": ref,
                    "pred_rare": float(np.mean([r["pred_rare"] for r in runs])),
                    "test_rare": float(np.mean(data[3] == 1)),
                    "sec": float(np.mean([r["sec"] for r in runs])),
                })  # fmt: skip
                print(f"  {name} s={share} n={these[-1]['n_train']}: ratio {mean:.3f} ± "
                      f"{half:.3f}", flush=True)  # fmt: skip
            found.setdefault(name, {})[str(share)] = rare_validated_n(these)
            rows += these
    meta = {**_meta(seeds), "rule": "benchmarks/results/defaults-rare-class-rule.md",
            "ratio": "(AUC - 0.5) / (AUC_LogReg - 0.5) of the row's estimator; target >= 0.8",
            "rare_validated_n": found}  # fmt: skip
    cols = ["estimator", "share", "n_train", "rare_train_rows", "ratio", "ratio_ci95", "meets",
            "auc", "logreg_auc", "pred_rare", "test_rare", "sec"]  # fmt: skip
    write_results(out, "defaults-rare-class", rows, meta=meta, columns=cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", action="store_true", help="run the candidate grid (default: check)")
    ap.add_argument("--lift", action="store_true", help="K5 against K5L (the lift rule)")
    ap.add_argument(
        "--coarse",
        action="store_true",
        help="post-hoc: breast cancer under coarse public bounds (selects nothing)",
    )
    ap.add_argument(
        "--rare",
        action="store_true",
        help="both classifiers' defaults with a rare class (the rare-class rule)",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default: 0 1 2")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"default: {RESULTS}")
    args = ap.parse_args(argv)
    if args.rare:
        run_rare(args.seeds, args.out)
    elif args.coarse:
        run_coarse(args.seeds, args.out)
    elif args.lift:
        run_lift(args.seeds, args.out)
    elif args.grid:
        print("chosen:", run_grid(args.seeds, args.out))
    else:
        run_check(args.seeds, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
