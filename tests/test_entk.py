"""Tests for privkernels.features.entk (e-NTK features / kernel / mean embedding)."""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.features import entk as E
from privkernels.features import networks as N
from privkernels.privacy.clipping import NORM_MARGIN

N_CLASSES = 3
_SMALL_LENET = {"channels": (2, 3), "hidden": (4,)}

# (name, module, example shape); one compiled set per entry, shared by the tests.
# Layer shapes overlap on purpose (fewer distinct RNG/XLA compilations).
NETS = {
    "fc_1l_k3": (N.fc_1l(8, out_features=3), (5,)),
    "fc_2l_k2": (N.fc_2l(8, 6, out_features=2), (5,)),
    "fc_2l_ln": (N.fc_2l(8, 6, layer_norm=True), (5,)),
    "cnn_2l_tab": (N.cnn_2l(3, 6), (5,)),
    "cnn_2l_img": (N.cnn_2l(2, 6, out_features=2), (4, 4)),
    "lenet": (N.lenet(out_features=2, **_SMALL_LENET), (16, 16)),
}
DENSE = ["fc_1l_k3", "fc_2l_k2", "fc_2l_ln"]


@pytest.fixture(autouse=True)
def _full_float32():
    """These tests compare features with independent references: mathematics, not the
    precision policy (that is `tests/test_precision.py`). A GPU's default float32 product is
    TF32 (a 10-bit mantissa, errors near 1e-3), far above these tolerances, so the code under
    test and the references run at full float32; on CPU this changes nothing."""
    with jax.default_matmul_precision("highest"):
        yield


def _jacrev_features(apply_fn, params, x, normalize=True):
    """Independent reference: reverse-mode Jacobian of the per-example summed outputs."""
    with jax.default_matmul_precision("highest"):  # built by a module fixture (see above)
        jac = jax.jit(jax.jacrev(lambda p: jnp.sum(apply_fn(p, x), axis=1)))(params)
    g = jnp.concatenate(
        [leaf.reshape(x.shape[0], -1) for leaf in jax.tree_util.tree_leaves(jac)], axis=1
    )
    if normalize:  # normalised features are scaled to norm 1 / (1 + NORM_MARGIN) <= 1
        g = g / (jnp.linalg.norm(g, axis=1, keepdims=True) * (1.0 + NORM_MARGIN))
    return np.asarray(g)


class _Net(NamedTuple):
    apply_fn: object
    params: object
    x: jax.Array
    y: np.ndarray
    raw: np.ndarray  # jacrev reference, unnormalised

    @property
    def phi(self):
        return self.raw / (np.linalg.norm(self.raw, axis=1, keepdims=True) * (1.0 + NORM_MARGIN))


@pytest.fixture(scope="module")
def nets():
    out = {}
    for i, (name, (module, shape)) in enumerate(NETS.items()):
        params = N.init_params(jax.random.key(i), module, shape)
        rng = np.random.default_rng(100 + i)  # test data from NumPy: no XLA compilations
        x = jnp.asarray(rng.normal(size=(11, *shape)), jnp.float32)
        y = rng.integers(0, N_CLASSES, size=11).astype(np.int32)
        raw = _jacrev_features(module.apply, params, x, normalize=False)
        out[name] = _Net(module.apply, params, x, y, raw)
    return out


def _ref_embedding(phi, y, weights=None):
    w = np.full(len(y), 1.0 / len(y)) if weights is None else np.asarray(weights)
    return phi.T @ (np.eye(N_CLASSES)[y] * w[:, None])


