"""Issue 16: choose how DP-KIP treats a DP-NTK start, on a VALIDATION split.

MNIST training set split by a public seed into 50,000 rows (private training
data) and 10,000 validation rows; the test set is not read. Table 3 quick
settings (ScatterNet, group_norm 27, lr 0.1, clip 1e-3, ridge 1e-3, batch 2000,
2 epochs, feature-space clipping, replace-one), eps 10 in total: 10% to the
DP-NTK start (300 iterations), 90% to DP-SGD. One DP-NTK start is computed
and shared by the variants (they differ only in post-processing); each variant
then runs DP-KIP and trains the Table 3 ConvNet (300 steps) on its support.
The selection itself is not accounted, as in the papers.

    python scripts/dp_kip_dp_ntk_init_validation.py > out.md
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import validation_split  # noqa: E402
from privkernels import data, dp_kip, evaluation  # noqa: E402
from privkernels.dp_kip.dp_ntk_init import DPNTKInit, dp_ntk_start, split_budget  # noqa: E402
from privkernels.dp_kip.smoothing import smooth_images, smooth_updates  # noqa: E402
from privkernels.privacy import Budget  # noqa: E402

EPS, DELTA, SEED = 10.0, 1e-5, 0


def main() -> None:
    root = os.environ.get("PRIVKERNELS_DATA")
    tr = data.load("mnist", data_dir=root, split="train")
    fit_idx, val_idx = validation_split(len(tr.y))
    x, y = 2 * tr.x[fit_idx] - 1, tr.y[fit_idx]
    xv, yv = 2 * tr.x[val_idx] - 1, tr.y[val_idx]
    spec = DPNTKInit()
    kip_budget, ntk_budget = split_budget(Budget(EPS, DELTA), spec)
    assert kip_budget is not None and ntk_budget is not None  # a budget was given
    labels = dp_kip.support_labels(10, 10)
    t0 = time.perf_counter()
    start, _ = dp_ntk_start(jax.random.key(SEED), x, y, n_classes=10, labels=labels,
                            budget=ntk_budget, spec=spec)  # fmt: skip
    print(f"DP-NTK start: {time.perf_counter() - t0:.0f} s", flush=True)
    rows: list[tuple[str, float | None, float, float]] = [
        ("DP-NTK start only (no DP-KIP)", None, _convnet(start, labels, xv, yv), 0.0)
    ]
    variants = {
        "adam(0.1)": optax.adam(0.1),
        "adam(0.1) + smooth_updates(0.5)": optax.chain(optax.adam(0.1), smooth_updates(0.5)),
        "adam(0.1) + smooth_updates(1.0)": optax.chain(optax.adam(0.1), smooth_updates(1.0)),
    }
    for name, opt in variants.items():
        t0 = time.perf_counter()
        res = dp_kip.fit(
            jax.random.key(SEED + 1), x, y, epsilon=kip_budget.epsilon, delta=kip_budget.delta,
            n_classes=10, kernel="scatternet", kernel_options={"group_norm": 27},
            support_per_class=10, batch_size=2000, epochs=2, clip_norm=1e-3,
            relative_reg=1e-3, clip_space="feature", optimizer=opt,
            init=lambda k, m, shape: jnp.asarray(start), progress=False,
        )  # fmt: skip
        sec = time.perf_counter() - t0
        krr = dp_kip.accuracy(res, xv, yv)
        rows.append((name, krr, _convnet(res.support_x, labels, xv, yv), sec))
        print(rows[-1], flush=True)
        if name == "adam(0.1)":
            for s in (0.5, 1.0):
                sm = smooth_images(res.support_x, s)
                k2 = dp_kip.accuracy(_with_support(res, sm), xv, yv)
                rows.append((f"adam(0.1), then smooth_images({s})", k2,
                             _convnet(sm, labels, xv, yv), sec))  # fmt: skip
                print(rows[-1], flush=True)
    print("\n| variant | KRR val acc | ConvNet val acc | DP-KIP seconds |\n|---|---|---|---|")
    for name, krr_or_none, conv, sec in rows:
        k = "-" if krr_or_none is None else f"{100 * krr_or_none:.2f}"
        print(f"| {name} | {k} | {100 * conv:.2f} | {sec:.0f} |")


def _with_support(res, xs):
    import dataclasses

    return dataclasses.replace(res, support_x=np.asarray(xs))


def _convnet(xs, ys, xv, yv) -> float:
    mod, params = evaluation.train_convnet(jax.random.key(1000 + SEED), np.asarray(xs), ys, 10,
                                           steps=300)  # fmt: skip
    return evaluation.convnet_accuracy(mod, params, xv, yv)


if __name__ == "__main__":
    main()
