"""The classifiers warn where their defaults were not validated for a rare class (issue 52).

``benchmarks/results/defaults-rare-class-rule.md``: the class counts are private, so the
warnings fire below the row count at which the defaults held with a 5% class. On main
before it, cervical (686 training rows, 44 positive) fitted without a word from
``DPKIPClassifier`` (686 > 398) and every route predicted the majority class.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privkernels import sklearn as pk_sklearn
from privkernels.data.tabular import load_tabular
from privkernels.dp_kip.estimator_defaults import WARN_N, SmallDataWarning
from privkernels.privacy.warnings import SmallSampleWarning
from privkernels.sklearn import (
    CLASSIFIER_MIN_VALIDATED_N,
    CLASSIFIER_RARE_VALIDATED_N,
    CLASSIFIER_WARN_N,
    MIN_VALIDATED_N,
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKRegressor,
)


class _Stop(BaseException):
    """Raised in place of the model's release: the warnings come before it."""


@pytest.fixture
def no_model_release(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*args: object, **kwargs: object) -> None:
        raise _Stop

    monkeypatch.setattr(pk_sklearn.R, "fit", stop)
    monkeypatch.setattr(pk_sklearn.dp_kip, "fit", stop)


def _warned(est: object, x: np.ndarray, y: np.ndarray, category: type[Warning]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(_Stop):
            est.fit(x, y)  # type: ignore[attr-defined]
    return [str(w.message) for w in caught if issubclass(w.category, category)]


def test_ntk_classifier_warns_below_the_rare_class_figure(no_model_release: None) -> None:
    assert CLASSIFIER_WARN_N == max(CLASSIFIER_MIN_VALIDATED_N, CLASSIFIER_RARE_VALIDATED_N[0.05])
    rng = np.random.default_rng(0)
    for n, expect in ((CLASSIFIER_MIN_VALIDATED_N + 1, True), (CLASSIFIER_WARN_N, False)):
        x, y = rng.normal(size=(n, 4)), np.arange(n) % 2
        est = DPNTKClassifier(1.0, classes=[0, 1], random_state=0)
        msgs = _warned(est, x, y, SmallSampleWarning)
        assert bool(msgs) == expect, n
        for m in msgs:
            assert f"n >= {CLASSIFIER_MIN_VALIDATED_N} " in m and "not read" in m
            assert all(f"n >= {v} " in m for v in CLASSIFIER_RARE_VALIDATED_N.values())
            assert str(n) not in m  # no count of the data


def test_regressor_warning_is_unchanged(no_model_release: None) -> None:
    x = np.random.default_rng(1).normal(size=(300, 4))
    msgs = _warned(DPNTKRegressor(1.0, random_state=0), x, x[:, 0], SmallSampleWarning)
    assert len(msgs) == 1 and f"n >= {MIN_VALIDATED_N} " in msgs[0]
    assert "class" not in msgs[0]


def test_both_classifiers_warn_on_cervical(shared_data_dir, no_model_release: None) -> None:  # type: ignore[no-untyped-def]
    data = load_tabular("cervical", shared_data_dir, "train")
    x, y = np.asarray(data.x, np.float64), np.asarray(data.y)
    assert WARN_N > len(y) > 398  # above DP-KIP's balanced figure: silent before the rule
    sd = np.where(x.std(0) > 0, x.std(0), 1.0)
    kip = DPKIPClassifier(1.0, classes=[0, 1], random_state=0)
    assert len(_warned(kip, (x - x.mean(0)) / sd, y, SmallDataWarning)) == 1
    ntk = DPNTKClassifier(1.0, classes=[0, 1], random_state=0)
    assert len(_warned(ntk, x, y, SmallSampleWarning)) == 1
