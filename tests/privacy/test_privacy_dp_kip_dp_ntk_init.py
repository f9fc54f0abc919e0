"""DP-KIP started from DP-NTK samples (init="dp_ntk"): the budget split, the
composed report, the clipped inputs DP-NTK sees, and refusal before any noise."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from _privacy_helpers import NoiseDrawn, forbid_noise
from sklearn.datasets import load_digits

from privkernels import dp_kip, dp_ntk
from privkernels.dp_kip import DPNTKInit
from privkernels.privacy.report import PrivacyReport

INIT = DPNTKInit(iterations=3, batch_size=60)
# The start and its budget do not depend on DP-KIP's kernel: the FC-NTK compiles in a
# quarter of the ScatterNet's time (the default kernel's own fits are in test_dp_kip*).
# Every fit here shares these settings, and so one compilation of each program.
SMALL = dict(delta=1e-5, n_classes=10, epochs=1, batch_size=60, support_per_class=2,
             kernel="fc_ntk", progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    idx = np.random.default_rng(0).permutation(len(d.target))[:300]
    x = (d.images[idx] / 16.0 * 2.0 - 1.0).astype(np.float32)
    return x, d.target[idx].astype(np.int32)


@pytest.fixture(scope="module")
def spied(digits):
    """One fit (eps 2) with inputs outside the public range, DP-NTK's arguments recorded."""
    x, y = digits
    x = x.copy()
    x[0, 0, 0], x[1, 0, 0] = 7.0, -3.0  # outside the public range: clipped, not refused
    seen = {}
    real = dp_ntk.fit

    def spy(key, xs, ys, **kw):
        seen.update(lo=float(np.min(xs)), hi=float(np.max(xs)), eps=kw["epsilon"],
                    delta=kw["delta"], label_mode=kw["label_mode"])  # fmt: skip
        return real(key, xs, ys, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dp_ntk, "fit", spy)
        res = dp_kip.fit(jax.random.key(3), x, y, epsilon=2.0, init=INIT, **SMALL)
    return res, seen, x, y


@pytest.fixture(scope="module")
def fitted(spied):
    return spied[0]


def test_two_releases_compose_to_the_budget(fitted):
    rep = fitted.report
    assert rep.private and rep.neighbouring == "replace-one"
    ntk, sgd = rep.mechanisms
    assert ntk.name == "gaussian" and "e-NTK mean embedding" in ntk.released
    assert ntk.epsilon == pytest.approx(0.2, rel=1e-12)
    assert ntk.delta == pytest.approx(1e-6, rel=1e-12)
    assert sgd.name == "poisson_subsampled_gaussian"
    assert sgd.delta == pytest.approx(9e-6, rel=1e-12)
    assert sgd.param_dict["target_epsilon"] == pytest.approx(1.8, rel=1e-12)
    assert sgd.epsilon <= 1.8 + 1e-9
    assert rep.epsilon == pytest.approx(ntk.epsilon + sgd.epsilon, rel=1e-12)
    assert rep.epsilon <= 2.0 and rep.delta <= 1e-5  # never above the request, not even an ulp
    assert rep.delta == pytest.approx(1e-5, rel=1e-12)
    assert "range [-1, 1]" in " ".join(rep.notes)
    assert not any("DP-NTK" in d for d in rep.data_independent)


def test_dp_sgd_is_calibrated_to_the_remaining_share(fitted, digits):
    x, _ = digits
    settings = {k: v for k, v in SMALL.items() if k not in ("n_classes", "progress")}
    settings.update(epsilon=1.8, delta=9e-6)
    _, plan, _ = dp_kip.configure(n=len(x), input_shape=x.shape[1:], n_classes=10, **settings)
    assert fitted.config.noise_multiplier == pytest.approx(plan.noise_multiplier, rel=1e-12)
    assert fitted.config.epsilon == pytest.approx(1.8, rel=1e-12)
    assert fitted.config.init.startswith("dp_ntk(fraction=0.1")


def test_dp_ntk_sees_clipped_inputs_and_its_share(spied):
    _, seen, _, _ = spied
    assert seen["lo"] >= 0.0 and seen["hi"] <= 1.0
    assert seen["eps"] == pytest.approx(0.2) and seen["delta"] == pytest.approx(1e-6)
    assert seen["label_mode"] == "uniform"  # nothing spent on labels: they are fixed


