"""The README's main job: all three methods on scikit-learn's ``digits``.

No download, a few minutes on 2 CPU cores. Prints one table (method, epsilon,
delta, neighbouring relation, accuracy, non-private accuracy, seconds) and
writes the plots: DP-NTK samples, DP-KIP distilled images, DP NTK regression
accuracy vs epsilon.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import markdown_table, release_key, save_image_grid, write_results

COLUMNS = (
    "method",
    "epsilon",
    "delta",
    "neighbouring",
    "accuracy",
    "non_private_accuracy",
    "seconds",
)


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from privkernels import data

    train, test = data.load("digits", split="train"), data.load("digits", split="test")
    return train.x, train.y, test.x, test.y


def _progress(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def demo_dp_ntk(key: Any, xtr, ytr, xte, yte, *, epsilon: float, delta: float, out: Path) -> dict:
    """DP-NTK: fc_1l e-NTK embedding released once, conditional generator trained on it."""
    import jax

    from privkernels import dp_ntk, features
    from privkernels.evaluation import evaluate_images

    network = features.fc_1l(64, out_features=10, layer_norm=True)
    settings = dict(
        network=network,
        n_classes=10,
        iterations=300,
        batch_size=200,
        learning_rate=0.01,
        progress=False,
    )
    k_fit, k_sample, k_grid = jax.random.split(key, 3)

    def run(eps: float | None) -> tuple[float, Any]:
        result = dp_ntk.fit(k_fit, xtr, ytr, epsilon=eps, delta=delta, **settings)
        x_syn, y_syn = dp_ntk.sample(k_sample, result, 2000)
        scores = evaluate_images(x_syn, y_syn, xte, yte, seed=0, classifiers=("logreg",))
        return float(scores["logreg"]), result

    t0 = time.perf_counter()
    acc, result = run(epsilon)
    seconds = time.perf_counter() - t0
    acc_np, _ = run(None)
    labels = np.repeat(np.arange(10), 6)
    gx, gy = dp_ntk.sample(k_grid, result, len(labels), labels=labels)
    save_image_grid(
        out / "dp_ntk_samples.png", gx, gy, title=f"DP-NTK samples, ({epsilon:g}, {delta:g})-DP"
    )
    return dict(
        method="DP-NTK (fc_1l e-NTK, generator; LogReg on synthetic)",
        epsilon=epsilon,
        delta=delta,
        neighbouring=result.report.neighbouring,
        accuracy=acc,
        non_private_accuracy=acc_np,
        seconds=seconds,
        report=result.report.to_dict(),
    )


def demo_dp_kip(key: Any, xtr, ytr, xte, yte, *, epsilon: float, delta: float, out: Path) -> dict:
    """DP-KIP: 5 support images per class with the infinite FC-NTK kernel."""
    from privkernels import dp_kip

    xtr, xte = xtr * 2.0 - 1.0, xte * 2.0 - 1.0
    settings: dict[str, Any] = dict(
        kernel="fc_ntk",
        support_per_class=5,
        delta=delta,
        clip_norm=0.1,
        batch_size=100,
        epochs=6,
        learning_rate=0.1,
        n_classes=10,
        progress=False,
    )

    t0 = time.perf_counter()
    result = dp_kip.fit(key, xtr, ytr, epsilon=epsilon, **settings)
    acc = dp_kip.accuracy(result, xte, yte)
    seconds = time.perf_counter() - t0
    baseline = dp_kip.fit(key, xtr, ytr, epsilon=None, **settings)
    acc_np = dp_kip.accuracy(baseline, xte, yte)
    support = np.asarray(result.support_x)
    save_image_grid(
        out / "dp_kip_support.png",
        support,
        np.asarray(result.support_y).argmax(-1)
        if np.ndim(result.support_y) == 2
        else result.support_y,
        title=f"DP-KIP support set, ({epsilon:g}, {delta:g})-DP",
    )
    return dict(
        method="DP-KIP (FC-NTK, 5 img/class; KRR)",
        epsilon=epsilon,
        delta=delta,
        neighbouring=result.report.neighbouring,
        accuracy=float(acc),
        non_private_accuracy=float(acc_np),
        seconds=seconds,
        report=result.report.to_dict(),
    )


def demo_dp_ntk_regression(
    key: Any, xtr, ytr, xte, yte, *, epsilon: float, delta: float, out: Path
) -> dict:
    """DP NTK regression: quadratic NTK, Gaussian-sampling kernel, truncated-Laplace inputs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privkernels import dp_ntk_regression as reg

    def flat_unit(x: np.ndarray) -> np.ndarray:  # per-record map: data-independent
        x = x.reshape(len(x), -1)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    xtr, xte = flat_unit(xtr), flat_unit(xte)

    def acc(model: Any) -> float:
        return float(np.mean(np.asarray(reg.predict_labels(model, xte)) == yte))

    import jax

    baseline = reg.fit(key, xtr, ytr, epsilon=None, reg=10.0, fit_intercept=False,
                       neighbouring="beta-close")  # fmt: skip
    acc_np = acc(baseline)
    curve = []
    for i, eps in enumerate(sorted({0.3, 1.0, 3.0, 10.0, epsilon})):
        t0 = time.perf_counter()
        # one key per budget; eps_alpha = eps / 2 >= 1 is outside the theorem: marked unproven
        model = reg.fit(
            jax.random.fold_in(key, i),
            xtr,
            ytr,
            epsilon=eps,
            delta=delta,
            kernel_shift=5.0,
            reg=5.0,
            fit_intercept=False,
            allow_unproven=True,
            neighbouring="beta-close",  # the paper's Alg. 2, by name
        )
        curve.append((eps, acc(model), time.perf_counter() - t0, model))
    fig, ax = plt.subplots(figsize=(4.5, 3))
    proven = [(e, a) for e, a, _, m in curve if m.report.proven]
    unproven = [(e, a) for e, a, _, m in curve if not m.report.proven]
    ax.plot([math.log10(e) for e, _ in proven], [a for _, a in proven], "-o", label="private")
    if unproven:
        ax.plot(
            [math.log10(e) for e, _ in unproven],
            [a for _, a in unproven],
            "x",
            color="C3",
            label="eps_alpha >= 1 (unproven)",
        )
    ax.axhline(acc_np, ls="--", color="gray", label="non-private")
    ax.set_xlabel("log10(epsilon)")
    ax.set_ylabel("test accuracy")
    ax.set_title("DP NTK regression on digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "dp_ntk_regression_accuracy.png", dpi=80)
    plt.close(fig)
    eps, a, seconds, model = next(c for c in curve if c[0] == epsilon)
    return dict(
        method="DP NTK regression (quadratic NTK, kernel_shift=5)",
        epsilon=eps,
        delta=delta,
        neighbouring=model.report.neighbouring,
        accuracy=a,
        non_private_accuracy=acc_np,
        seconds=seconds,
        report=model.report.to_dict(),
        curve=[(e, acc_e) for e, acc_e, *_ in curve],
    )


def run_demo(*, out: Path, epsilon: float = 1.0, delta: float = 1e-5, seed: int = 0) -> int:
    """Run the three methods; print the table; write JSON, Markdown and PNGs to ``out``."""
    import jax

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = _digits()
    keys = jax.random.split(release_key(seed, epsilon, "demo"), 3)
    rows = []
    for name, fn, k in (
        ("DP-NTK", demo_dp_ntk, keys[0]),
        ("DP-KIP", demo_dp_kip, keys[1]),
        ("DP NTK regression", demo_dp_ntk_regression, keys[2]),
    ):
        _progress(f"{name} at epsilon={epsilon:g}, delta={delta:g} ...")
        t0 = time.perf_counter()
        rows.append(fn(k, xtr, ytr, xte, yte, epsilon=epsilon, delta=delta, out=out))
        _progress(f"{name} done in {time.perf_counter() - t0:.0f} s")
    table = [{c: r[c] for c in COLUMNS} for r in rows]
    print()
    print(markdown_table(table, COLUMNS))
    write_results(
        out,
        "demo",
        rows,
        meta={
            "epsilon": epsilon,
            "delta": delta,
            "seed": seed,
            "data": "sklearn digits (1347 train / 450 test)",
        },
        columns=COLUMNS,
        command=(
            f"python -m benchmarks demo --out {out} --epsilon {epsilon:g} --delta {delta:g} "
            f"--seed {seed}"
        ),
    )
    print(
        f"wrote {out}/demo.json, demo.md, dp_ntk_samples.png, dp_kip_support.png, "
        "dp_ntk_regression_accuracy.png"
    )
    return 0
