"""Same key, same numbers: every method's release, for a fixed key, against a fingerprint.

A refactor of the path from ``fit`` to the noise draw (issue 51, "one shape") must not
change any number a table or a user gets for the same key. Each case below fits a small
problem with a fixed key and saves the result; every array in the saved file is reduced
to a fingerprint (shape, sum, sum of squares, first values) and compared with the one
stored in ``tests/fixtures/fingerprints.json``, which names the commit and the command
that wrote it:

    PRIVKERNELS_WRITE_FINGERPRINTS=1 python -m pytest -n 0 tests/test_fingerprints.py

Write it again only for a change meant to alter the numbers, and say so in the commit.
The fingerprints are of this CPU backend (XLA on another device rounds differently), so
on another backend the test is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd
import pytest

from privkernels import dp_kip, dp_ntk, dp_ntk_regression
from privkernels.data.schema import TabularSchema, categorical, numeric
from privkernels.generators import ColumnGroup
from privkernels.preprocessing import PrivateStandardScaler
from privkernels.synth import fit_table

FIXTURE = Path(__file__).parent / "fixtures" / "fingerprints.json"
WRITE = os.environ.get("PRIVKERNELS_WRITE_FINGERPRINTS") == "1"
#: relative tolerance of a sum, and of the first values against the array's scale
RTOL = 1e-4
N_FIRST = 6


def _images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = rng.uniform(0.0, 1.0, (n, 8, 8)).astype(np.float32)
    x[:, :4] *= (1 + y[:, None, None]) / 3.0  # classes differ in the top half
    return x, y


def _tabular(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (n, 5)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.standard_normal(n) > 0.5).astype(np.int64)
    return x, y


def _regression(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.clip(x @ np.array([0.5, -0.3, 0.2, 0.0], np.float32), -1, 1)
    return x, y


def _fit_case(
    method: Any, data: Callable[[], tuple[np.ndarray, np.ndarray]], seed: int, **kw: Any
) -> Callable[[Path], Path]:
    """A case: ``method.fit(key(seed), *data(), progress=False, **kw)``, saved."""

    def run(tmp: Path) -> Path:
        x, y = data()
        res = method.fit(jax.random.key(seed), x, y, progress=False, **kw)
        return res.save(tmp / "a.npz")

    return run


def _scaler(tmp: Path) -> Path:
    x, _ = _regression(300, 8)
    sc = PrivateStandardScaler(epsilon=1.0, random_state=jax.random.key(41)).fit(x)
    path = tmp / "a.npz"
    np.savez(path, mean=sc.mean_, scale=sc.scale_)
    return path


def _table(tmp: Path) -> Path:
    """`fit_table` with its defaults' network (the e-NTK beside the marginal code)."""
    schema = TabularSchema.from_columns(
        "toy", [numeric("age", 17, 90, dtype="int"), categorical("job", ["a", "b", "c"])],
        label="income", classes=["lo", "hi"],
    )  # fmt: skip
    rng = np.random.default_rng(9)
    age = rng.integers(17, 91, 120)
    df = pd.DataFrame({"age": age, "job": rng.choice(["a", "b", "c"], 120),
                       "income": np.where(age > 45, "hi", "lo")})  # fmt: skip
    model = fit_table(jax.random.key(51), df, schema, epsilon=1.0, iterations=3,
                      batch_size=20, progress=False)  # fmt: skip
    return model.save(tmp / "a.npz")


