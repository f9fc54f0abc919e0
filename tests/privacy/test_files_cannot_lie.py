"""Files that cannot lie (N4): a saved release whose report was edited is refused on load.

Every loader (`dp_kip.load`, `dp_ntk.load`, `dp_ntk_regression.load`,
`privkernels.sklearn.load`, ``privkernels report``) reads the report through
`PrivacyReport.from_dict`, which re-derives each record's epsilon from its own
parameters with the accountant and the totals from the composition rule (an enum);
each method's loader then checks the records against its config (relation,
sensitivities, budget shares). One test per tamper: total, rule, sigma, q, steps,
relation; each edit is one an attacker would make to claim a smaller epsilon.
"""

from __future__ import annotations

import copy
import warnings

import jax
import numpy as np
import pytest

from privkernels import checkpoint, dp_kip, dp_ntk, dp_ntk_regression
from privkernels.cli import main as cli_main
from privkernels.data.schema import TabularSchema, categorical, numeric
from privkernels.privacy.report import Composition, PrivacyReport
from privkernels.synth import fit_table, load_table_synth


def _edit(path, tmp_path, change, name="edited.npz"):
    """Copy of the file at ``path`` whose report (and meta) ``change(meta)`` edited."""
    arrays, meta = checkpoint.load(path)
    meta = copy.deepcopy(meta)
    change(meta)
    return checkpoint.save(tmp_path / name, arrays, meta)


def _sgd(meta):
    return meta["report"]["mechanisms"][-1]


@pytest.fixture(scope="module")
def kip_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (np.arange(40) % 2).astype(np.int32)
    res = dp_kip.fit(
        jax.random.key(0), x, y, kernel="fc_ntk", support_per_class=1, epsilon=2.0,
        delta=1e-5, clip_norm=1.0, batch_size=10, epochs=2, progress=False, n_classes=2,
        chunk_size=16,
    )  # fmt: skip
    return res.save(tmp_path_factory.mktemp("kip") / "kip.npz")


def test_an_unedited_dp_kip_file_loads(kip_file):
    res = dp_kip.load(kip_file)
    assert res.report.composition == Composition.SINGLE
    assert res.report.neighbouring == "replace-one"


def _claim_small_total(meta):
    meta["report"]["epsilon"] = 0.01
    meta["report"]["delta"] = 1e-12


def _claim_rule(meta):  # the PR-50 bypass: a rule name that skipped the totals check
    _claim_small_total(meta)
    meta["report"]["composition"] = "pld"


def _claim_basic_rule(meta):
    meta["report"]["composition"] = "basic"
    _claim_small_total(meta)


def _claim_sigma(meta):
    _sgd(meta)["params"]["noise_multiplier"] *= 4.0
    meta["config"]["noise_multiplier"] = _sgd(meta)["params"]["noise_multiplier"]


def _claim_q(meta):
    _sgd(meta)["params"]["sampling_rate"] /= 10.0


def _claim_steps(meta):
    _sgd(meta)["params"]["steps"] = 1
    meta["steps_done"] = 1


def _claim_relation(meta):
    meta["report"]["neighbouring"] = "add-remove"  # cheaper than replace-one for the same sigma


def _claim_record_epsilon(meta):
    eps = 0.01
    _sgd(meta)["epsilon"] = eps
    meta["report"]["epsilon"] = eps


@pytest.mark.parametrize(
    "change",
    [_claim_small_total, _claim_rule, _claim_basic_rule, _claim_sigma, _claim_q, _claim_steps,
     _claim_relation, _claim_record_epsilon],
    ids=["total", "rule", "basic-rule", "sigma", "q", "steps", "relation", "record-epsilon"],
)  # fmt: skip
def test_an_edited_dp_kip_file_is_refused_by_every_reader(kip_file, tmp_path, change, capsys):
    edited = _edit(kip_file, tmp_path, change)
    with pytest.raises(ValueError):
        dp_kip.load(edited)
    with pytest.raises(ValueError):
        PrivacyReport.from_dict(checkpoint.load(edited)[1]["report"])
    assert cli_main(["report", str(edited)]) == 2  # the CLI's one-line error, not a summary
    assert "error" in capsys.readouterr().err


