"""`privkernels.privacy.BudgetAccountant` (issue 52, item 1): one total over many releases.

Every test here fails on the code before the accountant (no such class, no
``budget_accountant`` keyword, no ``--budget`` flag).
"""

from __future__ import annotations

import argparse
import copy
import json
import pickle
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import dp_accounting
import jax
import joblib
import numpy as np
import pytest
from _privacy_helpers import forbid_noise
from dp_accounting.pld import pld_privacy_accountant
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline

from privkernels import cli, dp_kip, dp_ntk, dp_ntk_regression, privacy, tuning
from privkernels._sklearn_accounting import DetachedAccountantWarning
from privkernels.data.schema import TabularSchema
from privkernels.dp_ntk_regression import replace_one
from privkernels.preprocessing import PrivateStandardScaler
from privkernels.privacy import Budget, BudgetAccountant, BudgetExceededError, Cost
from privkernels.privacy.accountant import FAILED_NOTE, charged_release, default_accountant
from privkernels.sklearn import (
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    PrivateSearchCV,
    load,
)
from privkernels.synth import fit_table


def _xy(n=80, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, d)).astype(np.float32), np.arange(n) % 2


def _key(i=0):
    return jax.random.fold_in(jax.random.key(2**40 + 12345), i)  # not a small-int key


def _reg_fit(acc, i=0, epsilon=1.0, **kw):
    x, y = _xy()
    return dp_ntk_regression.fit(
        _key(i), x, y.astype(np.float64), epsilon=epsilon, budget_accountant=acc, **SMALL, **kw
    )


#: the cheapest replace-one regression (a fit takes milliseconds once compiled)
SMALL = {"width": 16, "features": 32}


def _clf(**kw):
    return DPNTKClassifier(classes=[0, 1], width=16, fit_options={"features": 32}, **kw)


# ----------------------------------------------------------------------------- the value


def test_total_is_validated_like_every_budget():
    for eps in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="epsilon"):
            BudgetAccountant(eps, 1e-5)
    for delta in (-1e-9, 1.0, 2.0):
        with pytest.raises(ValueError, match="delta"):
            BudgetAccountant(1.0, delta)
    with pytest.raises(ValueError, match="neighbouring"):
        BudgetAccountant(1.0, 1e-5, neighbouring="beta-close")  # not standard DP
    assert BudgetAccountant(1.0, 0.0).remaining().delta == 0.0  # a pure-DP total


def test_charges_compose_basically_and_refuse_past_the_total():
    acc = BudgetAccountant(3.0, 1e-4)
    a, b = _reg_fit(acc, 0), _reg_fit(acc, 1, epsilon=1.5)
    assert acc.reports == (a.report, b.report)
    total = privacy.compose(a.report, b.report)
    assert acc.report == total
    assert acc.spent().epsilon == total.epsilon and acc.spent().delta == total.delta
    assert acc.remaining().epsilon == pytest.approx(3.0 - total.epsilon)
    with pytest.raises(BudgetExceededError, match=r"asks for \(1, 1e-05\)") as err:
        _reg_fit(acc, 2)
    assert "(0.5, 8e-05)" in str(err.value)  # the remaining budget, a public number
    assert len(acc.reports) == 2  # nothing charged for the refusal
    acc.charge(Budget(0.5, 1e-5))  # a bare budget fills the rest (within an ulp)
    assert acc.remaining().epsilon == 0.0
    assert "without a report" in acc.report.notes[-1]


def test_basic_rule_upper_bounds_dp_accounting_pld():
    """The accountant's total for Gaussian releases is at least what dp_accounting's PLD
    accountant gives for the same composed Gaussian events at the summed delta."""
    acc = BudgetAccountant(10.0, 1e-3)
    for i, eps in enumerate((0.5, 1.0, 2.0)):
        _reg_fit(acc, i, epsilon=eps)
    sigmas = [r.mechanisms[0].param_dict["sigma"] for r in acc.reports]
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s) for s in sigmas]))
    tight = pld.get_epsilon(acc.spent().delta)
    assert tight <= acc.spent().epsilon
    assert acc.spent().epsilon == pytest.approx(3.5)
    one = pld_privacy_accountant.PLDAccountant()  # one release: the rule is exact
    one.compose(dp_accounting.GaussianDpEvent(sigmas[0]))
    assert one.get_epsilon(1e-5) == pytest.approx(0.5, rel=2e-2)


