"""Tests of PrivacyReport / MechanismRecord / compose and the record builders."""

from __future__ import annotations

import json
import math

import pytest

from privkernels.privacy import accounting, mechanisms
from privkernels.privacy.report import (
    ADD_REMOVE,
    BETA_CLOSE,
    REPLACE_ONE,
    MechanismRecord,
    PrivacyReport,
    compose,
    non_private_report,
)


def _rec(eps: float, delta: float, name: str = "gaussian", **params) -> MechanismRecord:
    """A consistent record: a Gaussian release's sigma is the one its budget gives."""
    if name == "gaussian":
        sigma = accounting.gaussian_sigma(eps, delta)
        return mechanisms.gaussian_record(
            f"stat-{eps}", epsilon=eps, delta=delta, sensitivity=1.0, sigma=sigma, **params
        )
    return MechanismRecord.make(
        name, f"stat-{eps}", eps, delta, sensitivity=1.0, accountant="analytic-gaussian", **params
    )


def _report(eps_list, rel=REPLACE_ONE, **kw) -> PrivacyReport:
    return PrivacyReport.from_mechanisms(
        [_rec(e, 1e-6 * (i + 1)) for i, e in enumerate(eps_list)], rel, **kw
    )


def test_from_mechanisms_and_compose_sum_epsilon_and_delta():
    a = _report([0.5, 0.25], data_independent=("random weights",), notes=("note A",))
    b = _report([1.0], data_independent=("random weights", "n public"), notes=("note B",))
    assert a.epsilon == pytest.approx(0.75) and a.delta == pytest.approx(3e-6)
    assert a.composition == "basic" and b.composition == "single"
    c = compose(a, b)
    assert c.epsilon == pytest.approx(1.75) and c.delta == pytest.approx(4e-6)
    assert c.private and c.neighbouring == REPLACE_ONE
    assert [m.epsilon for m in c.mechanisms] == [0.5, 0.25, 1.0]
    assert c.data_independent == ("random weights", "n public")  # de-duplicated, ordered
    assert c.notes == ("note A", "note B")
    assert "1.75" in c.summary()


def test_compose_rejects_mixed_relations_and_empty():
    with pytest.raises(ValueError, match="neighbouring"):
        compose(_report([1.0], REPLACE_ONE), _report([1.0], ADD_REMOVE))
    with pytest.raises(ValueError, match="neighbouring"):
        compose(_report([1.0], BETA_CLOSE), _report([1.0], REPLACE_ONE))
    with pytest.raises(ValueError):
        compose()
    with pytest.raises(ValueError, match="mechanism"):
        PrivacyReport.from_mechanisms([], REPLACE_ONE)


def test_non_private_composition_is_non_private():
    c = compose(_report([1.0]), non_private_report())
    assert not c.private and math.isinf(c.epsilon)
    assert "NON-PRIVATE" in c.summary()


@pytest.mark.parametrize(
    "eps,delta",
    [(-1.0, 1e-5), (math.inf, 1e-5), (math.nan, 1e-5), (1.0, 1.0), (1.0, -0.1)],
)
def test_private_report_rejects_invalid_guarantee(eps, delta):
    with pytest.raises(ValueError):
        PrivacyReport(epsilon=eps, delta=delta, neighbouring=REPLACE_ONE)


def test_zero_epsilon_report_is_valid():
    """(0, delta)-DP is a valid guarantee (e.g. one DP-SGD step with enormous noise)."""
    assert PrivacyReport(epsilon=0.0, delta=1e-5, neighbouring=REPLACE_ONE).private


def test_json_round_trip():
    sigma = accounting.gaussian_sigma(1.0, 1e-5)
    rec = mechanisms.gaussian_record(
        "embedding", epsilon=1.0, delta=1e-5, sensitivity=0.5, sigma=sigma, shape=(4, 2)
    )
    tl = mechanisms.truncated_laplace_record("X~", epsilon=0.5, delta=1e-6, sensitivity=2.0)
    rep = PrivacyReport.from_mechanisms(
        [rec, tl], BETA_CLOSE, data_independent=("w",), notes=("n",)
    )
    text = rep.to_json()
    assert json.loads(text) == json.loads(json.dumps(rep.to_dict()))
    back = PrivacyReport.from_json(text)
    assert back == rep
    assert back.mechanisms[0].param_dict["shape"] == (4, 2)
    np_rep = non_private_report("baseline")
    assert PrivacyReport.from_json(np_rep.to_json()) == np_rep