def test_the_dp_kip_estimator_file_is_refused_too(tmp_path):
    from privkernels.sklearn import DPKIPClassifier, load

    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = np.arange(40) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPKIPClassifier(classes=[0, 1], epochs=1, batch_size=10, clip_norm=1.0).fit(x, y)
    path = est.save(tmp_path / "est.npz")
    assert load(path).privacy_report_ == est.privacy_report_
    with pytest.raises(ValueError):
        load(_edit(path, tmp_path, _claim_rule))


@pytest.fixture(scope="module")
def ntk_files(tmp_path_factory):
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(60, 5)).astype(np.float32)
    y = (np.arange(60) % 3).astype(np.int32)
    out = {}
    for label_mode in ("uniform", "released"):
        res = dp_ntk.fit(
            jax.random.key(1), x, y, epsilon=1.0, delta=1e-5, n_classes=3, iterations=2,
            batch_size=30, label_mode=label_mode, progress=False,
        )  # fmt: skip
        out[label_mode] = res.save(tmp_path_factory.mktemp("ntk") / f"{label_mode}.npz")
    return out


def _ntk_epsilon(meta, factor=0.1):
    """Claim a smaller epsilon everywhere a number says it (config, total, records)."""
    meta["config"]["epsilon"] *= factor
    meta["report"]["epsilon"] *= factor
    for m in meta["report"]["mechanisms"]:
        m["epsilon"] *= factor