def test_another_relation_or_a_non_private_fit_is_refused(monkeypatch):
    acc = BudgetAccountant(5.0, 1e-4, neighbouring="add-remove")
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="add-remove guarantees"):
        _reg_fit(acc)  # a replace-one fit
    with pytest.raises(BudgetExceededError, match="non-private"):
        _reg_fit(BudgetAccountant(5.0, 1e-4), epsilon=None)
    with pytest.raises(ValueError, match="cannot be charged"):
        x, y = _xy()
        dp_ntk_regression.fit(_key(), x, y.astype(float), epsilon=1.0, neighbouring="beta-close",
                              budget_accountant=BudgetAccountant(5.0, 1e-4))  # fmt: skip
    assert acc.spent().epsilon == 0.0


# ----------------------------------------------------------------------------- refusals before noise


def _spent_accountant():
    acc = BudgetAccountant(1.0, 1e-4)
    acc.charge(Budget(0.9, 1e-5))
    return acc


def test_each_fit_is_refused_before_any_noise(monkeypatch):
    x, y = _xy()
    forbid_noise(monkeypatch)
    fits = {
        "regression": lambda acc: _reg_fit(acc),
        "dp_ntk": lambda acc: dp_ntk.fit(_key(), x, y, epsilon=1.0, n_classes=2, iterations=1,
                                         progress=False, budget_accountant=acc),
        "dp_kip": lambda acc: dp_kip.fit(_key(), x, y, epsilon=1.0, n_classes=2, kernel="fc_ntk",
                                         epochs=1, progress=False, budget_accountant=acc),
    }  # fmt: skip
    for name, fit in fits.items():
        acc = _spent_accountant()
        with pytest.raises(BudgetExceededError):
            fit(acc)
        assert acc.spent().epsilon == 0.9, name
        with _spent_accountant():  # the default accountant refuses as well
            with pytest.raises(BudgetExceededError):
                fit(None)


def test_each_estimator_is_refused_before_any_noise(monkeypatch):
    x, y = _xy()
    forbid_noise(monkeypatch)
    ests = [
        DPNTKRegressor(random_state=None),
        DPNTKClassifier(classes=[0, 1]),
        DPKIPClassifier(classes=[0, 1], epochs=1),
        DPNTKGenerator(classes=[0, 1], iterations=1),
    ]
    for est in ests:
        acc = _spent_accountant()
        with pytest.raises(BudgetExceededError):
            est.set_params(budget_accountant=acc).fit(x, y)
    table = {"a": x[:, 0], "label": y}
    schema = privacy_schema()
    with pytest.raises(BudgetExceededError):
        fit_table(_key(), table, schema, epsilon=1.0, budget_accountant=_spent_accountant())


def privacy_schema():
    return TabularSchema.from_dict(
        {"label": "label", "classes": ["0", "1"], "source": "public",
         "columns": [{"name": "a", "kind": "numeric", "bounds": [0.0, 1.0]}]}
    )  # fmt: skip


def test_bad_input_is_not_charged_and_a_failure_after_noise_is():
    acc = BudgetAccountant(5.0, 1e-4)
    x, _ = _xy()
    with pytest.raises(ValueError):
        dp_ntk_regression.fit(_key(), x, np.full(len(x), np.nan), epsilon=1.0,
                              budget_accountant=acc)  # fmt: skip
    assert acc.spent().epsilon == 0.0  # refused before its release began: nothing charged
    with pytest.raises(RuntimeError, match="boom"):
        with acc:
            privacy_release_then_fail()
    assert acc.spent().epsilon == pytest.approx(0.7)  # the plan, charged
    assert acc.reports == () and FAILED_NOTE in json.dumps(acc.to_dict())


def test_a_fit_failing_after_its_release_is_charged_its_plan(monkeypatch):
    acc = BudgetAccountant(5.0, 1e-4)

    def failing_solve(*args, **kwargs):
        raise FloatingPointError("the solve after the release failed")

    monkeypatch.setattr(replace_one, "solve", failing_solve)
    with pytest.raises(FloatingPointError):
        _reg_fit(acc)
    assert acc.spent() == Cost(1.0, 1e-5) and acc.reports == ()  # the plan, no report


def privacy_release_then_fail():
    def release():
        privacy.gaussian_release(_key(), np.zeros(3), budget=Budget(0.7, 1e-5), sensitivity=1.0,
                                 released="test")  # fmt: skip
        raise RuntimeError("boom")

    charged_release(None, 0.7, 1e-5, "replace-one", release)


# ----------------------------------------------------------------------------- the with block


