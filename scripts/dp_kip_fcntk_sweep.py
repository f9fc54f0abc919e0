"""DP-KIP FC-NTK: preprocessing / learning-rate sweep on a validation split of the TRAINING set.

Usage: python scripts/dp_kip_fcntk_sweep.py DATASET [DATA_DIR] [--only=I,J,...]
(DATA_DIR defaults to $PRIVKERNELS_DATA; ``--only`` runs a subset of SETTINGS by
index). eps=1, delta=1e-5, 10 images/class, 10 epochs; 10,000 training
examples are held out for validation and the test set is never read. The
selection itself is not privacy-accounted (as in the paper); it is a diagnostic
of how sensitive the method is to these choices. Prints one JSON line per setting.

Preprocessing: ``x`` (pixels in [0, 1]), ``2x-1``, or ``std`` (each image
standardised by its own mean and standard deviation: a per-example map, so it
costs no privacy, unlike the dataset-wide channel statistics of the reference code).

Init ``real`` is a NON-PRIVATE diagnostic: it starts the support set from real
training images, as the authors' public FC-NTK script does for MNIST. It exists
only to measure how much of the paper's number that initialisation explains;
``dp_kip.fit`` never does this on its own: the script passes an ``init`` callable.
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

SETTINGS = [  # (preprocessing, learning rate, batch size, clip norm, init)
    ("2x-1", 1e-2, 500, 1e-6, "normal"),  # the paper's App. D values as we read them
    ("x", 1e-2, 500, 1e-6, "normal"),
    ("2x-1", 1e-1, 500, 1e-1, "normal"),
    ("x", 1e-1, 500, 1e-1, "normal"),
    ("x", 3e-2, 500, 1e-1, "normal"),
    ("std", 3e-2, 500, 1e-1, "normal"),
    ("std", 1e-2, 500, 1e-1, "normal"),
    ("std", 1e-1, 500, 1e-1, "normal"),
    ("x", 1e-2, 500, 1e-6, "real"),  # NOT private: the reference script's MNIST init
    ("x", 3e-2, 500, 1e-1, "real"),  # NOT private
    ("std", 3e-2, 1000, 1e-1, "normal"),
    ("std", 3e-2, 250, 1e-1, "normal"),
]


def _preprocess(raw: np.ndarray, prep: str) -> np.ndarray:
    if prep == "2x-1":
        return 2.0 * raw - 1.0
    if prep == "std":
        return data.standardize_per_example(raw)
    return raw


def _real_init(x: np.ndarray, y: np.ndarray, spc: int, n_classes: int):
    """Replacement for ``dp_kip.init_support`` drawing real images (NOT private)."""
    rng = np.random.default_rng(0)
    picks = np.concatenate(
        [rng.choice(np.flatnonzero(y == c), spc, replace=False) for c in range(n_classes)]
    )  # class-major, matching dp_kip.support_labels
    real = jax.numpy.asarray(x[picks])

    def init(key, n_support, input_shape):
        assert n_support == len(picks)
        return real.astype(jax.numpy.float32).reshape(n_support, *input_shape)

    return init


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--only=")]
    only = [a for a in sys.argv[1:] if a.startswith("--only=")]
    chosen = [int(i) for i in only[0].split("=", 1)[1].split(",")] if only else range(len(SETTINGS))
    ds = args[0]
    root = args[1] if len(args) > 1 else os.environ.get("PRIVKERNELS_DATA")
    tr = data.load(ds, data_dir=root, split="train")
    raw = np.asarray(tr.x, np.float32)
    y = np.asarray(tr.y)
    perm = np.random.default_rng(123).permutation(len(y))
    va, fit_idx = perm[:10000], perm[10000:]
    for idx in chosen:
        prep, lr, bs, clip, init = SETTINGS[idx]
        x = _preprocess(raw, prep)
        # NOT private when init == "real": the support starts from training images
        init_fn = _real_init(x[fit_idx], y[fit_idx], 10, 10) if init == "real" else "gaussian"
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
                relative_reg=1e-6,
                n_classes=10,
                progress=False,
                init=init_fn,
            )
        acc = dp_kip.accuracy(res, x[va], y[va])
        row = dict(ds=ds, prep=prep, lr=lr, batch_size=bs, clip=clip, init=init, val_acc=acc)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