def _ntk_sigma_too(meta):
    """A larger sigma (and noise std) than the recorded epsilon gives: more noise claimed."""
    for m in meta["report"]["mechanisms"]:
        if "sigma" in m["params"]:
            m["params"]["sigma"] *= 3.0
            m["params"]["noise_std"] *= 3.0
        if "scale" in m["params"]:  # truncated Laplace: a larger scale
            m["params"]["scale"] *= 3.0
        if "k" in m["params"]:  # Gaussian sampling: fewer samples (more noise)
            m["params"]["k"] = max(1, m["params"]["k"] // 2)


def _ntk_sensitivity_too(meta):
    """... and a sensitivity that keeps the noise std: the relation's sensitivity then lies."""
    _ntk_epsilon(meta)
    for m in meta["report"]["mechanisms"]:
        import dp_accounting

        sigma = dp_accounting.get_sigma_gaussian(m["epsilon"], m["delta"])
        m["sensitivity"] = m["params"]["noise_std"] / sigma
        m["params"]["sigma"] = sigma


@pytest.mark.parametrize("mode", ["uniform", "released"])
@pytest.mark.parametrize(
    "change",
    [_ntk_epsilon, _ntk_sigma_too, _ntk_sensitivity_too, _claim_relation, _claim_rule],
    ids=["epsilon", "sigma", "sensitivity", "relation", "rule"],
)
def test_an_edited_dp_ntk_file_is_refused(ntk_files, tmp_path, mode, change):
    dp_ntk.load(ntk_files[mode])  # the unedited file loads
    with pytest.raises(ValueError):
        dp_ntk.load(_edit(ntk_files[mode], tmp_path, change))


def _fields(edit):
    """``edit(arrays, meta)`` applied to a copy of a file (`_edit` edits the meta only)."""

    def change(path, tmp_path):
        arrays, meta = checkpoint.load(path)
        arrays, meta = dict(arrays), copy.deepcopy(meta)
        edit(arrays, meta)
        return checkpoint.save(tmp_path / "fields.npz", arrays, meta)

    return change


def _gen(field, value):
    def edit(arrays, meta):
        old = meta["generator"]["fields"][field]
        meta["generator"]["fields"][field] = value(old) if callable(value) else value

    return _fields(edit)


def _array(prefix, fn):
    def edit(arrays, meta):
        key = next(k for k in sorted(arrays) if k.startswith(prefix))
        arrays[key] = fn(np.asarray(arrays[key]))

    return _fields(edit)


#: C2 (adversary s60): a file whose fields disagree with its arrays loaded on 754763a,
#: then `dp_ntk.sample` failed (flax / TypeError) or sampled a generator the file
#: misdescribed. (edit, the field the load-time ValueError names.)
FIELD_EDITS = {
    "generator n_classes a string": (_gen("n_classes", "abc"), "generator"),
    "generator n_features a string": (_gen("n_features", "abc"), "generator"),
    "generator n_features one more": (_gen("n_features", lambda v: v + 1), "generator_params"),
    "generator hidden a list": (_gen("hidden", lambda v: v["__tuple__"]), "generator"),
    "generator hidden doubled": (
        _gen("hidden", lambda v: {"__tuple__": [2 * h for h in v["__tuple__"]]}),
        "generator_params",
    ),
    "generator groups a list": (_gen("groups", []), "generator"),
    "ntk_params leaf in float16": (_array("ntk_params/", lambda a: a.astype(np.float16)), "ntk_params"),
    "generator_params leaf cut": (_array("generator_params/", lambda a: a[..., :1]), "generator_params"),
    "noisy_embedding column short": (_array("noisy_embedding", lambda a: a[:, :1]), "noisy_embedding"),
    "noisy_embedding row short": (_array("noisy_embedding", lambda a: a[:-1]), "noisy_embedding"),
    "noisy_proportions one more": (_array("noisy_proportions", lambda a: np.append(a, 0.0)), "noisy_proportions"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FIELD_EDITS))
def test_a_dp_ntk_file_whose_fields_disagree_with_its_arrays_is_refused_at_load(
    ntk_files, tmp_path, case
):
    change, field = FIELD_EDITS[case]
    dp_ntk.sample(jax.random.key(1), dp_ntk.load(ntk_files["released"]), 3)  # unedited: fine
    with pytest.raises(ValueError, match=f"^the file's {field} ") as err:
        dp_ntk.load(change(ntk_files["released"], tmp_path))
    assert not any(c.isdigit() for c in str(err.value)) and "abc" not in str(err.value)


@pytest.mark.slow
def test_the_table_model_loader_refuses_a_generator_that_disagrees_with_its_params(tmp_path):
    """``privkernels synth --model`` reads a table model with `load_table_synth`, which
    rebuilds the result as `dp_ntk.load` does."""
    schema = TabularSchema.from_columns(
        "toy", [numeric("age", 17, 90), categorical("sex", ["F", "M"])], label="income",
        classes=["<=50K", ">50K"],
    )  # fmt: skip
    rng = np.random.default_rng(0)
    age = rng.integers(17, 91, 50)
    frame = {"age": age, "sex": rng.choice(["F", "M"], 50),
             "income": np.where(age > 50, ">50K", "<=50K")}  # fmt: skip
    model = fit_table(jax.random.key(0), frame, schema, epsilon=1.0, iterations=2, progress=False)
    path = model.save(tmp_path / "t.npz")
    load_table_synth(path)  # unedited: fine
    doubled = _gen("hidden", lambda v: {"__tuple__": [2 * h for h in v["__tuple__"]]})
    with pytest.raises(ValueError, match="the file's generator_params"):
        load_table_synth(doubled(path, tmp_path))


@pytest.fixture(scope="module")
def regression_files(tmp_path_factory):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    y = (np.arange(30) % 2).astype(np.int32)
    d = tmp_path_factory.mktemp("reg")
    one = dp_ntk_regression.fit(jax.random.key(2), x, y, epsilon=1.0, n_classes=2, width=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close = dp_ntk_regression.fit(
            jax.random.key(2), x, y, epsilon=0.8, n_classes=2, width=16, kernel_shift=0.5,
            neighbouring="beta-close",
        )  # fmt: skip
    return {"replace-one": one.save(d / "one.npz"), "beta-close": close.save(d / "close.npz")}


def _reg_epsilon(meta):
    _ntk_epsilon(meta)


def _reg_relation(meta):
    rel = meta["report"]["neighbouring"]
    meta["report"]["neighbouring"] = "beta-close" if rel == "replace-one" else "replace-one"


def _reg_k(meta):
    meta["report"]["mechanisms"][0]["params"]["k"] = 10**6
    meta["config"]["k"] = 10**6


_REG_TAMPERS = [
    (rel, change)
    for rel in ("replace-one", "beta-close")
    for change in (_reg_epsilon, _ntk_sigma_too, _reg_relation, _claim_rule)
] + [("beta-close", _reg_k)]  # k: a beta-close parameter (replace-one files have none)


@pytest.mark.parametrize(
    ("relation", "change"), _REG_TAMPERS, ids=[f"{r}-{c.__name__}" for r, c in _REG_TAMPERS]
)
def test_an_edited_regression_file_is_refused(regression_files, tmp_path, relation, change):
    dp_ntk_regression.load(regression_files[relation])
    with pytest.raises(ValueError):
        dp_ntk_regression.load(_edit(regression_files[relation], tmp_path, change))


def test_the_cli_report_reads_and_checks_the_json_beside_an_output(kip_file, tmp_path, capsys):
    report = dp_kip.load(kip_file).report
    good = tmp_path / "out.privacy.json"
    good.write_text(report.to_json())
    assert cli_main(["report", str(good)]) == 0
    assert "replace-one" in capsys.readouterr().out
    bad = report.to_dict()
    _claim_rule({"report": bad})
    tampered = tmp_path / "bad.privacy.json"
    import json

    tampered.write_text(json.dumps(bad))
    assert cli_main(["report", str(tampered)]) == 2


def test_the_cli_report_runs_the_method_loader_checks(kip_file, tmp_path, capsys):
    """An edit that keeps the report internally consistent but no longer matches the saved
    config (a lower sampling rate, epsilon re-derived) is refused by ``privkernels report``
    as by ``dp_kip.load``."""
    from privkernels.privacy.accounting import dpsgd_epsilon

    def lower_q(meta):
        rec = _sgd(meta)
        p = rec["params"]
        p["sampling_rate"] /= 10.0
        rec["epsilon"] = dpsgd_epsilon(
            p["noise_multiplier"], rec["delta"], sampling_rate=p["sampling_rate"],
            steps=p["steps"], neighbouring=p["neighbouring"],
        )  # fmt: skip
        meta["report"]["epsilon"] = rec["epsilon"]

    edited = _edit(kip_file, tmp_path, lower_q)
    PrivacyReport.from_dict(checkpoint.load(edited)[1]["report"])  # consistent on its own
    with pytest.raises(ValueError):
        dp_kip.load(edited)
    assert cli_main(["report", str(edited)]) == 2


def test_flags_are_booleans_and_proven_is_what_the_config_gives(regression_files, tmp_path):
    """A string flag is refused (``bool("false")`` is True); a beta-close model's ``proven``
    must be what its kernel share gives (Lemma D.1: eps_alpha < 1)."""
    path = regression_files["beta-close"]
    _, meta = checkpoint.load(path)
    bad = copy.deepcopy(meta["report"])
    bad["proven"] = "false"
    with pytest.raises(ValueError, match="true or false"):
        PrivacyReport.from_dict(bad)

    def unproven(m):
        m["report"]["proven"] = False

    with pytest.raises(ValueError):
        dp_ntk_regression.load(_edit(path, tmp_path, unproven))


def test_deltas_and_steps_must_match_the_saved_run(regression_files, kip_file, tmp_path):
    def lower_delta(meta):
        factor = 0.1
        meta["report"]["delta"] *= factor
        for m in meta["report"]["mechanisms"]:
            m["delta"] *= factor
            if "sigma" in m["params"]:
                import dp_accounting

                m["params"]["sigma"] = dp_accounting.get_sigma_gaussian(m["epsilon"], m["delta"])
                m["params"]["noise_std"] = m["params"]["sigma"] * m["sensitivity"]

    with pytest.raises(ValueError):
        dp_ntk_regression.load(_edit(regression_files["replace-one"], tmp_path, lower_delta))

    def fewer_steps(meta):  # steps edited everywhere but the history
        from privkernels.privacy.accounting import dpsgd_epsilon

        rec = _sgd(meta)
        p = rec["params"]
        p["steps"] = meta["steps_done"] = p["steps"] - 1
        rec["epsilon"] = meta["report"]["epsilon"] = dpsgd_epsilon(
            p["noise_multiplier"], rec["delta"], sampling_rate=p["sampling_rate"],
            steps=p["steps"], neighbouring=p["neighbouring"],
        )  # fmt: skip

    with pytest.raises(ValueError, match="history"):
        dp_kip.load(_edit(kip_file, tmp_path, fewer_steps))

    def lower_rate_everywhere(meta):  # config and record agree, but q is not batch_size / n
        from privkernels.privacy.accounting import dpsgd_epsilon

        rec = _sgd(meta)
        p = rec["params"]
        p["sampling_rate"] = meta["config"]["sampling_rate"] = p["sampling_rate"] / 10
        rec["epsilon"] = meta["report"]["epsilon"] = dpsgd_epsilon(
            p["noise_multiplier"], rec["delta"], sampling_rate=p["sampling_rate"],
            steps=p["steps"], neighbouring=p["neighbouring"],
        )  # fmt: skip

    with pytest.raises(ValueError):
        dp_kip.load(_edit(kip_file, tmp_path, lower_rate_everywhere))


def test_a_privacy_json_is_checked_against_the_model_beside_it(tmp_path, capsys):
    """``<out>.privacy.json`` carries no configuration: ``privkernels report`` checks it
    against ``<out>`` (distill) with the method's loader, so an edit that keeps the JSON
    consistent on its own (a lower q, epsilon re-derived) is refused."""
    import json

    from privkernels.privacy.accounting import dpsgd_epsilon

    rng = np.random.default_rng(4)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 4)).astype(np.float32),
             y=np.arange(60) % 2)  # fmt: skip
    out = tmp_path / "s.npz"
    args = ["distill", str(tmp_path / "d.npz"), "--epsilon", "1", "--out", str(out), "--quiet",
            "--epochs", "1", "--classes", "0,1"]  # fmt: skip
    assert cli_main(args) == 0
    report_path = tmp_path / "s.npz.privacy.json"
    assert cli_main(["report", str(report_path)]) == 0
    data = json.loads(report_path.read_text())
    rec = data["mechanisms"][-1]
    p = rec["params"]
    p["sampling_rate"] /= 10.0
    rec["epsilon"] = data["epsilon"] = dpsgd_epsilon(
        p["noise_multiplier"], rec["delta"], sampling_rate=p["sampling_rate"], steps=p["steps"],
        neighbouring=p["neighbouring"],
    )  # fmt: skip
    report_path.write_text(json.dumps(data))
    PrivacyReport.from_dict(data)  # consistent on its own
    capsys.readouterr()
    assert cli_main(["report", str(report_path)]) == 2
    assert "does not match" in capsys.readouterr().err


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_a_search_report_beside_its_model_is_checked(tmp_path, capsys):
    """``distill --tune`` writes the search's report beside the chosen model: a lower mean
    number of runs (epsilon re-derived) misses its planned target, and larger sigmas no
    longer match the chosen model's own fit."""
    import json

    from privkernels.privacy.accounting import repeat_and_select_epsilon

    rng = np.random.default_rng(5)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(300, 4)).astype(np.float32),
             y=np.arange(300) % 2)  # fmt: skip
    out = tmp_path / "s.npz"
    args = ["distill", str(tmp_path / "d.npz"), "--epsilon", "2", "--out", str(out), "--quiet",
            "--epochs", "1", "--classes", "0,1", "--neighbouring", "add-remove",
            "--batch-size", "30", "--sampling-rate", "0.1", "--tune", "clip_norm=0.1,1"]  # fmt: skip
    assert cli_main(args) == 0
    path = tmp_path / "s.npz.privacy.json"
    genuine = json.loads(path.read_text())
    assert cli_main(["report", str(path)]) == 0

    def write(change):
        data = copy.deepcopy(genuine)
        rec = data["mechanisms"][0]
        change(rec["params"])
        rec["epsilon"] = data["epsilon"] = repeat_and_select_epsilon(
            json.loads(rec["params"]["events"]), mean=rec["params"]["mean"],
            shape=rec["params"]["shape"], delta=rec["delta"],
        )  # fmt: skip
        path.write_text(json.dumps(data))

    def fewer_runs(p):
        p["mean"] = 1.0

    def more_noise(p):
        events = json.loads(p["events"])
        p["events"] = json.dumps([[[e[0], e[1] * 3, *e[2:]] for e in run] for run in events])

    for change in (fewer_runs, more_noise):
        write(change)
        capsys.readouterr()
        assert cli_main(["report", str(path)]) == 2, change.__name__