def test_same_key_same_release_and_save_load(spied, tmp_path):
    fitted, _, x, y = spied
    again = dp_kip.fit(jax.random.key(3), x, y, epsilon=2.0, init=INIT, **SMALL)
    np.testing.assert_array_equal(again.support_x, fitted.support_x)
    path = tmp_path / "r.npz"
    fitted.save(path)
    loaded = dp_kip.load(path)
    assert loaded.report == fitted.report
    np.testing.assert_array_equal(loaded.support_x, fitted.support_x)


def test_any_fraction_survives_save_load(digits, tmp_path):
    """The load-time check reads the fraction back from the config's init name: it must
    round-trip exactly (a 6-digit rendering refused fractions like 0.1234567)."""
    x, y = digits
    spec = DPNTKInit(budget_fraction=0.1234567, iterations=3, batch_size=60)
    res = dp_kip.fit(jax.random.key(5), x, y, epsilon=1.0, init=spec, **SMALL)
    assert res.report.mechanisms[0].epsilon == pytest.approx(0.1234567, rel=1e-12)
    res.save(tmp_path / "f.npz")
    assert dp_kip.load(tmp_path / "f.npz").report == res.report


def test_init_names_tell_close_ranges_apart_and_keep_usual_names():
    """The name is in the checkpoint fingerprint: ranges that differ past 6 digits differ."""
    a = DPNTKInit(data_range=(0.0, 1.0000001)).name
    b = DPNTKInit(data_range=(0.0, 1.0000002)).name
    assert a != b and "1.0000001)" in a
    assert "range=(0, 1)" in DPNTKInit(data_range=(0.0, 1.0)).name
    assert "range=(-1, 1)" in DPNTKInit(data_range=(-1, 1)).name
    assert DPNTKInit().name.endswith("network=default)")  # earlier fingerprints unchanged
    assert DPNTKInit(centered=True).name.endswith("network=default-centered)")


def test_a_centered_start_releases_through_the_centred_default_network(digits):
    """``centered=True``: DP-NTK gets the default network on ``2 x - 1`` (same share,
    same clipped inputs); the fit composes to the budget as without it."""
    x, y = digits
    seen = {}
    real = dp_ntk.fit

    def spy(key, xs, ys, **kw):
        seen.update(network=kw["network"], eps=kw["epsilon"], lo=float(np.min(xs)))
        return real(key, xs, ys, **kw)

    spec = DPNTKInit(iterations=2, batch_size=60, centered=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dp_ntk, "fit", spy)
        res = dp_kip.fit(jax.random.key(4), x, y, epsilon=2.0, init=spec, **SMALL)
    assert seen["network"] == dp_ntk.default_network(10, centered=True)
    assert seen["eps"] == pytest.approx(0.2) and seen["lo"] >= 0.0
    assert 1.99 <= res.report.epsilon <= 2.0 and "default-centered" in res.config.init
    with pytest.raises(ValueError, match="centered"):
        DPNTKInit(centered=True, network=dp_ntk.default_network(10))
    with pytest.raises(TypeError, match="centered"):
        DPNTKInit(centered="yes")


def test_a_report_without_the_dp_ntk_release_is_refused(fitted):
    data = json.loads(fitted.report.to_json())
    data["mechanisms"] = data["mechanisms"][1:]
    data["epsilon"], data["delta"] = (data["mechanisms"][0][k] for k in ("epsilon", "delta"))
    tampered = PrivacyReport.from_dict(data)
    from privkernels.dp_kip.result import _check_report

    with pytest.raises(ValueError, match="2 release"):
        _check_report(tampered, fitted.config, fitted.steps_done)


def test_an_edited_dp_ntk_record_is_refused(fitted):
    from privkernels.dp_kip.result import _check_report

    data = json.loads(fitted.report.to_json())
    data["mechanisms"][0]["epsilon"] = 1e-6  # claim a cheaper start, totals kept consistent
    data["epsilon"] = sum(m["epsilon"] for m in data["mechanisms"])
    with pytest.raises(ValueError, match="DP-NTK start|its parameters give"):
        _check_report(PrivacyReport.from_dict(data), fitted.config, fitted.steps_done)


