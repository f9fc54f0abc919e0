"""DP-KIP FC-NTK: preprocessing / learning-rate sweep on a validation split of the TRAINING set.

Usage: python scripts/dp_kip_fcntk_sweep.py DATASET [DATA_DIR]
(DATA_DIR defaults to $PRIVKERNELS_DATA). eps=1, delta=1e-5, 10 images/class,
10 epochs; 10,000 training examples are held out for validation and the test
set is never read. The selection itself is not privacy-accounted (as in the
paper); it is a diagnostic of how sensitive the method is to these choices.
Prints one JSON line per setting.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import jax
import numpy as np

from privkernels import data, dp_kip

SETTINGS = [  # (preprocessing, learning rate, batch size, clip norm)
    ("2x-1", 1e-2, 500, 1e-6),  # the paper's App. D values as we read them
    ("x", 1e-2, 500, 1e-6),
    ("2x-1", 1e-1, 500, 1e-1),
    ("x", 1e-1, 500, 1e-1),
    ("x", 3e-2, 500, 1e-1),
]


def main() -> None:
    ds = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("PRIVKERNELS_DATA")
    tr = data.load(ds, data_dir=root, split="train")
    raw = np.asarray(tr.x, np.float32)
    y = np.asarray(tr.y)
    perm = np.random.default_rng(123).permutation(len(y))
    va, fit_idx = perm[:10000], perm[10000:]
    for prep, lr, bs, clip in SETTINGS:
        x = 2.0 * raw - 1.0 if prep == "2x-1" else raw
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = dp_kip.fit(
                jax.random.key(0),
                x[fit_idx],
                y[fit_idx],
                kernel="fc_ntk",
                support_per_class=10,
                epsilon=1.0,
                delta=1e-5,
                clip_norm=clip,
                batch_size=bs,
                epochs=10,
                learning_rate=lr,
                reg=1e-6,
                n_classes=10,
                progress=False,
            )
        acc = dp_kip.accuracy(res, x[va], y[va])
        row = dict(ds=ds, prep=prep, lr=lr, batch_size=bs, clip=clip, val_acc=acc)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
