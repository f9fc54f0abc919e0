"""Tests for privkernels.dp_kip (DP-KIP, Vinaroz & Park, Algorithm 1).

Small synthetic / sklearn-digits problems only; the whole file runs in well
under 90 s on 2 CPU cores. Reference quantities (per-example gradients, the
epsilon of the accountant, the clipped sum) are recomputed independently here.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import privkernels.checkpoint
from privkernels import dp_kip
from privkernels.privacy.clipping import NORM_MARGIN
from privkernels.privacy.warnings import PrivacyLeakWarning


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32) * 2.0 - 1.0
    y = d.target.astype(np.int32)
    return x[:300], y[:300], x[1500:], y[1500:]


def _small(seed: int = 0, n: int = 120, shape=(8, 8), c: int = 3):
    rng = np.random.default_rng(seed)
    y = np.arange(n, dtype=np.int32) % c
    x = rng.normal(size=(n, *shape)).astype(np.float32) + y.reshape(-1, *([1] * len(shape)))
    return x, y


BASE = dict(
    kernel="fc_ntk",
    support_per_class=2,
    epsilon=2.0,
    delta=1e-5,
    clip_norm=0.1,
    batch_size=20,
    epochs=1,
    learning_rate=1e-2,
    n_classes=3,
    progress=False,
)


# ------------------------------------------------------------------ gradients


def _tanh_features_spec(d: int, f: int, seed: int = 0):
    """A cheap non-linear feature kernel ``phi(x) = tanh(W x)`` (features kind, f features)."""
    w = jnp.asarray(np.random.default_rng(seed).normal(size=(d, f)) / math.sqrt(d))
    return dp_kip.KernelSpec(
        "tanh", "features", {}, feature_fn=lambda z: jnp.tanh(z.reshape(z.shape[0], -1) @ w)
    )


@pytest.mark.parametrize("method", ["adjoint", "vmap"])
@pytest.mark.parametrize(
    "kernel",
    ["fc_ntk", "tanh", pytest.param("scatternet", marks=pytest.mark.slow)],
)
def test_per_example_grads_match_python_loop(kernel, method, digits):
    x, y, _, _ = digits
    if kernel == "tanh":
        spec = _tanh_features_spec(64, 16)
    else:
        spec = dp_kip.make_kernel(kernel, (8, 8), 10)
    xs = dp_kip.init_support(jax.random.key(3), 6, (8, 8))
    ys = jax.nn.one_hot(jnp.arange(6) % 10, 10) - 0.1
    xt = jnp.asarray(x[:5])
    yt = jax.nn.one_hot(jnp.asarray(y[:5]), 10) - 0.1
    got = np.asarray(
        jax.jit(lambda s: dp_kip.per_example_grads(spec, s, ys, xt, yt, reg=1e-3, method=method))(
            xs
        )
    )

    @jax.jit
    def single_grad(xs_, xi, yi):  # the loss of ONE target example, differentiated alone
        return jax.grad(lambda s: dp_kip.krr_loss(spec, s, ys, xi[None], yi[None], reg=1e-3)[0])(
            xs_
        )

    # The references run at full float32, as `per_example_grads` does: `krr_loss` leaves a
    # feature map (the tanh kernel's) at the backend default, which is TF32 on a GPU.
    with jax.default_matmul_precision("highest"):
        refs = [np.asarray(single_grad(xs, xt[i], yt[i])) for i in range(5)]  # Python loop
        # the summed loss gradient equals the sum of per-example gradients
        total_loss = lambda s: jnp.sum(dp_kip.krr_loss(spec, s, ys, xt, yt, reg=1e-3))  # noqa: E731
        tot = jax.jit(jax.grad(total_loss))(xs)
    for i, ref in enumerate(refs):
        np.testing.assert_allclose(got[i], ref, rtol=2e-3, atol=1e-6 * np.abs(ref).max())
    np.testing.assert_allclose(
        got.sum(0), np.asarray(tot), rtol=2e-3, atol=1e-6 * np.abs(tot).max()
    )


@pytest.mark.parametrize(
    "kernel, f",
    [("fc_ntk", None), ("tanh", 40), ("tanh", 5)],  # tanh f=5 < m: push-through fallback
)
def test_adjoint_grads_equal_vmap_grads_x64(kernel, f):
    """The adjoint per-example gradients equal vmap(grad) to float64 rounding."""
    rng = np.random.default_rng(5)
    m, b, c = 9, 7, 3
    with jax.enable_x64(True):
        spec = (
            dp_kip.make_kernel("fc_ntk", (3, 4), c, options={"depth": 2})
            if kernel == "fc_ntk"
            else _tanh_features_spec(12, f)
        )
        xs = jnp.asarray(rng.normal(size=(m, 3, 4)))
        ys = jnp.asarray(rng.normal(size=(m, c)))
        xt = jnp.asarray(rng.normal(size=(b, 3, 4)))
        xt = xt.at[0].set(xs[2])  # a target equal to a support point (kernel kink)
        yt = jnp.asarray(rng.normal(size=(b, c)))
        kw = dict(reg=1e-3, jitter=1e-4)
        # jitted: one compilation each instead of an eager dispatch of every operation
        adj = jax.jit(
            lambda a: dp_kip.per_example_grads(spec, a, ys, xt, yt, method="adjoint", **kw)
        )(xs)
        ref = jax.jit(lambda a: dp_kip.per_example_grads(spec, a, ys, xt, yt, method="vmap", **kw))(
            xs
        )
        assert adj.dtype == jnp.float64 and adj.shape == (b, m, 3, 4)
        # fc_ntk's capped kappa0 slope at c = 1 (diagonal of K_ss, x_t == x_s) amplifies
        # float64 rounding to ~1e-9 relative; anything structural would be O(1).
        np.testing.assert_allclose(
            np.asarray(adj), np.asarray(ref), rtol=1e-6, atol=1e-8 * float(jnp.abs(ref).max())
        )
        # losses from the adjoint path are the KRR losses of eq. 3
        t = dp_kip.krr.support_repr(spec, xt)
        _, losses = jax.jit(lambda a: dp_kip.grads.example_grads(spec, a, ys, t, yt, 1e-3 + 1e-4))(
            xs
        )
        ref_l = jax.jit(lambda a: dp_kip.krr_loss(spec, a, ys, xt, yt, **kw))(xs)
        # (fc_ntk's diagonal kappa1(c ~ 1) carries sqrt(eps64) ~ 1e-8 rounding noise)
        np.testing.assert_allclose(np.asarray(losses), np.asarray(ref_l), rtol=1e-7)
    with pytest.raises(ValueError, match="method"):
        dp_kip.per_example_grads(spec, xs, ys, xt, yt, method="loop")  # type: ignore[arg-type]


def test_adjoint_per_example_grads_do_not_mix_examples():
    """Gradient i depends only on (x_i, y_i): replacing the other targets leaves it unchanged."""
    rng = np.random.default_rng(6)
    spec = dp_kip.make_kernel("fc_ntk", (8,), 3)
    xs = jnp.asarray(rng.normal(size=(5, 8)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    xt = jnp.asarray(rng.normal(size=(6, 8)), jnp.float32)
    yt = jnp.asarray(rng.normal(size=(6, 3)), jnp.float32)
    fn = jax.jit(lambda a, b: dp_kip.per_example_grads(spec, xs, ys, a, b, reg=1e-3))
    g1 = np.asarray(fn(xt, yt))
    xt2 = xt.at[1:].set(100.0 * jnp.asarray(rng.normal(size=(5, 8)), jnp.float32))
    yt2 = yt.at[1:].set(-50.0)
    g2 = np.asarray(fn(xt2, yt2))
    np.testing.assert_array_equal(g1[0], g2[0])
    assert not np.allclose(g1[1:], g2[1:])


@pytest.mark.parametrize("corrupt", [0.3, 0.0])
def test_step_adjoint_equals_vmap_padded_masked(corrupt):
    """The private input-space train_step: auto (Gram form, or adjoint with frozen pixels) ==
    vmap(grad) == a per-example loop.

    A padded Poisson batch (mask with zeros, padding pointing at the public zero row), active
    clipping, and frozen (corrupted) pixels (adjoint path) or none (the FC-NTK then takes the
    Gram-form clipped sum); SGD(lr=1) and no noise, so the update is the clipped sum / (q n).
    """
    from privkernels.audit import dp_kip_full_batch_step
    from privkernels.privacy import clip_per_example, poisson_batch

    rng = np.random.default_rng(7)
    n, m, c, shape = 40, 6, 3, (4, 5)
    x = jnp.asarray(rng.normal(size=(n, *shape)), jnp.float32)
    y_enc = dp_kip.encode_labels(jnp.asarray(np.arange(n) % c), c)
    xe = jnp.concatenate([x, jnp.zeros((1, *shape))])
    ye = jnp.concatenate([y_enc, jnp.zeros((1, c))])
    spec = dp_kip.make_kernel("fc_ntk", shape, c)
    xs = dp_kip.init_support(jax.random.key(2), m, shape)
    ys = dp_kip.encode_labels(jnp.asarray(dp_kip.support_labels(c, 2)), c)
    gmask = dp_kip.corruption_mask(jax.random.key(4), (m, *shape), corrupt)
    xs = jnp.where(gmask, 0.5, xs)
    q, pad, chunk, clip = 0.25, 24, 8, 0.05
    k_batch, k_noise = jax.random.split(jax.random.key(11))
    sample = poisson_batch(k_batch, n, q, pad_to=pad, pad_index=n)
    batch = dp_kip.Batch(xe[sample.indices], ye[sample.indices], sample.mask.astype(jnp.float32))
    out = {}
    for meth in ("auto", "vmap"):
        step, state, _ = dp_kip_full_batch_step(
            "fc_ntk",
            xs,
            c,
            int(q * n),
            clip_norm=clip,
            noise_multiplier=0.0,
            relative_reg=1e-3,
            optimizer=optax.sgd(1.0),
            grad_method=meth,
            corrupted=gmask,
            chunk_size=chunk,
        )
        new, info = step(state, batch, k_noise)
        out[meth] = (np.asarray(new.params["x"]), info)
    (xa, aux_a), (xv, aux_v) = out["auto"], out["vmap"]
    np.testing.assert_allclose(xa, xv, rtol=1e-4, atol=1e-4 * np.abs(xs).max())
    assert int(aux_a.n_clipped) == int(aux_v.n_clipped) > 0  # clipping active
    assert float(aux_a.loss_sum) == pytest.approx(float(aux_v.loss_sum), rel=1e-4)
    # independent reference for the noiseless step: loop over the sampled examples
    mk = np.asarray(sample.mask)
    assert 0 < mk.sum() < pad  # padded rows present and masked out
    idx = np.asarray(sample.indices)[mk]
    single = jax.jit(
        jax.grad(lambda s, xi, yi: dp_kip.krr_loss(spec, s, ys, xi[None], yi[None], reg=1e-3)[0])
    )
    ref = np.zeros(xs.shape, np.float32)
    for i in idx:
        g = np.asarray(single(xs, x[i], y_enc[i])) * (1.0 - np.asarray(gmask, np.float32))
        g = np.asarray(clip_per_example(jnp.asarray(g)[None], clip)[0][0])
        ref += g
    got = (np.asarray(xs) - xa) * (q * n)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=1e-3 * np.abs(ref).max())
    assert (np.asarray(gmask).sum() > 0) == (corrupt > 0)
    assert np.all(got[np.asarray(gmask)] == 0.0)  # frozen pixels never move


def test_clipped_per_example_norms_bounded(digits):
    from privkernels.privacy import clip_per_example

    x, y, _, _ = digits
    spec = dp_kip.make_kernel("fc_ntk", (8, 8), 10)
    xs = dp_kip.init_support(jax.random.key(0), 10, (8, 8))
    ys = jax.nn.one_hot(jnp.arange(10), 10) - 0.1
    g = jax.jit(
        lambda s: dp_kip.per_example_grads(
            spec, s, ys, jnp.asarray(x[:40]), jax.nn.one_hot(y[:40], 10) - 0.1
        )
    )(xs)
    norms = np.sqrt(np.sum(np.asarray(g).reshape(40, -1) ** 2, 1))
    c = float(np.median(norms))
    clipped, _ = clip_per_example({"x": g}, c)
    new = np.sqrt(np.sum(np.asarray(clipped["x"]).reshape(40, -1) ** 2, 1))
    assert np.all(new <= c * (1 + 1e-5))
    assert np.any(norms > c)  # clipping was active for some


def test_feature_space_solve_matches_kernel_space():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        s = jnp.asarray(rng.normal(size=(12, 5)))  # f = 5 < m = 12: Woodbury branch
        t = jnp.asarray(rng.normal(size=(7, 5)))
        ys = jnp.asarray(rng.normal(size=(12, 3)))
        got = dp_kip.krr.krr_predict_repr("features", None, s, ys, t, 1e-3)
        k = s @ s.T
        lam = 1e-3 * jnp.trace(k) / 12
        ref = (t @ s.T) @ jnp.linalg.solve(k + lam * jnp.eye(12), ys)
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-8)


# ------------------------------------------------------------------ privacy mechanics


def test_noise_scale_and_clipped_sum_through_fit():
    """(x0 - x1) * q n - (exact clipped sum) ~ N(0, (sigma C)^2) for one SGD(lr=1) step."""
    from privkernels.privacy import clip_per_example, poisson_batch

    x, y = _small(1, n=100)
    key = jax.random.key(7)
    kw = {
        **BASE,
        "epsilon": 1.0,
        "clip_norm": 0.05,
        "optimizer": optax.sgd(1.0),
        "max_steps": 1,
        "support_per_class": 4,
        "kernel_options": {"depth": 1},
    }
    res = dp_kip.fit(key, x, y, **kw)
    sigma = res.report.mechanisms[0].param_dict["noise_multiplier"]
    q = 20 / 100
    # recompute the step's inputs from the documented key schedule
    k_init, _, _, k_train = jax.random.split(key, 4)
    x0 = dp_kip.init_support(k_init, 12, (8, 8))
    k_batch, _ = jax.random.split(jax.random.fold_in(k_train, 0))
    batch = poisson_batch(k_batch, 100, q)
    idx = np.asarray(batch.indices)[np.asarray(batch.mask)]
    spec = dp_kip.make_kernel("fc_ntk", (8, 8), 3, options={"depth": 1})
    ys = jax.nn.one_hot(jnp.asarray(dp_kip.support_labels(3, 4)), 3) - 1 / 3
    g = jax.jit(
        lambda s: dp_kip.per_example_grads(
            spec, s, ys, jnp.asarray(x[idx]), jax.nn.one_hot(y[idx], 3) - 1 / 3, reg=1e-6
        )
    )(x0)
    clipped, _ = clip_per_example({"x": g}, 0.05)
    exact = np.asarray(clipped["x"]).sum(0)
    noisy = (np.asarray(x0) - res.support_x) * (q * 100)
    resid = (noisy - exact).ravel() / (sigma * 0.05)
    assert resid.size == 12 * 64
    assert stats.kstest(resid, "norm").pvalue > 1e-3
    assert abs(resid.std() - 1.0) < 0.1


def test_sampler_inclusion_rate_and_epsilon_matches_dp_accounting():
    import dp_accounting

    x, y = _small(2, n=200)
    with pytest.warns(PrivacyLeakWarning):
        res = dp_kip.fit(
            jax.random.key(1), x, y, **{**BASE, "epochs": 3, "accountant": "pld"}, diagnostics=True
        )
    q = 20 / 200
    steps = 3 * round(1 / q)
    sizes = np.concatenate([np.asarray(s) for s in res.history["batch_sizes"]])
    assert sizes.size == steps
    # Binomial(n, q) batch sizes: mean q n, std sqrt(n q (1-q) / steps)
    assert abs(sizes.mean() - q * 200) < 5 * math.sqrt(200 * q * (1 - q) / steps)
    mech = res.report.mechanisms[0]
    sigma = mech.param_dict["noise_multiplier"]
    assert mech.param_dict["steps"] == steps and mech.param_dict["sampling_rate"] == q
    acc = dp_accounting.pld.PLDAccountant(
        dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4
    )
    acc.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
        )
    )
    eps_ref = acc.get_epsilon(1e-5)
    assert res.report.epsilon == pytest.approx(eps_ref, rel=1e-6)
    assert eps_ref <= 2.0 * (1 + 1e-3)  # calibrated for the target
    assert res.report.neighbouring == "replace-one"
    assert res.report.private


@pytest.mark.parametrize(
    "kw, q",
    [
        (dict(n=200, batch_size=20), 0.1),
        (dict(n=50_000, batch_size=20_000), 0.4),  # 1 / q = 2.5: rounds to 2
        (dict(n=60_000, batch_size=60_000), 1.0),
        (dict(n=100, batch_size=30, neighbouring="add-remove", sampling_rate=0.03), 0.03),
    ],
)
def test_planned_steps_is_the_count_configure_plans(kw, q):
    """``dp_kip.planned_steps`` (for a caller's step-size schedule) counts what `configure`
    plans and accounts, under either relation; bad rates and epochs are refused."""
    cfg, plan, _ = dp_kip.configure(
        **kw, input_shape=(8, 8), n_classes=10, epsilon=2.0, epochs=3, clip_norm=1.0
    )
    assert dp_kip.planned_steps(q, 3) == cfg.planned_steps == plan.steps
    for bad in (dict(sampling_rate=0.0), dict(sampling_rate=1.5), dict(epochs=0)):
        with pytest.raises(ValueError):
            dp_kip.planned_steps(**{"sampling_rate": q, "epochs": 3, **bad})


# ------------------------------------------------------------------ initialisation


def test_init_is_data_independent_and_not_a_real_example():
    xa, ya = _small(3)
    xb, yb = _small(4)
    xb = xb * 3.0 + 5.0  # a very different dataset of the same shape
    kw = {**BASE, "corrupt_fraction": 0.5, "max_steps": 2}
    ra = dp_kip.fit(jax.random.key(5), xa, ya, **kw)
    rb = dp_kip.fit(jax.random.key(5), xb, yb, **kw)
    np.testing.assert_array_equal(ra.corrupted, rb.corrupted)
    assert abs(ra.corrupted.mean() - 0.5) < 1e-9
    # frozen pixels keep their initial values, identical across datasets
    np.testing.assert_array_equal(ra.support_x[ra.corrupted], rb.support_x[rb.corrupted])
    k_init = jax.random.split(jax.random.key(5), 4)[0]
    x0 = np.asarray(dp_kip.init_support(k_init, 6, (8, 8)))
    np.testing.assert_array_equal(ra.support_x[ra.corrupted], x0[ra.corrupted])
    # trainable pixels moved
    assert np.any(ra.support_x[~ra.corrupted] != x0[~ra.corrupted])
    # no support point equals (or is close to) a real example
    d = np.min(np.linalg.norm(x0.reshape(6, 1, -1) - xa.reshape(1, len(xa), -1), axis=-1))
    assert d > 1.0
    np.testing.assert_array_equal(ra.support_y, np.repeat(np.arange(3), 2))


def test_lowpass_init_is_smooth_data_independent_and_reported():
    x0 = np.asarray(dp_kip.lowpass_support(jax.random.key(1), 5, (28, 28)))
    assert x0.shape == (5, 28, 28)
    np.testing.assert_allclose(x0.mean(axis=(1, 2)), 0.0, atol=1e-5)
    np.testing.assert_allclose(x0.std(axis=(1, 2)), 1.0, atol=1e-3)
    # smooth: neighbouring pixels are far more alike than in N(0, I) (correlation ~0 there)
    corr = np.corrcoef(x0[:, :, :-1].ravel(), x0[:, :, 1:].ravel())[0, 1]
    assert corr > 0.8
    np.testing.assert_array_equal(x0, dp_kip.lowpass_support(jax.random.key(1), 5, (28, 28)))
    xa, ya = _small(3)
    kw = {**BASE, "max_steps": 1, "init": "lowpass"}
    ra = dp_kip.fit(jax.random.key(5), xa, ya, **kw)
    assert ra.config.init == "lowpass"
    assert any("smooth random images" in d for d in ra.report.data_independent)
    with pytest.raises(ValueError, match="needs image inputs"):
        dp_kip.fit(jax.random.key(5), xa.reshape(len(xa), -1), ya, **kw)


def test_same_key_same_result_and_predict():
    x, y = _small(5)
    r1 = dp_kip.fit(jax.random.key(9), x, y, **BASE)
    r2 = dp_kip.fit(jax.random.key(9), x, y, **BASE)
    np.testing.assert_array_equal(r1.support_x, r2.support_x)
    r3 = dp_kip.fit(jax.random.key(10), x, y, **BASE)
    assert not np.array_equal(r1.support_x, r3.support_x)
    pred = dp_kip.predict(r1, x[:7])
    assert pred.shape == (7, 3) and np.all(np.isfinite(pred))
    assert dp_kip.predict_labels(r1, x[:7]).shape == (7,)
    assert 0.0 <= dp_kip.accuracy(r1, x, y) <= 1.0


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "override, match",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"batch_size": 10_000}, "batch_size"),
        ({"support_per_class": 0}, "support_per_class"),
        ({"corrupt_fraction": 1.0}, "corrupt_fraction"),
        ({"corrupt_fraction": -0.1}, "corrupt_fraction"),
        ({"kernel": "rbf"}, "kernel"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"n_classes": 2}, "y"),
        ({"learn_labels": True}, "learn_labels"),
        ({"clip_space": "feature"}, "clip_space"),
    ],
)
def test_bad_input_raises_before_noise(override, match, monkeypatch):
    import privkernels.privacy.accounting as acc

    def boom(*a, **k):  # the accountant is never reached on bad input
        raise AssertionError("noise calibrated before validation")

    monkeypatch.setattr(acc, "dpsgd_noise_multiplier", boom)
    x, y = _small(6)
    with pytest.raises(ValueError, match=match):
        dp_kip.fit(jax.random.key(0), x, y, **{**BASE, **override})


def test_bad_data_raises():
    x, y = _small(6)
    xn = x.copy()
    xn[3, 2, 2] = np.nan
    with pytest.raises(ValueError, match="x"):
        dp_kip.fit(jax.random.key(0), xn, y, **BASE)
    with pytest.raises(ValueError, match="y"):
        dp_kip.fit(jax.random.key(0), x, y[:-1], **BASE)
    with pytest.raises(TypeError):
        dp_kip.fit(0, x, y, **BASE)
    with pytest.raises(ValueError, match="scatternet"):
        dp_kip.fit(jax.random.key(0), x[:, :2, :2], y, **{**BASE, "kernel": "scatternet"})


# ------------------------------------------------------------------ modes


def test_non_private_mode_and_learned_labels():
    x, y = _small(7)
    res = dp_kip.fit(jax.random.key(0), x, y, **{**BASE, "epsilon": None, "learn_labels": True})
    assert not res.report.private
    assert not np.allclose(res.support_targets, jax.nn.one_hot(res.support_y, 3) - 1 / 3)


def test_checkpoint_resume_keeps_accountant_state(tmp_path):
    x, y = _small(8)
    kw = {**BASE, "epochs": 2}
    full = dp_kip.fit(jax.random.key(2), x, y, **kw)
    ck = tmp_path / "kip.npz"
    part = dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck, max_steps=5)
    assert part.steps_done == 5
    assert part.report.mechanisms[0].param_dict["steps"] == 5
    assert part.report.epsilon < full.report.epsilon
    _, meta = privkernels.checkpoint.load(ck, format=dp_kip.fitting.CHECKPOINT_FORMAT)
    assert "seconds" not in meta["history"] and meta["history"]["step"] == part.history["step"]
    with pytest.raises(ValueError, match="exists"):  # a fresh run would reset the budget
        dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck)
    with pytest.raises(ValueError, match=r"differs from this call \(epsilon, noise_multiplier\)"):
        dp_kip.fit(  # other accountant state; the message names what differs
            jax.random.key(2), x, y, **{**kw, "epsilon": 3.0}, checkpoint_path=ck, resume=True
        )
    done = dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck, resume=True)
    assert done.steps_done == full.steps_done == 2 * round(120 / 20)
    assert len(done.history["seconds"]) == len(done.history["step"])  # NaN before the resume
    assert np.isnan(done.history["seconds"][0]) and np.isfinite(done.history["seconds"][-1])
    np.testing.assert_allclose(done.support_x, full.support_x, rtol=1e-6, atol=1e-7)
    assert done.report.epsilon == pytest.approx(full.report.epsilon, rel=1e-9)
    assert (
        done.report.mechanisms[0].param_dict["noise_multiplier"]
        == full.report.mechanisms[0].param_dict["noise_multiplier"]
    )
    # resuming a finished run takes no further step and never resets the count
    again = dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck, resume=True)
    assert again.steps_done == done.steps_done
    np.testing.assert_array_equal(again.support_x, done.support_x)


@pytest.mark.parametrize("kern", ["scatternet", pytest.param("entk", marks=pytest.mark.slow)])
def test_feature_clip_space_runs(kern):
    # a small ScatterNet (J=1, L=4: 5 maps of 4 x 4) compiles in half the default's time;
    # the feature-space path is the same for any features kernel (the LeNet needs 12 x 12)
    opts, side = ({"J": 1, "L": 4}, 8) if kern == "scatternet" else (None, 12)
    rng = np.random.default_rng(0)
    y = np.arange(60, dtype=np.int32) % 2
    x = rng.normal(size=(60, side, side)).astype(np.float32) + y[:, None, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        res = dp_kip.fit(
            jax.random.key(0),
            x,
            y,
            **{
                **BASE,
                "kernel": kern,
                "n_classes": 2,
                "clip_space": "feature",
                "batch_size": 15,
                "support_per_class": 1,
                "kernel_options": opts,
            },
        )
    assert np.all(np.isfinite(res.support_x))
    assert res.support_x.shape == (2, side, side)
    assert any("feature" in n for n in res.report.notes)
    assert np.all(np.isfinite(dp_kip.predict(res, x[:5])))


def test_feature_space_closed_form_clipped_sum_matches_vmap():
    from privkernels.privacy import clip_per_example

    rng = np.random.default_rng(1)
    m, f, b, c = 6, 9, 11, 3
    s = jnp.asarray(rng.normal(size=(m, f)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(m, c)), jnp.float32)
    phi = jnp.asarray(rng.normal(size=(b, f)), jnp.float32)
    yt = jnp.asarray(rng.normal(size=(b, c)), jnp.float32)
    mask = jnp.asarray(rng.random(b) < 0.7, jnp.float32)
    spec = dp_kip.KernelSpec("lin", "features", {}, feature_fn=lambda z: z)
    fn = lambda p, y_s, t, y: dp_kip.krr.loss_one(
        p, y_s, t, y, spec=spec, space="feature", ridge=1e-2
    )
    g = jax.vmap(jax.grad(fn), in_axes=(None, None, 0, 0))({"phi": s}, ys, phi, yt)["phi"]
    norms = np.sqrt(np.sum(np.asarray(g).reshape(b, -1) ** 2, 1))
    srt = np.sort(norms)
    clip = float(0.5 * (srt[b // 2] + srt[b // 2 + 1]))  # between two norms: no tie at C
    clipped, _ = clip_per_example(g, clip)
    ref = np.tensordot(np.asarray(mask), np.asarray(clipped), axes=1)
    got, _, loss_sum, n_clipped = dp_kip.clipped_sums.feature_clipped_sum(
        s, ys, phi, yt, mask, 1e-2, clip
    )
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-3, atol=2e-4 * np.abs(ref).max())
    assert int(n_clipped) == int(np.sum(np.asarray(mask) * (norms > clip)))


@pytest.mark.parametrize(
    "m,d,opts",
    [
        (7, 12, {}),
        (9, 4, {"depth": 2, "b_std": 0.3, "W_std": 1.5}),
        (7, 12, {"sphere_lift": True}),
        (9, 4, {"sphere_lift": True, "depth": 2}),
    ],
)
def test_gram_form_clipped_sum_matches_vmap(m, d, opts):
    """FC-NTK input-space clipping in Gram form == clip_per_example(vmap(grad)) summed over
    the mask, for m <= d and m > d (both quadratic-form branches), with clipping active."""
    from privkernels.privacy import clip_per_example

    rng = np.random.default_rng(3)
    b, c = 13, 3
    spec = dp_kip.make_kernel("fc_ntk", (d,), c, options=opts)
    xs = jnp.asarray(rng.normal(size=(m, d)), jnp.float32)
    ys = dp_kip.encode_labels(jnp.asarray(np.arange(m) % c), c)
    xt = jnp.asarray(0.7 * rng.normal(size=(b, d)), jnp.float32)
    yt = dp_kip.encode_labels(jnp.asarray(rng.integers(0, c, b)), c)
    mask = jnp.asarray(rng.random(b) < 0.7, jnp.float32)
    g = jax.jit(lambda a: dp_kip.per_example_grads(spec, a, ys, xt, yt, reg=1e-3, method="vmap"))(
        xs
    )
    losses = jax.jit(lambda a: dp_kip.krr_loss(spec, a, ys, xt, yt, reg=1e-3))(xs)
    norms = np.sqrt(np.sum(np.asarray(g).reshape(b, -1) ** 2, 1))
    srt = np.sort(norms)
    clipped_sum = jax.jit(  # one compilation for both clips (the norm is an argument)
        lambda a, t, mk, clip: dp_kip.clipped_sums.gram_clipped_sum(
            spec.gram_fn, a, ys, t, yt, mk, 1e-3, clip
        )
    )
    for clip in (float(0.5 * (srt[b // 2] + srt[b // 2 + 1])), 1e6):  # no ties at the clip
        clipped, _ = clip_per_example(g, clip)
        ref = np.tensordot(np.asarray(mask), np.asarray(clipped), axes=1)
        got, loss_sum, n_clipped = clipped_sum(xs, xt, mask, clip)
        # float32: the NTK's kink at c = 1 makes both sides carry ~sqrt(eps) rounding noise
        np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
        assert int(n_clipped) == int(np.sum(np.asarray(mask) * (norms > clip)))
        assert float(loss_sum) == pytest.approx(float(jnp.sum(losses * mask)), rel=1e-4)


def test_sphere_lift_kernel_is_the_fc_ntk_of_lifted_rows_in_both_forms():
    """``sphere_lift=True``: kernel_fn == the FC-NTK of `sphere_lift` rows == gram_fn of the
    raw Gram; lifted rows have norm sqrt(d) and order by the raw norm along the new axis;
    the diagonal of a self-Gram is exact; a non-bool value is refused."""
    from privkernels import features
    from privkernels.dp_kip.kernels import sphere_lift

    rng = np.random.default_rng(5)
    d = 6
    a = jnp.asarray(rng.normal(size=(5, d)) * np.array([[0.1], [1], [3], [10], [30]]), jnp.float32)
    b = jnp.asarray(rng.normal(size=(4, d)), jnp.float32)
    spec = dp_kip.make_kernel("fc_ntk", (d,), 2, options={"sphere_lift": True})
    lifted = np.asarray(sphere_lift(a))
    assert lifted.shape == (5, d + 1)
    np.testing.assert_allclose(np.linalg.norm(lifted, axis=1), np.sqrt(d), rtol=1e-6)
    assert np.all(np.diff(lifted[:, -1]) < 0)  # larger rows lie further from the new axis
    ref = features.fc_ntk_kernel(sphere_lift(a), sphere_lift(b), depth=1, W_std=2**0.5, b_std=0.1)
    np.testing.assert_allclose(np.asarray(spec.kernel_fn(a, b)), np.asarray(ref), rtol=1e-5)
    g = spec.gram_fn(a @ b.T, jnp.sum(a * a, 1), jnp.sum(b * b, 1))
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-5, atol=1e-6)
    self_g = spec.gram_fn(a @ a.T, jnp.sum(a * a, 1), jnp.sum(a * a, 1), same=True)
    np.testing.assert_allclose(np.asarray(self_g), np.asarray(spec.kernel_fn(a, a)), rtol=1e-5)
    # rows 10x apart in norm: the plain FC-NTK grows with the norm, the lifted one does not
    plain = dp_kip.make_kernel("fc_ntk", (d,), 2)
    big = np.asarray(plain.kernel_fn(10 * b, b)) / np.asarray(plain.kernel_fn(b, b))
    lift_big = np.asarray(spec.kernel_fn(10 * b, b))
    assert np.all(big > 5) and np.all(
        np.abs(lift_big) < 3 * np.abs(np.asarray(spec.kernel_fn(b, b))).max()
    )
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="sphere_lift"):
            dp_kip.make_kernel("fc_ntk", (d,), 2, options={"sphere_lift": bad})


def test_fc_ntk_kernel_from_gram_equals_kernel():
    from privkernels import features

    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 7)).astype(np.float32)
    b = rng.normal(size=(4, 7)).astype(np.float32)
    kw = dict(depth=3, W_std=1.3, b_std=0.2)
    ref = features.fc_ntk_kernel(a, b, **kw)
    got = features.fc_ntk_kernel_from_gram(
        jnp.asarray(a @ b.T), jnp.sum(a * a, 1), jnp.sum(b * b, 1), dim=7, **kw
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6, atol=1e-6)
    g, s1, s2 = jnp.asarray(a @ b.T), jnp.sum(a * a, 1), jnp.sum(b * b, 1)
    with pytest.raises(ValueError, match="must match gram"):
        features.fc_ntk_kernel_from_gram(g, s2, s1, dim=7, **kw)
    with pytest.raises(ValueError):
        features.fc_ntk_kernel_from_gram(g.at[0, 0].set(np.nan), s1, s2, dim=7, **kw)
    with pytest.raises(ValueError):
        features.fc_ntk_kernel_from_gram(g, s1, s2, dim=0, **kw)
    with pytest.raises(ValueError):
        features.fc_ntk_kernel_from_gram(g, s1, s2, dim=7, depth=3, W_std=0.0)


def test_clip_factors_match_clip_per_example():
    from privkernels.privacy import clip_factors, clip_per_example

    g = jnp.asarray([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [np.inf, 1.0]], jnp.float32)
    clipped, norms = clip_per_example(g, 1.0)
    f = clip_factors(norms, 1.0)
    margin = 1.0 + NORM_MARGIN
    np.testing.assert_allclose(np.asarray(f), [0.2 / margin, 1.0, 1.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped[:3]), np.asarray(f[:3, None] * g[:3]))
    for bad in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError):
            clip_factors(norms, bad)


def test_keyboard_interrupt_saves_checkpoint_and_resume_completes(tmp_path, monkeypatch):
    from privkernels import checkpoint
    from privkernels.dp_kip import fitting as fit_module

    x, y = _small(8)
    kw = {**BASE, "epochs": 2}
    full = dp_kip.fit(jax.random.key(2), x, y, **kw)
    ck = tmp_path / "interrupted.npz"
    real_check = fit_module._check_support
    calls = {"n": 0}

    def interrupting_check(state):
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C while epoch 2 is being committed
            raise KeyboardInterrupt
        return real_check(state)

    monkeypatch.setattr(fit_module, "_check_support", interrupting_check)
    with pytest.raises(KeyboardInterrupt):
        dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck)
    monkeypatch.setattr(fit_module, "_check_support", real_check)
    _, meta = checkpoint.load(ck, format=fit_module.CHECKPOINT_FORMAT)
    per_epoch = full.config.steps_per_epoch
    assert meta["steps_done"] == per_epoch and meta["config"]["planned_steps"] == full.steps_done
    done = dp_kip.fit(jax.random.key(2), x, y, **kw, checkpoint_path=ck, resume=True)
    assert done.steps_done == full.steps_done
    np.testing.assert_allclose(done.support_x, full.support_x, rtol=1e-6, atol=1e-7)
    assert done.report.epsilon == pytest.approx(full.report.epsilon, rel=1e-9)


def test_convnet_downstream_smoke(digits):
    from privkernels import evaluation

    x, y, xt, yt = digits
    mod, params = evaluation.train_convnet(
        jax.random.key(0), x[:40], y[:40], 10, steps=3, width=8, depth=1
    )
    logits = mod.apply(params, jnp.asarray(xt[:4]))
    assert logits.shape == (4, 10)
    assert 0.0 <= evaluation.convnet_accuracy(mod, params, xt[:50], yt[:50]) <= 1.0


def test_scatternet_kernel_group_norm_option():
    from privkernels.features import scatternet_features

    x = jnp.asarray(np.random.default_rng(7).random((2, 16, 16), dtype=np.float32))
    spec = dp_kip.make_kernel("scatternet", (16, 16), 10)
    assert spec.options["group_norm"] == 27  # "auto" with J=2, L=8 (81 maps)
    np.testing.assert_allclose(
        np.asarray(spec.feature_fn(x)), np.asarray(scatternet_features(x, group_norm=27))
    )
    raw = dp_kip.make_kernel("scatternet", (16, 16), 10, options={"group_norm": None})
    np.testing.assert_allclose(np.asarray(raw.feature_fn(x)), np.asarray(scatternet_features(x)))
    small = dp_kip.make_kernel("scatternet", (16, 16), 10, options={"J": 1, "L": 4})
    assert small.options["group_norm"] is None  # 5 maps: no grouping
    for bad in (4, 81, 0):
        with pytest.raises(ValueError, match="group_norm"):
            dp_kip.make_kernel("scatternet", (16, 16), 10, options={"group_norm": bad})


def test_krr_teacher_reads_only_the_release(tmp_path):
    """`evaluation.krr_teacher` is a function of the saved release: the result reloaded
    from disk (support set, targets, config; no training data) teaches the same scores."""
    from privkernels import evaluation

    x, y = _small()
    res = dp_kip.fit(jax.random.key(0), x, y, **BASE)
    loaded = dp_kip.load(res.save(tmp_path / "release.npz"))
    probe = np.random.default_rng(5).normal(size=(7, 8, 8)).astype(np.float32)
    scores = evaluation.krr_teacher(loaded)(probe)
    assert scores.shape == (7, 3) and scores.dtype == np.float32
    np.testing.assert_array_equal(evaluation.krr_teacher(res)(probe), scores)
    np.testing.assert_array_equal(scores, dp_kip.predict(res, probe))
    # running times depend on private quantities: in memory, never in the release file
    assert len(res.history["seconds"]) == len(res.history["step"]) >= 1
    assert "seconds" not in loaded.history and loaded.history["step"] == res.history["step"]
