"""Issue 16: choose the Table 3 ConvNet's training protocol on a VALIDATION split.

The ConvNet is trained on a DP release (post-processing, no privacy cost), so
how it is trained is an evaluation choice: number of steps, weight decay and
data augmentation of the 100 distilled images. Here it is chosen without the
test set. MNIST training set split by a public seed (2026) into 50,000 rows
(private training data) and 10,000 validation rows, as in
``dp_kip_dp_ntk_init_validation.py``. Stage 1 (``--supports``) distils one
support set per epsilon with the shipped recipe (``init="dp_ntk"``,
``smooth_updates(1.0)``, Table 3 quick settings, replace-one) and saves it;
stage 2 (default) trains the ConvNet with each protocol on each saved support
(ConvNet seeds 0 and 1) and prints validation accuracy. The selection is not
accounted, as in the papers.

    python scripts/dp_kip_convnet_protocol_validation.py --supports DIR
    python scripts/dp_kip_convnet_protocol_validation.py DIR [--real] [--only TEXT[,TEXT]] > out.md

``--dataset fashion_mnist`` (both stages) runs the same on Fashion-MNIST (the
same split seed), ``--eps 10`` (stage 1) distils for that epsilon only, and
``--init-iterations N`` / ``--init-fraction F`` (stage 1) change the DP-NTK
start's generator iterations (300) and budget share (0.1); the file names
then carry them.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import numpy as np
import optax

from privkernels import data, dp_kip, evaluation
from privkernels.dp_kip.smoothing import smooth_updates

DELTA, SEED, EPSILONS = 1e-5, 0, (10.0, 1.0)


def split(dataset: str = "mnist") -> tuple[np.ndarray, ...]:
    tr = data.load(dataset, data_dir=os.environ.get("PRIVKERNELS_DATA"), split="train")
    perm = np.random.default_rng(2026).permutation(len(tr.y))
    fit_idx, val_idx = np.sort(perm[10_000:]), np.sort(perm[:10_000])
    return 2 * tr.x[fit_idx] - 1, tr.y[fit_idx], 2 * tr.x[val_idx] - 1, tr.y[val_idx]


def supports(
    out: str, dataset: str = "mnist", epsilons: tuple[float, ...] = EPSILONS,
    init: dp_kip.DPNTKInit | None = None,
) -> None:  # fmt: skip
    x, y, xv, yv = split(dataset)
    spec = init or dp_kip.DPNTKInit()
    tag = "" if init is None else f"-f{spec.budget_fraction:g}-it{spec.iterations}"
    for eps in epsilons:
        t0 = time.perf_counter()
        res = dp_kip.fit(
            jax.random.key(SEED), x, y, epsilon=eps, delta=DELTA, n_classes=10,
            kernel="scatternet", kernel_options={"group_norm": 27}, support_per_class=10,
            batch_size=2000, epochs=2, clip_norm=1e-3, relative_reg=1e-3,
            clip_space="feature", neighbouring="replace-one", init=spec,
            optimizer=optax.chain(optax.adam(0.1), smooth_updates(1.0)), progress=False,
        )  # fmt: skip
        krr = dp_kip.accuracy(res, xv, yv)
        np.savez(f"{out}/support-eps{eps:g}{tag}.npz", x=np.asarray(res.support_x),
                 y=np.asarray(res.support_y), krr_val=krr)  # fmt: skip
        print(f"eps {eps:g}: KRR val {100 * krr:.2f}, {time.perf_counter() - t0:.0f} s, "
              f"report eps {res.report.epsilon:.3f}", flush=True)  # fmt: skip


#: name -> train_convnet keyword arguments. (A ConvNet step takes about 0.27 s on
#: 2 CPU cores, so the search is small: augmentation on/off, shift only vs affine,
#: 150 / 300 / 600 steps, AdamW weight decay.)
PROTOCOLS = {
    "adam 300 steps (before)": {"steps": 300},
    "shift 2px, 300 steps": {"steps": 300, "augment": evaluation.Augment(shift=2)},
    "affine (2px, 15deg, 10%), 300 steps": {
        "steps": 300, "augment": evaluation.Augment(shift=2, rotate=15.0, scale=0.1)},
    "affine (2px, 15deg, 10%), 600 steps": {
        "steps": 600, "augment": evaluation.Augment(shift=2, rotate=15.0, scale=0.1)},
    "affine (2px, 25deg, 20%), 300 steps": {
        "steps": 300, "augment": evaluation.Augment(shift=2, rotate=25.0, scale=0.2)},
    "shift 1px, 300 steps": {"steps": 300, "augment": evaluation.Augment(shift=1)},
    "affine (1px, 5deg, 5%), 300 steps": {
        "steps": 300, "augment": evaluation.Augment(shift=1, rotate=5.0, scale=0.05)},
    "adam 150 steps": {"steps": 150},
    "adam 600 steps": {"steps": 600},
    "adamw 300 steps, wd 0.01": {"steps": 300, "weight_decay": 0.01},
    "adamw 300 steps, wd 0.1": {"steps": 300, "weight_decay": 0.1},
}  # fmt: skip
SEEDS = (0, 1)


def protocols(out: str, real: bool = False, only: str = "", dataset: str = "mnist") -> None:
    """ConvNet validation accuracy of each protocol on each saved support (seeds `SEEDS`).

    ``real``: a last column (not in the mean, not private) trains on 10 real
    images per class of the fit split, the ceiling such a small set is up against.
    """
    x, y, xv, yv = split(dataset)
    sets = {f: dict(np.load(f"{out}/{f}")) for f in sorted(os.listdir(out)) if f.endswith(".npz")}
    if real:
        idx = np.concatenate([np.flatnonzero(y == c)[:10] for c in range(10)])
        sets["real 10/class (not private)"] = {"x": x[idx], "y": y[idx]}
    print("| protocol | " + " | ".join(sets) + " | mean (private sets) | seconds |")
    print("|---|" + "---|" * (len(sets) + 2))
    for name, kw in PROTOCOLS.items():
        if only and not any(o in name for o in only.split(",")):
            continue
        t0, accs = time.perf_counter(), []
        for s in sets.values():
            per_seed = []
            for seed in SEEDS:
                mod, params = evaluation.train_convnet(
                    jax.random.key(1000 + seed), s["x"], s["y"], 10, **kw)  # fmt: skip
                per_seed.append(evaluation.convnet_accuracy(mod, params, xv, yv))
            accs.append(100 * float(np.mean(per_seed)))
        cells = " | ".join(f"{a:.2f}" for a in accs)
        print(f"| {name} | {cells} | {np.mean(accs[: len(accs) - real]):.2f} | {time.perf_counter() - t0:.0f} |",
              flush=True)  # fmt: skip


def _arg(name: str, default: str = "") -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


if __name__ == "__main__":
    ds = _arg("--dataset", "mnist")
    if sys.argv[1] == "--supports":
        eps = (float(_arg("--eps")),) if "--eps" in sys.argv else EPSILONS
        custom = "--init-iterations" in sys.argv or "--init-fraction" in sys.argv
        init = dp_kip.DPNTKInit(
            budget_fraction=float(_arg("--init-fraction", "0.1")),
            iterations=int(_arg("--init-iterations", "300")),
        )
        supports(sys.argv[2], ds, eps, init if custom else None)
    else:
        protocols(sys.argv[1], real="--real" in sys.argv, only=_arg("--only"), dataset=ds)
