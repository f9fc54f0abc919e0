"""Generate the neural-tangents reference fixture for the closed-form FC-NTK.

Run in the reference environment (jax 0.4.25, numpy<2, neural-tangents 0.6.5)::

    /tmp/venv-nt/bin/python scripts/generate_fc_ntk_fixture.py

It writes ``tests/fixtures/fc_ntk_reference.npz`` holding fixed random inputs,
the neural-tangents ``kernel_fn(x1, x2, 'ntk')`` of
``stax.serial(*[Dense(512, W_std, b_std), Relu()] * depth, Dense(1, W_std, b_std))``
(float64) for a grid of configurations, and metadata. When privkernels is
importable in that environment it also reports the closed-form error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import neural_tangents as nt  # noqa: E402
import numpy as np  # noqa: E402
from neural_tangents import stax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEPTHS = (1, 2, 3, 5)
W_STDS = (1.0, 1.5, float(np.sqrt(2.0)))
B_STDS = (0.0, 0.1, 0.5)
SEED = 20261120


def make_inputs() -> dict[str, np.ndarray]:
    """Fixed-seed inputs: a small pair sharing one row, and a wider pair."""
    rng = np.random.default_rng(SEED)
    xa = rng.normal(size=(6, 5))
    xb = rng.normal(size=(4, 5))
    xb[1] = xa[2]  # repeated row: exercises the kernel's diagonal (c = 1)
    xb[3] = -2.5 * xa[0]  # anti-parallel row: c = -1
    ya = rng.normal(size=(5, 30)) * rng.uniform(0.5, 3.0, size=(5, 1))
    yb = rng.uniform(-1.0, 2.0, size=(3, 30))
    return {"xa": xa, "xb": xb, "ya": ya, "yb": yb}


PAIRS = (("xa", "xb"), ("xa", "xa"), ("ya", "yb"))


def nt_kernel(x1: np.ndarray, x2: np.ndarray, depth: int, w: float, b: float) -> np.ndarray:
    layers = []
    for _ in range(depth):
        layers += [stax.Dense(512, W_std=w, b_std=b), stax.Relu()]
    layers.append(stax.Dense(1, W_std=w, b_std=b))
    _, _, kernel_fn = stax.serial(*layers)
    return np.asarray(kernel_fn(x1, x2, "ntk"), dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "tests" / "fixtures" / "fc_ntk_reference.npz"
    )
    args = parser.parse_args()

    inputs = make_inputs()
    configs = [(d, w, b) for d in DEPTHS for w in W_STDS for b in B_STDS]
    arrays: dict[str, Any] = dict(inputs)
    for i, (d, w, b) in enumerate(configs):
        for p, (n1, n2) in enumerate(PAIRS):
            arrays[f"k_{i}_{p}"] = nt_kernel(inputs[n1], inputs[n2], d, w, b)
    meta = {
        "neural_tangents_version": nt.__version__,
        "jax_version": jax.__version__,
        "numpy_version": np.__version__,
        "x64": True,
        "seed": SEED,
        "architecture": "stax.serial(*[Dense(512, W_std, b_std), Relu()] * depth, Dense(1, W_std, b_std))",
        "parameterization": "ntk",
        "configs": [{"depth": d, "W_std": w, "b_std": b} for d, w, b in configs],
        "pairs": [list(p) for p in PAIRS],
        "key_format": "k_{config_index}_{pair_index}",
    }
    arrays["metadata"] = np.array(json.dumps(meta))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(configs)} configs)")

    # Optional cross-check of the closed form in this environment.
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from privkernels.features.fc_ntk import fc_ntk_kernel
    except Exception as err:  # pragma: no cover - informational only
        print(f"closed-form cross-check skipped: {type(err).__name__}: {err}")
        return
    worst_rel = worst_scaled = 0.0
    for i, (d, w, b) in enumerate(configs):
        for p, (n1, n2) in enumerate(PAIRS):
            ours = np.asarray(fc_ntk_kernel(inputs[n1], inputs[n2], depth=d, W_std=w, b_std=b))
            ref = arrays[f"k_{i}_{p}"]
            diff = np.abs(ours - ref)
            # Entries that are exactly 0 in exact arithmetic (anti-parallel rows,
            # b_std = 0) carry neural-tangents' rounding noise (arccos near -1 is
            # only sqrt(eps) accurate): judge those relative to the matrix scale.
            big = np.abs(ref) >= 1e-6 * np.abs(ref).max()
            worst_rel = max(worst_rel, float(np.max(diff[big] / np.abs(ref[big]))))
            worst_scaled = max(worst_scaled, float(diff.max() / np.abs(ref).max()))
    print(
        f"closed form vs neural-tangents: max relative error {worst_rel:.3e} "
        f"(entries >= 1e-6 max|K|), max |err| / max|K| {worst_scaled:.3e}"
    )
    nt_backend = fc_ntk_kernel(
        inputs["xa"],
        inputs["xb"],
        depth=2,
        W_std=1.5,
        b_std=0.1,
        backend="neural_tangents",
        chunk_size=4,
    )
    closed = fc_ntk_kernel(inputs["xa"], inputs["xb"], depth=2, W_std=1.5, b_std=0.1)
    print(
        f"backend='neural_tangents' vs closed form: max abs diff "
        f"{float(np.max(np.abs(np.asarray(nt_backend) - np.asarray(closed)))):.3e}"
    )


if __name__ == "__main__":
    main()
