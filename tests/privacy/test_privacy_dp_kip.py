"""Privacy verification of DP-KIP's released quantity: the noisy clipped gradient step.

DP-KIP (Vinaroz & Park, Alg. 1) releases, every step, the support set updated
with ``sum_i clip_C(grad_i) + N(0, (sigma C)^2 I)`` over a Poisson batch,
accounted by the privacy core. The tests drive the *real* jitted
``train_step`` (built by `privkernels.audit.dp_kip_full_batch_step`) on a
full batch (q = 1, so one step is a plain Gaussian release with L2 sensitivity
C and claimed ``eps = gaussian_epsilon(sigma, delta)``) and an SGD(lr=1)
optimizer, so the update is an affine image of the noisy sum. Add/remove is
modelled by giving both neighbours the same rows, the canary's gradient
vanishing in one of them (sampling amplification itself is dp-accounting's job
and is not audited here).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _privacy_helpers import patch_privacy
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privkernels import audit, dp_kip, privacy

N_BASE, D, C_CLASSES = 6, 4, 2
CLIP = 0.5
RIDGE = 1e-3
EPS, DELTA = 1.0, 1e-5
TRIALS = 20_000


def _krr_pred(spec, x_s, y_s, xt):
    return dp_kip.krr.krr_predict_repr(
        spec.kind,
        spec.kernel_fn,
        dp_kip.krr.support_repr(spec, x_s),
        y_s,
        dp_kip.krr.support_repr(spec, xt),
        RIDGE,
    )


def _setup(seed=0):
    """Support, state (SGD lr=1) and the neighbouring target sets D, D'.

    Both have N_BASE + 1 rows and differ only in the last row's target vector:
    in D' it is the canary (x_c, pred(x_c) + 50 (1, -1)), whose KRR gradient is
    huge and clipped to C; in D it is (x_c, pred(x_c)), whose residual and hence
    gradient vanish (up to rounding): the example contributes nothing, so D is
    D' with the canary removed (add/remove) while both share every compiled shape.
    """
    rng = np.random.default_rng(seed)
    spec = dp_kip.make_kernel("fc_ntk", (D,), C_CLASSES)
    x_s0 = dp_kip.init_support(jax.random.key(1), 2, (D,))
    y_s0 = dp_kip.encode_labels(jnp.asarray(dp_kip.support_labels(C_CLASSES, 1)), C_CLASSES)
    x = jnp.asarray(rng.normal(size=(N_BASE + 1, D)), jnp.float32)
    y_enc = dp_kip.encode_labels(jnp.asarray(np.arange(N_BASE + 1) % C_CLASSES), C_CLASSES)
    pred_c = _krr_pred(spec, x_s0, y_s0, x[-1:])[0]
    y_d = y_enc.at[-1].set(pred_c)
    y_dp = y_enc.at[-1].set(pred_c + 50.0 * jnp.asarray([1.0, -1.0]))
    opt = optax.sgd(1.0)
    return spec, x_s0, y_s0, opt, x, y_d, y_dp


def _reference_clipped_sum(spec, x_s0, y_s0, x, y_enc, clip=CLIP):
    """Reference: loop-free sum_i clip(g_i) from dp_kip.per_example_grads + privacy.clip_per_example."""
    g = dp_kip.per_example_grads(spec, x_s0, y_s0, x, y_enc, reg=RIDGE)
    clipped, norms = privacy.clip_per_example({"x": g}, clip)
    return (
        np.asarray(jnp.sum(clipped["x"], axis=0), np.float64),
        np.asarray(clipped["x"]),
        np.asarray(norms),
    )


def _step_fn(x_s0, opt, n, *, noise_multiplier):
    return audit.dp_kip_full_batch_step(
        "fc_ntk",
        x_s0,
        C_CLASSES,
        n,
        clip_norm=CLIP,
        noise_multiplier=noise_multiplier,
        relative_reg=RIDGE,
        optimizer=opt,
    )


def _noisy_sums(key, step, x, y_enc, trials=TRIALS):
    """The released noisy sum of each trial, from the SGD(lr=1) update x1 = x0 - (sum + noise)/n."""
    train_step, state, pad = step
    n = x.shape[0]
    xp = jnp.concatenate([x, jnp.zeros((pad - n, x.shape[1]), x.dtype)])
    mask = jnp.arange(pad) < n

    def one(k, yy):
        yp = jnp.concatenate([yy, jnp.zeros((pad - n, yy.shape[1]), yy.dtype)])
        new_state, _ = train_step(state, dp_kip.Batch(xp, yp, mask.astype(jnp.float32)), k)
        return (state.params["x"] - new_state.params["x"]) * n

    return audit.run_trials(key, one, y_enc, trials)


def _run_variant(sigma_scale=1.0, no_clip=False):
    spec, x_s0, y_s0, opt, x, y_d, y_dp = _setup()
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    with pytest.MonkeyPatch.context() as mp:
        if no_clip:
            real_clip = privacy.clip_per_example

            def identity_clip(grads, clip_norm):
                _, norms = real_clip(grads, clip_norm)
                return grads, norms

            patch_privacy(mp, "clip_per_example", identity_clip)
            # the FC-NTK step clips in Gram form (no per-example gradients): unclip it too,
            # by making its clip factors 1 on every kept row (the norms stay computed)
            sums = dp_kip.clipped_sums
            real_factors = sums.masked_clip_factors

            def no_clip_factors(norms, mask, clip_norm):
                _, keep = real_factors(norms, mask, clip_norm)
                return jnp.where(keep, 1.0, 0.0), keep

            mp.setattr(sums, "masked_clip_factors", no_clip_factors)
            mp.setattr(sums, "clip_per_example", identity_clip)
        step = _step_fn(x_s0, opt, x.shape[0], noise_multiplier=sigma * sigma_scale)
        out_d = _noisy_sums(jax.random.key(60), step, x, y_d)
        out_dp = _noisy_sums(jax.random.key(61), step, x, y_dp)
    ref_d, _, _ = _reference_clipped_sum(spec, x_s0, y_s0, x, y_d)
    ref_dp, clipped_dp, _ = _reference_clipped_sum(spec, x_s0, y_s0, x, y_dp)
    _, clipped_d, _ = _reference_clipped_sum(spec, x_s0, y_s0, x, y_d)
    null_norm = float(np.linalg.norm(clipped_d[-1]))
    u = (ref_dp - ref_d).ravel()
    # claimed eps of one full-batch step (accountant), for the actual pair distance <= C + ||null||
    claimed = privacy.dpsgd_epsilon(sigma, DELTA, sampling_rate=1.0, steps=1)
    claimed_pair = privacy.gaussian_epsilon(sigma * CLIP / (CLIP + null_norm), DELTA)
    res = audit.epsilon_lower_bound(
        out_d @ u, out_dp @ u, delta=DELTA, claimed_epsilon=claimed_pair
    )
    return dict(
        res=res,
        claimed=claimed,
        claimed_pair=claimed_pair,
        out_d=out_d,
        out_dp=out_dp,
        ref_d=ref_d,
        ref_dp=ref_dp,
        null_norm=null_norm,
        sigma=sigma * sigma_scale,
    )


@pytest.fixture(scope="module")
def kip_ok():
    return _run_variant()


@pytest.fixture(scope="module")
def kip_quarter():
    return _run_variant(sigma_scale=0.25)


# --------------------------------------------------------------------------- #
# Sensitivity
# --------------------------------------------------------------------------- #

_SPEC3 = None


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), clip=st.floats(1e-3, 1e2), scale=st.floats(1e-2, 1e2))
def test_per_example_clipped_contribution_is_at_most_C(seed, clip, scale):
    """Per-example KRR gradients after privacy.clip_per_example have L2 norm <= C (so adding or
    removing one target example moves the clipped sum by <= C), and gradients already inside the
    ball are unchanged."""
    global _SPEC3
    if _SPEC3 is None:
        spec = dp_kip.make_kernel("fc_ntk", (3,), 2)
        ys = dp_kip.encode_labels(jnp.asarray([0, 1]), 2)
        _SPEC3 = jax.jit(
            lambda xs, xt, yt: dp_kip.per_example_grads(spec, xs, ys, xt, yt, reg=RIDGE)
        )
    rng = np.random.default_rng(seed)
    xs = jnp.asarray(rng.normal(size=(2, 3)), jnp.float32)
    xt = jnp.asarray(scale * rng.normal(size=(5, 3)), jnp.float32)
    yt = dp_kip.encode_labels(jnp.asarray(rng.integers(0, 2, 5)), 2)
    g = np.asarray(_SPEC3(xs, xt, yt))
    clipped, norms = privacy.clip_per_example({"x": jnp.asarray(g)}, clip)
    flat = np.asarray(clipped["x"]).reshape(5, -1)
    assert np.all(np.linalg.norm(flat, axis=1) <= clip * (1 + 1e-5))
    in_norms = np.linalg.norm(g.reshape(5, -1), axis=1)
    np.testing.assert_allclose(np.asarray(norms), in_norms, rtol=1e-5)
    inside = in_norms < clip * 0.999
    np.testing.assert_allclose(flat[inside], g.reshape(5, -1)[inside], rtol=1e-5, atol=1e-7)


def test_canary_pair_differs_by_one_clipped_gradient(kip_ok):
    """The neighbouring pair used by the audit: the reference clipped sums differ by ~C (the canary is
    clipped to exactly C, the 'removed' example contributes ~0)."""
    assert kip_ok["null_norm"] < 1e-3 * CLIP
    diff = np.linalg.norm(kip_ok["ref_dp"] - kip_ok["ref_d"])
    assert diff == pytest.approx(CLIP, rel=2e-3)
    assert kip_ok["claimed"] == pytest.approx(EPS, rel=1e-3)


# --------------------------------------------------------------------------- #
# Noise distribution
# --------------------------------------------------------------------------- #


def test_step_noise_is_gaussian_with_std_sigma_C(kip_ok):
    """Real step output minus the reference clipped sum ~ N(0, (sigma C)^2) per coordinate on BOTH
    neighbours (KS test): the step's pre-noise sum equals the reference, noise has the stated scale."""
    std = kip_ok["sigma"] * CLIP
    for out, ref in ((kip_ok["out_d"], kip_ok["ref_d"]), (kip_ok["out_dp"], kip_ok["ref_dp"])):
        z = (out - ref.ravel()[None]) / std
        assert stats.kstest(z[:5000].ravel(), "norm").pvalue > 1e-3
        assert np.all(np.abs(z.mean(0)) < 5 / math.sqrt(z.shape[0]))
        # coordinates are independent (one key per leaf, no reuse across coordinates)
        corr = np.corrcoef(z[:, :4].T)
        assert np.max(np.abs(corr - np.eye(4))) < 0.05


