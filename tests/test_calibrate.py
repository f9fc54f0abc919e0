"""Calibrated sampling (`privkernels.dp_ntk.calibrate`): the tilt, the code block, the
noise scale read from the release, refusals, and the table path."""

from __future__ import annotations

import dataclasses
import warnings

import jax
import numpy as np
import pytest

from privkernels import dp_ntk, features
from privkernels.dp_ntk.calibrate import (
    Calibration,
    CalibrationWarning,
    _warn_shortfall,
    code_block,
    pool_codes,
    released_code,
    sample_calibrated,
    tilt,
)
from privkernels.features.networks import init_params
from privkernels.sklearn import DPNTKGenerator
from privkernels.synth import default_table_network, fit_table, load_table_synth
from tests.test_synth import _frame, _schema


@pytest.fixture(scope="module")
def model():
    return fit_table(jax.random.key(0), _frame(400), _schema(), epsilon=1.0, iterations=30,
                     progress=False)  # fmt: skip


def test_tilt_fits_a_reachable_target_and_stays_uniform_under_a_weak_penalty():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(400, 3))
    w_true = rng.dirichlet(np.ones(400))
    t = z.T @ w_true
    w, ok = tilt(z, t, 1e-8)
    assert ok and w.shape == (400,) and np.isclose(w.sum(), 1.0) and (w >= 0).all()
    assert np.abs(z.T @ w - t).max() < 1e-3
    w_flat, ok = tilt(z, t, 1e6)  # a penalty far above the misfit: the uniform weights
    assert ok and np.abs(w_flat * 400 - 1).max() < 1e-3


def test_an_unreachable_target_is_not_converged_and_never_fits_worse_than_uniform():
    rng = np.random.default_rng(1)
    z = rng.uniform(size=(300, 4))
    far = np.full(4, 5.0)  # outside the pool's convex hull: no weights reach it
    w, ok = tilt(z, far, 1e-9, max_iter=3)
    assert not ok
    # whatever the optimiser does, the returned weights never fit worse than uniform ones
    for var in (1e-9, 1e-6, 1e-3, 1.0):
        w, _ = tilt(z, far, var)
        assert np.sum((z.T @ w - far) ** 2) <= np.sum((z.mean(0) - far) ** 2) + 1e-12


def test_code_block_is_the_skip_kernel_and_refuses_a_network_without_one():
    net = default_table_network(_schema(), 2)
    params = init_params(jax.random.key(0), net, (_schema().n_features,))
    idx = code_block(net, params)
    skip = params["params"]["skip"]["kernel"]
    assert idx.size == skip.size
    flat = jax.flatten_util.ravel_pytree(params)[0]
    marked = jax.tree_util.tree_map(lambda a: a, params)
    marked["params"]["skip"]["kernel"] = skip + 7.0
    assert np.allclose(np.asarray(jax.flatten_util.ravel_pytree(marked)[0] - flat)[idx], 7.0)
    plain = features.fc_1l(16, out_features=2)
    with pytest.raises(ValueError, match="MarginalSkip"):
        code_block(plain, init_params(jax.random.key(0), plain, (5,)))


def test_released_code_noise_is_the_records(model):
    res = model.result
    t, v = released_code(res)
    rec = [m for m in res.report.mechanisms if "embedding" in m.released][0]
    k = res.network.base.out_features
    p = np.maximum(res.noisy_proportions, res.config.min_proportion)
    assert np.allclose(v, (dict(rec.params)["noise_std"] / p) ** 2 / k)
    assert t.shape == (2, code_block(res.network, res.ntk_params).size // k)


def test_a_uniform_mode_result_is_refused():
    """``label_mode="uniform"`` releases no proportions; its target is ``C p_c`` times a class
    mean, no mean at all on imbalanced data, so there is nothing to calibrate towards."""
    m = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                  progress=False, label_mode="uniform")  # fmt: skip
    with pytest.raises(ValueError, match="label_mode='released'"):
        sample_calibrated(jax.random.key(1), m.result, 10)
    with pytest.raises(ValueError, match="label_mode='released'"):
        m.sample(jax.random.key(1), 10, calibrate=True)