def test_a_dp_kip_file_must_say_its_plan_consistently(kip_file, tmp_path):
    """The plan is ``epochs * max(1, round(1/q))`` steps, n is public under replace-one and
    the history is not empty: files that drop n, empty the history or change the steps per
    epoch are refused."""

    def drop_n(meta):
        meta["config"]["n"] = None

    def empty_history(meta):
        meta["history"]["step"] = []

    def other_plan(meta):
        meta["config"]["steps_per_epoch"] += 1

    for change in (drop_n, empty_history, other_plan):
        with pytest.raises(ValueError):
            dp_kip.load(_edit(kip_file, tmp_path, change, name=f"{change.__name__}.npz"))


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", "{not json", '{"a": ' * 5000 + "1" + "}" * 5000, '{"a": ' * 40 + "1" + "}" * 40],
)
def test_metadata_that_is_not_a_json_object_is_a_value_error(tmp_path, text):
    """A file's metadata that is malformed, not an object, or nested past the format's
    depth is a ``ValueError`` naming the file (before: ``RecursionError`` or
    ``AttributeError``, and a traceback from ``privkernels report``). The depth is the
    format's own limit: Python 3.12's parser reads 5000 levels that 3.11's refuses."""
    path = tmp_path / "m.npz"
    np.savez(path, **{checkpoint._META: np.asarray(text)})
    with pytest.raises(ValueError, match="metadata"):
        checkpoint.load(path)