# --------------------------------------------------------------------------- #
# Audits
# --------------------------------------------------------------------------- #


def test_dpkip_step_audit_passes(kip_ok):
    """Real DP-KIP step, full batch, canary add/remove: audited lb <= claimed eps (= 1)."""
    res = kip_ok["res"]
    assert res.passed, res.summary()


def test_dpkip_step_audit_catches_quarter_noise(kip_quarter):
    """Broken variant: noise multiplier / 4 -> refuted by the same audit."""
    res = kip_quarter["res"]
    assert not res.passed, res.summary()


def test_dpkip_step_audit_catches_missing_clipping():
    """Broken variant: clipping removed inside the real step (canary's raw gradient) -> refuted."""
    res = _run_variant(no_clip=True)["res"]
    assert not res.passed, res.summary()
    assert res.epsilon_lower_bound > 3 * EPS


def test_privacy_core_dpsgd_step_audit():
    """privacy.clip_per_example + noisy_clipped_sum: canary audit passes; sigma/4 and removed clipping
    are refuted; an ignored mask makes both worlds contain the canary (no longer neighbours)."""
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    ok = audit.audit_dpsgd_step(
        jax.random.key(70), clip_norm=CLIP, noise_multiplier=sigma, delta=DELTA, trials=TRIALS
    )
    assert ok.claimed_epsilon == pytest.approx(EPS, rel=1e-3)
    assert ok.passed, ok.summary()
    real_sum = privacy.noisy_clipped_sum
    quarter = audit.audit_dpsgd_step(
        jax.random.key(70),
        clip_norm=CLIP,
        noise_multiplier=sigma,
        delta=DELTA,
        trials=TRIALS,
        noisy_sum_fn=lambda k, c, m, *, clip_norm, noise_multiplier: real_sum(
            k, c, m, clip_norm=clip_norm, noise_multiplier=noise_multiplier / 4
        ),
    )
    assert not quarter.passed, quarter.summary()
    noclip = audit.audit_dpsgd_step(
        jax.random.key(70),
        clip_norm=CLIP,
        noise_multiplier=sigma,
        delta=DELTA,
        trials=TRIALS,
        clip_fn=lambda g, c: (g, None),
    )
    assert not noclip.passed, noclip.summary()
    assert noclip.epsilon_lower_bound > 3 * EPS


