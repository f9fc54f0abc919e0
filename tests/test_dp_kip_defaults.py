"""DPKIPClassifier's defaults (issue #52, item 4): public-data rules, the small-n warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

from benchmarks.defaults_dp_kip import monotone, rare_validated_n, validated_n
from privkernels import sklearn as pk_sklearn
from privkernels.dp_kip import estimator_defaults
from privkernels.dp_kip.estimator_defaults import (
    RARE_VALIDATED_N,
    VALIDATED_N,
    WARN_N,
    SmallDataWarning,
    warn_small_data,
)
from privkernels.sklearn import CLASSIFIER_RARE_VALIDATED_N, DPKIPClassifier


class _Captured(BaseException):
    """Stops a fit at its call of dp_kip.fit (nothing drawn), carrying the keywords."""


def _capture_fit(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    seen: list[dict] = []

    def fake_fit(key, x, y, **kw):
        seen.append(kw)
        raise _Captured

    monkeypatch.setattr(pk_sklearn.dp_kip, "fit", fake_fit)
    return seen


@pytest.fixture(scope="module")
def wine():
    """Wine (124 training rows, 3 classes), standardised by the training split's statistics
    (a public set: its statistics are public)."""
    x, y = load_wine(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    mu, sd = xtr.mean(0), xtr.std(0)
    return (xtr - mu) / sd, (xte - mu) / sd, ytr, yte


def test_default_beats_majority_on_small_public_set(wine):
    # Issue 52: the MNIST-chosen defaults scored near or below the majority class on wine
    # (today's main: mean accuracy 0.48 over seeds 0-2, majority 0.39).
    xtr, xte, ytr, yte = wine
    majority = np.max(np.bincount(yte)) / len(yte)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded keys, small-n warning (tested below)
        accs = [
            DPKIPClassifier(classes=[0, 1, 2], random_state=s).fit(xtr, ytr).score(xte, yte)
            for s in (0, 1, 2)
        ]
    assert np.mean(accs) >= majority + 0.3, accs


def test_small_data_warning_threshold():
    # The rare-class rule: the class counts are private, so the warning covers a 5% class.
    assert WARN_N == max(VALIDATED_N, RARE_VALIDATED_N[0.05]) > VALIDATED_N
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallDataWarning)
        warn_small_data(WARN_N, 1.0)  # at the threshold: quiet
        warn_small_data(2 * WARN_N, 0.5)  # n * min(eps, 1) at it: quiet
        warn_small_data(10, None)  # the non-private baseline has no DP-SGD noise
    figures = (VALIDATED_N, RARE_VALIDATED_N[0.10], RARE_VALIDATED_N[0.05])
    with pytest.warns(SmallDataWarning, match="n >= ") as rec:
        warn_small_data(WARN_N - 1, 1.0)
    msg = str(rec[0].message)
    assert all(f"n >= {v} " in msg for v in figures), msg
    assert "not read" in msg and "decision_function" in msg
    with pytest.warns(SmallDataWarning):
        warn_small_data(WARN_N, 0.5)  # validated at epsilon 1: a smaller one needs more
    with pytest.warns(SmallDataWarning):
        warn_small_data(WARN_N - 1, 10.0)  # a larger one is not validated below it
    with pytest.warns(SmallDataWarning):
        warn_small_data(VALIDATED_N, 1.0)  # balanced-validated, but not for a rare class


def test_fit_warns_below_validated_n_and_not_above(monkeypatch):
    seen = _capture_fit(monkeypatch)  # the warning comes before dp_kip.fit: no fit needed
    rng = np.random.default_rng(0)
    for n, expect in ((VALIDATED_N + 1, True), (WARN_N - 1, True), (WARN_N, False)):
        x, y = rng.normal(size=(n, 5)), np.arange(n) % 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(_Captured):
                DPKIPClassifier(classes=[0, 1], random_state=0).fit(x, y)
        small = [w for w in caught if issubclass(w.category, SmallDataWarning)]
        assert bool(small) == expect, n
        assert all(str(n) not in str(w.message) for w in small)  # no count of the data
    assert len(seen) == 3


def test_default_resolution_reads_no_value_of_x(monkeypatch):
    seen = _capture_fit(monkeypatch)
    rng = np.random.default_rng(1)
    n = 1500
    inputs = [
        (rng.normal(size=(n, 8)), np.arange(n) % 3),
        (1e3 * rng.standard_cauchy(size=(n, 8)) + 7.0, np.where(np.arange(n) < 50, 2, 0)),
    ]
    for x, y in inputs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(_Captured):
                DPKIPClassifier(classes=[0, 1, 2], random_state=0).fit(x, y)
    first, second = seen
    assert first == second  # every setting but the data (and the key) is the same
    assert first["support_per_class"] == 2 and first["epochs"] == 10  # 1500 // (200 * 3)
    assert first["learning_rate"] == pytest.approx(1 / np.sqrt(10 * 3))  # q = 500 / 1500


def test_defaults_are_functions_of_public_numbers():
    d = estimator_defaults(20000, 2, kernel="fc_ntk")
    assert (d.support_per_class, d.epochs) == (10, 10)
    assert d.learning_rate == pytest.approx(1 / np.sqrt(10 * 40))
    small = estimator_defaults(100, 2, kernel="fc_ntk")
    assert small.support_per_class == 1 and small.learning_rate == pytest.approx(1 / np.sqrt(10))
    given = estimator_defaults(100, 2, kernel="fc_ntk", support_per_class=3, learning_rate=0.5)
    assert (given.support_per_class, given.learning_rate) == (3, 0.5)
    other = estimator_defaults(100, 2, kernel="scatternet")  # MNIST kernels: as before
    assert (other.support_per_class, other.learning_rate) == (10, None)


def test_add_remove_defaults_do_not_read_n():
    # Under add-remove n is private: the rule uses the public batch_size / sampling_rate.
    est = DPKIPClassifier(
        classes=[0, 1], batch_size=100,
        fit_options={"neighbouring": "add-remove", "sampling_rate": 0.05},
    )  # fmt: skip
    (pub_a, hp_a), (pub_b, hp_b) = est._defaults(900, 2), est._defaults(5000, 2)
    assert pub_a == pub_b == pytest.approx(2000) and hp_a == hp_b
    assert hp_a.support_per_class == 5 and hp_a.learning_rate == pytest.approx(1 / np.sqrt(200))


def test_validated_n_is_the_committed_tables():
    # VALIDATED_N follows the rule of benchmarks/results/defaults-dp-kip-rule.md applied to
    # the committed final table; a new table that moves it must move the constant too.
    path = Path(__file__).parents[1] / "benchmarks" / "results" / "defaults-dp-kip.json"
    rows = json.loads(path.read_text())["rows"]
    assert validated_n(rows) == VALIDATED_N
    make = [r for r in rows if r["set"].startswith("make_classification")]
    assert monotone(make)  # no worse as n grows


def test_rare_validated_n_is_the_committed_table():
    # Both classifiers' rare-class figures follow the rule of
    # benchmarks/results/defaults-rare-class-rule.md applied to its committed table.
    path = Path(__file__).parents[1] / "benchmarks" / "results" / "defaults-rare-class.json"
    rows = json.loads(path.read_text())["rows"]
    constants = {
        "DPKIPClassifier": RARE_VALIDATED_N,
        "DPNTKClassifier": CLASSIFIER_RARE_VALIDATED_N,
    }
    for name, figures in constants.items():
        for share, n in figures.items():
            these = [r for r in rows if r["estimator"] == name and r["share"] == share]
            assert len(these) == 6 and rare_validated_n(these) == n, (name, share)


def test_default_ranks_a_class_that_differs_only_in_scale():
    """Issue 52 item 4: on epileptic (minority rows of 5x the norm) the plain FC-NTK ranked
    the test rows inverted, AUC 0.026 on every seed (``defaults-tabular.md``); the same
    happens here on synthetic rows, 20% of them 5x larger (main: AUC 0.07 to 0.22). The
    sphere-lift default (``defaults-dp-kip-lift-rule.md``) ranks them the right way up."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = (rng.random(n) < 0.2).astype(int)
        return rng.normal(size=(n, 20)) * np.where(y == 1, 5.0, 1.0)[:, None], y

    (xtr, ytr), (xte, yte) = rows(2000), rows(1000)
    mu, sd = xtr.mean(0), xtr.std(0)  # synthetic, public
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded keys
        aucs = [
            roc_auc_score(yte, DPKIPClassifier(classes=[0, 1], random_state=s)
                          .fit((xtr - mu) / sd, ytr).decision_function((xte - mu) / sd))
            for s in (0, 1)
        ]  # fmt: skip
    assert min(aucs) >= 0.9, aucs


def test_fit_passes_the_sphere_lift_under_the_callers_kernel_options(monkeypatch):
    """The FC-NTK default ``sphere_lift=True`` is added beneath ``fit_options``'
    ``kernel_options`` (the caller's keys win); other kernels get nothing added."""
    seen = _capture_fit(monkeypatch)
    x, y = np.random.default_rng(0).normal(size=(600, 4)), np.arange(600) % 2
    cases = [
        ({}, {"sphere_lift": True}),
        ({"fit_options": {"kernel_options": {"depth": 2}}}, {"sphere_lift": True, "depth": 2}),
        ({"fit_options": {"kernel_options": {"sphere_lift": False}}}, {"sphere_lift": False}),
        ({"kernel": "scatternet", "image_shape": (2, 2)}, None),
    ]
    for params, expected in cases:
        with warnings.catch_warnings(), pytest.raises(_Captured):
            warnings.simplefilter("ignore")
            DPKIPClassifier(classes=[0, 1], random_state=0, **params).fit(x, y)
        assert seen[-1].get("kernel_options") == expected, params
