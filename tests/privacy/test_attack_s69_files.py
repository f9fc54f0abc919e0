"""Attack s69 on files read back: a report read through a format no loader checks (F1),
JSON nested past any limit in every reader (F2), terminal control characters in a report's
text (F3), and report containers of the wrong JSON type (F6). Each one was accepted or
crashed ``privkernels report`` with a traceback before; each is now a ``ValueError`` (exit
status 2 and one line from the command) that quotes none of the file's values."""

from __future__ import annotations

import copy
import json
import warnings

import jax
import numpy as np
import pytest

from privkernels import checkpoint, dp_kip, dp_ntk, dp_ntk_regression
from privkernels._json import loads_bounded
from privkernels.cli import main as cli_main
from privkernels.data.schema import TabularSchema
from privkernels.privacy.accountant import BudgetAccountant
from privkernels.privacy.accounting import (
    MAX_SELECT_CANDIDATES,
    MAX_SELECT_DPSGD_EVENTS,
    MAX_SELECT_EVENTS,
    gaussian_epsilon,
    gaussian_sigma,
    repeat_and_select_epsilon,
)
from privkernels.privacy.budget import Budget
from privkernels.privacy.report import PrivacyReport
from privkernels.privacy.selection import SelectionPlan, selection_report

DEEP = 100_000  # Python 3.11's parser refuses it with RecursionError, 3.12's reads it


@pytest.fixture(scope="module")
def ntk_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 5)).astype(np.float32)
    y = (np.arange(60) % 3).astype(np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_ntk.fit(jax.random.key(1), x, y, epsilon=1.0, delta=1e-5, n_classes=3,
                         iterations=2, batch_size=30, progress=False)  # fmt: skip
    return res.save(tmp_path_factory.mktemp("ntk") / "ntk.npz")


def _edited(path, tmp_path, change, name="edited.npz"):
    arrays, meta = checkpoint.load(path)
    meta = copy.deepcopy(meta)
    change(meta)
    return checkpoint.save(tmp_path / name, arrays, meta)


def _report_fails(path, capsys, *needles):
    assert cli_main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(n in err for n in needles), err
    return err


@pytest.mark.parametrize("fmt", ["privkernels.dp_ntk.checkpoint/1", "privkernels.dp_ntk.result/2"])
def test_f1_a_report_under_another_format_is_refused_not_printed(ntk_file, tmp_path, capsys, fmt):
    """F1: sensitivity / 10 and sigma x 10 (the noise unchanged) claimed eps 0.08 for an eps 1
    release once the format named a checkpoint: the records went unchecked against a config."""

    def swap(meta):
        meta["format"] = fmt
        rec = meta["report"]["mechanisms"][0]
        rec["sensitivity"] /= 10
        rec["params"]["sigma"] *= 10
        rec["epsilon"] = meta["report"]["epsilon"] = gaussian_epsilon(
            rec["params"]["sigma"], rec["delta"]
        )

    path = _edited(ntk_file, tmp_path, swap)
    PrivacyReport.from_dict(checkpoint.load(path)[1]["report"])  # consistent on its own
    out = _report_fails(path, capsys, "not a result file")
    assert "-DP" not in out
    assert cli_main(["report", str(ntk_file)]) == 0  # the genuine file is still reported


def _nest(depth):
    return "[" * depth + "1" + "]" * depth


def test_f2_deep_json_is_refused_by_every_reader(ntk_file, tmp_path, capsys):
    with pytest.raises(ValueError, match="nested deeper than 32"):
        loads_bounded(_nest(33), "x")
    assert loads_bounded(_nest(32), "x")  # the limit itself is readable
    with pytest.raises(ValueError, match="not readable JSON"):
        loads_bounded(_nest(DEEP), "x")
    deep = tmp_path / "deep.json"
    deep.write_text(_nest(DEEP))
    with pytest.raises(ValueError):
        BudgetAccountant.load(deep)
    with pytest.raises(ValueError):
        TabularSchema.load(deep)
    with pytest.raises(ValueError):
        PrivacyReport.from_json(_nest(DEEP))
    _report_fails(deep, capsys, "not a file the privkernels commands write")
    ledger = tmp_path / "x.privacy.json"
    ledger.write_text('{"format": "privkernels-budget-ledger/1", "a": ' + _nest(40) + "}")
    _report_fails(ledger, capsys)


def test_f2_deep_events_in_a_record_are_a_value_error(ntk_file, tmp_path, capsys):
    """A record parameter holding a JSON string (a search's events) nested 100,000 deep."""

    def deep_events(meta):
        meta["report"]["mechanisms"][0]["name"] = "repeat_and_select"
        meta["report"]["mechanisms"][0]["accountant"] = "rdp"
        meta["report"]["mechanisms"][0]["params"]["events"] = _nest(DEEP)

    path = _edited(ntk_file, tmp_path, deep_events)
    with pytest.raises(ValueError):
        dp_ntk.load(path)
    _report_fails(path, capsys)


@pytest.mark.parametrize("field", ["notes", "data_independent"])
def test_f3_control_characters_in_a_reports_text_are_refused(ntk_file, tmp_path, capsys, field):
    """F3: a note that moved the cursor up and rewrote the epsilon line on a terminal."""
    spoof = "\x1b[s\x1b[999A\r\x1b[2K(0.0100, 1e-05)-DP\x1b[u"

    def add(meta):
        meta["report"][field] = [*meta["report"].get(field, []), spoof]

    path = _edited(ntk_file, tmp_path, add)
    with pytest.raises(ValueError, match="control characters") as err:
        dp_ntk.load(path)
    assert "0.0100" not in str(err.value)
    _report_fails(path, capsys, "control characters")
    for bidi in ("\u202e", "\u200b"):  # a right-to-left override, a zero-width space
        with pytest.raises(ValueError, match="control characters"):
            PrivacyReport.from_dict({**checkpoint.load(ntk_file)[1]["report"], "notes": [bidi]})


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.__setitem__("report", []),
        lambda m: m.__setitem__("report", "eps=0.01"),
        lambda m: m["report"].__setitem__("mechanisms", {"a": 1}),
        lambda m: m["report"].__setitem__("mechanisms", [[1]]),
        lambda m: m["report"]["mechanisms"][0].__setitem__("params", [1, 2]),
        lambda m: m["report"].__setitem__("notes", "a note"),
        lambda m: m["report"].pop("delta"),
    ],
)
def test_f6_report_parts_of_the_wrong_type_are_value_errors(ntk_file, tmp_path, capsys, change):
    path = _edited(ntk_file, tmp_path, change)
    with pytest.raises(ValueError):
        dp_ntk.load(path)
    _report_fails(path, capsys)