def test_noisy_clipped_sum_excludes_masked_rows_even_if_nan():
    """Masked (padding) rows never enter the sum, even when they hold NaN or a huge canary."""
    g = {"a": jnp.asarray([[1.0, 0.0], [np.nan, 1e6]], jnp.float32)}
    out = privacy.noisy_clipped_sum(
        jax.random.key(0), g, jnp.asarray([True, False]), clip_norm=1.0, noise_multiplier=1e-6
    )
    np.testing.assert_allclose(np.asarray(out["a"]), [1.0, 0.0], atol=1e-4)


# --------------------------------------------------------------------------- #
# Checkpoint / resume keeps the accountant
# --------------------------------------------------------------------------- #


def _fit_kwargs(path, **over):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (np.arange(40) % 2).astype(np.int32)
    kw = dict(
        kernel="fc_ntk",
        support_per_class=1,
        epsilon=2.0,
        delta=1e-5,
        clip_norm=1.0,
        batch_size=10,
        epochs=2,
        accountant="rdp",
        neighbouring="add-remove",  # RDP supports Poisson subsampling under add-remove only
        sampling_rate=0.25,  # public rate (= batch_size / 40)
        progress=False,
        n_classes=2,
        checkpoint_path=path,
        chunk_size=16,
    )
    kw.update(over)
    return x, y, kw


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A DP-KIP run stopped after 3 of its 8 planned steps (checkpoint on disk)."""
    path = tmp_path_factory.mktemp("kip") / "kip.npz"
    x, y, kw = _fit_kwargs(path)
    part = dp_kip.fit(jax.random.key(0), x, y, max_steps=3, **kw)
    return path, part


def _copy(path, tmp_path):
    import shutil

    dst = tmp_path / "ck.npz"
    shutil.copy(path, dst)
    return dst


def test_resume_continues_the_accountant(interrupted, tmp_path):
    """Interrupt after 3 steps, resume: the steps add up (3 + 5 = 8, no reset), the report is the
    accountant's epsilon for all 8 steps (<= target), never the 5 steps of the second call alone."""
    path, part = interrupted
    assert part.steps_done == 3
    sigma = part.report.mechanisms[0].param_dict["noise_multiplier"]
    assert part.report.epsilon == pytest.approx(
        privacy.dpsgd_epsilon(sigma, 1e-5, sampling_rate=0.25, steps=3, accountant="rdp")
    )
    x, y, kw = _fit_kwargs(_copy(path, tmp_path))
    full = dp_kip.fit(jax.random.key(0), x, y, resume=True, **kw)
    assert full.steps_done == 8
    rec = full.report.mechanisms[0]
    assert rec.param_dict["steps"] == 8
    assert full.report.epsilon == pytest.approx(
        privacy.dpsgd_epsilon(sigma, 1e-5, sampling_rate=0.25, steps=8, accountant="rdp")
    )
    assert full.report.epsilon <= 2.0 + 1e-9
    assert full.report.epsilon > privacy.dpsgd_epsilon(
        sigma, 1e-5, sampling_rate=0.25, steps=5, accountant="rdp"
    )