def test_with_block_scopes_nest_and_restore_on_exceptions():
    outer, inner = BudgetAccountant(3.0, 1e-4), BudgetAccountant(2.0, 1e-4)
    assert default_accountant() is None
    with outer:
        _reg_fit(None, 0)
        with pytest.raises(KeyError), inner:
            assert default_accountant() is inner
            _reg_fit(None, 1)
            raise KeyError("leaves the inner block")
        assert default_accountant() is outer
        _reg_fit(None, 2)
    assert default_accountant() is None
    assert (outer.spent().epsilon, inner.spent().epsilon) == (2.0, 1.0)
    _reg_fit(None, 3)  # outside any block: charged nowhere
    assert outer.spent().epsilon == 2.0


# ----------------------------------------------------------------------------- scikit-learn


def test_clone_and_deepcopy_keep_the_same_ledger_and_pickling_is_refused():
    acc = BudgetAccountant(3.0, 1e-4)
    assert copy.copy(acc) is acc and copy.deepcopy(acc) is acc
    est = _clf(budget_accountant=acc)
    assert clone(est).budget_accountant is acc
    with pytest.raises(TypeError, match="n_jobs=1"):
        pickle.dumps(acc)
    with pytest.raises(TypeError, match="n_jobs=1"):
        pickle.dumps(est)
    with acc:
        in_block = clone(_clf())  # GridSearchCV clones in the calling thread
    with pytest.raises(TypeError, match="n_jobs=1"):
        pickle.dumps(in_block)  # the block's accountant would not follow it
    pickle.dumps(clone(_clf()))  # outside any block: nothing to carry
    x, y = _xy()
    est.fit(x, y)
    back = pickle.loads(pickle.dumps(est))  # a fitted model leaves its ledger behind
    assert back.budget_accountant is None


def test_grid_search_charges_every_fit_and_the_fourth_is_refused(monkeypatch):
    """The issue's case: GridSearchCV ran its fits on the same data and reported one; with
    a total of epsilon 3 the fourth fit at epsilon 1 is refused, before noise."""
    x, y = _xy(120)
    acc = BudgetAccountant(3.0, 1e-4)
    grid = GridSearchCV(_clf(), {"reg": [0.1, 1.0]}, cv=2, n_jobs=1,
                        error_score="raise")  # fmt: skip
    with acc, pytest.raises(BudgetExceededError):
        grid.fit(x, y)  # fits 1-3 run, the 4th is refused
    assert len(acc.reports) == 3 and acc.remaining().epsilon == 0.0
    explicit = BudgetAccountant(10.0, 1e-4)
    grid = GridSearchCV(_clf(budget_accountant=explicit),
                        {"reg": [0.1, 1.0]}, cv=2, n_jobs=1)  # fmt: skip
    grid.fit(x, y)
    assert len(explicit.reports) == 5  # 4 fits and the refit, each charged
    threads = BudgetAccountant(10.0, 1e-4)
    grid = GridSearchCV(_clf(), {"reg": [0.1, 1.0]}, cv=2, n_jobs=2)
    with threads, joblib.parallel_backend("threading"):  # worker threads see no ContextVar
        grid.fit(x, y)
    assert len(threads.reports) == 5  # the clones keep the block's accountant


def test_grid_search_with_two_workers_fails_loudly():
    x, y = _xy(60)
    acc = BudgetAccountant(10.0, 1e-4)
    grid = GridSearchCV(_clf(budget_accountant=acc),
                        {"reg": [0.1, 1.0]}, cv=2, n_jobs=2)  # fmt: skip
    with pytest.raises(Exception) as err:  # joblib's PicklingError, caused by the accountant
        grid.fit(x, y)
    chain, e = [], err.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("n_jobs=1" in m for m in chain), chain
    assert acc.spent().epsilon == 0.0
    grid = GridSearchCV(_clf(), {"reg": [0.1, 1.0]}, cv=2, n_jobs=2)  # the with-block default
    with acc, pytest.raises(Exception) as err:
        grid.fit(x, y)
    assert acc.spent().epsilon == 0.0