def _close(a, b, rtol=1e-4):
    """Max-abs error <= rtol * max|b| (float32 tolerance relative to the scale)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b))), 1e-12)
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale)


def _p(params):
    return sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))


# ------------------------------------------------------------------ features


@pytest.mark.parametrize("name", list(NETS))
def test_features_match_jacrev_and_have_unit_norm(nets, name):
    net = nets[name]
    phi = E.entk_features(net.apply_fn, net.params, net.x, chunk_size=4)  # 11 = 4 + 4 + 3 (padded)
    assert phi.shape == (11, _p(net.params)) and phi.dtype == jnp.float32
    _close(phi, net.phi)
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(phi), axis=1), 1.0 / (1.0 + NORM_MARGIN), rtol=1e-5
    )
    assert np.all(np.linalg.norm(np.asarray(phi, np.float64), axis=1) <= 1.0)
    _close(E.entk_features(net.apply_fn, net.params, net.x, normalize=False), net.raw)  # one chunk


def test_feature_layout_is_ravel_pytree(nets):
    from jax.flatten_util import ravel_pytree

    net = nets["fc_2l_k2"]
    g = jax.grad(lambda p: jnp.sum(net.apply_fn(p, net.x[:1])))(net.params)
    _close(net.raw[0], ravel_pytree(g)[0], rtol=1e-6)
    _close(
        E.entk_features(net.apply_fn, net.params, net.x[:1], normalize=False)[0],
        ravel_pytree(g)[0],
        rtol=1e-6,
    )


def test_chunked_equals_unchunked(nets):
    net = nets["cnn_2l_img"]
    full = E.entk_features(net.apply_fn, net.params, net.x, chunk_size=64)
    _close(E.entk_features(net.apply_fn, net.params, net.x, chunk_size=3), full, rtol=1e-6)
    _close(
        E.entk_kernel(net.apply_fn, net.params, net.x, net.x[:7], chunk_size=3),
        full @ full[:7].T,
        rtol=1e-5,
    )
    net = nets["fc_1l_k3"]
    for method in ("generic", "structured"):
        emb = lambda cs, method=method: E.entk_mean_embedding(
            net.apply_fn, net.params, net.x, net.y, N_CLASSES, chunk_size=cs, method=method
        )
        _close(emb(3), emb(64), rtol=1e-5)


def test_same_params_same_output(nets):
    net = nets["fc_2l_k2"]
    for method in ("auto", "generic"):
        a = E.entk_mean_embedding(
            net.apply_fn, net.params, net.x, net.y, N_CLASSES, method=method, chunk_size=4
        )
        b = E.entk_mean_embedding(
            net.apply_fn, net.params, net.x, net.y, N_CLASSES, method=method, chunk_size=4
        )
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ embedding


@pytest.mark.parametrize("name", list(NETS))
def test_embedding_matches_definition(nets, name):
    net = nets[name]
    emb = E.entk_mean_embedding(net.apply_fn, net.params, net.x, net.y, N_CLASSES, chunk_size=4)
    assert emb.shape == (_p(net.params), N_CLASSES)
    _close(emb, _ref_embedding(net.phi, net.y))


@pytest.mark.parametrize("name", DENSE)
def test_structured_equals_generic(nets, name):
    net = nets[name]
    f, params, x, y = net.apply_fn, net.params, net.x, net.y
    assert E.is_dense_mlp(f, params, x.shape[1:])
    gen = E.entk_mean_embedding(f, params, x, y, N_CLASSES, method="generic", chunk_size=4)
    _close(gen, _ref_embedding(net.phi, y))
    # class-grouped layout (concrete labels; also in test_embedding_matches_definition)
    # and dense one-hot layout (label matrix)
    _close(
        E.entk_mean_embedding(f, params, x, y, N_CLASSES, method="structured", chunk_size=4), gen
    )
    onehot = jax.nn.one_hot(y, N_CLASSES)
    _close(
        E.entk_mean_embedding(f, params, x, onehot, N_CLASSES, method="structured", chunk_size=4),
        gen,
    )
    # unnormalised, per-example weights
    w = np.linspace(0.1, 1.0, len(y))
    _close(
        E.entk_mean_embedding(
            f, params, x, y, N_CLASSES, method="structured", sample_weights=w, normalize=False
        ),
        _ref_embedding(net.raw, y, w),
    )
    # kernel
    _close(E.entk_kernel(f, params, x, x[:5], method="structured"), net.phi @ net.phi[:5].T)


@pytest.mark.parametrize("chunk", [1, 3, 4, 50])
def test_class_layout_is_class_pure_without_empty_chunks(chunk):
    labels = np.random.default_rng(7).integers(0, 5, size=37).astype(np.int32)
    labels[labels == 2] = 1  # an absent class contributes no chunk
    perm, mask, cls = E._class_layout(labels, 5, chunk)
    counts = np.bincount(labels, minlength=5)
    assert perm.shape == mask.shape == (sum(-(-k // chunk) for k in counts), chunk)
    assert mask.any(axis=1).all()  # no empty chunk: the scan body is branch-free
    n_base = -(-labels.size // chunk)
    assert n_base <= perm.shape[0] <= n_base + 5 - 1
    assert sorted(perm[mask].tolist()) == list(range(labels.size))  # each row once
    assert (labels[perm] == cls[:, None]).all()  # padding repeats a row of the same class


def test_sample_weights_and_label_matrix(nets):
    net = nets["cnn_2l_tab"]
    w = np.arange(1, 12) / 66.0
    _close(
        E.entk_mean_embedding(net.apply_fn, net.params, net.x, net.y, N_CLASSES, sample_weights=w),
        _ref_embedding(net.phi, net.y, w),
    )
    soft = np.random.default_rng(0).dirichlet(np.ones(N_CLASSES), size=11)
    _close(
        E.entk_mean_embedding(net.apply_fn, net.params, net.x, soft, N_CLASSES),
        net.phi.T @ soft / 11,
    )


@pytest.mark.parametrize("name", ["fc_1l_k3", "cnn_2l_tab"])
def test_replace_one_sensitivity_bound(nets, name):
    # Prop. 3.1: ||mu(D) - mu(D')||_F <= 2/n for D, D' differing in one example
    net = nets[name]
    n = net.x.shape[0]
    base = E.entk_mean_embedding(net.apply_fn, net.params, net.x, net.y, N_CLASSES)
    x2 = np.array(net.x)
    x2[4] = 10.0 * np.random.default_rng(9).normal(size=net.x.shape[1:])
    y2 = net.y.copy()
    y2[4] = (net.y[4] + 1) % N_CLASSES
    diff = float(
        jnp.linalg.norm(E.entk_mean_embedding(net.apply_fn, net.params, x2, y2, N_CLASSES) - base)
    )
    assert 0 < diff <= 2.0 / n * (1 + 1e-5)


def test_zero_gradient_gives_zero_feature_without_nan():
    class NoBias(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(4, use_bias=False, kernel_init=nn.initializers.constant(-1.0))(x))
            return nn.Dense(2, use_bias=False)(h)

    m = NoBias()
    params = m.init(jax.random.key(0), jnp.zeros((1, 3)))
    x = jnp.array([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]])  # first row: all ReLUs dead -> grad 0
    y = np.array([0, 1])
    phi = E.entk_features(m.apply, params, x)
    assert float(jnp.abs(phi[0]).max()) == 0.0
    assert abs(float(jnp.linalg.norm(phi[1])) * (1.0 + NORM_MARGIN) - 1) < 1e-5
    assert E.is_dense_mlp(m.apply, params, (3,))
    for method in ("generic", "structured"):
        emb = E.entk_mean_embedding(m.apply, params, x, y, 2, method=method)
        _close(emb, np.asarray(phi).T @ np.eye(2)[y] / 2)
        loss = lambda z, method=method: jnp.sum(
            E.entk_mean_embedding(m.apply, params, z, y, 2, method=method) ** 2
        )
        assert bool(jnp.all(jnp.isfinite(jax.grad(loss)(x))))


# ------------------------------------------------------------------ gradients w.r.t. x


def _loss(net, G, method, labels_as_matrix=False, params=None):
    lab = jax.nn.one_hot(net.y, N_CLASSES) if labels_as_matrix else net.y
    params = net.params if params is None else params

    def f(x):
        emb = E.entk_mean_embedding(
            net.apply_fn, params, x, lab, N_CLASSES, chunk_size=4, method=method
        )
        return jnp.sum((emb - G) ** 2)  # the DP-NTK loss ||mu_P - mu_Q||_F^2

    return f


def test_embedding_grad_wrt_x_structured_vs_generic(nets):
    net = nets["fc_2l_ln"]
    G = 0.05 * np.random.default_rng(5).normal(size=(_p(net.params), N_CLASSES)).astype(np.float32)
    g_gen = jax.grad(_loss(net, G, "generic"))(net.x)
    g_grp = jax.grad(_loss(net, G, "structured"))(net.x)
    g_dense = jax.jit(jax.grad(_loss(net, G, "structured", labels_as_matrix=True)))(net.x)
    assert float(jnp.abs(g_gen).max()) > 0
    _close(g_grp, g_gen, rtol=1e-4)
    _close(g_dense, g_gen, rtol=1e-4)


def test_embedding_grad_wrt_x_finite_differences(nets):
    # float64 central differences along a random direction (structured path; the
    # generic path's gradient is compared with it in the test above)
    net = nets["fc_1l_k3"]
    with jax.enable_x64(True):
        params64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), net.params)
        x64 = jnp.asarray(net.x, jnp.float64)
        G = 0.05 * np.random.default_rng(5).normal(size=(_p(net.params), N_CLASSES))
        f = _loss(net, G, "auto", params=params64)
        v = np.random.default_rng(6).normal(size=x64.shape)
        h = 1e-6
        fd = (f(x64 + h * v) - f(x64 - h * v)) / (2 * h)
        ad = jnp.vdot(jax.grad(f)(x64), v)
        assert abs(float(ad)) > 0
        assert abs(float(fd) - float(ad)) <= 1e-5 * abs(float(ad))


def test_jit_with_traced_labels_matches_eager(nets):
    net = nets["fc_1l_k3"]
    eager = E.entk_mean_embedding(net.apply_fn, net.params, net.x, net.y, N_CLASSES, chunk_size=4)
    jitted = jax.jit(
        lambda xx, yy: E.entk_mean_embedding(
            net.apply_fn, net.params, xx, yy, N_CLASSES, chunk_size=4
        )
    )(net.x, jnp.asarray(net.y))
    _close(jitted, eager)


def test_chunk_fn_sums_to_embedding(nets):
    net = nets["fc_2l_k2"]
    lw = np.eye(N_CLASSES)[net.y] / len(net.y)
    ref = _ref_embedding(net.phi, net.y)
    for method in ("generic", "auto"):
        fn = E.make_entk_embedding_chunk_fn(
            net.apply_fn, net.params, net.x.shape[1:], method=method
        )
        _close(fn(net.params, net.x[:6], lw[:6]) + fn(net.params, net.x[6:], lw[6:]), ref)


# ------------------------------------------------------------------ kernel


@pytest.mark.parametrize("name", ["fc_2l_k2", "lenet"])
def test_kernel_feature_form(nets, name):
    net = nets[name]
    K = E.entk_kernel(net.apply_fn, net.params, net.x, net.x[:6])
    assert K.shape == (11, 6)
    _close(K, net.phi @ net.phi[:6].T)
    Kxx = np.asarray(K[:6])
    np.testing.assert_allclose(np.diag(Kxx), (1.0 + NORM_MARGIN) ** -2, rtol=1e-5)
    np.testing.assert_allclose(Kxx, Kxx.T, atol=1e-6)
    assert np.linalg.eigvalsh(Kxx).min() > -1e-5


# ------------------------------------------------------------------ detection


def test_dense_mlp_detection(nets):
    for name, net in nets.items():
        assert E.is_dense_mlp(net.apply_fn, net.params, net.x.shape[1:]) == (name in DENSE)

    class Shared(nn.Module):  # one Dense applied twice: weight sharing
        @nn.compact
        def __call__(self, x):
            d = nn.Dense(5)
            return d(nn.relu(d(x)))

    m = Shared()
    params = m.init(jax.random.key(0), jnp.zeros((1, 5)))
    assert not E.is_dense_mlp(m.apply, params, (5,))
    # parameters transformed before use are not the Dense kernels themselves
    net = nets["fc_2l_k2"]
    # (``a + 0.0`` is the same function, but the Dense kernels are no longer params leaves)
    shifted = lambda p, x: net.apply_fn(jax.tree_util.tree_map(lambda a: a + 0.0, p), x)
    assert not E.is_dense_mlp(shifted, net.params, (5,))
    with pytest.raises(ValueError, match="does not use a params leaf"):
        E.entk_mean_embedding(shifted, net.params, net.x, net.y, N_CLASSES, method="structured")
    # auto falls back to the (correct) generic path for it
    _close(
        E.entk_mean_embedding(shifted, net.params, net.x, net.y, N_CLASSES),
        _ref_embedding(net.phi, net.y),
    )


def test_structured_plan_is_traced_once_per_network_and_shape(nets, monkeypatch):
    """Perf (issue 51 item 6): the Dense-call plan is a function of the network and the
    shapes alone, so repeated embeddings reuse it instead of re-tracing the flax module
    (several ms of host time per call); it equals the plan traced from the real params."""
    net = nets["fc_2l_k2"]
    calls = []
    real = E._dense_plan

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(E, "_dense_plan", counting)
    x = net.x[:, :, None]  # an example shape (5, 1) no other test uses: a fresh cache entry
    apply_fn = lambda p, xb: net.apply_fn(p, xb.reshape(xb.shape[0], -1))  # noqa: E731
    first = E.entk_mean_embedding(apply_fn, net.params, x, net.y, N_CLASSES)
    again = E.entk_mean_embedding(apply_fn, net.params, x, net.y, N_CLASSES)
    assert len(calls) == 1
    np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
    assert E._resolve_plan("auto", apply_fn, net.params, x) == real(
        apply_fn, net.params, (5, 1), x.dtype
    )


# ------------------------------------------------------------------ validation


def test_input_validation(nets):
    net = nets["fc_1l_k3"]
    f, params, x, y = net.apply_fn, net.params, net.x, net.y

    def emb(**kw):
        return E.entk_mean_embedding(
            kw.pop("apply_fn", f),
            params,
            kw.pop("x", x),
            kw.pop("y", y),
            kw.pop("n_classes", N_CLASSES),
            **kw,
        )

    with pytest.raises(ValueError, match="x contains NaN"):
        emb(x=x.at[0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match="x contains NaN"):
        E.entk_features(f, params, x.at[1, 1].set(jnp.inf))
    with pytest.raises(ValueError, match="rank"):
        E.entk_features(f, params, x[0])
    with pytest.raises(ValueError, match="x must have at least 1 row"):
        E.entk_features(f, params, x[:0])
    with pytest.raises(ValueError, match=r"y must lie in \[0, n_classes\)"):
        emb(y=np.where(y == 0, N_CLASSES, y))
    with pytest.raises(ValueError, match="y must lie"):
        emb(y=y - 5)
    with pytest.raises(ValueError, match="labels but x has"):
        emb(y=y[:-1])
    with pytest.raises(TypeError, match="integer"):
        emb(y=np.array(["a"] * 11))
    with pytest.raises(ValueError, match="n_classes"):
        emb(n_classes=0)
    with pytest.raises(ValueError, match="method"):
        emb(method="fast")
    with pytest.raises(ValueError, match="chunk_size"):
        emb(chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        E.entk_features(f, params, x, chunk_size=2.0)
    with pytest.raises(ValueError, match="sample_weights"):
        emb(sample_weights=np.ones(10))
    with pytest.raises(ValueError, match="sample_weights"):
        emb(sample_weights=-np.ones(11))
    with pytest.raises(ValueError, match="sample_weights contains NaN"):
        emb(sample_weights=np.full(11, np.nan))
    with pytest.raises(ValueError, match="label matrix"):
        emb(y=np.ones((11, N_CLASSES + 1)))
    with pytest.raises(TypeError, match="apply_fn"):
        emb(apply_fn="not callable")
    cnn = nets["cnn_2l_tab"]
    with pytest.raises(ValueError, match="structured"):
        E.entk_mean_embedding(
            cnn.apply_fn, cnn.params, cnn.x, cnn.y, N_CLASSES, method="structured"
        )
    with pytest.raises(ValueError, match="same example shape"):
        E.entk_kernel(f, params, x, x[:, :3])
    with pytest.raises(ValueError, match="x2 contains NaN"):
        E.entk_kernel(f, params, x, x.at[0, 0].set(jnp.nan))


def test_generic_leaf_norms_of_large_leaves_are_summed_in_blocks():
    """The normalisation of generic-path e-NTK features divides by a float32 norm with a margin of
    `NORM_MARGIN`, which covers sums of up to ~8,000 squares: a leaf of 48,000 entries must not be
    one reduction after compilation (XLA merges unseparated levels), a small leaf stays one."""
    import re

    def reduces(d):
        hlo = jax.jit(E._row_sqnorm).lower(jnp.ones((4, d))).compile().as_text()
        return [line for line in hlo.splitlines() if " reduce(" in line]

    big = reduces(48_000)
    assert len(big) == 2 and any(re.search(r"f32\[4,\d+\]\S* reduce\(", r) for r in big)
    assert len(reduces(3_000)) == 1
    g = np.random.default_rng(0).normal(size=(3, 48_000)).astype(np.float32)
    exact = np.sum(g.astype(np.float64) ** 2, axis=1)
    np.testing.assert_allclose(np.asarray(E._row_sqnorm(jnp.asarray(g))), exact, rtol=1e-6)


class _Bf16MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.relu(nn.Dense(8, param_dtype=jnp.bfloat16)(x.reshape(x.shape[0], -1)))
        return nn.Dense(2, param_dtype=jnp.bfloat16)(h)


def test_structured_plan_of_bfloat16_parameters():
    """The plan cache keys dtypes as objects: bfloat16 parameters keep the structured path
    (their ``dtype.str`` is the void "<V2" of every 2-byte ml_dtype)."""
    net = _Bf16MLP()
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(6, 4)), jnp.float32)
    params = net.init(jax.random.key(0), x[:1])
    y = jnp.asarray([0, 1, 0, 1, 0, 1])
    emb = E.entk_mean_embedding(net.apply, params, x, y, n_classes=2, method="structured")
    ref = E.entk_mean_embedding(net.apply, params, x, y, n_classes=2, method="generic")
    np.testing.assert_allclose(np.asarray(emb), np.asarray(ref), rtol=2e-2, atol=2e-3)