def test_resume_with_a_different_budget_is_refused(interrupted, tmp_path):
    """Adversarial resume: another epsilon/delta/batch size/epochs/clip norm (or a fresh run over an
    existing checkpoint) must raise ValueError, never reset or re-spend the budget."""
    path, _ = interrupted
    ck = _copy(path, tmp_path)
    x, y, kw = _fit_kwargs(ck)
    for change in (
        {"epsilon": 8.0},
        {"delta": 1e-3},
        {"batch_size": 20},
        {"epochs": 30},
        {"clip_norm": 5.0},
    ):
        with pytest.raises(ValueError):
            dp_kip.fit(jax.random.key(0), x, y, resume=True, **{**kw, **change})
    with pytest.raises(ValueError, match="exists"):
        dp_kip.fit(jax.random.key(0), x, y, **kw)  # fresh run over an existing checkpoint


@pytest.mark.parametrize(
    "change",
    [
        {"key": jax.random.key(1)},  # a fork of the run under other noise
        {"diagnostics": True},  # un-noised entries the checkpoint's history lacks
        {"x_test": np.zeros((4, 4), np.float32), "y_test": np.array([0, 1, 0, 1])},
    ],
    ids=["key", "diagnostics", "test-set"],
)
def test_a_resume_that_changes_the_run_is_refused_before_any_noise(
    interrupted, tmp_path, monkeypatch, change
):
    """A resume continues the one run that wrote the checkpoint: another key, another
    ``diagnostics`` or test set, or another optimizer is a ValueError raised before any random
    draw (data-independent ones included), and the checkpoint is left as it was."""
    from _privacy_helpers import forbid_noise

    path, _ = interrupted
    ck = _copy(path, tmp_path)
    before = ck.read_bytes()
    x, y, kw = _fit_kwargs(ck)
    key = change.pop("key", jax.random.key(0))
    forbid_noise(monkeypatch)  # NoiseDrawn (a BaseException) if anything is drawn first
    with pytest.raises(ValueError, match="key|history"):
        dp_kip.fit(key, x, y, resume=True, **{**kw, **change})
    assert ck.read_bytes() == before