def test_a_private_search_is_charged_once_for_the_whole_search():
    x, y = _xy(120)
    acc = BudgetAccountant(5.0, 1e-4)
    est = DPNTKRegressor(width=16, fit_options={"features": 32}, budget_accountant=acc)
    search = PrivateSearchCV(est, {"reg": [0.1, 1.0]}, epsilon=2.0, random_state=None)
    search.fit(x, y.astype(np.float64))
    assert acc.reports == (search.privacy_report_,)  # its fits are covered, not charged twice
    with acc, pytest.raises(BudgetExceededError):
        PrivateSearchCV(DPNTKRegressor(width=16), {"reg": [0.1, 1.0]}, epsilon=3.5).fit(x, y * 1.0)
    assert tuning.select.__kwdefaults__["budget_accountant"] is None


def test_a_saved_estimator_does_not_store_its_accountant(tmp_path):
    x, y = _xy()
    acc = BudgetAccountant(3.0, 1e-4)
    est = _clf(budget_accountant=acc).fit(x, y)
    back = load(est.save(tmp_path / "m.npz"))
    assert back.budget_accountant is None and acc.spent().epsilon == 1.0


# ----------------------------------------------------------------------------- the ledger and the CLI


def test_ledger_round_trips_and_refuses_an_edited_entry(tmp_path):
    acc = BudgetAccountant(3.0, 1e-4)
    _reg_fit(acc)
    path = acc.save(tmp_path / "ledger.json")
    back = BudgetAccountant.load(path)
    assert back.reports == acc.reports and back.spent() == acc.spent()
    data = json.loads(path.read_text())
    data["entries"][0]["epsilon"] = 0.1  # under-counting by hand
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="does not match"):
        BudgetAccountant.load(path)


def test_cli_budget_refuses_before_reading_the_data(tmp_path, capsys, monkeypatch):
    ledger = tmp_path / "ledger.json"
    assert cli.main(["budget", "init", str(ledger), "--epsilon", "1.5", "--delta", "1e-4"]) == 0
    acc = BudgetAccountant.load(ledger)
    acc.charge(Budget(1.0, 1e-5))
    acc.save(ledger)
    x, y = _xy(20)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    (tmp_path / "d.csv").write_text(
        "a,label\n" + "".join(f"{v},{c}\n" for v, c in zip(x[:, 0], y, strict=True))
    )
    privacy_schema().save(tmp_path / "s.json")
    read = []
    monkeypatch.setattr(cli, "read_csv", lambda *a, **k: read.append(a))
    monkeypatch.setattr(cli, "_read_xy", lambda *a, **k: read.append(a))
    for argv in (
        ["distill", str(tmp_path / "d.npz"), "--classes", "0,1", "--epsilon", "1"],
        ["synth", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--epsilon", "1"],
    ):
        out = ["--out", str(tmp_path / "o.npz"), "--budget", str(ledger)]
        assert cli.main([*argv, *out]) == 2
        assert "refuses this release" in capsys.readouterr().err
    assert read == [] and BudgetAccountant.load(ledger).spent().epsilon == 1.0
    assert cli.main(["synth", "--model", str(tmp_path / "d.npz"), "--out", "o.csv",
                     "--budget", str(ledger)]) == 2  # fmt: skip
    assert "--budget" in capsys.readouterr().err  # sampling charges nothing: not ignored silently


@pytest.mark.slow
def test_cli_distill_charges_the_ledger(tmp_path, capsys):
    x, y = _xy(60)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=y)
    ledger = tmp_path / "ledger.json"
    cli.main(["budget", "init", str(ledger), "--epsilon", "1.5", "--delta", "1e-4"])
    argv = ["distill", str(data), "--epsilon", "1", "--epochs", "1", "--support-per-class", "1",
            "--classes", "0,1", "--quiet", "--out", str(tmp_path / "s.npz"), "--budget",
            str(ledger)]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(argv) == 0
    acc = BudgetAccountant.load(ledger)
    assert len(acc.reports) == 1 and acc.spent().epsilon <= 1.0
    assert cli.main(argv) == 2  # the second run does not fit in what remains
    assert "refuses this release" in capsys.readouterr().err


def test_cli_report_reads_a_ledger(tmp_path, capsys):
    """``privkernels report LEDGER`` prints the totals and, with --json, the composed report
    of the charged releases (an edited ledger is refused, as `budget show` refuses it)."""
    ledger = tmp_path / "ledger.json"
    assert cli.main(["budget", "init", str(ledger), "--epsilon", "3", "--delta", "1e-4"]) == 0
    capsys.readouterr()
    assert cli.main(["report", str(ledger)]) == 0
    assert "spent (0, 0) in 0 release(s); remaining (3, 0.0001)" in capsys.readouterr().out
    acc = BudgetAccountant.load(ledger)
    _reg_fit(acc)
    acc.save(ledger)
    assert cli.main(["report", str(ledger), "--json"]) == 0
    printed = capsys.readouterr()
    assert "1 release(s)" in printed.err and json.loads(printed.out)["epsilon"] == 1.0
    data = json.loads(ledger.read_text())
    data["entries"][0]["epsilon"] = 0.1
    ledger.write_text(json.dumps(data))
    assert cli.main(["report", str(ledger)]) == 2
    assert "does not match" in capsys.readouterr().err


