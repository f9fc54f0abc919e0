"""Replace-one DP NTK regression with its solver chosen inside the budget, or fixed.

The rule, written before any run: ``benchmarks/results/dp-ntk-regression-solver-rule.md``.
Rows are flattened and scaled to unit L2 norm (a per-record map), so the estimators run
with ``preprocessing=None`` and input bound 1. digits: scikit-learn's bundled set, the
stratified 80/20 split of seed 0 (1438 training / 359 test rows). MNIST: the 60,000
training and 10,000 test images (``PRIVKERNELS_DATA``).

``mode=search`` (default): `privkernels.sklearn.PrivateSearchCV` over ``solver`` in
{ridge, kernel-mean} x ``fit_intercept`` in {True, False} at its defaults, the cell's
epsilon covering every fit, noisy score and the choice (Papernot & Steinke 2022, Thm. 2).
``mode=fixed``: one `DPNTKClassifier` at ``solver`` / ``fit_intercept``. Either way the
test set is read once per row (accuracy of the released model).

Options (``--set key=value``), all checked before the first fit: datasets (comma list of
digits, mnist), epsilons (comma list, each > 0), delta (in (0, 1)), mode (search | fixed),
and in fixed mode only solver (ridge | kernel-mean) and fit_intercept (0 | 1).
Rows: ``dataset, epsilon, delta, seed, metric (test_acc), value, paper_value (None),
seconds, relation, mode, candidate (the chosen or fixed setting), noisy_val_score (search:
the released mean validation score), eps_spent, n_rows (rows given to the fit or the
search; a search fits the chosen model on its training part, 80% of them), tuning``.
A search row's ``seconds`` is None: the search's running time grows with its number of
runs, which the guarantee keeps hidden (the file's ``total_seconds`` sums it over all
rows; with these seeded keys nothing here is secret, but a release should not publish it).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np

from benchmarks.common import Timer, release_key
from benchmarks.dp_ntk_regression_tables import _normalize
from benchmarks.registry import RunContext, register

DEFAULTS: dict[str, str] = {
    "datasets": "digits,mnist",
    "epsilons": "1,10",
    "delta": "1e-5",
    "mode": "search",
    "solver": "ridge",
    "fit_intercept": "1",
}
#: The grid of the accounted search (the rule's 2 x 2).
GRID: dict[str, list[Any]] = {
    "fit_options": [{"solver": "ridge"}, {"solver": "kernel-mean"}],
    "fit_intercept": [True, False],
}
TUNING = {
    "search": "privkernels.tuning (accounted): PrivateSearchCV over solver x fit_intercept",
    "fixed": "public data (the other dataset's validation rows; rule dp-ntk-regression-solver-rule.md)",
}


DATASETS = ("digits", "mnist")


def _options(ctx: RunContext) -> dict[str, Any]:
    """The run's settings, every one checked before any data is read (``SystemExit``)."""
    opts = {**DEFAULTS, **ctx.options}
    if opts["mode"] not in TUNING:
        raise SystemExit(f"mode must be 'search' or 'fixed', got {opts['mode']!r}")
    if opts["mode"] == "search" and {"solver", "fit_intercept"} & set(ctx.options):
        raise SystemExit("mode=search searches solver and fit_intercept: do not set them")
    names = [d.strip() for d in opts["datasets"].split(",") if d.strip()]
    if not names or any(n not in DATASETS for n in names):
        raise SystemExit(f"datasets must be a non-empty comma list of {DATASETS}")
    try:
        eps = [float(e) for e in opts["epsilons"].split(",") if e.strip()]
        delta = float(opts["delta"])
    except ValueError:
        raise SystemExit("epsilons and delta must be numbers") from None
    if not eps or not all(math.isfinite(e) and e > 0 for e in eps):
        raise SystemExit("epsilons must be a non-empty comma list of finite numbers > 0")
    if not 0.0 < delta < 1.0:
        raise SystemExit("delta must lie in (0, 1)")
    if opts["solver"] not in ("ridge", "kernel-mean") or opts["fit_intercept"] not in ("0", "1"):
        raise SystemExit("solver must be ridge or kernel-mean, fit_intercept 0 or 1")
    return {**opts, "datasets": names, "epsilons": eps, "delta": delta}


def _load(name: str, data_dir: str | None) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)``, unit-norm rows and int labels."""
    from sklearn.datasets import load_digits

    from privkernels import data

    if name == "digits":
        dg = load_digits()
        x, y = _normalize(dg.data), np.asarray(dg.target)
        tr, te = data.stratified_split_indices(y, test_fraction=0.2, seed=0)
        return x[tr], y[tr], x[te], y[te]
    train = data.load("mnist", data_dir=data_dir, split="train")
    test = data.load("mnist", data_dir=data_dir, split="test")
    return _normalize(train.x), np.asarray(train.y), _normalize(test.x), np.asarray(test.y)


def _estimator(eps: float, delta: float, key: Any, solver: str, intercept: bool) -> Any:
    from privkernels.sklearn import DPNTKClassifier

    return DPNTKClassifier(
        eps, delta, classes=list(range(10)), neighbouring="replace-one", preprocessing=None,
        fit_intercept=intercept, fit_options={"solver": solver}, random_state=key,
    )  # fmt: skip


def _one(
    name: str, xs: tuple[np.ndarray, ...], eps: float, seed: int, opts: dict[str, Any]
) -> dict[str, Any]:
    """One row: fit (search or fixed) on the training rows, read the test set once."""
    from privkernels.search import PrivateSearchCV

    xtr, ytr, xte, yte = xs
    delta, mode = opts["delta"], opts["mode"]
    key = release_key(seed, eps, "regression-solver", name, mode)
    with Timer() as t, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded keys and small-sample notes: the report says
        if mode == "search":
            base = _estimator(eps, delta, None, "ridge", True)
            model = PrivateSearchCV(base, GRID, epsilon=eps, delta=delta, random_state=key)
            model.fit(xtr, ytr)
            cand = json.dumps(model.best_params_, sort_keys=True)
            noisy = float(model.best_score_)
        else:
            intercept = opts["fit_intercept"] == "1"
            model = _estimator(eps, delta, key, opts["solver"], intercept).fit(xtr, ytr)
            cand = json.dumps(
                {"fit_intercept": intercept, "fit_options": {"solver": opts["solver"]}}
            )
            noisy = None
        acc = float(np.mean(model.predict(xte) == yte))
    report = model.privacy_report_
    return {
        "dataset": name, "epsilon": eps, "delta": delta, "seed": seed, "metric": "test_acc",
        "value": acc, "paper_value": None, "seconds": None if mode == "search" else t.seconds,
        "relation": report.neighbouring, "mode": mode, "candidate": cand,
        "noisy_val_score": noisy, "eps_spent": float(report.epsilon), "n_rows": len(ytr),
        "tuning": TUNING[mode],
    }  # fmt: skip


@register(
    "dp-ntk-regression-solver",
    "Replace-one DP NTK regression: solver chosen by PrivateSearchCV (accounted) or fixed",
    tuple(DEFAULTS),
)
def run(ctx: RunContext) -> list[dict[str, Any]]:
    opts = _options(ctx)
    rows = []
    for name in opts["datasets"]:
        xs = _load(name, ctx.data_dir)
        for eps in opts["epsilons"]:
            for seed in ctx.seeds:
                row = _one(name, xs, eps, seed, opts)
                print(f"[dp-ntk-regression-solver] {row}", flush=True)
                rows.append(row)
    return rows
