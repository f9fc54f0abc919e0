"""Replace-one DP NTK regression on digits (issue 16 item 3 target: eps 1 >= 0.75): a validation sweep.

sklearn digits, unit-norm pixel rows; a stratified 80/20 split (seed 0) whose test part is not read; the
80% part split again 80/20 (seed 1) into 1151 fit and 287 validation rows. Mean of 3 seeds.
Prints ``D ridge_factor epsilon validation_accuracy``.
"""

import itertools
import warnings

import jax
import numpy as np
from sklearn.datasets import load_digits

from privkernels import data
from privkernels import dp_ntk_regression as R

d = load_digits()
x = d.data.astype(np.float32)
y = d.target
x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
tr, te = data.stratified_split_indices(
    y, test_fraction=0.2, seed=0
)  # 1437 / 360; test not read here
fi, vi = data.stratified_split_indices(y[tr], test_fraction=0.2, seed=1)
xf, yf, xv, yv = x[tr][fi], y[tr][fi], x[tr][vi], y[tr][vi]
print(len(yf), len(yv))
for D, rf, eps in itertools.product((16, 32, 64, 128, 256, 1024), (0.125, 0.5, 2.0), (1.0, 10.0)):
    accs = []
    for s in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = R.fit(
                jax.random.key(100 * s + D),
                xf,
                yf,
                epsilon=eps,
                n_classes=10,
                neighbouring="replace-one",
                features=D,
                ridge_factor=rf,
                progress=False,
            )
        accs.append(float(np.mean(R.predict_labels(m, xv) == yv)))
    print(D, rf, eps, round(np.mean(accs), 4), flush=True)
