"""DPNTKClassifier's defaults on one-hot tabular data (issue 52; the adult gap).

Before the row map of ``benchmarks/results/defaults-ntk-clip-rule.md`` the private scales
of adult's rare one-hot columns (about 400 times too small) turned rows into spikes, and
the default classifier kept 0.77 of a logistic regression's ROC-AUC lift (0.767 on this
seed); with ``sphere-clip3`` it keeps 0.978.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from privkernels.data.tabular import load_tabular
from privkernels.sklearn import DPNTKClassifier


@pytest.mark.slow
def test_the_default_classifier_keeps_most_of_the_lift_on_adult(shared_data_dir) -> None:  # type: ignore[no-untyped-def]
    tr, te = (load_tabular("adult", shared_data_dir, s) for s in ("train", "test"))
    xtr, xte = (np.asarray(d.x, np.float64) for d in (tr, te))
    ytr, yte = np.asarray(tr.y), np.asarray(te.y)
    mu, sd = xtr.mean(0), xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    lr = LogisticRegression(max_iter=5000).fit((xtr - mu) / sd, ytr)
    ref = roc_auc_score(yte, lr.decision_function((xte - mu) / sd)) - 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the classes are the schema's: public
        est = DPNTKClassifier(1.0, 1e-5, classes=[0, 1], random_state=0).fit(xtr, ytr)
    scores = est.decision_function(xte)
    s = scores[:, 1] - scores[:, 0] if scores.ndim == 2 else scores
    ratio = (roc_auc_score(yte, s) - 0.5) / ref
    assert ratio >= 0.9, f"ratio {ratio:.3f} of logistic regression's ROC-AUC lift"
    assert abs(est.privacy_report_.epsilon - 1.0) < 1e-9