def _drop(key):
    return lambda meta: meta.pop(key)


def _set(key, value):
    return lambda meta: meta.__setitem__(key, value)


MALFORMED_NTK = {
    "no_groups": _drop("groups"),
    "groups_not_rows": _set("groups", [5]),
    "groups_of_strings": _set("groups", [["numeric", "0", "5"]]),
    "iteration_none": _set("iteration", None),
    "no_config": _drop("config"),
    "no_generator": _drop("generator"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_NTK))
def test_a_malformed_dp_ntk_field_is_a_value_error(ntk_files, tmp_path, name):
    """Third attack of s61, C2: a missing or ill-typed field raised ``KeyError`` or
    ``TypeError`` (a traceback from ``privkernels report``); now a ``ValueError``."""
    path = _edit(ntk_files["uniform"], tmp_path, MALFORMED_NTK[name])
    with pytest.raises(ValueError):
        dp_ntk.load(path)


def test_a_dp_ntk_array_of_strings_is_a_value_error(ntk_files, tmp_path):
    arrays, meta = checkpoint.load(ntk_files["uniform"])
    arrays = {**arrays, "noisy_embedding": np.asarray([["a", "b"]])}
    with pytest.raises(ValueError, match="arrays"):
        dp_ntk.load(checkpoint.save(tmp_path / "s.npz", arrays, meta))


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.__setitem__("class", "os"),
        lambda b: b.__setitem__("params", [1, 2]),
        lambda b: b["params"].__setitem__("bogus", 1),
        lambda b: b["params"].__setitem__("width", "x"),
    ],
    ids=["class_os", "params_list", "unknown_param", "width_str"],
)
def test_a_malformed_estimator_file_is_a_value_error(tmp_path, change):
    """C2 for `privkernels.sklearn.load`: a class outside the four estimators, parameters
    that are not a mapping or that the estimator's own settings checks refuse."""
    from privkernels.sklearn import DPNTKClassifier, load

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 3)), np.arange(40) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKClassifier(classes=[0, 1], width=16, random_state=jax.random.key(0)).fit(x, y)
    path = est.save(tmp_path / "c.npz")
    edited = _edit(path, tmp_path, lambda meta: change(meta["estimator"]), name="e.npz")
    with pytest.raises(ValueError):
        load(edited)