def test_the_genuine_report_round_trips(ntk_file):
    report = PrivacyReport.from_dict(checkpoint.load(ntk_file)[1]["report"])
    assert PrivacyReport.from_json(report.to_json()) == report
    assert json.loads(report.to_json())["epsilon"] == pytest.approx(report.epsilon)


# ---------------------------------------------------------------- round 2 (G1, G2, G5, G6)


def _add_param(key, value):
    def change(meta):
        meta["report"]["mechanisms"][0]["params"][key] = value

    return change


def test_g1_g5_text_read_from_a_file_cannot_forge_a_line_of_the_summary(ntk_file, tmp_path, capsys):
    """G1: escape codes in a record's params (unchecked there) rewrote the headline on a
    terminal; G5: a newline in one printed a line of its own at the margin, like the headline.
    Now every line but the headline is escaped and its continuation lines indented."""
    forged = "(0.01, 1e-05)-DP under replace-one neighbours"
    for i, value in enumerate(["\x1b[999A\r\x1b[2K" + forged, "x\n" + forged]):
        path = _edited(ntk_file, tmp_path, _add_param("z", value), name=f"p{i}.npz")
        try:
            dp_ntk.load(path)
        except ValueError:
            continue  # refused on load: nothing printed either
        assert cli_main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\r" not in out
        assert [ln for ln in out.splitlines() if not ln.startswith(" ")] == [out.splitlines()[0]]
        assert out.splitlines()[0].startswith("(1, 1e-05)-DP")


def test_g2_numbers_too_large_for_a_float_are_one_line_errors(ntk_file, tmp_path, capsys):
    """10**400 is valid JSON; float() of it raised OverflowError through three readers."""
    path = _edited(ntk_file, tmp_path, lambda m: m["report"].__setitem__("epsilon", 10**400))
    with pytest.raises(ValueError):
        PrivacyReport.from_dict(checkpoint.load(path)[1]["report"])
    _report_fails(path, capsys)
    beside = tmp_path / "x.privacy.json"
    beside.write_text('{"epsilon": 1e999999, "delta": 1e-5, "neighbouring": "replace-one"}')
    _report_fails(beside, capsys)


def test_g6_an_error_never_prints_control_characters(tmp_path, capsys):
    bad = tmp_path / "\x1b[2Kname.json"
    bad.write_text("{not json")
    assert cli_main(["report", str(bad)]) == 2
    assert "\x1b" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def kip_and_reg_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kipreg")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (np.arange(40) % 2).astype(np.int32)
    kip = dp_kip.fit(
        jax.random.key(0), x, y, kernel="fc_ntk", support_per_class=1, epsilon=2.0,
        delta=1e-5, clip_norm=1.0, batch_size=10, epochs=1, progress=False, n_classes=2,
    ).save(d / "kip.npz")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = dp_ntk_regression.fit(jax.random.key(2), x[:30], y[:30], epsilon=1.0, n_classes=2,
                                    width=16).save(d / "reg.npz")  # fmt: skip
    return kip, reg