@pytest.fixture(scope="module")
def add_remove(digits):
    """One fit (eps 2) under add-remove, DP-NTK's arguments recorded."""
    x, y = digits
    seen = {}
    real = dp_ntk.fit

    def spy(key, xs, ys, **kw):
        seen.update(neighbouring=kw["neighbouring"], batch=kw["batch_size"], eps=kw["epsilon"])
        return real(key, xs, ys, **kw)

    kw = dict(SMALL, neighbouring="add-remove", sampling_rate=60 / 300)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dp_ntk, "fit", spy)
        res = dp_kip.fit(jax.random.key(3), x, y, epsilon=2.0, init=INIT, **kw)
    return res, seen


def test_add_remove_start_composes_three_releases_under_one_relation(add_remove, tmp_path):
    res, seen = add_remove
    rep = res.report
    assert rep.private and rep.neighbouring == "add-remove"
    sums, n_hat, sgd = rep.mechanisms
    assert "class sums" in sums.released and sums.sensitivity == 1.0
    assert "dataset size n" in n_hat.released and n_hat.sensitivity == 1.0
    assert "n" not in sums.param_dict and "n" not in n_hat.param_dict
    assert sums.epsilon + n_hat.epsilon == pytest.approx(0.2, rel=1e-12)
    assert sgd.param_dict["neighbouring"] == "add-remove"
    assert sgd.param_dict["target_epsilon"] == pytest.approx(1.8, rel=1e-12)
    assert rep.epsilon <= 2.0 and rep.delta <= 1e-5
    assert rep.epsilon == pytest.approx(2.0, rel=1e-3)
    # DP-NTK got the relation, and a generator batch that is not capped at the private n
    assert seen == dict(neighbouring="add-remove", batch=INIT.batch_size, eps=pytest.approx(0.2))
    res.save(tmp_path / "ar.npz")
    assert dp_kip.load(tmp_path / "ar.npz").report == rep


@pytest.mark.parametrize(
    "edit",
    ["drop_count", "cheaper_sums", "sensitivity", "shift_eps", "negative_eps", "swap",
     "with_n", "sigma", "renamed"],
)  # fmt: skip
def test_an_edited_add_remove_start_is_refused(add_remove, edit):
    from privkernels.dp_kip.result import _check_report

    res, _ = add_remove
    data = json.loads(res.report.to_json())
    mechs = data["mechanisms"]
    total = mechs[0]["epsilon"] + mechs[1]["epsilon"]
    if edit == "drop_count":
        del mechs[1]
    elif edit == "cheaper_sums":
        mechs[0]["epsilon"] = 1e-6
    elif edit == "sensitivity":
        mechs[0]["sensitivity"] = 0.5
    elif edit in ("shift_eps", "negative_eps"):  # the DP-NTK total is kept
        mechs[1]["epsilon"] = 0.01 * total if edit == "shift_eps" else -0.5 * total
        mechs[0]["epsilon"] = total - mechs[1]["epsilon"]
    elif edit == "swap":
        mechs[0], mechs[1] = mechs[1], mechs[0]
    elif edit == "with_n":
        mechs[0]["params"]["n"] = 300
    elif edit == "sigma":
        mechs[0]["params"]["sigma"] *= 10
    else:
        mechs[0]["released"] = mechs[0]["released"].replace("class sums", "mean embedding")
    data["epsilon"] = sum(m["epsilon"] for m in mechs)
    data["delta"] = sum(m["delta"] for m in mechs)
    # a negative part is refused already as a record (report.MechanismRecord), the others by
    # the load-time check of the start's releases
    reason = (
        "epsilon must be finite and >= 0"
        if edit == "negative_eps"
        else "release|DP-NTK start|its parameters give"
    )
    with pytest.raises(ValueError, match=reason):
        _check_report(PrivacyReport.from_dict(data), res.config, res.steps_done)


@pytest.mark.parametrize("fraction", [0.2, 0.37, 0.5])
def test_split_never_overspends(fraction):
    from privkernels.dp_kip.dp_ntk_init import split_budget
    from privkernels.privacy import Budget

    kip, ntk = split_budget(Budget(2.0, 1e-5), DPNTKInit(budget_fraction=fraction))
    assert ntk.delta + kip.delta <= 1e-5 and kip.delta + ntk.delta <= 1e-5
    assert ntk.epsilon + kip.epsilon <= 2.0