def test_a_pipeline_of_private_scaler_and_estimator_is_charged_whole(monkeypatch):
    """A private scaler and a DPNTKRegressor with preprocessing='auto' each charge their
    whole (epsilon, delta) (scales and model together), before any noise; a third fit
    that would exceed the total is refused with nothing drawn."""
    x, y = _xy(60)
    acc = BudgetAccountant(2.5, 1e-4)
    with acc:
        PrivateStandardScaler(epsilon=0.5, bounds=(-5.0, 5.0), random_state=0).fit(x)
        reg = DPNTKRegressor(epsilon=1.0, width=16, random_state=1).fit(x, y.astype(float))
    assert len(acc.reports) == 2
    assert acc.spent().epsilon == pytest.approx(1.5)
    assert reg.privacy_report_.epsilon == pytest.approx(1.0)
    forbid_noise(monkeypatch)
    with pytest.raises(BudgetExceededError):
        DPNTKRegressor(epsilon=1.5, width=16, random_state=2, budget_accountant=acc).fit(
            x, y.astype(float)
        )
    assert acc.spent().epsilon == pytest.approx(1.5)


# ----------------------------------------------------------------------------- adversary fixes (B1-B7, C3, C4)


def _ns(ledger, epsilon=1.0):
    return argparse.Namespace(cmd="distill", budget=str(ledger), model=None, epsilon=epsilon,
                              delta=1e-5, neighbouring="replace-one")  # fmt: skip


def test_b1_concurrent_cli_runs_on_one_ledger_take_turns(tmp_path):
    """Two ``--budget`` runs at once (total 1, each asks 1): the second waits for the
    first's save and is refused, instead of both passing the check on a stale copy."""
    ledger = tmp_path / "l.json"
    BudgetAccountant(1.0, 1e-4).save(ledger)

    def slow_release(a):
        time.sleep(0.3)  # both runs are in flight at once
        default_accountant().charge(Budget(a.epsilon, a.delta))
        return 0

    def one_run(_):
        try:
            return cli._charged(slow_release, _ns(ledger))
        except BudgetExceededError:
            return "refused"

    with ThreadPoolExecutor(2) as ex:
        outcomes = sorted(map(str, ex.map(one_run, range(2))))
    assert outcomes == ["0", "refused"]
    assert BudgetAccountant.load(ledger).spent().epsilon == pytest.approx(1.0)


def test_b1_a_failed_run_does_not_save_a_stale_ledger_over_a_charge(tmp_path):
    ledger = tmp_path / "l.json"
    BudgetAccountant(3.0, 1e-4).save(ledger)

    def fails(a):
        time.sleep(0.3)
        raise RuntimeError("boom")

    def charges(a):
        default_accountant().charge(Budget(a.epsilon, a.delta))
        return 0

    with ThreadPoolExecutor(2) as ex:
        bad = ex.submit(cli._charged, fails, _ns(ledger))
        time.sleep(0.1)
        good = ex.submit(cli._charged, charges, _ns(ledger))
        with pytest.raises(RuntimeError):
            bad.result()
        assert good.result() == 0
    assert BudgetAccountant.load(ledger).spent().epsilon == pytest.approx(1.0)


def test_b2_saving_through_a_symlink_updates_the_target(tmp_path):
    target = tmp_path / "real" / "ledger.json"
    target.parent.mkdir()
    acc = BudgetAccountant(2.0, 1e-4)
    acc.save(target)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    acc.charge(Budget(0.5, 1e-5))
    acc.save(link)
    assert link.is_symlink()
    assert BudgetAccountant.load(target).spent().epsilon == pytest.approx(0.5)


def test_b3_a_fit_in_a_worker_thread_inside_a_block_is_refused(monkeypatch):
    x, _ = _xy(60)
    forbid_noise(monkeypatch)
    with BudgetAccountant(5.0, 1e-4) as acc, ThreadPoolExecutor(1) as ex:
        job = ex.submit(lambda: PrivateStandardScaler(1.0, bounds=(0.0, 1.0)).fit(x))
        with pytest.raises(ValueError, match="budget_accountant= explicitly"):
            job.result()
    assert acc.spent().epsilon == 0.0


