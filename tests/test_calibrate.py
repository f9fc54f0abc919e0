"""Calibrated sampling (`privkernels.dp_ntk.calibrate`): the tilt, the code block, the
noise scale read from the release, refusals, and the table path."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from privkernels import features
from privkernels.dp_ntk.calibrate import (
    code_block,
    pool_codes,
    released_code,
    sample_calibrated,
    tilt,
)
from privkernels.features.networks import init_params
from privkernels.sklearn import DPNTKGenerator
from privkernels.synth import default_table_network, fit_table
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
    w = tilt(z, t, 1e-8)
    assert w.shape == (400,) and np.isclose(w.sum(), 1.0) and (w >= 0).all()
    assert np.abs(z.T @ w - t).max() < 1e-3
    w_flat = tilt(z, t, 1e6)  # a penalty far above the misfit: the uniform weights
    assert np.abs(w_flat * 400 - 1).max() < 1e-3


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


def test_calibrated_sampling_is_keyed_moves_towards_the_release_and_costs_nothing(model):
    before = model.report
    x1, y1, cal = sample_calibrated(jax.random.key(5), model.result, 300)
    x2, y2, _ = sample_calibrated(jax.random.key(5), model.result, 300)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert x1.shape == (300, _schema().n_features) and x1.dtype == np.float32
    assert (cal.misfit_after <= cal.misfit_before + 1e-9).all()
    assert ((cal.ess > 0) & (cal.ess <= 1 + 1e-9)).all()
    assert model.report == before
    # the drawn rows are pool rows: their codes are the generator's, one-hots exact
    z = pool_codes(model.result, x1)
    assert np.isfinite(z).all()
    df = model.sample_df(jax.random.key(5), 300, calibrate=True)
    assert list(df.columns) == ["age", "hours", "sex", "job", "income"]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_penalty_is_refused(model, bad):
    with pytest.raises(ValueError, match="penalty"):
        sample_calibrated(jax.random.key(1), model.result, 10, penalty=bad)


def test_add_remove_release_is_refused():
    m = fit_table(jax.random.key(0), _frame(300), _schema(), epsilon=1.0, iterations=2,
                  progress=False, neighbouring="add-remove")  # fmt: skip
    with pytest.raises(ValueError, match="replace-one"):
        sample_calibrated(jax.random.key(1), m.result, 10)


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