def test_record_builders_are_consistent_with_accounting():
    sigma = accounting.gaussian_sigma(2.0, 1e-5)
    rec = mechanisms.gaussian_record("m", epsilon=2.0, delta=1e-5, sensitivity=0.1, sigma=sigma)
    assert accounting.gaussian_epsilon(rec.param_dict["sigma"], rec.delta) == pytest.approx(
        rec.epsilon, rel=1e-7
    )
    with pytest.raises(ValueError, match="epsilon"):
        mechanisms.gaussian_record("m", epsilon=0.0, delta=1e-5, sensitivity=1.0, sigma=1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        mechanisms.truncated_laplace_record("m", epsilon=1.0, delta=1e-5, sensitivity=-1.0)
    with pytest.raises(ValueError, match="k"):
        mechanisms.gaussian_sampling_record("m", epsilon=1.0, delta=1e-5, k=0)


def test_from_dict_refuses_totals_that_are_not_the_sum_of_the_mechanisms():
    rep = PrivacyReport.from_mechanisms([_rec(0.5, 1e-6), _rec(0.5, 1e-6)], REPLACE_ONE)
    d = rep.to_dict()
    assert PrivacyReport.from_dict(d) == rep
    for key, value in (("epsilon", 0.01), ("delta", 1e-12)):
        edited = {**d, key: value}
        with pytest.raises(ValueError, match="not the basic composition of its mechanisms"):
            PrivacyReport.from_dict(edited)


def test_matches_gaussian_release_accepts_its_own_record_and_refuses_edits():
    import dataclasses

    import jax
    import numpy as np

    from privkernels.privacy import Budget
    from privkernels.privacy.release import gaussian_release, matches_gaussian_release

    _, rec = gaussian_release(
        jax.random.key(0), np.zeros(3, np.float32), budget=Budget(0.5, 1e-6), sensitivity=0.25,
        released="x",
    )  # fmt: skip
    assert matches_gaussian_release(rec, 0.25)
    assert not matches_gaussian_release(rec, 0.5)  # another sensitivity
    params = dict(rec.param_dict)
    for edit in (dict(epsilon=-rec.epsilon), dict(delta=1.0)):  # no such record exists
        with pytest.raises(ValueError, match="epsilon|delta"):
            dataclasses.replace(rec, **edit)
    edits = [
        dict(epsilon=2 * rec.epsilon),  # sigma no longer that of the budget
        dict(name="laplace"),
        dict(params=tuple(sorted({**params, "sigma": params["sigma"] / 4}.items()))),
        dict(params=tuple(sorted({**params, "noise_std": params["noise_std"] / 4}.items()))),
    ]
    for edit in edits:
        assert not matches_gaussian_release(dataclasses.replace(rec, **edit), 0.25), edit


def test_check_neighbouring_accepts_the_allowed_relations_only():
    from privkernels.privacy import check_neighbouring

    standard = (REPLACE_ONE, ADD_REMOVE)
    for rel in standard:
        assert check_neighbouring(rel, standard) == rel
    assert check_neighbouring(BETA_CLOSE, (BETA_CLOSE, REPLACE_ONE)) == BETA_CLOSE
    for bad in ("add-one", "Replace-One", "", None, 1, ("replace-one",), "one"):
        with pytest.raises(ValueError, match="neighbouring must be one of"):
            check_neighbouring(bad, standard)
    with pytest.raises(TypeError, match="allowed"):  # a string is not a list of names
        check_neighbouring("one", "replace-one")
    with pytest.raises(ValueError, match=r"\('beta-close', 'replace-one'\)"):
        check_neighbouring(ADD_REMOVE, (BETA_CLOSE, REPLACE_ONE))


def test_a_record_with_a_negative_or_non_finite_cost_is_refused_also_when_loaded():
    """Two records of +2 and -1 add up to a report of 1: the loader would accept the
    total, so a record itself refuses a negative (or NaN, infinite) epsilon, a delta
    outside [0, 1) and a negative sensitivity."""
    good = mechanisms.gaussian_record("a", epsilon=1.0, delta=1e-6, sensitivity=1.0, sigma=4.0)
    rep = PrivacyReport.from_mechanisms([good], REPLACE_ONE)
    d = rep.to_dict()
    hidden = {**d["mechanisms"][0], "epsilon": 2.0}
    negative = {**d["mechanisms"][0], "name": "b", "epsilon": -1.0}
    with pytest.raises(ValueError, match="epsilon must be finite and >= 0"):
        PrivacyReport.from_dict({**d, "mechanisms": [hidden, negative]})
    for field, value in (("epsilon", math.nan), ("epsilon", math.inf), ("delta", 1.0),
                         ("delta", -1e-9), ("sensitivity", -1.0), ("sensitivity", math.nan)):  # fmt: skip
        with pytest.raises(ValueError, match=field):
            MechanismRecord.make("m", "x", **{"epsilon": 1.0, "delta": 1e-6, field: value})
    assert MechanismRecord.make("m", "x", 0.0, 0.0).epsilon == 0.0  # a free record is fine
