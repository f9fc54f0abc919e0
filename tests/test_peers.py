"""The peers benchmark's own logic (the peer libraries themselves are an optional extra)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.datasets import load_digits

from benchmarks.peers_dpsgd import train_mlp
from benchmarks.peers_smartnoise import _columns, _from_codes, _to_codes
from privkernels.privacy import Budget, dpsgd_plan


def test_schema_codes_round_trip_on_adult(shared_data_dir):
    from privkernels import data

    tr = data.load("adult", data_dir=shared_data_dir, split="train")
    x, y = tr.x[:2000], tr.y[:2000]
    cols = _columns(tr.schema)
    bins = 16
    codes = _to_codes(x, y, cols, bins)
    binned = np.floor(codes) + 0.5  # what a synthesizer returns: one code per bin
    x2, y2 = _from_codes(binned, cols, bins, x.shape[1])
    np.testing.assert_array_equal(y2, y)
    for kind, a, b, _ in cols:
        if kind == "categorical":
            np.testing.assert_array_equal(x2[:, a:b], x[:, a:b])
        else:  # bin centre: within half a bin of the value
            assert np.abs(x2[:, a] - x[:, a]).max() <= 0.5 / bins + 1e-6


def test_schema_codes_keep_a_nullable_numeric_columns_missing_values():
    from privkernels.data.synthetic import synthetic_tabular

    ds = synthetic_tabular(0, 400, missing_rate=0.3)  # every column nullable
    cols = _columns(ds.schema)
    codes = _to_codes(ds.x, ds.y, cols, 16)
    x2, y2 = _from_codes(np.floor(codes) + 0.5, cols, 16, ds.x.shape[1])
    for c in ds.schema.numeric_columns:
        np.testing.assert_array_equal(x2[:, c.start + 1], ds.x[:, c.start + 1])  # missing
        present = ds.x[:, c.start + 1] == 0
        assert np.abs(x2[present, c.start] - ds.x[present, c.start]).max() <= 0.5 / 16 + 1e-6
        assert 0 < present.sum() < len(present)


def test_dpsgd_baseline_accounts_what_it_runs_and_learns():
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
    predict, plan, steps = train_mlp(jax.random.key(0), x, y, 10, epsilon=10.0, delta=1e-5,
                                     epochs=5, batch_size=128)  # fmt: skip
    ref = dpsgd_plan(Budget(10.0, 1e-5), sampling_rate=128 / len(y), steps=steps, clip_norm=1.0,
                     neighbouring="replace-one")  # fmt: skip
    assert plan.noise_multiplier == pytest.approx(ref.noise_multiplier, rel=1e-12)
    assert steps == 5 * round(len(y) / 128)
    assert np.mean(predict(x) == y) > 0.5