def _flat(x):
    return x.reshape(len(x), -1)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(neighbouring="add-remove"), "sampling_rate"),  # add-remove needs a public rate
        (dict(neighbouring="add_remove"), "neighbouring"),
        (dict(x_map=_flat, smooth=True), "images"),
        (dict(x_map=lambda x: x[:, None, :, :, None], kernel="fc_ntk"), "dp_ntk"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(delta=1.5), "delta"),
        (dict(x_nan=True), "finite|NaN"),
        (dict(batch_size=10**6), "batch_size"),
        (  # a one-entry input cannot be standardised per sample
            dict(
                x_map=lambda x: x[:, 0, :1],
                kernel="fc_ntk",
                init=DPNTKInit(data_range="standardized", iterations=3, batch_size=60),
            ),
            "at least 2",
        ),
    ],
)
def test_bad_input_is_refused_before_any_noise(monkeypatch, digits, change, match):
    x, y = digits
    kw = dict(SMALL, epsilon=1.0, init="dp_ntk")
    if change.pop("x_nan", False):
        x = x.copy()
        x[5, 3, 3] = np.nan
    x = change.pop("x_map", lambda a: a)(x)
    if change.pop("smooth", False):
        import optax

        change["optimizer"] = optax.chain(optax.adam(0.1), dp_kip.smooth_updates(1.0))
    kw.update(change)
    forbid_noise(monkeypatch)
    try:
        with pytest.raises(ValueError, match=match):
            dp_kip.fit(jax.random.key(0), x, y, **kw)
    except NoiseDrawn as err:  # pragma: no cover - the failure this test exists for
        pytest.fail(str(err))


@pytest.mark.parametrize(
    "kw",
    [
        dict(budget_fraction=0.0),
        dict(budget_fraction=1.0),
        dict(budget_fraction=float("nan")),
        dict(data_range=(1.0, 1.0)),
        dict(data_range=(0.0, float("inf"))),
        dict(data_range="ab"),
        dict(data_range="Standardized"),
        dict(data_range="12"),
        dict(iterations=0),
        dict(learning_rate=-1.0),
    ],
)
def test_bad_specs_are_refused(kw):
    with pytest.raises(ValueError):
        DPNTKInit(**kw)