@pytest.mark.parametrize(
    "which, change",
    [
        ("kip", lambda m: m.__setitem__("report", [])),  # F6 through the DP-KIP loader
        ("kip", lambda m: m["config"].__setitem__("noise_multiplier", 10**400)),
        ("kip", lambda m: m["config"].__setitem__("clip_norm", 10**400)),
        ("kip", lambda m: m["config"].__setitem__("init", 5)),
        ("kip", lambda m: m.__setitem__("history", [1, 2])),
        ("reg", lambda m: m["config"].__setitem__("epsilon", 10**400)),
        ("reg", lambda m: m["config"].__setitem__("delta", 10**400)),
    ],
)
def test_g2_crafted_numbers_and_types_are_value_errors_in_every_loader(
    kip_and_reg_files, tmp_path, capsys, which, change
):
    """G2: OverflowError or AttributeError tracebacks from dp_kip.load and
    dp_ntk_regression.load (dp_ntk.load already named the malformed field)."""
    kip, reg = kip_and_reg_files
    path = _edited(kip if which == "kip" else reg, tmp_path, change)
    with pytest.raises(ValueError):
        (dp_kip.load if which == "kip" else dp_ntk_regression.load)(path)
    _report_fails(path, capsys)


def _set_sgd_params(**values):
    def change(meta):
        sgd = [
            r for r in meta["report"]["mechanisms"] if r["name"] == "poisson_subsampled_gaussian"
        ]
        sgd[0]["params"].update(values)

    return change


@pytest.mark.timeout(60, func_only=True)  # unguarded, each ran for minutes or ran out of memory
@pytest.mark.parametrize(
    "values",
    [
        {"value_discretization_interval": 1e-7},
        {"steps": 10**9},
        # s70 round: q so small that the RDP epsilon is 0, while one step's grid is 1e7 cells
        {"noise_multiplier": 0.05, "sampling_rate": 1e-50, "value_discretization_interval": 3e-5},
        # s70 round 2: a sigma so large that the grid is tiny, composed 3e7 times (157 s)
        {"noise_multiplier": 200.0, "sampling_rate": 0.01, "steps": 3 * 10**7},
    ],
)
def test_f7_a_file_cannot_make_the_pld_accountant_run_without_bound(
    kip_and_reg_files, tmp_path, capsys, values
):
    """F7 / G2: a DP-SGD record's interval, step count or sampling rate made loading run
    for minutes or ask for 9.4 GiB (steps 1e7) to 469 GiB (1e9). Now refused from the
    grid's estimated size, before the PLD is built, by the loader and ``privkernels report``."""
    path = _edited(kip_and_reg_files[0], tmp_path, _set_sgd_params(**values))
    with pytest.raises(ValueError, match="PLD"):
        dp_kip.load(path)
    _report_fails(path, capsys, "PLD")


def test_d_an_unreadable_interval_is_not_echoed(kip_and_reg_files, tmp_path, capsys):
    """s70 round 2, D: a text interval came back whole inside the error message."""
    path = _edited(
        kip_and_reg_files[0], tmp_path, _set_sgd_params(value_discretization_interval="Z" * 300)
    )
    with pytest.raises(ValueError, match="value_discretization_interval") as err:
        dp_kip.load(path)
    assert "ZZZ" not in str(err.value)
    assert "ZZZ" not in _report_fails(path, capsys)


def test_e_a_search_report_cannot_list_unbounded_candidates(tmp_path, capsys):
    """s70 E: `privkernels report` re-derived one RDP curve per listed candidate (about 40 ms
    each) before it could refuse; 3,500 distinct candidates ran 141 s. Now more than
    `MAX_SELECT_CANDIDATES` is refused before any curve, and equal candidates share one."""

    def report(n, spread):
        share, fit = 0.2, Budget(1.0, 1e-6)
        sigma = gaussian_sigma(share / (1 - share), 1e-6 * share / (1 - share))
        events = tuple(
            (("dpsgd", 1.0 + i * spread, 0.01, 1000), ("gaussian", sigma)) for i in range(n)
        )
        plan = SelectionPlan(
            5.0, 1e-5, 5.0, fit, Budget(1.0, 1e-6), sigma, 10.0, 1.0, events, share
        )
        return selection_report(
            plan, "add-remove", candidates=[f"c{i}" for i in range(n)], chosen=0
        )

    path = tmp_path / "search.privacy.json"
    for n in (MAX_SELECT_CANDIDATES + 1, MAX_SELECT_DPSGD_EVENTS + 1):  # round 2: 256 took 80 s
        path.write_text(json.dumps(report(n, 1e-9).to_dict()))
        with pytest.raises(ValueError, match="at most"):
            PrivacyReport.from_dict(json.loads(path.read_text()))
        _report_fails(path, capsys, "at most")
    many = [[("gaussian", 2.0 + i * 1e-9) for i in range(MAX_SELECT_EVENTS + 1)]]
    with pytest.raises(ValueError, match="events in all"):
        repeat_and_select_epsilon(many, mean=10.0, shape=1.0, delta=1e-5)
    one = [[("dpsgd", 1.0, 0.01, 1000), ("gaussian", 2.0)]]
    kw = dict(mean=10.0, shape=1.0, delta=1e-5)
    same = repeat_and_select_epsilon(one * MAX_SELECT_CANDIDATES, **kw)
    assert same == repeat_and_select_epsilon(one, **kw)