def test_a_shortfall_is_warned_and_a_clean_tilt_is_not():
    def cal(conv, ess):
        return Calibration(pool=np.array([900.0, 0.0]), ess=np.array([ess, 0.0]),
                           misfit_before=np.ones(2), misfit_after=np.ones(2),
                           converged=np.array([conv, 0.0]))  # fmt: skip

    with pytest.warns(CalibrationWarning, match="did not converge for 1 class"):
        _warn_shortfall(cal(0.0, 0.5))
    with pytest.warns(CalibrationWarning, match="for 1 \\(rows repeat\\)"):
        _warn_shortfall(cal(1.0, 0.001))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_shortfall(cal(1.0, 0.5))  # the empty class (pool 0) says nothing


def test_a_report_without_a_usable_noise_scale_is_refused(model):
    rec = [r for r in model.report.mechanisms if "embedding" in r.released][0]
    bad_rec = dataclasses.replace(rec, params=tuple(
        (k, float("nan") if k == "noise_std" else v) for k, v in rec.params))  # fmt: skip
    bad = dataclasses.replace(model.report, mechanisms=tuple(
        bad_rec if r is rec else r for r in model.report.mechanisms))  # fmt: skip
    with pytest.raises(ValueError, match="noise_std"):
        released_code(dataclasses.replace(model.result, report=bad))


def test_bad_flags_and_variances_are_refused(model):
    with pytest.raises(TypeError, match="calibrate"):
        model.sample(jax.random.key(1), 10, calibrate="no")
    with pytest.raises(ValueError, match="penalty"):
        sample_calibrated(jax.random.key(1), model.result, 10, penalty=5e-324)
    for var in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="var"):
            tilt(np.ones((5, 2)), np.ones(2), var)


def test_calibrated_sampling_is_keyed_moves_towards_the_release_and_costs_nothing(model):
    before = model.report
    x1, y1, cal = sample_calibrated(jax.random.key(5), model.result, 300)
    x2, y2, _ = sample_calibrated(jax.random.key(5), model.result, 300)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert x1.shape == (300, _schema().n_features) and x1.dtype == np.float32
    assert (cal.misfit_after <= cal.misfit_before + 1e-9).all()
    assert set(cal.converged) <= {0.0, 1.0}
    assert ((cal.ess > 0) & (cal.ess <= 1 + 1e-9)).all()
    assert model.report == before
    # the drawn rows are pool rows: their codes are the generator's, one-hots exact
    z = pool_codes(model.result, x1)
    assert np.isfinite(z).all()
    df = model.sample_df(jax.random.key(5), 300, calibrate=True)
    assert list(df.columns) == ["age", "hours", "sex", "job", "income"]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "1", None])
def test_bad_penalty_is_refused(model, bad):
    with pytest.raises((ValueError, TypeError), match="penalty"):
        sample_calibrated(jax.random.key(1), model.result, 10, penalty=bad)


def _fits(relation: str, keys: range, epsilon: float | None = 2.0):
    """Table fits of one 2000-row frame under ``relation``: the same public draws (network,
    generator), the noise from each key."""
    return [fit_table(jax.random.key(r), _frame(2000), _schema(), epsilon=epsilon,
                      iterations=1, progress=False, neighbouring=relation,
                      public_key=jax.random.key(77)).result for r in keys]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_the_code_noise_variance_is_the_releases_own(relation):
    """Statistical: over 24 independent releases of one table, the released code minus the
    exact code (same divisor) has the variance `released_code` says, per coordinate,
    under both relations (add-remove: the sums' noise divided by the released total).
    A variance off by 2x, or not divided by ``n_hat``, fails."""
    (exact,) = _fits(relation, range(1), epsilon=None)
    k = exact.network.base.out_features
    idx = code_block(exact.network, exact.ntk_params)
    mean = np.asarray(exact.noisy_embedding, np.float64)[idx, :]
    mean = mean.reshape(-1, k, 2).mean(axis=1).T  # (C, q): the exact class-weighted code
    z = []
    for res in _fits(relation, range(10, 34)):
        t, v = released_code(res)
        p = np.maximum(res.noisy_proportions, res.config.min_proportion)
        if relation == "add-remove":  # t = (sums + noise) / (n_hat p): sums = n * mean
            signal = mean * 2000 / (res.noisy_total * p[:, None])
        else:  # t = (mean + noise) / p
            signal = mean / p[:, None]
        z.append((t - signal) / np.sqrt(v)[:, None])
    z = np.concatenate([a.ravel() for a in z])
    assert abs(z.mean()) < 4 / np.sqrt(z.size)  # no bias: noise only
    assert 0.85 < z.var() < 1.15, z.var()  # z.size in the thousands: about +-0.05 at 3 sd