def test_standardized_range_gives_pixels_back_and_standardises_samples():
    from privkernels.data import standardize_per_example
    from privkernels.dp_kip.dp_ntk_init import from_unit_range, to_unit_range

    rng = np.random.default_rng(0)
    pix = rng.uniform(0.0, 1.0, (6, 8, 8)).astype(np.float32)
    pix[:, 0, 0], pix[:, 0, 1] = 0.0, 1.0  # darkest 0, brightest 1, as in MNIST
    pix[5] = 0.25  # a constant input maps to 0, not to NaN
    back = np.asarray(to_unit_range(standardize_per_example(pix), "standardized"))
    np.testing.assert_allclose(back[:5], pix[:5], atol=1e-5)
    np.testing.assert_array_equal(back[5], 0.0)
    out = from_unit_range(pix[:5], "standardized")
    assert out.dtype == np.float32 and out.shape == (5, 8, 8)
    np.testing.assert_allclose(out.reshape(5, -1).mean(1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.reshape(5, -1).std(1), 1.0, atol=1e-4)
    # a public range: the affine map, clipped (values outside are not refused)
    np.testing.assert_allclose(np.asarray(to_unit_range(np.array([[-3.0, 0.0, 3.0]]), (-1, 1))),
                               [[0.0, 0.5, 1.0]])  # fmt: skip
    np.testing.assert_allclose(from_unit_range(np.array([[0.0, 0.5, 1.0]]), (-1, 1)), [[-1, 0, 1]])
    # finite inputs at the float32 limits: no overflow to NaN (a data-dependent failure)
    big = np.array([[-3e38, 0.0, 3e38], [-3e38, 3e38, 3e38], [1.0, 2.0, 3.0]], np.float32)
    unit = np.asarray(to_unit_range(big, "standardized"))
    assert np.isfinite(unit).all() and unit.min() >= 0.0 and unit.max() <= 1.0
    np.testing.assert_allclose(unit[2], [0.0, 0.5, 1.0], atol=1e-6)


def test_dp_ntk_start_standardises_every_sample(digits):
    """The samples leave `dp_ntk_start` on the FC-NTK's scale: each one standardised."""
    from privkernels.data import standardize_per_example
    from privkernels.dp_kip.dp_ntk_init import dp_ntk_start
    from privkernels.privacy import Budget

    x, y = digits
    labels = np.repeat(np.arange(10), 2)
    start, report = dp_ntk_start(
        jax.random.key(0), standardize_per_example(x), y, n_classes=10, labels=labels,
        budget=Budget(0.5, 1e-6), spec=DPNTKInit(data_range="standardized", iterations=3, batch_size=60),
    )  # fmt: skip
    flat = start.reshape(len(labels), -1)
    assert start.dtype == np.float32 and start.shape == (20, *x.shape[1:])
    np.testing.assert_allclose(flat.mean(1), 0.0, atol=1e-5)
    np.testing.assert_allclose(flat.std(1), 1.0, atol=1e-3)
    assert report.epsilon == pytest.approx(0.5, rel=1e-3)


def test_a_standardized_start_end_to_end(monkeypatch, digits):
    """Inputs standardised per example (the FC-NTK's preprocessing): DP-NTK sees each
    record mapped to [0, 1] by its own min and max; the report says so; same budget."""
    from privkernels.data import standardize_per_example

    x, y = digits
    xs = standardize_per_example(x)
    seen = {}
    real = dp_ntk.fit

    def spy(key, x01, ys, **kw):
        flat = np.asarray(x01).reshape(len(x01), -1)
        seen.update(mins=flat.min(1), maxs=flat.max(1), eps=kw["epsilon"])
        return real(key, x01, ys, **kw)

    monkeypatch.setattr(dp_ntk, "fit", spy)
    spec = DPNTKInit(data_range="standardized", iterations=3, batch_size=60)
    res = dp_kip.fit(jax.random.key(3), xs, y, epsilon=2.0, init=spec, **SMALL)
    np.testing.assert_allclose(seen["mins"], 0.0, atol=1e-6)
    np.testing.assert_allclose(seen["maxs"], 1.0, atol=1e-6)
    assert seen["eps"] == pytest.approx(0.2)
    assert res.config.init.startswith("dp_ntk(fraction=0.1, range=standardized,")
    assert "own min and max" in " ".join(res.report.notes)
    assert res.report.epsilon <= 2.0 and res.report.epsilon == pytest.approx(2.0, rel=1e-3)
    assert np.isfinite(np.asarray(res.support_x)).all()


def test_non_private_baseline(digits):
    x, y = digits
    res = dp_kip.fit(jax.random.key(5), x, y, epsilon=None, init=INIT, **SMALL)
    assert not res.report.private


def _resume_counting_dp_ntk(x, y, kw, ck):
    """``(DP-NTK releases made, result)`` of resuming ``ck`` with key 3."""
    calls = []
    real = dp_ntk.fit

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dp_ntk, "fit", counted)
        done = dp_kip.fit(jax.random.key(3), x, y, **kw, checkpoint_path=ck, resume=True)
    return len(calls), done


def test_a_resume_takes_the_saved_start_report_and_repeats_no_release(digits, tmp_path):
    """The checkpoint keeps the DP-NTK start's report: a resume composes it without running
    DP-NTK again (DP-NTK does not read the data again) and ends where an
    uninterrupted run ends. A checkpoint without it (written before) re-runs the release."""
    from privkernels import checkpoint
    from privkernels.dp_kip.fitting import CHECKPOINT_FORMAT

    x, y = digits
    kw = dict(SMALL, epochs=2, epsilon=2.0, init=INIT)
    full = dp_kip.fit(jax.random.key(3), x, y, **kw)
    for saved_report in (True, False):
        ck = tmp_path / f"kip-{saved_report}.npz"
        part = dp_kip.fit(jax.random.key(3), x, y, **kw, checkpoint_path=ck, max_steps=5)
        assert part.steps_done == 5
        arrays, meta = checkpoint.load(ck, format=CHECKPOINT_FORMAT)
        saved = PrivacyReport.from_dict(meta["init_report"])
        assert saved.mechanisms == part.report.mechanisms[:1]  # the DP-NTK release alone
        assert saved.epsilon == pytest.approx(0.2, rel=1e-12)
        if saved_report:  # a report of another share is refused, before any noise
            bad = dict(meta, init_report=dict(meta["init_report"], neighbouring="add-remove"))
            bad_ck = tmp_path / "bad.npz"
            checkpoint.save(bad_ck, arrays, bad)
            with pytest.MonkeyPatch.context() as mp:
                forbid_noise(mp)
                with pytest.raises(ValueError, match="does not record this call"):
                    dp_kip.fit(jax.random.key(3), x, y, **kw, checkpoint_path=bad_ck, resume=True)
        else:
            del meta["init_report"]
            checkpoint.save(ck, arrays, meta)
        calls, done = _resume_counting_dp_ntk(x, y, kw, ck)
        assert calls == (0 if saved_report else 1)
        assert done.steps_done == full.steps_done == 10
        np.testing.assert_allclose(done.support_x, full.support_x, rtol=1e-6, atol=1e-7)
        assert done.report == full.report


