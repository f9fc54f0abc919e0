"""Peers side by side (issue 16, item 4): privkernels against what a user would pick instead.

``python -m benchmarks run peers`` (needs ``pip install -e .[peers]``; a peer
whose library is missing is a row with ``status: missing <library>``, never a
silent gap). Every row is one private release on the same data at the same
epsilon, evaluated on the real test split; ``library`` and ``version`` name
what produced it. The guarantees are not all of one kind: ``delta`` is 1e-5
except for diffprivlib (pure epsilon), and ``relation`` names the neighbouring
relation each library's analysis covers. Neither relation implies the other
at the same epsilon: an add-remove guarantee gives a replace-one one at twice
the epsilon, and a replace-one guarantee (n public) gives no add-remove bound.

MNIST (``datasets=mnist``; quick: a seeded public subset of ``max_train``
training rows, the full test set):

* ``privkernels DP-KIP`` -- ScatterNet kernel, 10 images/class, KRR test
  accuracy (inputs ``2 x - 1``; defaults of `privkernels.dp_kip.fit`).
* ``privkernels DP NTK regression`` -- ``neighbouring="replace-one"`` on
  unit-norm ScatterNet features (the Fig. 1 representation).
* ``diffprivlib LogisticRegression`` / ``GaussianNB`` -- on the same unit-norm
  ScatterNet features (``data_norm=1``; NB bounds ``[-1, 1]``), and on pixels
  scaled by the public ``1 / 28`` (norm <= 1; NB bounds ``[0, 1]``). Pure
  epsilon-DP (delta = 0), multi-class by one-vs-rest with ``epsilon / c`` each.
* ``DP-SGD`` -- a one-hidden-layer MLP (256 tanh units) on pixels, trained
  with a small optax DP-SGD on the privacy core (Poisson batches of expected
  size 256, clip 1, Adam 1e-3, ``dpsgd_epochs`` epochs, PLD, replace-one). These
  settings are common literature defaults fixed before any run, not tuned here.

Adult (``datasets=adult``; the Table 4 protocol: 12 classifiers trained on the
release, mean ROC-AUC and PR-AUC on the real test split):

* ``privkernels DP-NTK`` -- the tabular generator of ``dp-ntk-table4`` (label
  proportions released, ``split=(0.9, 0.1)``).
* ``smartnoise MST`` (and ``AIM`` with ``--set methods=...,aim``; slow on 2 cores)
  -- on the table decoded through its public schema, numeric columns cut into
  ``bins`` equal-width bins of their public bounds (log scale where the schema
  says so), sampled rows mapped back to bin centres and encoded by the same
  schema.
* ``diffprivlib`` LR / NB as private classifiers on the encoded rows (scaled by
  the public ``1 / sqrt(14)``: 14 attributes, each in ``[0, 1]`` or one-hot).

Options: ``datasets``, ``epsilons``, ``methods`` (comma lists of the method
keys below), ``max_train``, ``max_test``, ``dpsgd_epochs``, ``kip_epochs``,
``bins``.
"""

from __future__ import annotations

import importlib.metadata
import math
import warnings
from typing import Any

import numpy as np

from benchmarks.common import Timer, public_key, release_key, resolve_data_dir
from benchmarks.registry import RunContext, register

DELTA = 1e-5

OPTIONS = (
    "datasets", "epsilons", "methods", "max_train", "max_test", "dpsgd_epochs", "kip_epochs",
    "bins",
)  # fmt: skip

#: diffprivlib 0.6.6: LogisticRegression is Chaudhuri et al.'s objective perturbation
#: (replace one record; epsilon / c per one-vs-rest class). GaussianNB composes over classes
#: in parallel (add-remove style) but forces its noisy class counts to sum to the true n, so
#: it is epsilon-DP under neither relation as stated (n is released; a record changing class
#: moves two classes' statistics).
_DPL_RELATION = {
    "dpl_lr": "replace-one (Chaudhuri et al.)",
    "dpl_nb": "see note: neither relation exactly (library's counts sum to n)",
}

MNIST_METHODS = ("dp_kip", "dp_ntk_regression", "dp_ntk", "dpl_lr", "dpl_nb", "dpsgd")
ADULT_METHODS = ("dp_ntk", "mst", "dpl_lr", "dpl_nb")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _list(ctx: RunContext, name: str, default: list[Any], cast: Any = str) -> list[Any]:
    if name not in ctx.options:
        return default
    return [cast(v) for v in ctx.options[name].split(",") if v.strip()]