def test_a_resume_with_another_custom_optimizer_is_refused_before_any_noise(tmp_path, monkeypatch):
    """The fingerprint records only that an optimizer was given; a checkpoint whose optimizer
    state does not fit this call's optimizer is refused before any random draw."""
    from _privacy_helpers import forbid_noise

    x, y, kw = _fit_kwargs(tmp_path / "o.npz", optimizer=optax.sgd(0.1))
    dp_kip.fit(jax.random.key(0), x, y, max_steps=4, **kw)
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="checkpoint has no entry"):
        dp_kip.fit(jax.random.key(0), x, y, resume=True, **{**kw, "optimizer": optax.adam(0.1)})


def test_a_resume_keeps_the_diagnostics_it_was_started_with(tmp_path):
    """A run started with ``diagnostics=True`` resumes only with them on, so its un-noised history
    never passes on without this call's PrivacyLeakWarning and report note; resumed that way,
    the history continues and both are there."""
    x, y, kw = _fit_kwargs(tmp_path / "d.npz", diagnostics=True)
    with pytest.warns(privacy.PrivacyLeakWarning):
        dp_kip.fit(jax.random.key(0), x, y, max_steps=4, **kw)
    with pytest.raises(ValueError, match="history"):
        dp_kip.fit(jax.random.key(0), x, y, resume=True, **{**kw, "diagnostics": False})
    with pytest.warns(privacy.PrivacyLeakWarning):
        full = dp_kip.fit(jax.random.key(0), x, y, resume=True, **kw)
    assert full.steps_done == 8 and len(full.history["train_loss"]) == 2
    assert any("diagnostics" in n for n in full.report.notes)


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(interrupted, tmp_path):
    """Interrupted + resumed gives the same support set and report as one uninterrupted run (the
    per-step keys fold_in(k_train, step) make re-execution draw identical, not fresh, noise)."""
    path, _ = interrupted
    x, y, kw = _fit_kwargs(_copy(path, tmp_path))
    resumed = dp_kip.fit(jax.random.key(0), x, y, resume=True, **kw)
    x, y, kw = _fit_kwargs(tmp_path / "straight.npz")
    straight = dp_kip.fit(jax.random.key(0), x, y, **kw)
    assert resumed.report.epsilon == pytest.approx(straight.report.epsilon)
    np.testing.assert_allclose(resumed.support_x, straight.support_x, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_fit_noise_keys_are_fresh_per_step(tmp_path, monkeypatch):
    """Every normal draw in a DP-KIP fit (support init + per-step noise) uses a distinct key, none of
    them the user's key (run eagerly under jax.disable_jit so the keys are concrete)."""
    from _privacy_helpers import key_bytes

    seen = []
    real_normal = jax.random.normal

    def recording_normal(key, *args, **kwargs):
        seen.append(key_bytes(key))
        return real_normal(key, *args, **kwargs)

    monkeypatch.setattr(jax.random, "normal", recording_normal)
    x, y, kw = _fit_kwargs(None)
    user_key = jax.random.key(3)
    with jax.disable_jit():
        dp_kip.fit(user_key, x[:12], y[:12], **{**kw, "batch_size": 4, "epochs": 1}, max_steps=3)
    assert len(seen) >= 1 + 3  # support init + one noise draw per step (per leaf)
    assert len(set(seen)) == len(seen), "a key was reused for two normal draws"
    assert key_bytes(user_key) not in seen