def test_a_failure_after_the_start_resumes_without_a_second_release(digits, tmp_path):
    """The checkpoint is written as soon as the start is released (step 0): a run that
    fails after it (here an out-of-memory error building the trainer) resumes from it, and a
    resume that fails the same way leaves the checkpoint as it was (no second write)."""
    import privkernels.dp_kip.fitting as fitting
    from privkernels import checkpoint

    x, y = digits
    kw = dict(SMALL, epsilon=2.0, init=INIT)
    full = dp_kip.fit(jax.random.key(3), x, y, **kw)
    ck = tmp_path / "kip.npz"

    def out_of_memory(*args, **kwargs):
        raise MemoryError("featurisation")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fitting, "make_trainer", out_of_memory)
        with pytest.raises(MemoryError):
            dp_kip.fit(jax.random.key(3), x, y, **kw, checkpoint_path=ck)
        written, saves, loads = ck.read_bytes(), [], []  # a resume that finds the start's
        mp.setattr(checkpoint, "save", lambda *a, **k: saves.append(a))  # record does not
        real_load = checkpoint.load  # rewrite it, and reads the checkpoint once
        mp.setattr(checkpoint, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
        with pytest.raises(MemoryError):
            _resume_counting_dp_ntk(x, y, kw, ck)
        assert saves == [] and ck.read_bytes() == written and len(loads) == 1
    calls, done = _resume_counting_dp_ntk(x, y, kw, ck)
    assert calls == 0 and done.steps_done == full.steps_done
    np.testing.assert_allclose(done.support_x, full.support_x, rtol=1e-6, atol=1e-7)
    assert done.report == full.report


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_an_older_checkpoint_keeps_the_re_run_report_at_once(digits, tmp_path):
    """Resuming a checkpoint written without the start's report re-runs that release once and
    writes its report before anything else can fail, so a second resume runs DP-NTK no more."""
    import privkernels.dp_kip.fitting as fitting
    from privkernels import checkpoint
    from privkernels.dp_kip.fitting import CHECKPOINT_FORMAT

    x, y = digits
    kw = dict(SMALL, epsilon=2.0, init=INIT)
    full = dp_kip.fit(jax.random.key(3), x, y, **kw)
    ck = tmp_path / "kip.npz"
    dp_kip.fit(jax.random.key(3), x, y, **kw, checkpoint_path=ck, max_steps=3)
    arrays, meta = checkpoint.load(ck, format=CHECKPOINT_FORMAT)
    del meta["init_report"]
    checkpoint.save(ck, arrays, meta)

    def out_of_memory(*args, **kwargs):
        raise MemoryError("featurisation")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fitting, "make_trainer", out_of_memory)
        with pytest.raises(MemoryError):
            _resume_counting_dp_ntk(x, y, kw, ck)
    _, meta = checkpoint.load(ck, format=CHECKPOINT_FORMAT)
    assert meta["steps_done"] == 3
    assert PrivacyReport.from_dict(meta["init_report"]).mechanisms == full.report.mechanisms[:1]
    calls, done = _resume_counting_dp_ntk(x, y, kw, ck)
    assert calls == 0 and done.steps_done == full.steps_done
    np.testing.assert_allclose(done.support_x, full.support_x, rtol=1e-6, atol=1e-7)
    assert done.report == full.report
