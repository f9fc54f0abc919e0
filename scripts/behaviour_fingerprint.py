"""Fingerprint what the three methods release for fixed keys (a redesign guard).

Runs small but complete fits of DP-NTK, DP-KIP (FC-NTK Gram form, ScatterNet
feature space, e-NTK, the explicit adjoint path with corrupted pixels, the
non-private baseline) and DP NTK regression on scikit-learn's digits, and
writes every released array to an ``.npz``. ``--compare OLD.npz`` reports the
largest difference per array against an earlier run: a behaviour-preserving
change gives zeros, or differences at float32 rounding level where the
summation order changed.

Usage::

    python scripts/behaviour_fingerprint.py --out before.npz
    python scripts/behaviour_fingerprint.py --out after.npz --compare before.npz
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import jax
import numpy as np


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8)
    return x[:600], y[:600].astype(np.int32)


def _kip(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    from privkernels import dp_kip

    out = {}
    xs = x * 2.0 - 1.0
    runs: dict[str, dict[str, Any]] = {
        "kip_fcntk": dict(kernel="fc_ntk", epochs=2, clip_norm=0.1),
        "kip_scatter_feature": dict(
            kernel="scatternet", epochs=1, clip_norm=0.01, clip_space="feature"
        ),
        "kip_entk": dict(kernel="entk", epochs=1, clip_norm=0.1),
        "kip_fcntk_corrupt": dict(kernel="fc_ntk", epochs=1, clip_norm=0.1, corrupt_fraction=0.1),
        "kip_fcntk_nonprivate": dict(kernel="fc_ntk", epochs=1, epsilon=None),
    }
    x16 = np.kron(xs, np.ones((1, 2, 2), np.float32))  # the e-NTK LeNet needs sides >= 12
    for name, kw in runs.items():
        kw = {"epsilon": 1.0, "relative_reg": 1e-6, "clip_norm": 1.0, **kw}  # pre-issue-17 defaults
        data = x16 if kw["kernel"] == "entk" else xs
        res = dp_kip.fit(
            jax.random.key(3),
            data,
            y,
            support_per_class=2,
            batch_size=100,
            learning_rate=0.05,
            n_classes=10,
            progress=False,
            **kw,
        )
        out[name] = np.asarray(res.support_x)
        out[name + "_pred"] = np.asarray(dp_kip.predict(res, data[:50]))
    return out


def _ntk(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    from privkernels import dp_ntk, features

    net = features.fc_1l(32, out_features=10, layer_norm=True)
    res = dp_ntk.fit(
        jax.random.key(4),
        x,
        y,
        epsilon=1.0,
        network=net,
        iterations=15,
        batch_size=100,
        n_classes=10,
        progress=False,
    )
    xs, ys = dp_ntk.sample(jax.random.key(5), res, 40)
    out = {"ntk_embedding": np.asarray(res.noisy_embedding), "ntk_samples": xs, "ntk_labels": ys}
    res2 = dp_ntk.fit(
        jax.random.key(6),
        x.reshape(len(x), -1)[:, :12],
        y % 3,
        epsilon=1.0,
        network=features.fc_1l(16, out_features=3),
        iterations=5,
        batch_size=60,
        n_classes=3,
        label_mode="released",
        progress=False,
    )
    out["ntk_tab_embedding"] = np.asarray(res2.noisy_embedding)
    out["ntk_tab_props"] = np.asarray(res2.noisy_proportions)
    out["ntk_tab_loss"] = np.asarray(res2.loss_history)
    return out


def _reg(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    from privkernels import dp_ntk_regression as reg

    xf = x.reshape(len(x), -1)
    xf = xf / np.maximum(np.linalg.norm(xf, axis=1, keepdims=True), 1e-12)
    model = reg.fit(
        jax.random.key(7),
        xf,
        y,
        epsilon=1.0,
        delta=1e-5,
        kernel_shift=5.0,
        reg=5.0,
        fit_intercept=False,
        neighbouring="beta-close",  # the paper's Alg. 2 (the default is replace-one)
    )
    return {
        "reg_alpha": np.asarray(model.alpha),
        "reg_x_tilde": np.asarray(model.x_tilde),
        "reg_pred": np.asarray(reg.predict(model, xf[:50])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", default=None)
    args = parser.parse_args()
    x, y = _digits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arrays: dict[str, Any] = {**_kip(x, y), **_ntk(x, y), **_reg(x, y)}
    np.savez(args.out, **arrays)
    if args.compare:
        old = np.load(args.compare)
        worst = 0.0
        for k in sorted(set(old.files) | set(arrays)):
            if k not in old.files or k not in arrays:
                print(f"{k:28s} missing in {'old' if k not in old.files else 'new'}")
                continue
            a, b = np.asarray(arrays[k], np.float64), np.asarray(old[k], np.float64)
            if a.shape != b.shape:
                print(f"{k:28s} shape {a.shape} vs {b.shape}")
                worst = np.inf
                continue
            diff = float(np.max(np.abs(a - b))) if a.size else 0.0
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            worst = max(worst, diff / max(scale, 1e-30))
            print(f"{k:28s} max |diff| {diff:.3g} (max |old| {scale:.3g})")
        print(f"largest relative difference: {worst:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