def test_b3_an_explicit_accountant_in_a_worker_thread_is_charged():
    x, _ = _xy(60)
    with BudgetAccountant(5.0, 1e-4) as acc, ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: PrivateStandardScaler(1.0, budget_accountant=acc).fit(x)).result()
    assert acc.spent().epsilon == pytest.approx(1.0)


def test_b4_scalers_in_parallel_cross_validation_are_charged_or_fail_loudly():
    x, y = _xy(60)
    pipe = make_pipeline(PrivateStandardScaler(1.0, bounds=(0.0, 1.0)), Ridge())
    acc = BudgetAccountant(10.0, 1e-4)
    with acc, joblib.parallel_backend("threading"):
        cross_val_score(pipe, x, y.astype(float), cv=3, n_jobs=2, error_score="raise")
    assert acc.spent().epsilon == pytest.approx(3.0)  # one charge per fold
    with acc, pytest.raises(Exception) as err:  # loky: the accountant refuses to be pickled
        cross_val_score(pipe, x, y.astype(float), cv=3, n_jobs=2, error_score="raise")
    assert "n_jobs=1" in repr(err.value) or "n_jobs=1" in str(err.value.__cause__)
    assert acc.spent().epsilon == pytest.approx(3.0)


def test_b5_a_fit_in_a_user_callback_inside_a_release_is_charged():
    x, y = _xy(60)
    acc = BudgetAccountant(3.0, 1e-4)
    extra = []

    def cb(it, loss):
        if not extra:
            extra.append(PrivateStandardScaler(1.0, budget_accountant=acc).fit(x))

    DPNTKGenerator(epsilon=1.0, classes=[0, 1], iterations=2, verbose=False,
                   budget_accountant=acc, fit_options={"callback": cb}).fit(x, y)  # fmt: skip
    assert len(extra) == 1
    assert acc.spent().epsilon == pytest.approx(2.0)  # the generator and the scaler


def test_b6_copies_keep_the_accountant_and_an_unpickled_refit_warns():
    x, _ = _xy(60)
    acc = BudgetAccountant(5.0, 1e-4)
    sc = PrivateStandardScaler(1.0, budget_accountant=acc).fit(x)
    for twin in (copy.copy(sc), copy.deepcopy(sc)):
        assert twin.budget_accountant is acc
        twin.fit(x)
    assert acc.spent().epsilon == pytest.approx(3.0)
    thawed = pickle.loads(pickle.dumps(sc))
    assert thawed.budget_accountant is None
    with pytest.warns(DetachedAccountantWarning, match="charged to no ledger"):
        thawed.fit(x)
    with BudgetAccountant(1.0, 1e-4) as other, warnings.catch_warnings():
        warnings.simplefilter("error", DetachedAccountantWarning)
        thawed.fit(x)  # a block charges it: no warning
    assert other.spent().epsilon == pytest.approx(1.0)


def test_b7_a_search_and_its_estimator_naming_two_accountants_are_refused(monkeypatch):
    x, y = _xy(60)
    a, b = BudgetAccountant(5.0, 1e-4), BudgetAccountant(5.0, 1e-4)
    forbid_noise(monkeypatch)
    est = DPNTKRegressor(width=16, budget_accountant=b)
    with pytest.raises(ValueError, match="two different budget accountants"):
        PrivateSearchCV(est, {"reg": [0.1, 1.0]}, epsilon=1.0, budget_accountant=a).fit(x, y * 1.0)
    assert a.spent().epsilon == b.spent().epsilon == 0.0


def test_c3_a_bare_ledger_entry_of_zero_cost_is_refused():
    acc = BudgetAccountant(2.0, 1e-4)
    acc.charge(Budget(0.5, 1e-5))
    data = acc.to_dict()
    data["entries"][0]["epsilon"] = 0.0
    with pytest.raises(ValueError, match="zero epsilon"):
        BudgetAccountant.from_dict(data)


def test_c4_a_ledger_missing_a_field_is_one_line_exit_2(tmp_path, capsys):
    ledger = tmp_path / "x.json"
    ledger.write_text(json.dumps({"format": "privkernels-budget-ledger/1", "epsilon": 1}))
    with pytest.raises(ValueError, match="'delta'"):
        BudgetAccountant.load(ledger)
    assert cli.main(["budget", "show", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'delta'" in err