@pytest.mark.parametrize(
    "change",
    [
        _set("iteration", float("inf")),
        _set("iteration", "SECRET-7731"),
        _set("groups", [["SECRET-7731", 0, 3]]),
        _set("groups", [["numeric", 0.5, 2.5]]),
    ],
    ids=["iteration_inf", "iteration_text", "groups_kind_text", "groups_float_bounds"],
)
def test_a_malformed_field_names_no_file_value(ntk_files, tmp_path, change):
    """Fourth attack of s61, F3/F5: an infinite iteration raised ``OverflowError``; a text
    iteration or group kind was repeated in the message; float group bounds loaded."""
    path = _edit(ntk_files["uniform"], tmp_path, change)
    with pytest.raises(ValueError) as err:
        dp_ntk.load(path)
    assert "SECRET" not in str(err.value)


def _set_params_classes(classes):
    return lambda meta: meta["estimator"]["params"].__setitem__("classes", classes)


def _set_classes_array(arrays, classes):
    arrays["estimator/classes_"] = np.asarray(classes)


def _three_class_file(factory, make, x):
    """A saved 3-class estimator ``make(classes=[0, 1, 2], random_state=0)`` fitted on ``x``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make(classes=[0, 1, 2], random_state=0).fit(x, np.arange(x.shape[0]) % 3)
    return est.save(factory.mktemp("three") / "three.npz")


@pytest.fixture(scope="module")
def classifier_file(tmp_path_factory):
    from privkernels.sklearn import DPNTKClassifier

    x = np.random.default_rng(0).normal(size=(45, 3))
    return _three_class_file(tmp_path_factory, lambda **kw: DPNTKClassifier(width=16, **kw), x), x


def test_an_unedited_classifier_file_loads_with_its_classes(classifier_file):
    from privkernels.sklearn import load

    path, x = classifier_file
    est = load(path)
    assert est.classes_.tolist() == [0, 1, 2]
    assert set(est.predict(x).tolist()) <= {0, 1, 2}


@pytest.mark.parametrize(
    "classes", [[0, 1], [0, 1, 2, 3], [5, 6, 7]], ids=["fewer", "more", "relabelled"]
)
def test_a_classifier_file_whose_classes_parameter_was_edited_is_refused(
    classifier_file, tmp_path, classes
):
    """Left alone in s61: ``params.classes`` edited to other labels loaded, and predictions
    then named labels the model was never fitted with."""
    from privkernels.sklearn import load

    edited = _edit(classifier_file[0], tmp_path, _set_params_classes(classes), name="e.npz")
    with pytest.raises(ValueError, match="classes"):
        load(edited)


@pytest.mark.parametrize(
    "classes", [[0, 1], [0, 0, 1], [[0, 1, 2]]], ids=["fewer", "repeated", "nested"]
)
def test_a_classifier_file_whose_classes_array_was_edited_is_refused(
    classifier_file, tmp_path, classes
):
    from privkernels.sklearn import load

    arrays, meta = checkpoint.load(classifier_file[0])
    meta["estimator"]["params"]["classes"] = None  # only the model can disagree now
    _set_classes_array(arrays, classes)
    edited = checkpoint.save(tmp_path / "a.npz", arrays, meta)
    with pytest.raises(ValueError, match="classes"):
        load(edited)


def _with_arrays(path, tmp_path, change, name="w.npz"):
    arrays, meta = checkpoint.load(path)
    change(arrays, meta)
    return checkpoint.save(tmp_path / name, arrays, meta)


def _no_param(meta):
    meta["estimator"]["params"]["classes"] = None


@pytest.mark.parametrize(
    "classes",
    [
        np.array([2, 0, 1]),
        np.array([b"0", b"1", b"2"]),
        np.array([0, 1, 2], complex),
        np.array([0.0, np.nan, 1.0]),
        np.array(["0", "1", "2"]),
    ],
    ids=["permuted", "bytes", "complex", "nan", "text_for_numbers"],
)
def test_a_classes_array_save_never_writes_is_refused(classifier_file, tmp_path, classes):
    """s62 attack c2/c3/c6: with ``params.classes`` None (one edit), a permuted, bytes,
    complex or NaN ``classes_`` loaded and relabelled every prediction."""
    from privkernels.sklearn import load

    def change(arrays, meta):
        if classes.dtype.kind != "U":
            _no_param(meta)
        arrays["estimator/classes_"] = classes

    with pytest.raises(ValueError, match="classes"):
        load(_with_arrays(classifier_file[0], tmp_path, change))


def test_a_classifier_file_without_classes_is_refused(classifier_file, tmp_path):
    """s62 attack c7: it loaded, and ``predict`` raised ``AttributeError``."""
    from privkernels.sklearn import load

    edited = _with_arrays(classifier_file[0], tmp_path,
                          lambda a, m: a.pop("estimator/classes_"))  # fmt: skip
    with pytest.raises(ValueError, match="classes_"):
        load(edited)


@pytest.fixture(scope="module")
def regressor_file(tmp_path_factory):
    from privkernels.sklearn import DPNTKRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    y = np.stack([x[:, 0], x[:, 1], x[:, 2]], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKRegressor(width=16, random_state=0).fit(x, y)
    return est.save(tmp_path_factory.mktemp("reg") / "r.npz")


def test_a_regression_model_cannot_load_as_a_classifier_nor_the_reverse(
    regressor_file, classifier_file, tmp_path
):
    """s62 attack c12: a 3-target regression file relabelled ``DPNTKClassifier`` with a
    ``classes_`` added loaded (the model has no class count); a 3-class classifier file
    relabelled ``DPNTKRegressor`` loaded and returned one-hot scores."""
    from privkernels.sklearn import load

    def as_classifier(arrays, meta):
        meta["estimator"]["class"] = "DPNTKClassifier"
        arrays["estimator/classes_"] = np.array([0, 1, 2])

    def as_regressor(arrays, meta):
        meta["estimator"]["class"] = "DPNTKRegressor"
        meta["estimator"]["params"].pop("classes")
        arrays.pop("estimator/classes_")

    with pytest.raises(ValueError, match="classes"):
        load(_with_arrays(regressor_file, tmp_path, as_classifier, "a.npz"))
    with pytest.raises(ValueError, match="classes"):
        load(_with_arrays(classifier_file[0], tmp_path, as_regressor, "b.npz"))
    assert load(regressor_file).predict(np.zeros((2, 3))).shape == (2, 3)


@pytest.fixture(scope="module")
def generator_file(tmp_path_factory):
    from privkernels.sklearn import DPNTKGenerator

    x = np.random.default_rng(0).uniform(size=(45, 4))
    return _three_class_file(tmp_path_factory, lambda **kw: DPNTKGenerator(iterations=1, **kw), x)


@pytest.mark.parametrize("classes", [[0, 1, 2, 3, 4], [7]], ids=["five", "one"])
def test_an_array_generator_file_s_class_count_is_checked(generator_file, tmp_path, classes):
    """s62 attack c3/c4: generator results hold their config one level down, so the count
    check never ran and a 3-class generator loaded with 5 or 1 classes."""
    from privkernels.sklearn import load

    def change(arrays, meta):
        _no_param(meta)
        arrays["estimator/classes_"] = np.array(classes)

    assert load(generator_file).classes_.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="classes"):
        load(_with_arrays(generator_file, tmp_path, change))


@pytest.mark.parametrize(
    "classes",
    [np.array([0.0, 123456792.0], np.float32), np.array([0, 2**63 + 5], np.uint64)],
    ids=["float32", "uint64"],
)
def test_classes_of_any_numeric_dtype_survive_save_and_load(tmp_path, classes):
    """s62 attack c1/c2: the first version of the check compared ``str`` forms, and a float32
    or uint64 class list came back from JSON in another form: the file was refused."""
    from privkernels.sklearn import DPNTKClassifier, load

    x = np.random.default_rng(0).normal(size=(40, 3))
    y = classes[np.arange(40) % 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPNTKClassifier(classes=classes, width=16, random_state=0).fit(x, y)
    back = load(est.save(tmp_path / "c.npz"))
    assert np.array_equal(back.predict(x), est.predict(x))


def _nan_first(name):
    def change(arrays, meta):
        a = np.array(arrays[name], dtype=np.float32)
        a.reshape(-1)[0] = np.nan
        arrays[name] = a

    return change


def _set_array(name, fn):
    def change(arrays, meta):
        arrays[name] = fn(np.asarray(arrays[name]))

    return change


@pytest.mark.parametrize(
    "change",
    [
        _nan_first("support_x"),
        _nan_first("support_targets"),
        _set_array("support_y", lambda a: a[::-1].copy()),
        _set_array("support_targets", lambda a: a[:, :1].copy()),
    ],
    ids=["nan_support", "nan_targets", "relabelled", "one_target_column"],
)
def test_a_dp_kip_file_with_an_edited_support_set_is_refused(kip_file, tmp_path, change):
    """s62 attack c9/c11: NaN supports loaded (every row predicted as class 0), relabelled
    or narrowed supports changed every prediction."""
    with pytest.raises(ValueError, match="support"):
        dp_kip.load(_with_arrays(kip_file, tmp_path, change))


@pytest.mark.parametrize(
    "change",
    [_nan_first("alpha"), _nan_first("weights"), _set_array("alpha", lambda a: a[..., :2].copy())],
    ids=["nan_alpha", "nan_weights", "two_of_three_columns"],
)
def test_a_regression_classifier_file_with_edited_arrays_is_refused(
    classifier_file, tmp_path, change
):
    """s62 attack c9/c11: a NaN alpha loaded (NaN probabilities); a 3-class file with a
    2-column alpha never predicted the third class."""
    from privkernels.sklearn import load

    with pytest.raises(ValueError):
        load(_with_arrays(classifier_file[0], tmp_path, change))
