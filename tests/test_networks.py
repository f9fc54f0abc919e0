"""Tests for privkernels.features.networks (e-NTK network zoo)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels.features import networks as N


def _n_params(params) -> int:
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params))


_SMALL_LENET = {"channels": (2, 3), "hidden": (4,)}


@pytest.mark.parametrize(
    "module, input_shape, k",
    [
        (N.fc_1l(8), (5,), 1),
        (N.fc_1l(8, out_features=4), (5,), 4),
        (N.fc_1l(8, layer_norm=True), (5,), 1),
        (N.fc_2l(8, 6, out_features=3), (2, 2, 2), 3),
        (N.fc_2l(8, 6, layer_norm=True), (5,), 1),
        (N.cnn_2l(3, 7), (5,), 1),
        (N.cnn_2l(3, 7, out_features=2), (8, 8), 2),
        (N.cnn_2l(3, 7, kernel_size=3), (8, 8, 2), 1),
        (N.lenet(out_features=2, **_SMALL_LENET), (28, 28), 2),
        (N.lenet(out_features=2, **_SMALL_LENET), (32, 32), 2),
        (N.lenet(out_features=2, **_SMALL_LENET), (32, 32, 3), 2),
        (N.lenet(out_features=2, **_SMALL_LENET), (16, 16), 2),
    ],
)
def test_output_shapes(module, input_shape, k):
    # shapes only (eval_shape: no compilation); numerics are covered by tests/test_entk.py
    params = jax.eval_shape(lambda: N.init_params(jax.random.key(0), module, input_shape))
    out = jax.eval_shape(module.apply, params, jax.ShapeDtypeStruct((3, *input_shape), jnp.float32))
    assert out.shape == (3, k)
    assert out.dtype == jnp.float32


def test_outputs_finite():
    module = N.lenet(out_features=2, **_SMALL_LENET)
    params = N.init_params(jax.random.key(0), module, (28, 28))
    out = jax.jit(module.apply)(params, jax.random.uniform(jax.random.key(1), (3, 28, 28)))
    assert out.shape == (3, 2) and bool(jnp.all(jnp.isfinite(out)))


def test_fc_param_counts():
    d, w1, w2, k = 7, 11, 5, 3
    p1 = jax.eval_shape(lambda: N.init_params(jax.random.key(0), N.fc_1l(w1, out_features=k), (d,)))
    assert _n_params(p1) == d * w1 + w1 + w1 * k + k
    p2 = jax.eval_shape(
        lambda: N.init_params(jax.random.key(0), N.fc_2l(w1, w2, out_features=k), (d,))
    )
    assert _n_params(p2) == d * w1 + w1 + w1 * w2 + w2 + w2 * k + k


def test_cnn_2l_tabular_matches_reference_layout():
    # CNTK_1D: conv1d(1 -> c1, kernel 1) -> flatten(d*c1) -> Dense(c2) -> Dense(out)
    d, c1, c2 = 6, 4, 5
    params = jax.eval_shape(lambda: N.init_params(jax.random.key(0), N.cnn_2l(c1, c2), (d,)))
    shapes = sorted(leaf.shape for leaf in jax.tree_util.tree_leaves(params))
    assert shapes == sorted([(1, 1, c1), (c1,), (d * c1, c2), (c2,), (c2, 1), (1,)])


def test_lenet_default_is_classic_lenet5():
    # 28x28 (padded first conv) and 32x32 both reach the 5x5x16 map -> 120 -> 84 -> 10
    for hw in (28, 32):
        shapes = jax.eval_shape(
            lambda hw=hw: N.lenet().init(jax.random.key(0), jnp.zeros((1, hw, hw)))
        )
        kernels = [leaf.shape for leaf in jax.tree_util.tree_leaves(shapes)]
        assert (16 * 5 * 5, 120) in kernels and (120, 84) in kernels and (84, 10) in kernels
        assert (5, 5, 1, 6) in kernels and (5, 5, 6, 16) in kernels


def test_init_is_deterministic_and_key_dependent():
    m = N.fc_2l(6, 4)
    a = N.init_params(jax.random.key(3), m, (5,))
    b = N.init_params(jax.random.key(3), m, (5,))
    c = N.init_params(jax.random.key(4), m, (5,))
    for la, lb, lc in zip(
        jax.tree_util.tree_leaves(a),
        jax.tree_util.tree_leaves(b),
        jax.tree_util.tree_leaves(c),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))
        assert not np.array_equal(np.asarray(la), np.asarray(lc))


def test_torch_init_bounds_and_flax_init():
    d, w = 50, 40
    params = N.init_params(jax.random.key(0), N.fc_1l(w), (d,))["params"]
    k0, b0 = params["Dense_0"]["kernel"], params["Dense_0"]["bias"]
    bound = 1 / math.sqrt(d)
    assert float(jnp.max(jnp.abs(k0))) <= bound and float(jnp.max(jnp.abs(b0))) <= bound
    # uniform on [-b, b]: variance b^2/3 (loose check, 2000 draws)
    assert abs(float(jnp.var(k0)) - bound**2 / 3) < 0.1 * bound**2 / 3
    assert float(jnp.max(jnp.abs(b0))) > 0
    pf = N.init_params(jax.random.key(0), N.fc_1l(w, init="flax"), (d,))["params"]
    assert float(jnp.max(jnp.abs(pf["Dense_0"]["bias"]))) == 0.0


def test_examples_are_processed_independently():
    # the per-example e-NTK needs f(batch)[i] == f(x_i); LayerNorm is per example
    for m, shape in [
        (N.fc_2l(6, 5, layer_norm=True, out_features=2), (4,)),
        (N.cnn_2l(2, 3), (5,)),
        (N.lenet(out_features=2, **_SMALL_LENET), (16, 16)),
    ]:
        params = N.init_params(jax.random.key(0), m, shape)
        x = jax.random.normal(jax.random.key(1), (4, *shape))
        f = jax.jit(m.apply)
        full = f(params, x)
        single = jnp.concatenate([f(params, x[i : i + 1]) for i in range(4)])
        np.testing.assert_allclose(np.asarray(full), np.asarray(single), rtol=1e-5, atol=1e-6)


def test_layer_norm_variant_changes_function_not_params():
    a = N.init_params(jax.random.key(0), N.fc_1l(6), (4,))
    b = N.init_params(jax.random.key(0), N.fc_1l(6, layer_norm=True), (4,))
    assert _n_params(a) == _n_params(b)
    x = jax.random.normal(jax.random.key(1), (3, 4))
    assert not np.allclose(N.fc_1l(6).apply(a, x), N.fc_1l(6, layer_norm=True).apply(b, x))


def test_centered_fc_is_the_plain_fc_on_2x_minus_1():
    """``centered=True``: the same parameters, applied to ``2 x - 1``; its e-NTK features
    see contrast (a halved image is no longer nearly the same feature) and the
    structured dense-MLP path still applies."""
    from privkernels.features import entk_features, is_dense_mlp

    plain = N.fc_1l(40, out_features=3, layer_norm=True)
    cen = N.fc_1l(40, out_features=3, layer_norm=True, centered=True)
    params = N.init_params(jax.random.key(0), cen, (5, 5))
    ref = N.init_params(jax.random.key(0), plain, (5, 5))
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(ref)
    x = jax.random.uniform(jax.random.key(1), (8, 5, 5))
    np.testing.assert_allclose(cen.apply(params, x), plain.apply(params, 2 * x - 1), rtol=1e-6)
    assert is_dense_mlp(cen.apply, params, (5, 5))
    assert N.fc_2l(3, 4, centered=True).centered and not N.fc_2l(3, 4).centered

    def cos(f, a, b):
        u, v = np.asarray(entk_features(f, params, a)), np.asarray(entk_features(f, params, b))
        return np.sum(u * v, 1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)

    # plain: the feature of x and of x / 2 nearly coincide; centred they do not
    assert cos(plain.apply, x, 0.5 * x).min() > 0.85  # measured 0.90-0.95
    assert cos(cen.apply, x, 0.5 * x).max() < cos(plain.apply, x, 0.5 * x).min()


def test_validation_errors():
    with pytest.raises(ValueError, match="width"):
        N.fc_1l(0)
    with pytest.raises(TypeError, match="width1"):
        N.fc_2l(2.5, 3)
    with pytest.raises(ValueError, match="out_features"):
        N.cnn_2l(out_features=0)
    with pytest.raises(ValueError, match="init"):
        N.fc_1l(3, init="xavier")
    with pytest.raises(ValueError, match="channels"):
        N.lenet(channels=(1, 2, 3))
    with pytest.raises(TypeError, match="key"):
        N.init_params(0, N.fc_1l(3), (4,))
    with pytest.raises(TypeError, match="input_shape"):
        N.init_params(jax.random.key(0), N.fc_1l(3), 4)
    with pytest.raises(ValueError, match="input_shape"):
        N.init_params(jax.random.key(0), N.fc_1l(3), (4, 0))
    with pytest.raises(TypeError, match="module"):
        N.init_params(jax.random.key(0), object(), (4,))
    m = N.cnn_2l(2, 3)
    params = N.init_params(jax.random.key(0), m, (4,))
    with pytest.raises(ValueError, match="cnn_2l expects"):
        m.apply(params, jnp.zeros((2, 1, 2, 3, 4)))
