"""DP-KIP with learned support labels under privacy (``learn_labels=True``, feature space).

The paper fixes the support labels (Sec. 4, "to reduce the privacy loss"). Clipping each
target's gradient w.r.t. the support features AND labels as one vector keeps the step's
sensitivity at C, so the labels can be learned at no extra cost. These tests check the
closed form against ``clip(vmap(grad))`` over both, the joint per-example bound, that the
label update carries noise of std ``sigma C`` (not less), and the report.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from privkernels import dp_kip
from privkernels.dp_kip.clipped_sums import feature_clipped_sum
from privkernels.dp_kip.krr import loss_one
from privkernels.privacy import clip_per_example

SPEC = dp_kip.KernelSpec("lin", "features", {}, feature_fn=lambda z: z)


def _problem(seed: int, scale: float = 1.0, m: int = 6, f: int = 9, b: int = 11, c: int = 3):
    rng = np.random.default_rng(seed)
    s = jnp.asarray(scale * rng.normal(size=(m, f)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(m, c)), jnp.float32)
    phi = jnp.asarray(scale * rng.normal(size=(b, f)), jnp.float32)
    yt = jnp.asarray(rng.normal(size=(b, c)), jnp.float32)
    mask = jnp.asarray(rng.random(b) < 0.7, jnp.float32)
    return s, ys, phi, yt, mask


def _vmap_grads(s, ys, phi, yt, ridge):
    fn = lambda p, t, y: loss_one(p, ys, t, y, spec=SPEC, space="feature", ridge=ridge)  # noqa: E731
    return jax.vmap(jax.grad(fn), in_axes=(None, 0, 0))({"phi": s, "y": ys}, phi, yt)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joint_closed_form_matches_clipped_vmap_grads(seed):
    """Both sums equal the masked sum of ``clip_per_example`` of the per-example gradients
    w.r.t. ``{phi, y}`` (one joint norm), with half the examples clipped, and unclipped."""
    s, ys, phi, yt, mask = _problem(seed)
    g = _vmap_grads(s, ys, phi, yt, 1e-2)
    b = phi.shape[0]
    flat = np.concatenate(
        [np.asarray(g["phi"]).reshape(b, -1), np.asarray(g["y"]).reshape(b, -1)], 1
    )
    norms = np.sqrt(np.sum(flat.astype(np.float64) ** 2, 1))
    srt = np.sort(norms)
    for clip in (float(0.5 * (srt[b // 2] + srt[b // 2 + 1])), 1e6):
        clipped, _ = clip_per_example(g, clip)
        got_s, got_y, loss_sum, n_clipped = feature_clipped_sum(
            s, ys, phi, yt, mask, 1e-2, clip, labels=True
        )
        for got, leaf in ((got_s, "phi"), (got_y, "y")):
            ref = np.tensordot(np.asarray(mask), np.asarray(clipped[leaf]), axes=1)
            np.testing.assert_allclose(
                np.asarray(got), ref, rtol=2e-3, atol=2e-4 * np.abs(ref).max()
            )
        assert int(n_clipped) == int(np.sum(np.asarray(mask) * (norms > clip)))
    # the label part is not zero: the joint norm is not the features' norm alone
    assert np.abs(np.asarray(got_y)).max() > 1e-3


@pytest.mark.parametrize("seed,scale,clip", [(3, 1.0, 1e-3), (4, 30.0, 0.5), (5, 0.05, 10.0)])
def test_one_example_moves_the_pair_by_at_most_C(seed, scale, clip):
    """Sensitivity: the contribution of any one target to (sum_S, sum_Y) has joint L2 norm
    <= C, whatever the scale of the support and targets."""
    s, ys, phi, yt, _ = _problem(seed, scale)
    for i in range(phi.shape[0]):
        one = jnp.zeros(phi.shape[0], jnp.float32).at[i].set(1.0)
        got_s, got_y, _, _ = feature_clipped_sum(s, ys, phi, yt, one, 1e-2, clip, labels=True)
        joint = np.sqrt(
            np.sum(np.asarray(got_s, np.float64) ** 2) + np.sum(np.asarray(got_y, np.float64) ** 2)
        )
        assert joint <= clip * (1 + 1e-6), (i, joint, clip)


def _images(n: int = 120, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.arange(n, dtype=np.int32) % 3
    return rng.normal(size=(n, 8, 8)).astype(np.float32) + y[:, None, None], y


FIT = dict(
    kernel="scatternet",
    kernel_options={"J": 1},
    support_per_class=20,
    epsilon=1.0,
    delta=1e-5,
    batch_size=40,
    epochs=1,
    n_classes=3,
    progress=False,
)


def _fit(**kw):
    x, y = _images()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return dp_kip.fit(jax.random.key(7), x, y, **{**FIT, **kw})


def test_learned_labels_carry_noise_of_std_sigma_C():
    """One SGD(lr=1) step with a tiny clip norm: the label update is the noise over the batch
    size (the clipped signal is below 1e-6 of it), so ``-dY * B / (sigma C)`` is N(0, 1)."""
    clip = 1e-6
    res = _fit(learn_labels=True, clip_norm=clip, optimizer=optax.sgd(1.0), max_steps=1)
    sigma = dict(res.report.mechanisms[-1].params)["noise_multiplier"]
    y0 = np.asarray(dp_kip.encode_labels(jnp.asarray(res.support_y), 3))
    z = -(res.support_targets - y0) * FIT["batch_size"] / (sigma * clip)
    assert z.shape == (60, 3)
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-3
    assert 0.8 < z.std() < 1.2


def test_learned_labels_release_report_and_refusals():
    """The labels move, the budget and mechanism equal the fixed-label run's, the report says
    the labels are learned, the same key gives the same release, and input-space clipping of
    learned labels under privacy is refused."""
    fixed = _fit(clip_norm=0.1, learning_rate=0.05)
    res = _fit(learn_labels=True, clip_norm=0.1, learning_rate=0.05)
    again = _fit(learn_labels=True, clip_norm=0.1, learning_rate=0.05)
    np.testing.assert_array_equal(res.support_targets, again.support_targets)
    np.testing.assert_array_equal(res.support_x, again.support_x)
    y0 = np.asarray(dp_kip.encode_labels(jnp.asarray(res.support_y), 3))
    assert np.abs(res.support_targets - y0).max() > 1e-3
    np.testing.assert_array_equal(fixed.support_targets, y0)
    assert res.report.epsilon == fixed.report.epsilon
    (rec,), (rec_fixed,) = res.report.mechanisms, fixed.report.mechanisms
    assert rec.params == rec_fixed.params and rec.sensitivity == rec_fixed.sensitivity
    assert "labels" in rec.released and "labels" not in rec_fixed.released
    assert any("learn_labels" in n for n in res.report.notes)
    assert not any("learn_labels" in n for n in fixed.report.notes)
    assert np.isfinite(dp_kip.accuracy(res, *_images(30, seed=1)))
    with pytest.raises(ValueError, match="learn_labels"):
        _fit(learn_labels=True, clip_space="input")


def test_learned_and_fixed_labels_draw_independent_noise_from_one_key():
    """The two variants release different sums under the same parameters, so the plan's digest
    names the variant: with one key, the fixed-label and learned-label runs' support updates
    carry independent noise (shared noise would make their difference noise-free), while the
    fixed-label digest is the one it always was."""
    from privkernels.privacy import Budget
    from privkernels.privacy.dpsgd import dpsgd_plan
    from privkernels.privacy.keys import params_digest

    plan = dpsgd_plan(Budget(1.0, 1e-5), sampling_rate=0.1, steps=5, clip_norm=1.0)
    legacy = params_digest(
        "dpsgd", noise_multiplier=plan.noise_multiplier, clip_norm=1.0, sampling_rate=0.1,
        steps=5, neighbouring="replace-one", epsilon=1.0, delta=1e-5,
    )  # fmt: skip
    assert tuple(plan.digest) == legacy
    labelled = dpsgd_plan(Budget(1.0, 1e-5), sampling_rate=0.1, steps=5, clip_norm=1.0,
                          variant="support and labels")  # fmt: skip
    assert tuple(labelled.digest) != legacy
    step = dict(clip_norm=1e-2, optimizer=optax.sgd(1.0), max_steps=1)
    x0 = _fit(**{**step, "optimizer": optax.sgd(0.0)}).support_x
    d_fixed = (_fit(**step).support_x - x0).ravel()
    d_learned = (_fit(learn_labels=True, **step).support_x - x0).ravel()
    assert np.abs(d_fixed).max() > 1e-4  # the update is there
    assert abs(np.corrcoef(d_fixed, d_learned)[0, 1]) < 0.2


def test_an_optimizer_that_cannot_take_the_labels_is_refused_before_the_dp_ntk_start(
    monkeypatch,
):
    """With ``init="dp_ntk"`` the start is a release: an optimizer that fails on the labels'
    leaf must fail before it (the pre-release trace includes the labels), not after."""
    from _privacy_helpers import forbid_noise

    def init(params):
        if "y" in params:
            raise ValueError("this optimizer takes the support only")
        return optax.EmptyState()

    optimizer = optax.GradientTransformation(init, lambda u, s, p=None: (u, s))
    x, y = _images()
    forbid_noise(monkeypatch)  # NoiseDrawn (a BaseException) if anything is released first
    with pytest.raises(ValueError, match="support only"):
        dp_kip.fit(
            jax.random.key(0), np.clip(x / 4, -1, 1), y, **FIT, clip_norm=0.1,
            learn_labels=True, optimizer=optimizer,
            init=dp_kip.DPNTKInit(budget_fraction=0.2, data_range=(-1.0, 1.0), iterations=2),
        )  # fmt: skip