def _int(ctx: RunContext, name: str, default: int) -> int:
    return int(ctx.options.get(name, default))


@register("peers", "privkernels against diffprivlib, smartnoise-synth and DP-SGD", OPTIONS)
def peers(ctx: RunContext) -> list[dict[str, Any]]:
    datasets = _list(ctx, "datasets", ["mnist", "adult"])
    epsilons = _list(ctx, "epsilons", [1.0, 10.0], float)
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        if ds not in ("mnist", "adult"):
            raise SystemExit(f"peers: datasets are mnist and adult, got {ds!r}")
        run = _mnist if ds == "mnist" else _adult
        default = MNIST_METHODS if ds == "mnist" else ADULT_METHODS
        methods = [m for m in _list(ctx, "methods", list(default)) if m in default + ("aim",)]
        loaded = (_load_mnist if ds == "mnist" else _load_adult)(ctx)
        for eps in epsilons:
            for seed in ctx.seeds:
                for method in methods:
                    for row in run(ctx, loaded, method, eps, seed):
                        row = {"dataset": ds, "epsilon": eps, "seed": seed, **row}
                        print(row, flush=True)
                        rows.append(row)
    return rows


# ------------------------------------------------------------------ MNIST
def _load_mnist(ctx: RunContext) -> dict[str, Any]:
    from privkernels import data
    from privkernels.features import scatternet_features

    root = resolve_data_dir(ctx.data_dir)
    tr = data.load("mnist", data_dir=root, split="train")
    te = data.load("mnist", data_dir=root, split="test")
    n = min(_int(ctx, "max_train", 20000 if ctx.profile == "quick" else len(tr.y)), len(tr.y))
    idx = np.sort(np.random.default_rng(2026).permutation(len(tr.y))[:n])  # public subset
    x, y = tr.x[idx].astype(np.float32), tr.y[idx].astype(np.int32)
    xt, yt = te.x.astype(np.float32), te.y.astype(np.int32)

    def unit(f: np.ndarray) -> np.ndarray:  # per-record map to the unit sphere
        f = np.asarray(f, np.float64).reshape(len(f), -1)
        return (f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    return dict(
        x=x, y=y, xt=xt, yt=yt, c=int(tr.n_classes),
        feats=unit(scatternet_features(x, chunk_size=256)),
        feats_t=unit(scatternet_features(xt, chunk_size=256)),
    )  # fmt: skip


def _mnist(
    ctx: RunContext, d: dict[str, Any], method: str, eps: float, seed: int
) -> list[dict[str, Any]]:
    key = release_key(seed, eps, "peers", "mnist", method)
    if method == "dp_kip":
        return [_mnist_dp_kip(ctx, d, key, eps)]
    if method == "dp_ntk_regression":
        return [_mnist_regression(d, key, eps)]
    if method == "dp_ntk":
        return [_mnist_dp_ntk(d, key, eps, seed)]
    if method == "dpsgd":
        return [_mnist_dpsgd(ctx, d, key, eps)]
    out = []
    flat = lambda a: a.reshape(len(a), -1) / 28.0  # noqa: E731  public scale: norm <= 1
    reps = {
        "scatternet": (d["feats"], d["feats_t"], (-1.0, 1.0)),
        "pixels": (flat(d["x"]), flat(d["xt"]), (0.0, 1.0 / 28.0)),
    }
    for rep, (xtr, xte, bounds) in reps.items():
        out.append(_diffprivlib(method, xtr, d["y"], xte, d["yt"], eps, seed, bounds, rep))
    return out


def _row(method: str, library: str, metric: str, value: float, seconds: float, **kw: Any) -> dict:
    dist = library.split()[0]
    return {
        "method": method, "library": library, "version": _version(dist), "metric": metric,
        "value": value, "seconds": seconds, **kw,
    }  # fmt: skip


def _mnist_dp_kip(ctx: RunContext, d: dict[str, Any], key: Any, eps: float) -> dict:
    from privkernels import dp_kip

    epochs = _int(ctx, "kip_epochs", 10)  # dp_kip.fit's default
    with Timer() as t:
        res = dp_kip.fit(key, 2 * d["x"] - 1, d["y"], epsilon=eps, delta=DELTA, n_classes=d["c"],
                         kernel="scatternet", epochs=epochs, progress=False)  # fmt: skip
        acc = dp_kip.accuracy(res, 2 * d["xt"] - 1, d["yt"])
    return _row("DP-KIP ScatterNet, 10 img/class, KRR", "privkernels", "test_acc", acc,
                t.seconds, relation=res.report.neighbouring, delta=res.report.delta,
                note=f"{epochs} epochs, batch 500")  # fmt: skip


def _mnist_regression(d: dict[str, Any], key: Any, eps: float) -> dict:
    from privkernels import dp_ntk_regression as R

    with Timer() as t:
        model = R.fit(key, d["feats"], d["y"], epsilon=eps, delta=DELTA, n_classes=d["c"],
                      neighbouring="replace-one", progress=False)  # fmt: skip
        acc = float(np.mean(R.predict_labels(model, d["feats_t"]) == d["yt"]))
    return _row("DP NTK regression (replace-one), ScatterNet features", "privkernels",
                "test_acc", acc, t.seconds, relation="replace-one", delta=DELTA)  # fmt: skip


def _mnist_dp_ntk(d: dict[str, Any], key: Any, eps: float, seed: int) -> dict:
    import jax

    from privkernels import dp_ntk
    from privkernels.evaluation import evaluate_images

    with Timer() as t:
        res = dp_ntk.fit(key, d["x"], d["y"], epsilon=eps, delta=DELTA, n_classes=d["c"],
                         iterations=300, batch_size=500, progress=False,
                         public_key=public_key(seed, "peers", "mnist", "dp_ntk"))  # fmt: skip
        xs, ys = dp_ntk.sample(jax.random.key(seed + 10_000), res, 6000)
        ev = evaluate_images(xs, ys, d["xt"], d["yt"], classifiers=["logreg"], seed=seed)
    return _row("DP-NTK generator -> logistic regression (6000 samples)", "privkernels",
                "test_acc", float(ev["logreg"]), t.seconds, relation="replace-one",
                delta=DELTA, note="300 iterations, batch 500")  # fmt: skip


def _diffprivlib(
    method: str, x: np.ndarray, y: np.ndarray, xt: np.ndarray, yt: np.ndarray, eps: float,
    seed: int, bounds: tuple[float, float], rep: str,
) -> dict:  # fmt: skip
    name = "LogisticRegression" if method == "dpl_lr" else "GaussianNB"
    try:
        from diffprivlib import models
    except ImportError:
        return _row(f"{name} ({rep})", "diffprivlib", "test_acc", math.nan, 0.0,
                    status="missing diffprivlib")  # fmt: skip
    with Timer() as t, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "dpl_lr":
            clf = models.LogisticRegression(epsilon=eps, data_norm=1.0, random_state=seed,
                                            max_iter=200)  # fmt: skip
        else:
            lo, hi = bounds
            clf = models.GaussianNB(epsilon=eps, bounds=(np.full(x.shape[1], lo),
                                    np.full(x.shape[1], hi)), random_state=seed)  # fmt: skip
        clf.fit(x, y)
        acc = float(np.mean(clf.predict(xt) == yt))
    return _row(f"{name} ({rep})", "diffprivlib", "test_acc", acc, t.seconds,
                relation=_DPL_RELATION[method], delta=0.0)  # fmt: skip


def _mnist_dpsgd(ctx: RunContext, d: dict[str, Any], key: Any, eps: float) -> dict:
    from benchmarks.peers_dpsgd import train_mlp

    epochs = _int(ctx, "dpsgd_epochs", 15)
    with Timer() as t:
        predict, plan, steps = train_mlp(key, d["x"].reshape(len(d["x"]), -1), d["y"], d["c"],
                                         epsilon=eps, delta=DELTA, epochs=epochs)  # fmt: skip
        acc = float(np.mean(predict(d["xt"].reshape(len(d["xt"]), -1)) == d["yt"]))
    return _row("DP-SGD MLP(256, tanh) on pixels", "optax", "test_acc", acc, t.seconds,
                relation=plan.neighbouring, delta=DELTA,
                note=f"{steps} steps, q={plan.sampling_rate:.4g}, sigma={plan.noise_multiplier:.3g}, "
                "accounting: privkernels PLD")  # fmt: skip


# ------------------------------------------------------------------ adult
def _load_adult(ctx: RunContext) -> dict[str, Any]:
    from privkernels import data

    root = resolve_data_dir(ctx.data_dir)
    tr = data.load("adult", data_dir=root, split="train")
    te = data.load("adult", data_dir=root, split="test")
    quick = ctx.profile == "quick"
    return dict(
        train=tr, test=te, max_train=_int(ctx, "max_train", 5000) if quick else None,
        max_test=_int(ctx, "max_test", 5000) if quick else None,
    )  # fmt: skip


def _adult(
    ctx: RunContext, d: dict[str, Any], method: str, eps: float, seed: int
) -> list[dict[str, Any]]:
    from privkernels.evaluation import evaluate_tabular

    tr, te = d["train"], d["test"]
    key = release_key(seed, eps, "peers", "adult", method)
    if method in ("dpl_lr", "dpl_nb"):
        return [_adult_classifier(method, tr, te, eps, seed)]
    with Timer() as t:
        if method == "dp_ntk":
            xs, ys, lib, version, note = _adult_dp_ntk(key, tr, eps, seed)
            relation = "replace-one"
        else:
            from benchmarks.peers_smartnoise import synthesize

            bins = _int(ctx, "bins", 16)
            try:
                xs, ys = synthesize(method, tr, eps, DELTA, seed=seed, bins=bins)
            except ImportError as err:
                return [_row(method.upper(), "smartnoise-synth", "roc_auc", math.nan, 0.0,
                             status=f"missing {err.name}")]  # fmt: skip
            lib, note = "smartnoise-synth", f"{bins} bins per numeric column (public bounds)"
            relation = "add-remove (private-pgm's analysis); n rows sampled, so n is released"
        ev = evaluate_tabular(xs, ys, te.x, te.y, seed=seed, max_train=d["max_train"],
                              max_test=d["max_test"])  # fmt: skip
    label = "DP-NTK tabular generator" if method == "dp_ntk" else method.upper()
    m = ev["mean"]
    return [
        _row(label, lib, metric, float(m[metric]), t.seconds, relation=relation,
             delta=DELTA, note=f"12-classifier mean; {note}")
        for metric in ("roc_auc", "pr_auc")
    ]  # fmt: skip


def _adult_dp_ntk(key: Any, tr: Any, eps: float, seed: int) -> tuple[Any, ...]:
    import jax

    from benchmarks.dp_ntk_tables import TABULAR_QUICK, TABULAR_SETTINGS, _network
    from privkernels import dp_ntk
    from privkernels.generators import TabularGenerator, column_groups_from_schema

    s = {**TABULAR_SETTINGS["adult"], **TABULAR_QUICK["adult"]}
    dim = tr.x.shape[1]
    gen = TabularGenerator(n_classes=tr.n_classes, n_features=dim,
                           groups=column_groups_from_schema(tr.schema, dim),
                           hidden=(4 * dim, 2 * dim))  # fmt: skip
    res = dp_ntk.fit(key, tr.x, tr.y, epsilon=eps, delta=DELTA,
                     network=_network(s["net"], tr.n_classes), generator=gen,
                     iterations=s["iterations"], batch_size=s["batch_size"], learning_rate=0.01,
                     n_classes=tr.n_classes, d_code=s["d_code"], label_mode="released",
                     split=(0.9, 0.1), progress=False,
                     public_key=public_key(seed, "peers", "adult", "dp_ntk"))  # fmt: skip
    xs, ys = dp_ntk.sample(jax.random.key(seed + 10_000), res, min(len(tr.x), 20000))
    return xs, ys, "privkernels", _version("privkernels"), f"{s['iterations']} iterations"


def _adult_classifier(method: str, tr: Any, te: Any, eps: float, seed: int) -> dict:
    from sklearn.metrics import average_precision_score, roc_auc_score

    name = "LogisticRegression" if method == "dpl_lr" else "GaussianNB"
    try:
        from diffprivlib import models
    except ImportError:
        return _row(name, "diffprivlib", "roc_auc", math.nan, 0.0, status="missing diffprivlib")
    scale = 1.0 / math.sqrt(14.0)  # 14 attributes, each in [0, 1] or one-hot: norm <= sqrt(14)
    x, xt = tr.x * scale, te.x * scale
    with Timer() as t, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "dpl_lr":
            clf = models.LogisticRegression(epsilon=eps, data_norm=1.0, random_state=seed)
        else:
            dim = x.shape[1]
            clf = models.GaussianNB(epsilon=eps, bounds=(np.zeros(dim), np.full(dim, scale)),
                                    random_state=seed)  # fmt: skip
        clf.fit(x, tr.y)
        score = clf.predict_proba(xt)[:, 1]
    roc, pr = roc_auc_score(te.y, score), average_precision_score(te.y, score)
    return _row(f"{name} (private classifier; ROC-AUC {roc:.3f}, PR-AUC {pr:.3f})",
                "diffprivlib", "roc_auc", float(roc), t.seconds, relation=_DPL_RELATION[method],
                delta=0.0, pr_auc=float(pr))  # fmt: skip