CASES: dict[str, Callable[[Path], Path]] = {
    "dp_ntk_images": _fit_case(dp_ntk, lambda: _images(60, 0), 11, epsilon=1.0, n_classes=3,
                               iterations=4, batch_size=24),
    "dp_ntk_add_remove": _fit_case(dp_ntk, lambda: _tabular(80, 1), 12, epsilon=2.0,
                                   n_classes=2, iterations=4, batch_size=20,
                                   neighbouring="add-remove", label_mode="released"),
    "dp_ntk_released": _fit_case(dp_ntk, lambda: _tabular(80, 2), 13, epsilon=1.0, n_classes=2,
                                 iterations=3, batch_size=20, label_mode="released"),
    "dp_kip_fc_ntk": _fit_case(dp_kip, lambda: _images(60, 3), 21, epsilon=1.0, n_classes=3,
                               kernel="fc_ntk", support_per_class=2, batch_size=20, epochs=2),
    "dp_kip_add_remove": _fit_case(dp_kip, lambda: _images(60, 4), 22, epsilon=2.0,
                                   n_classes=3, kernel="fc_ntk", support_per_class=2,
                                   batch_size=20, epochs=1, neighbouring="add-remove",
                                   sampling_rate=0.3),
    "dp_kip_scatternet": _fit_case(dp_kip, lambda: _images(45, 5), 23, epsilon=1.0,
                                   n_classes=3, kernel="scatternet", support_per_class=1,
                                   batch_size=15, epochs=1),
    "regression_gsm": _fit_case(dp_ntk_regression, lambda: _regression(200, 6), 31,
                                epsilon=1.0, width=64, neighbouring="beta-close"),
    "regression_replace_one": _fit_case(dp_ntk_regression, lambda: _regression(200, 7), 32,
                                        epsilon=1.0, width=64),
    "private_standard_scaler": _scaler,
    "table_default": _table,
    # dp_ntk.fit with column groups: its default network takes the marginal code (01eb4cb)
    "dp_ntk_groups": _fit_case(dp_ntk, lambda: _tabular(80, 3), 14, epsilon=1.0, n_classes=2,
                               iterations=3, batch_size=20,
                               groups=(ColumnGroup("numeric", 0, 5),)),
}  # fmt: skip


def fingerprint(path: Path) -> dict[str, Any]:
    """Each numeric array of an ``.npz``: shape, float64 sum and sum of squares, first values."""
    out: dict[str, Any] = {}
    with np.load(path, allow_pickle=False) as data:
        for name in sorted(data.files):
            a = np.asarray(data[name])
            if a.dtype.kind not in "fiub":
                continue
            f = a.astype(np.float64).ravel()
            out[name] = {"shape": list(a.shape), "sum": float(f.sum()),
                         "sumsq": float((f * f).sum()), "first": f[:N_FIRST].tolist()}  # fmt: skip
    return out


def _close(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The names whose fingerprints differ beyond float32 rounding of a refactor."""
    bad = sorted(set(got) ^ set(want))
    for name in sorted(set(got) & set(want)):
        g, w = got[name], want[name]
        scale = max(np.sqrt(w["sumsq"]), 1e-12)
        ok = g["shape"] == w["shape"] and np.allclose(g["sumsq"], w["sumsq"], rtol=RTOL)
        ok = ok and abs(g["sum"] - w["sum"]) <= RTOL * scale * max(
            1.0, np.sqrt(np.prod(w["shape"]))
        )
        ok = ok and np.allclose(g["first"], w["first"], rtol=RTOL, atol=RTOL * scale)
        if not ok:
            bad.append(name)
    return bad


def _stored() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {"cases": {}}


@pytest.mark.slow  # about 90 s in all: eleven small fits
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_key_same_release(case: str, tmp_path: Path) -> None:
    if jax.default_backend() != "cpu":
        pytest.skip("the fingerprints are of the CPU backend; another device rounds otherwise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded keys and small-n warnings: expected here
        got = fingerprint(CASES[case](tmp_path))
    assert got, f"{case}: the saved file holds no numeric array"
    if WRITE:
        stored = _stored()
        stored["cases"][case] = got
        stored.setdefault("written_at_commit", _commit())
        stored.setdefault("case_written_at", {})[case] = _commit()
        stored["command"] = ("PRIVKERNELS_WRITE_FINGERPRINTS=1 python -m pytest -n 0 "
                             "tests/test_fingerprints.py")  # fmt: skip
        FIXTURE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        return
    want = _stored()["cases"].get(case)
    assert want is not None, f"no stored fingerprint for {case}: write them (module docstring)"
    bad = _close(got, want)
    assert not bad, f"{case}: these released arrays changed for the same key: {bad}"


def test_a_changed_release_is_caught() -> None:
    """The comparison itself can fail: a one-ulp-scale change passes, a 0.1% change does not."""
    want = {"a": {"shape": [3], "sum": 6.0, "sumsq": 14.0, "first": [1.0, 2.0, 3.0]}}
    near = {"a": {"shape": [3], "sum": 6.0 + 1e-7, "sumsq": 14.0, "first": [1.0, 2.0, 3.0]}}
    far = {"a": {"shape": [3], "sum": 6.003, "sumsq": 14.0, "first": [1.0, 2.003, 3.0]}}
    assert _close(near, want) == []
    assert _close(far, want) == ["a"]
    assert _close({}, want) == ["a"]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=True)  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
