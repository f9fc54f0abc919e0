"""Private hyperparameter selection (issue 50, item 6): accounting, sampling, the search.

The repeat-and-select bound is checked against dp-accounting's own
``RepeatAndSelectDpEvent``; the number of runs against its distribution; the search
end to end on breast cancer at total epsilon 1 (the issue's acceptance case).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import dp_accounting
import jax
import numpy as np
import pytest
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from scipy import stats
from sklearn.datasets import load_breast_cancer

from privkernels import tuning
from privkernels.privacy import keys as K
from privkernels.privacy.accounting import (
    SelectionEvent,
    gaussian_sigma,
    repeat_and_select_epsilon,
    repetition_tail,
    tnb_gamma,
    tnb_log_mass,
)
from privkernels.privacy.report import PrivacyReport
from privkernels.privacy.selection import draw_repetitions, plan_selection
from privkernels.sklearn import DPKIPClassifier, DPNTKClassifier, DPNTKGenerator, PrivateSearchCV

GAUSS = [("gaussian", 3.0)]
MIXED = [("gaussian", 2.0), ("dpsgd", 1.1, 0.01, 500)]


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("mean", [1.0, 4.0, 10.0])
@pytest.mark.parametrize("events", [GAUSS, MIXED], ids=["gaussian", "gaussian+dpsgd"])
def test_repeat_and_select_matches_dp_accounting(shape, mean, events):
    ours = repeat_and_select_epsilon([events], mean=mean, shape=shape, delta=1e-5)
    acc = dp_accounting.rdp.RdpAccountant()
    inner = dp_accounting.ComposedDpEvent([SelectionEvent(*e).dp_event() for e in events])
    acc.compose(RepeatAndSelectDpEvent(inner, mean, shape))
    # equal up to the precision of the halting probability (bisection to 1e-9 there)
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-7, abs=1e-12)


def test_heterogeneous_candidates_cost_what_the_worst_costs_at_every_order():
    """A candidate dominated at every RDP order adds nothing; the mixture is never cheaper
    than its most expensive part."""
    strong, weak = [("gaussian", 1.5)], [("gaussian", 6.0)]
    both = repeat_and_select_epsilon([strong, weak], mean=4, shape=1, delta=1e-5)
    assert both == pytest.approx(repeat_and_select_epsilon([strong], mean=4, shape=1, delta=1e-5))
    mixed = repeat_and_select_epsilon([GAUSS, MIXED], mean=4, shape=1, delta=1e-5)
    for one in (GAUSS, MIXED):
        assert mixed >= repeat_and_select_epsilon([one], mean=4, shape=1, delta=1e-5) - 1e-12


@pytest.mark.parametrize(("mean", "shape"), [(8.0, 1.0), (8.0, 0.0), (5.0, 0.5)])
def test_the_number_of_runs_follows_the_accounted_distribution(mean, shape):
    """K >= 1 with the truncated negative binomial's mean (3 standard errors, 3000 draws)
    and its first probabilities (chi-square on k = 1..4 and the rest)."""
    keys = jax.random.split(jax.random.key(5), 3000)
    draws = np.asarray([draw_repetitions(k, mean, shape) for k in keys])
    assert draws.min() >= 1
    assert abs(draws.mean() - mean) < 3 * draws.std() / np.sqrt(len(draws))
    gamma = tnb_gamma(mean, shape)
    if shape == 1.0:  # geometric: P[K = k] = gamma (1 - gamma)^(k - 1)
        probs = [gamma * (1 - gamma) ** (k - 1) for k in range(1, 5)]
        expected = np.asarray([*probs, 1 - sum(probs)]) * len(draws)
        observed = np.asarray([*(np.sum(draws == k) for k in range(1, 5)), np.sum(draws > 4)])
        chi2 = float(np.sum((observed - expected) ** 2 / expected))
        assert chi2 < 20.5  # chi-square(4) at p = 4e-4


@pytest.mark.parametrize(("mean", "shape"), [(8.0, 1.0), (8.0, 0.0), (5.0, 0.5), (30.0, 3.0)])
def test_the_runs_masses_are_scipys_truncated_negative_binomial(mean, shape):
    """`tnb_log_mass`, the one formula of the draw and of `repetition_tail`, against scipy:
    the logarithmic series for shape 0, the negative binomial conditioned on K >= 1
    otherwise; its masses sum to one."""
    gamma = tnb_gamma(mean, shape)
    k = np.arange(1, 201)
    if shape == 0.0:
        expected = stats.logser(1.0 - gamma).pmf(k)
    else:
        expected = stats.nbinom(shape, gamma).pmf(k) / (1.0 - gamma**shape)
    ours = np.exp(tnb_log_mass(k, gamma, shape))
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-300)
    assert float(np.exp(tnb_log_mass(1, gamma, shape))) == pytest.approx(expected[0], rel=1e-12)
    every = np.exp(tnb_log_mass(np.arange(1, 100_001), gamma, shape)).sum()
    assert every == pytest.approx(1.0, abs=1e-12)  # the tail past 100,000 is below 1e-30
    assert repetition_tail(mean, shape) == pytest.approx(0.0, abs=1e-12)


def test_plan_spends_the_target_and_refuses_an_impossible_one():
    ev = lambda b: [SelectionEvent("gaussian", gaussian_sigma(b.epsilon, b.delta))]  # noqa: E731
    plan = plan_selection([ev] * 4, epsilon=1.0, delta=1e-5, mean=8, shape=1)
    assert 0.999 <= plan.spent <= 1.0
    assert plan.fit_budget.epsilon + plan.score_budget.epsilon < 1.0  # one run spends less
    events = [[list(e) for e in run] for run in plan.events]
    assert repeat_and_select_epsilon(events, mean=8, shape=1, delta=1e-5) == plan.spent
    with pytest.raises(ValueError, match="no per-run budget"):
        plan_selection([ev], epsilon=1e-3, delta=1e-5, mean=100, shape=1)
    with pytest.raises(ValueError, match="too large"):  # its runs could pass their cap
        plan_selection([ev], epsilon=1.0, delta=1e-5, mean=1e6, shape=1)


@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer(return_X_y=True)
    # public, data-independent per-record map: log scale, then each row to norm 1
    z = np.log1p(x)
    return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32), y


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_private_search_cv_on_breast_cancer_within_epsilon_one(cancer):
    """The acceptance case: 4 candidates, total epsilon 1, a report of epsilon <= 1 that
    lists the selection and re-derives on load; the chosen model predicts."""
    x, y = cancer
    search = PrivateSearchCV(
        DPNTKClassifier(classes=[0, 1]), {"reg": [0.01, 0.1, 1.0, 10.0]}, epsilon=1.0
    ).fit(x, y)
    rep = search.privacy_report_
    assert rep.private and rep.epsilon <= 1.0 and rep.delta <= 1e-5
    assert [m.name for m in rep.mechanisms] == ["repeat_and_select"]
    rec = rep.mechanisms[0].param_dict
    assert len(rec["candidates"]) == 4 and len(json.loads(rec["events"])) == 4
    # the number of runs stays hidden (Theorem 2 bounds the best run with K unknown)
    assert "runs" not in rec and not hasattr(search, "n_runs_")
    fields = {f.name for f in dataclasses.fields(tuning.SelectionResult)}
    assert "run(s)" not in rep.to_json() and not fields & {"runs", "tried"}
    assert PrivacyReport.from_dict(rep.to_dict()) == rep
    assert search.best_params_ in search.candidates_
    assert search.predict(x[:5]).shape == (5,)
    inner = search.best_estimator_.privacy_report_
    assert inner.epsilon < rep.epsilon and any("PrivateSearchCV" in n for n in inner.notes)
    edited = rep.to_dict()
    edited["mechanisms"][0]["params"]["mean"] = 1.0  # claim fewer runs: a smaller epsilon
    with pytest.raises(ValueError):
        PrivacyReport.from_dict(edited)


def test_a_search_refuses_before_any_noise(cancer, monkeypatch):
    from _privacy_helpers import forbid_noise

    x, y = cancer
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="beta-close"):
        PrivateSearchCV(
            DPNTKClassifier(classes=[0, 1], neighbouring="beta-close"), {"reg": [0.1, 1.0]}
        ).fit(x, y)
    with pytest.raises(ValueError, match="classes"):
        PrivateSearchCV(DPNTKClassifier(), {"reg": [0.1, 1.0]}).fit(x, y)
    with pytest.raises(ValueError, match="epsilon"):
        PrivateSearchCV(DPNTKClassifier(classes=[0, 1]), {"epsilon": [0.5, 1.0]}).fit(x, y)
    with pytest.raises(ValueError, match="epsilon"):
        PrivateSearchCV(DPNTKClassifier(classes=[0, 1]), {"reg": [1.0]}, epsilon=0).fit(x, y)
    with pytest.raises(ValueError, match="add-remove"):
        PrivateSearchCV(DPKIPClassifier(classes=[0, 1]), {"clip_norm": [0.1, 1.0]}).fit(x, y)


def test_a_fit_that_releases_other_events_than_planned_stops_the_search(cancer):
    x, y = cancer

    class Liar:
        name = "liar"

        def events(self, budget, n_train):  # plans a large sigma ...
            return [SelectionEvent("gaussian", 100.0)]

        def fit(self, key, public_key, rows, budget):  # ... and releases at the budget's
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = DPNTKClassifier(classes=[0, 1], epsilon=budget.epsilon)
                est._search_keys = (key, public_key)
                return est.fit(x[rows], y[rows])

        def scores(self, model, rows):
            return np.ones(len(rows))

    with pytest.raises(RuntimeError, match="other events than planned"):
        tuning.select(K.fresh_key(), [Liar()], len(x), epsilon=1.0, delta=1e-5,
                      relation="replace-one")  # fmt: skip


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_dp_kip_and_generator_searches_run_under_their_relations():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(300, 6)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(int)
    kip = DPKIPClassifier(classes=[0, 1], epochs=1, batch_size=30, support_per_class=2,
                          fit_options={"neighbouring": "add-remove", "sampling_rate": 0.125})  # fmt: skip
    s = PrivateSearchCV(kip, {"clip_norm": [0.1, 1.0]}, epsilon=2.0, mean_runs=2).fit(x, y)
    assert s.privacy_report_.neighbouring == "add-remove" and s.privacy_report_.epsilon <= 2.0
    gen = DPNTKGenerator(classes=[0, 1], iterations=5, batch_size=100)
    g = PrivateSearchCV(gen, {"d_code": [2, 5]}, epsilon=2.0, mean_runs=2).fit(x, y)
    assert g.privacy_report_.epsilon <= 2.0
    xs, ys = g.sample(10)
    assert xs.shape == (10, 6) and set(np.unique(ys)) <= {0, 1}
    assert any("PrivateSearchCV" in n for n in g.best_estimator_.privacy_report_.notes)


def test_a_replace_one_dp_sgd_candidate_is_refused_before_any_noise(monkeypatch):
    """RDP covers Poisson-sampled DP-SGD under add-remove only: a search under replace-one
    with a DP-SGD event (or a fit recording one) stops before any random draw."""
    from _privacy_helpers import forbid_noise

    class Sgd:
        name = "sgd"

        def events(self, budget, n_train):
            return [SelectionEvent("dpsgd", 1.0, 0.01, 100)]

        def fit(self, key, public_key, rows, budget):  # pragma: no cover - never reached
            raise AssertionError("fit ran")

        def scores(self, model, rows):  # pragma: no cover - never reached
            raise AssertionError("scored")

    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="add-remove"):
        tuning.select(K.fresh_key(), [Sgd()], 100, epsilon=1.0, delta=1e-5,
                      relation="replace-one")  # fmt: skip


def test_under_add_remove_no_size_is_read_from_n():
    """Each row's part comes from its own coin: an added row leaves every other row's part as
    it was; the validation size is not returned (it would tell the private n)."""
    key = jax.random.key(2)
    tr_a, va_a = tuning._split(key, 1002, 200, 0.2, "add-remove")
    tr_b, va_b = tuning._split(key, 1003, 201, 0.2, "add-remove")
    assert set(va_a) == set(va_b) - {1002} and set(tr_a) == set(tr_b) - {1002}
    assert set(tr_a) | set(va_a) == set(range(1002)) and not set(tr_a) & set(va_a)


def test_every_grid_point_is_checked_and_a_fitted_search_pickles_without_its_seed(cancer):
    import pickle

    x, y = cancer
    base = DPNTKClassifier(classes=[0, 1])
    with pytest.raises(ValueError, match="classes"):
        PrivateSearchCV(base, {"classes": [None, [0, 1]]}).fit(x, y)
    with pytest.raises(ValueError, match="diagnostics"):
        kip = DPKIPClassifier(classes=[0, 1], fit_options={"diagnostics": True})
        PrivateSearchCV(kip, {"clip_norm": [0.1]}).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = PrivateSearchCV(base, {"reg": [0.1, 1.0]}, mean_runs=1, random_state=918).fit(x, y)
    assert pickle.loads(pickle.dumps(s)).random_state is None
    assert b"918" not in pickle.dumps(s.privacy_report_)


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_a_fit_under_another_relation_stops_the_search(cancer):
    """A candidate whose fit reports another relation than the search's (its sensitivities
    are for that relation) stops the search with nothing released."""
    x, y = cancer

    class AddRemove:
        name = "add-remove fit"

        def events(self, budget, n_train):
            return [SelectionEvent("gaussian", gaussian_sigma(budget.epsilon, budget.delta))] * 2

        def fit(self, key, public_key, rows, budget):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gen = DPNTKGenerator(classes=[0, 1], iterations=2, batch_size=20,
                                     epsilon=budget.epsilon, delta=budget.delta,
                                     fit_options={"neighbouring": "add-remove"})  # fmt: skip
                gen._search_keys = (key, public_key)
                return gen.fit(x[rows][:, :5], y[rows])

        def scores(self, model, rows):
            return np.ones(len(rows))

    with pytest.raises(RuntimeError, match="released under add-remove"):
        tuning.select(K.fresh_key(), [AddRemove()], len(x), epsilon=1.0, delta=1e-5,
                      relation="replace-one")  # fmt: skip


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_runs_print_no_progress_and_generators_score_on_a_public_count(capsys, monkeypatch):
    from privkernels import search as S

    seen = []
    real = S._synthetic_scores

    def spy(gen, x, y):
        out = real(gen, x, y)
        seen.append(S.SYNTHETIC_ROWS)
        return out

    monkeypatch.setattr(S, "_synthetic_scores", spy)
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(200, 4)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(int)
    gen = DPNTKGenerator(classes=[0, 1], iterations=3, batch_size=50, verbose=True)
    capsys.readouterr()
    PrivateSearchCV(gen, {"d_code": [2, 3]}, epsilon=2.0, mean_runs=2).fit(x, y)
    assert "DP-NTK" not in capsys.readouterr().err  # no progress bar per run
    assert seen and set(seen) == {S.SYNTHETIC_ROWS}
