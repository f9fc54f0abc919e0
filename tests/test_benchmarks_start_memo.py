"""`benchmarks.start_memo`: the validation scripts' one DP-NTK start per signature equals
recomputing it, is kept across processes in its pickle, and tells different calls apart."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.datasets import load_digits

from benchmarks.start_memo import patched, signature
from privkernels import dp_kip
from privkernels.dp_kip import DPNTKInit, fitting

KW = dict(
    epsilon=2.0, delta=1e-5, n_classes=10, epochs=1, batch_size=60, support_per_class=2,
    progress=False, init=DPNTKInit(iterations=3, batch_size=60),
)  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    idx = np.random.default_rng(0).permutation(len(d.target))[:300]
    return (d.images[idx] / 8.0 - 1.0).astype(np.float32), d.target[idx].astype(np.int32)


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_one_start_per_signature_equals_recomputing_it(digits, tmp_path, monkeypatch):
    x, y = digits
    fresh = dp_kip.fit(jax.random.key(3), x, y, **KW)
    calls = []
    real = fitting.dp_ntk_start
    monkeypatch.setattr(fitting, "dp_ntk_start", lambda *a, **k: calls.append(1) or real(*a, **k))
    counted, path = fitting.dp_ntk_start, tmp_path / "starts.pkl"
    with patched(path) as memo:
        runs = [dp_kip.fit(jax.random.key(3), x, y, **KW)]
        other_lr = dp_kip.fit(jax.random.key(3), x, y, **KW, learning_rate=0.3)
    assert len(calls) == 1 and len(memo) == 1 and fitting.dp_ntk_start is counted
    with patched(path):  # a later process reads the pickle: no release computed again
        runs.append(dp_kip.fit(jax.random.key(3), x, y, **KW))
        assert len(calls) == 1
        dp_kip.fit(jax.random.key(4), x, y, **KW)  # another key is another start
    assert len(calls) == 2
    for res in runs:
        np.testing.assert_array_equal(res.support_x, fresh.support_x)
        assert res.report == fresh.report
    assert not np.array_equal(other_lr.support_x, fresh.support_x)


def test_signature_reads_every_argument_but_progress():
    k, x = jax.random.key(0), np.zeros((3, 2), np.float32)
    base = signature(k, x, n_classes=2, progress=True)
    assert base == signature(k, x.copy(), n_classes=2, progress=False)
    for other in (
        signature(jax.random.key(1), x, n_classes=2),
        signature(k, x + 1, n_classes=2),
        signature(k, x.astype(np.float64), n_classes=2),
        signature(k, x.reshape(2, 3), n_classes=2),
        signature(k, x, n_classes=3),
    ):
        assert other != base
