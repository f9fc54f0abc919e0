"""The precision policy, checked on CPU: sensitive products are lowered at HIGHEST.

On an accelerator the default float32 matmul may be reduced precision (TF32);
a norm that bounds a sensitivity must not be. The lowered StableHLO of every
sensitive function is inspected: each ``dot_general`` must say
``precision = [HIGHEST, HIGHEST]``. Plus adversarial inputs for the clip and
normalisation bounds, measured in float64 on the float32 outputs.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels import dp_kip, features, linalg, privacy
from privkernels.dp_ntk_regression import kernel as reg_kernel
from privkernels.features import entk
from privkernels.privacy import mechanisms

DOT = re.compile(r"stablehlo\.dot_general.*")


def _dots(fn, *args, **kwargs) -> list[str]:
    text = jax.jit(fn, **kwargs).lower(*args).as_text()
    return DOT.findall(text)


def _assert_highest(dots: list[str]) -> None:
    assert dots, "expected matrix products in the lowered function"
    low = [d for d in dots if "precision = [HIGHEST, HIGHEST]" not in d]
    assert not low, f"{len(low)} of {len(dots)} products not at HIGHEST, e.g. {low[0][:160]}"


def _kip_setup():
    rng = np.random.default_rng(0)
    spec = dp_kip.make_kernel("fc_ntk", (5,), 2)
    xs = jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)
    ys = dp_kip.encode_labels(jnp.asarray([0, 0, 1, 1]), 2)
    xt = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    yt = dp_kip.encode_labels(jnp.asarray(rng.integers(0, 2, 6)), 2)
    return spec, xs, ys, xt, yt


def test_dp_kip_gram_clipped_sum_is_full_precision():
    spec, xs, ys, xt, yt = _kip_setup()
    fn = lambda a, b, c, d: dp_kip.clipped_sums.gram_clipped_sum(  # noqa: E731
        spec.gram_fn, a, b, c, d, jnp.ones(6), 1e-6, 1.0
    )
    _assert_highest(_dots(fn, xs, ys, xt, yt))


def test_dp_kip_feature_clipped_sum_is_full_precision():
    _, xs, ys, xt, yt = _kip_setup()
    fn = lambda a, b, c, d: dp_kip.clipped_sums.feature_clipped_sum(  # noqa: E731
        a, b, c, d, jnp.ones(6), 1e-6, 1.0
    )
    _assert_highest(_dots(fn, xs, ys, xt, yt))


@pytest.mark.parametrize("kind", ["kernel", "features"])
def test_dp_kip_krr_and_adjoint_gradients_are_full_precision(kind):
    spec, xs, ys, xt, yt = _kip_setup()
    if kind == "features":
        spec = dp_kip.KernelSpec("lin", "features", {}, feature_fn=lambda z: jnp.tanh(z))
    fn = lambda a, b, c, d: dp_kip.grads.example_grads(spec, a, b, c, d, 1e-3)  # noqa: E731
    _assert_highest(_dots(fn, xs, ys, xt, yt))
    pred = lambda a, b, c: dp_kip.krr.krr_predict_repr(  # noqa: E731
        spec.kind, spec.kernel_fn, a, b, c, 1e-3
    )
    _assert_highest(_dots(pred, xs, ys, xt))


def test_dp_kip_train_step_fc_ntk_is_full_precision():
    """The whole FC-NTK DP-KIP step (no feature map): every product at HIGHEST."""
    import optax

    from privkernels.audit import dp_kip_full_batch_step

    _, xs, _, xt, yt = _kip_setup()
    step, state, pad = dp_kip_full_batch_step(
        "fc_ntk", xs, 2, 6, clip_norm=1.0, noise_multiplier=1.0, relative_reg=1e-3,
        optimizer=optax.sgd(1.0), chunk_size=8,
    )  # fmt: skip
    xp = jnp.concatenate([xt, jnp.zeros((pad - 6, 5))])
    yp = jnp.concatenate([yt, jnp.zeros((pad - 6, 2))])
    batch = dp_kip.Batch(xp, yp, (jnp.arange(pad) < 6).astype(jnp.float32))
    lowered = jax.jit(lambda s, b, k: step(s, b, k)).lower(state, batch, jax.random.key(0))
    _assert_highest(DOT.findall(lowered.as_text()))


def test_release_embedding_is_full_precision_training_uses_the_default():
    net = features.fc_1l(8, out_features=2)
    params = features.init_params(jax.random.key(0), net, (5,))
    x = jnp.ones((6, 5))
    lw = jnp.ones((6, 2)) / 6
    static = {"apply_fn": net.apply, "normalize": True, "chunk": 6, "plan": None}
    core = entk._JITTED[entk._embedding_core]
    release = core.lower(params, x, lw, precision="highest", **static).as_text()
    _assert_highest(DOT.findall(release))
    train = core.lower(params, x, lw, precision=None, **static).as_text()
    assert DOT.findall(train) and not any("HIGHEST" in d for d in DOT.findall(train))


def test_kernel_matrices_solves_and_gaussian_sampling_are_full_precision():
    w = jnp.ones((4, 3))
    x = jnp.ones((5, 3))
    _assert_highest(_dots(lambda a, b: reg_kernel.kernel_matrix(a, a, b), x, w))
    _assert_highest(_dots(lambda a: features.fc_ntk_kernel(a, a, depth=1), x))
    # the ridge solve itself is Cholesky + triangular solves (no dot_general to mark): it is
    # wrapped all the same, so products a caller traces inside it are full precision
    assert getattr(linalg.ridge_solve, "__full_precision__", False)
    assert getattr(linalg.ridge_cholesky, "__full_precision__", False)
    lfac = jnp.eye(5)
    _assert_highest(
        _dots(lambda lf: mechanisms._gsm_explicit(jax.random.key(0), lf, jnp.int32(3), 4), lfac)
    )


def test_regression_scores_are_full_precision():
    """DP NTK regression's scores weight kernel rows (or sketched features) by ridge
    coefficients that can be large and of both signs: a TF32 product would lose them to
    cancellation, so `predict` multiplies at HIGHEST on every path."""
    from privkernels.dp_ntk_regression import model as reg_model

    x, w, alpha = jnp.ones((5, 3)), jnp.ones((4, 3)), jnp.ones((6, 2))
    _assert_highest(_dots(reg_model._block_scores, x, jnp.ones((6, 3)), w, alpha))
    _assert_highest(_dots(reg_model._feature_scores, jnp.ones((5, 7)), jnp.ones((7, 2))))


def test_clipped_norm_never_exceeds_c_on_adversarial_vectors():
    """Vectors built to fool a float32 sum of squares: one large entry and a million tiny
    ones whose squares a sequential sum would drop (true norm 1.0049 vs computed 1.0)."""
    big = np.zeros((3, 1_000_001), np.float32)
    big[:, 0] = 1.0
    big[:, 1:] = 1e-4  # each square 1e-8 < ulp(1)/2, a million of them add 0.01
    big[1] *= 3.0
    big[2, 0] = 1.0 + 2.0**-23  # just above C = 1
    clipped, _ = privacy.clip_per_example(jnp.asarray(big), 1.0)
    norms64 = np.linalg.norm(np.asarray(clipped, np.float64), axis=1)
    assert np.all(norms64 <= 1.0), norms64
    rng = np.random.default_rng(0)
    for scale in (1e-30, 1e-3, 1.0, 1e3, 1e30):
        g = (rng.standard_normal((64, 4097)) * scale).astype(np.float32)
        g[:, 0] *= 1e3  # a dominant coordinate
        clipped, _ = privacy.clip_per_example(jnp.asarray(g), 1.0)
        assert np.all(np.linalg.norm(np.asarray(clipped, np.float64), axis=1) <= 1.0)


def test_normalised_entk_features_never_exceed_one_on_adversarial_inputs():
    net = features.fc_2l(32, 32, out_features=3)
    params = features.init_params(jax.random.key(0), net, (10,))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 10)) * np.logspace(-20, 18, 64)[:, None]
    phi = features.entk_features(net.apply, params, jnp.asarray(x, jnp.float32))
    norms = np.linalg.norm(np.asarray(phi, np.float64), axis=1)
    assert np.all(norms <= 1.0) and np.all(np.isfinite(norms))