def test_an_add_remove_release_keeps_its_total_and_is_calibrated():
    m = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                  progress=False, neighbouring="add-remove")  # fmt: skip
    total = m.result.noisy_total
    assert isinstance(total, float) and total >= 1.0
    x, y, cal = sample_calibrated(jax.random.key(1), m.result, 40)
    assert x.shape == (40, _schema().n_features) and (cal.misfit_after <= cal.misfit_before).all()
    old = dataclasses.replace(m.result, noisy_total=None)  # a file from before it was kept
    with pytest.raises(ValueError, match="noisy total"):
        sample_calibrated(jax.random.key(1), old, 10)


def test_the_saved_total_round_trips_and_a_bad_one_is_refused(model, tmp_path):
    m = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                  progress=False, neighbouring="add-remove")  # fmt: skip
    path = m.result.save(tmp_path / "ar.npz")
    assert dp_ntk.load(path).noisy_total == m.result.noisy_total
    table = load_table_synth(m.save(tmp_path / "table.npz"))  # the CLI's model file
    assert table.result.noisy_total == m.result.noisy_total
    assert table.sample_df(jax.random.key(2), 20, calibrate=True).shape[0] == 20
    assert dp_ntk.load(model.result.save(tmp_path / "ro.npz")).noisy_total is None
    uniform = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                        progress=False, neighbouring="add-remove", label_mode="uniform")  # fmt: skip
    assert uniform.result.noisy_total is None  # the noisy n alone stays inside the embedding
    for bad, where in ((float("nan"), m.result), (0.5, m.result), (300.0, model.result),
                       (1e300, m.result), (300.0, uniform.result)):  # fmt: skip
        tampered = dataclasses.replace(where, noisy_total=bad).save(tmp_path / "bad.npz")
        with pytest.raises(ValueError, match="noisy_total") as err:
            dp_ntk.load(tampered)
        assert str(bad) not in str(err.value)


def test_the_estimator_samples_calibrated_rows_and_refuses_arrays():
    df = _frame(300)
    g = DPNTKGenerator(schema=_schema(), iterations=5, verbose=False, random_state=0)
    g.fit(df.drop(columns="income"), df["income"])
    out = g.sample_df(40, random_state=3, calibrate=True)
    assert list(out.columns) == list(df.columns) and len(out) == 40
    x, y = g.sample(40, random_state=3, calibrate=True)
    assert x.shape == (40, 4) and set(y) <= {"<=50K", ">50K"}
    rng = np.random.default_rng(0)
    arrays = DPNTKGenerator(classes=[0, 1], iterations=2, verbose=False, random_state=0)
    arrays.fit(rng.uniform(size=(200, 6)), rng.integers(0, 2, 200))
    with pytest.raises(ValueError, match="table network"):
        arrays.sample(10, random_state=1, calibrate=True)


def test_a_code_with_bin_indicators_is_calibrated_on_them_too():
    """``marginal_indicators=True``: the code block holds the bins' indicators as well, and
    calibrated sampling fits them (the tilt reads the whole skip block)."""
    net = default_table_network(_schema(), 2, marginal_indicators=True)
    m = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                  progress=False, network=net)  # fmt: skip
    k = m.result.network.base.out_features
    d, numeric = _schema().n_features, len(net.numeric)
    assert code_block(m.result.network, m.result.ntk_params).size == k * (d + numeric * 33)
    x, _, cal = sample_calibrated(jax.random.key(1), m.result, 60)
    assert x.shape == (60, d) and (cal.misfit_after <= cal.misfit_before + 1e-9).all()
