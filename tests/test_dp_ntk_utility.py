"""DP-NTK's utility grows with epsilon (issues 53 and 54): a small case, three seeds.

Each seed's two fits (eps 1 and eps 10) share their data-independent draws, the e-NTK
weights, the generator's start and its training codes (``public_key``), and differ in
the noise key and the budget only: common random numbers, as the benchmarks' DP-NTK
cells draw them (`benchmarks.common.public_key`). With independent draws per epsilon,
one seed compares two generators' luck as much as two noise levels.

The data is scikit-learn's digits (public), split by a fixed permutation; the measure is
the paper's: logistic regression trained on samples, tested on real held-out rows.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from privkernels import dp_ntk

SEEDS = (0, 1, 2)
EPSILONS = (1.0, 10.0)


@pytest.fixture(scope="module")
def digits_split() -> tuple[np.ndarray, ...]:
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    idx = np.random.default_rng(2026).permutation(len(y))
    tr, te = idx[:1200], idx[1200:]
    return x[tr], y[tr], x[te], y[te]


def _accuracy(seed: int, eps: float, data: tuple[np.ndarray, ...]) -> float:
    x, y, xt, yt = data
    noise_key = jax.random.fold_in(jax.random.key(seed), int(eps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded keys: reproducible on purpose here
        res = dp_ntk.fit(noise_key, x, y, epsilon=eps, n_classes=10, iterations=300,
                         batch_size=500, progress=False,
                         public_key=jax.random.key(10_000 + seed))  # fmt: skip
        xs, ys = dp_ntk.sample(jax.random.key(20_000 + seed), res, 2000)
    clf = LogisticRegression(max_iter=2000).fit(np.asarray(xs).reshape(len(ys), -1), ys)
    return float(clf.score(xt.reshape(len(yt), -1), yt))


@pytest.mark.slow  # six fits of 300 iterations
def test_accuracy_at_eps_10_is_not_below_eps_1(digits_split) -> None:
    acc = {(s, e): _accuracy(s, e, digits_split) for s in SEEDS for e in EPSILONS}
    low = [acc[s, 1.0] for s in SEEDS]
    high = [acc[s, 10.0] for s in SEEDS]
    print(f"LogReg accuracy on real digits, seeds {SEEDS}: eps 1 {low}, eps 10 {high}")
    assert np.mean(high) >= np.mean(low), f"eps 1: {low}, eps 10: {high}"
    assert all(h >= lo for h, lo in zip(high, low, strict=True)), f"eps 1: {low}, eps 10: {high}"
