"""Issue 16, item 2: DP-KIP with the FC-NTK from a DP-NTK start, chosen on a VALIDATION split.

Usage: python scripts/dp_kip_fcntk_dp_ntk_init_validation.py DATASET [--eps=E] [--only=I,J]
    [--cache=DIR] [--smooth=S] [--relation=add-remove] [--seed=S]

The training set of DATASET is split by a public seed (123, as in
``scripts/dp_kip_fcntk_sweep.py``) into 50,000 rows of private training data
and 10,000 validation rows; the test set is never read. 10 images/class;
10 epochs, batch 500, ridge 1e-6 and 300 generator iterations unless a row
says otherwise; delta 1e-5, seed 0. Every row spends the same total
(eps, 1e-5) under replace-one. Rows without a start fraction start from
N(0, I) and spend it all on DP-SGD. Rows with a fraction f spend f on the
DP-NTK start (`privkernels.dp_kip.DPNTKInit`) and the rest on DP-SGD
(`Budget.split`, as ``dp_kip.fit(init="dp_ntk")`` does). One start per
(preprocessing, fraction, generator iterations) is computed and shared by the
rows that differ only in DP-KIP's settings. The selection is not
privacy-accounted (as in the papers). ``--smooth=S`` blurs every DP-KIP
update of the chosen rows by S pixels after the noise (``adam(lr)`` then
`privkernels.dp_kip.smooth_updates`; post-processing). ``--relation=add-remove``
accounts both releases under add-remove instead (the DP-NTK start as class
sums and a noisy n; DP-SGD with the public rate batch / 50,000, the split's
size). ``--seed=S`` (default 0) draws the start's and DP-KIP's keys from S.
Prints one JSON line per row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.start_memo import memoized  # noqa: E402
from privkernels import data, dp_kip  # noqa: E402
from privkernels.dp_kip.dp_ntk_init import DPNTKInit, dp_ntk_start, split_budget  # noqa: E402
from privkernels.privacy import Budget  # noqa: E402

DELTA, SEED = 1e-5, 0
# epochs, batch size, ridge, DP-NTK generator iterations
DEFAULTS: tuple[Any, ...] = (10, 500, 1e-6, 300)
# (preprocessing, start fraction or None for N(0, I), DP-KIP learning rate, clip norm
#  [, epochs (10)[, batch size (500)[, ridge (1e-6)[, generator iterations (300)]]]])
SETTINGS: list[tuple[Any, ...]] = [
    ("std", None, 3e-2, 1e-1),  # the benchmarks' FC-NTK setting (replace-one here)
    ("2x-1", 0.1, 3e-2, 1e-1),
    ("2x-1", 0.1, 1e-2, 1e-1),
    ("std", 0.1, 3e-2, 1e-1),  # DPNTKInit(data_range="standardized")
    ("std", 0.2, 3e-2, 1e-1),
    ("2x-1", 0.2, 3e-2, 1e-1),
    ("std", 0.1, 1e-2, 1e-1),
    ("std", 0.1, 1e-1, 1e-1),
    ("std", 0.3, 3e-2, 1e-1),
    ("std", 0.2, 3e-2, 1e-1, 5),
    ("std", 0.2, 3e-2, 1e-1, 20),
    ("std", 0.4, 3e-2, 1e-1),
    ("std", 0.2, 3e-2, 1e-1, 3),
    ("std", 0.2, 5e-2, 1e-1, 5),
    ("std", 0.2, 3e-2, 1e-1, 2),
    ("std", None, 3e-2, 1e-1, 5),
    ("std", 0.2, 2e-2, 1e-1, 5),
    ("std", 0.2, 3e-2, 1e-1, 5, 1000),
    ("std", 0.2, 3e-2, 1e-1, 10, 1000),
    ("std", 0.2, 3e-2, 1e-1, 5, 500, 1e-4),
    ("std", 0.2, 3e-2, 1e-1, 5, 500, 1e-3),
    ("std", 0.2, 3e-2, 5e-2, 5),
    ("std", 0.2, 3e-2, 2e-1, 5),
    ("std", 0.2, 3e-2, 1e-1, 5, 500, 1e-6, 1000),
    ("std", 0.2, 3e-2, 1e-1, 5, 500, 1e-6, 2000),
]


def _prep(raw: np.ndarray, how: str) -> np.ndarray:
    return data.standardize_per_example(raw) if how == "std" else 2.0 * raw - 1.0


def _row(i: int) -> tuple[str, Any, float, float, int, int, float, int]:
    """Row ``i`` of SETTINGS with the defaults filled in."""
    prep, frac, lr, clip, *rest = SETTINGS[i]
    epochs, batch, reg, iters = (*rest, *DEFAULTS[len(rest) :])
    return prep, frac, lr, clip, epochs, batch, reg, iters


def _keys(seed: int) -> tuple[Any, Any]:
    """(start key, DP-KIP key): seed 0 keeps the keys of the rows above (0 and 1)."""
    if seed == SEED:
        return jax.random.key(SEED), jax.random.key(SEED + 1)
    k_start, k_fit = jax.random.split(jax.random.key(1000 + seed))
    return k_start, k_fit


def _start(
    x, y, budget, spec, cache_file: str | None, key: Any, relation: str
) -> tuple[np.ndarray, float]:
    """The DP-NTK start (and seconds spent); kept in ``cache_file`` (`benchmarks.start_memo`,
    keyed by every argument) and read from there by later runs."""
    t0 = time.perf_counter()
    start, _ = memoized(dp_ntk_start, cache_file)[0](
        key, x, y, n_classes=10, labels=dp_kip.support_labels(10, 10),
        budget=budget, spec=spec, neighbouring=relation,
    )  # fmt: skip
    return start, time.perf_counter() - t0


def _optimizer(lr: float, smooth: float) -> Any:
    """None (``adam(lr)`` inside fit) or ``adam(lr)`` then a blur of every update."""
    if not smooth:
        return None
    import optax

    return optax.chain(optax.adam(lr), dp_kip.smooth_updates(smooth))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    eps = float(opts.get("eps", 1.0))
    chosen = [int(i) for i in opts["only"].split(",")] if "only" in opts else range(len(SETTINGS))
    ds, cache = args[0], opts.get("cache")  # --cache=DIR keeps the starts between runs
    smooth = float(opts.get("smooth", 0.0))
    relation: Any = opts.get("relation", "replace-one")  # fit refuses any other value
    seed = int(opts.get("seed", SEED))
    k_start, k_fit = _keys(seed)
    tag = ("" if relation == "replace-one" else "-ar") + ("" if seed == SEED else f"-s{seed}")
    tr = data.load(ds, data_dir=os.environ.get("PRIVKERNELS_DATA"), split="train")
    raw, y = np.asarray(tr.x, np.float32), np.asarray(tr.y)
    perm = np.random.default_rng(123).permutation(len(y))
    va, fit_idx = perm[:10000], perm[10000:]
    starts: dict[tuple[str, float, int], np.ndarray] = {}
    for i in chosen:
        prep, frac, lr, clip, epochs, batch, reg, iters = _row(i)
        x = _prep(raw, prep)
        budget, t_start = Budget(eps, DELTA), 0.0
        init: Any = "gaussian"
        if frac is not None:
            rng = (-1.0, 1.0) if prep == "2x-1" else "standardized"
            spec = DPNTKInit(budget_fraction=frac, data_range=rng, iterations=iters)
            budget, ntk_budget = split_budget(budget, spec)
            if (prep, frac, iters) not in starts:
                where = cache and os.path.join(
                    cache, f"{ds}-eps{eps:g}-{prep}-f{frac:g}-it{iters}{tag}.pkl"
                )
                starts[(prep, frac, iters)], t_start = _start(
                    x[fit_idx], y[fit_idx], ntk_budget, spec, where, k_start, relation
                )
            start = jnp.asarray(starts[(prep, frac, iters)])
            init = lambda k, m, shape, s=start: s  # noqa: E731
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rate: dict[str, Any] = (
                {"sampling_rate": batch / len(fit_idx)} if relation == "add-remove" else {}
            )
            res = dp_kip.fit(
                k_fit, x[fit_idx], y[fit_idx], kernel="fc_ntk",
                support_per_class=10, epsilon=budget.epsilon, delta=budget.delta,
                clip_norm=clip, batch_size=batch, epochs=epochs, learning_rate=lr,
                relative_reg=reg, n_classes=10, progress=False, init=init,
                optimizer=_optimizer(lr, smooth), neighbouring=relation, **rate,
            )  # fmt: skip
        row = dict(ds=ds, eps=eps, prep=prep, start_fraction=frac, lr=lr, clip=clip, epochs=epochs,
                   batch=batch, reg=reg, generator_iterations=None if frac is None else iters,
                   smooth=smooth or None, relation=relation, seed=seed,
                   dpsgd_eps_spent=round(res.report.epsilon, 4),
                   val_acc=round(100 * dp_kip.accuracy(res, x[va], y[va]), 2))  # fmt: skip
        if frac is not None:  # the start alone (no DP-KIP), same kernel and ridge
            alone = dataclasses.replace(res, support_x=starts[(prep, frac, iters)])
            row["start_only_val_acc"] = round(100 * dp_kip.accuracy(alone, x[va], y[va]), 2)
        row.update(start_seconds=round(t_start, 1), kip_seconds=round(time.perf_counter() - t0, 1))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
