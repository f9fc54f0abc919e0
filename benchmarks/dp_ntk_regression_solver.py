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

Options (``--set key=value``): datasets (comma list of digits, mnist), epsilons (comma
list), delta, mode (search | fixed), solver (ridge | kernel-mean), fit_intercept (0 | 1).
Rows: ``dataset, epsilon, seed, metric (test_acc), value, paper_value (None), seconds,
relation, mode, candidate (the chosen or fixed setting), noisy_val_score (search: the
released mean validation score), eps_spent, n_train, tuning``.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

from benchmarks.common import Timer, release_key
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


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows flattened to ``(n, d)`` float32 and scaled to unit L2 norm."""
    x = np.asarray(x, np.float32).reshape(len(x), -1)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _load(name: str, data_dir: str | None) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)``, unit-norm rows and int labels."""
    from sklearn.datasets import load_digits

    from privkernels import data

    if name == "digits":
        dg = load_digits()
        x, y = _unit(dg.data), np.asarray(dg.target)
        tr, te = data.stratified_split_indices(y, test_fraction=0.2, seed=0)
        return x[tr], y[tr], x[te], y[te]
    if name != "mnist":
        raise SystemExit(f"dp-ntk-regression-solver: datasets are digits and mnist, got {name!r}")
    train = data.load("mnist", data_dir=data_dir, split="train")
    test = data.load("mnist", data_dir=data_dir, split="test")
    return _unit(train.x), np.asarray(train.y), _unit(test.x), np.asarray(test.y)


def _estimator(eps: float, delta: float, key: Any, solver: str, intercept: bool) -> Any:
    from privkernels.sklearn import DPNTKClassifier

    return DPNTKClassifier(
        eps, delta, classes=list(range(10)), neighbouring="replace-one", preprocessing=None,
        fit_intercept=intercept, fit_options={"solver": solver}, random_state=key,
    )  # fmt: skip


def _one(
    name: str, xs: tuple[np.ndarray, ...], eps: float, seed: int, opts: dict[str, str]
) -> dict[str, Any]:
    """One row: fit (search or fixed) on the training rows, read the test set once."""
    from privkernels.search import PrivateSearchCV

    xtr, ytr, xte, yte = xs
    delta, mode = float(opts["delta"]), opts["mode"]
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
        "dataset": name, "epsilon": eps, "seed": seed, "metric": "test_acc", "value": acc,
        "paper_value": None, "seconds": t.seconds, "relation": report.neighbouring, "mode": mode,
        "candidate": cand, "noisy_val_score": noisy, "eps_spent": float(report.epsilon),
        "n_train": len(ytr), "tuning": TUNING[mode],
    }  # fmt: skip


@register(
    "dp-ntk-regression-solver",
    "Replace-one DP NTK regression: solver chosen by PrivateSearchCV (accounted) or fixed",
    tuple(DEFAULTS),
)
def run(ctx: RunContext) -> list[dict[str, Any]]:
    opts = {**DEFAULTS, **ctx.options}
    if opts["mode"] not in TUNING:
        raise SystemExit(f"mode must be 'search' or 'fixed', got {opts['mode']!r}")
    eps_list = [float(e) for e in opts["epsilons"].split(",") if e.strip()]
    rows = []
    for name in [d.strip() for d in opts["datasets"].split(",") if d.strip()]:
        xs = _load(name, ctx.data_dir)
        for eps in eps_list:
            for seed in ctx.seeds:
                row = _one(name, xs, eps, seed, opts)
                print(f"[dp-ntk-regression-solver] {row}", flush=True)
                rows.append(row)
    return rows
