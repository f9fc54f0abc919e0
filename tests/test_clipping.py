"""Tests of per-example clipping and the noisy clipped sum (DP-SGD step)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privkernels.privacy.clipping import (
    NORM_MARGIN,
    clip_per_example,
    per_example_norms,
    rounding_bound,
    rounding_error,
)
from privkernels.privacy.dpsgd import noisy_clipped_sum

KEY = jax.random.key(42)


def _grads(b: int = 16, seed: int = 0, scale: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": jnp.asarray(scale * rng.normal(size=(b, 3, 4)), jnp.float32),
        "b": jnp.asarray(scale * rng.normal(size=(b, 4)), jnp.float32),
        "nested": [jnp.asarray(scale * rng.normal(size=(b,)), jnp.float32)],
    }


def _np_norms(g: dict) -> np.ndarray:
    leaves = jax.tree_util.tree_leaves(g)
    b = leaves[0].shape[0]
    return np.sqrt(
        sum(np.sum(np.asarray(x, np.float64).reshape(b, -1) ** 2, axis=1) for x in leaves)
    )


def test_norms_are_global_across_leaves():
    g = _grads()
    np.testing.assert_allclose(per_example_norms(g), _np_norms(g), rtol=1e-5)


@pytest.mark.parametrize("clip", [0.1, 1.0, 3.0, 100.0])
def test_clip_bounds_norm_preserves_direction(clip):
    g = _grads(b=32, scale=0.8)
    clipped, norms = clip_per_example(g, clip)
    before = _np_norms(g)
    after = _np_norms(clipped)
    np.testing.assert_allclose(norms, before, rtol=1e-5)
    assert np.all(after <= clip)  # never above C, even in float64 arithmetic on float32 data
    target = clip / (1.0 + NORM_MARGIN)  # clipped norms land on C / (1 + margin)
    below = before <= target
    np.testing.assert_allclose(after[below], before[below], rtol=1e-6)  # unchanged below
    np.testing.assert_allclose(after[~below], target, rtol=1e-5)
    # same direction: clipped = s_i * g_i with s_i = min(1, C/(||g_i|| (1 + margin)))
    s = np.minimum(1.0, target / before)
    for a, c in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(clipped), strict=True):
        a = np.asarray(a, np.float64)
        np.testing.assert_allclose(
            np.asarray(c), a * s.reshape((-1,) + (1,) * (a.ndim - 1)), rtol=1e-5, atol=1e-7
        )


def test_zero_and_nonfinite_examples():
    g = _grads(b=4)
    g = jax.tree_util.tree_map(lambda x: x.at[0].set(0.0), g)  # zero gradient
    g["w"] = g["w"].at[1, 0, 0].set(jnp.nan)
    g["b"] = g["b"].at[2, 1].set(jnp.inf)
    clipped, norms = clip_per_example(g, 1.0)
    for leaf in jax.tree_util.tree_leaves(clipped):
        assert np.all(np.isfinite(np.asarray(leaf)))
        np.testing.assert_array_equal(np.asarray(leaf[:3]), 0.0)  # zero stays zero; bad -> 0
    assert norms[0] == 0.0 and not np.isfinite(norms[1]) and not np.isfinite(norms[2])
    assert _np_norms(clipped)[3] <= 1.0 + 1e-6


def test_clip_under_jit_and_vmap_with_traced_clip_norm():
    g = _grads(b=8)
    eager, _ = clip_per_example(g, 0.5)
    jitted, _ = jax.jit(clip_per_example)(g, jnp.float32(0.5))
    for a, b in zip(
        jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_noisy_sum_noise_std_and_mask():
    b, d = 12, 20000
    rng = np.random.default_rng(1)
    g = {
        "a": jnp.asarray(rng.normal(size=(b, d)) / math.sqrt(d), jnp.float32),
        "c": jnp.asarray(rng.normal(size=(b, 50, 40)) / 40.0, jnp.float32),
    }
    clipped, _ = clip_per_example(g, 1.0)
    mask = np.zeros(b, bool)
    mask[[0, 3, 4, 9]] = True
    # padding rows hold garbage (NaN/huge): they must not leak into the sum
    clipped = {
        "a": clipped["a"].at[1].set(jnp.nan).at[2].set(1e30),
        "c": clipped["c"].at[5].set(jnp.inf),
    }
    sigma, c = 0.7, 1.0
    out = noisy_clipped_sum(KEY, clipped, jnp.asarray(mask), clip_norm=c, noise_multiplier=sigma)
    assert out["a"].shape == (d,) and out["c"].shape == (50, 40)
    noises = []
    for name in ("a", "c"):
        exact = np.asarray(clipped[name], np.float64)[mask].sum(0)
        noise = (np.asarray(out[name], np.float64) - exact).ravel() / (sigma * c)
        assert np.all(np.isfinite(noise))
        assert stats.kstest(noise, "norm").pvalue > 1e-3
        noises.append(noise)
    # leaves get independent draws (no shared key)
    m = min(noises[0].size, noises[1].size)
    assert abs(np.corrcoef(noises[0][:m], noises[1][:m])[0, 1]) < 4 / math.sqrt(m)


def test_noisy_sum_determinism_and_int_mask():
    g, _ = clip_per_example(_grads(b=6), 1.0)
    mask = jnp.array([1, 1, 0, 1, 0, 0])
    a = noisy_clipped_sum(KEY, g, mask, clip_norm=1.0, noise_multiplier=1.1)
    b = noisy_clipped_sum(KEY, g, mask.astype(bool), clip_norm=1.0, noise_multiplier=1.1)
    c = noisy_clipped_sum(jax.random.key(3), g, mask, clip_norm=1.0, noise_multiplier=1.1)
    for x, y, z in zip(*(jax.tree_util.tree_leaves(t) for t in (a, b, c)), strict=True):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(np.asarray(x), np.asarray(z))
    f = jax.jit(lambda k, gg, mm: noisy_clipped_sum(k, gg, mm, clip_norm=1.0, noise_multiplier=1.1))
    for x, y in zip(
        jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(f(KEY, g, mask)), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_validation(bad):
    g = _grads(b=3)
    with pytest.raises(ValueError, match="clip_norm"):
        clip_per_example(g, bad)
    with pytest.raises(ValueError, match="clip_norm"):
        noisy_clipped_sum(KEY, g, jnp.ones(3, bool), clip_norm=bad, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        noisy_clipped_sum(KEY, g, jnp.ones(3, bool), clip_norm=1.0, noise_multiplier=bad)


def test_structure_validation():
    g = _grads(b=3)
    with pytest.raises(ValueError, match="mask"):
        noisy_clipped_sum(KEY, g, jnp.ones(4, bool), clip_norm=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="disagree"):
        clip_per_example({"a": jnp.ones((3, 2)), "b": jnp.ones((4,))}, 1.0)
    with pytest.raises(ValueError, match="leading example axis"):
        clip_per_example({"a": jnp.ones(())}, 1.0)
    with pytest.raises(ValueError, match="no array leaves"):
        clip_per_example({}, 1.0)
    with pytest.raises(TypeError, match="key"):
        noisy_clipped_sum(1, g, jnp.ones(3, bool), clip_norm=1.0, noise_multiplier=1.0)


def test_rounding_error_charges_the_longer_chains_and_keeps_the_default_otherwise():
    """`rounding_error`: ``max(3 gamma_n bound^2, 2 (gamma_n bound^2 + gamma_k A_k))``; a small or
    short-chained piece leaves the default ``3 gamma_n bound^2`` unchanged to the bit."""
    bound = jnp.asarray([1.0, 2.0, 0.5, 1.0], jnp.float32)
    piece = jnp.asarray([0.5, 1.0, 0.0, 1e-9], jnp.float32)
    g = lambda n: rounding_bound(n)  # noqa: E731
    default = 3.0 * g(100) * np.asarray(bound, np.float64) ** 2
    none = np.asarray(rounding_error(bound, 100, (), jnp.float32))
    np.testing.assert_allclose(none, default, rtol=1e-6)
    short = np.asarray(rounding_error(bound, 100, ((piece, 50),), jnp.float32))
    np.testing.assert_array_equal(short, none)
    longer = np.asarray(rounding_error(bound, 100, ((piece, 10_000),), jnp.float32))
    charged = 2.0 * (g(100) * np.asarray(bound, np.float64) ** 2 + g(10_000) * np.asarray(piece))
    np.testing.assert_allclose(longer, np.maximum(default, charged), rtol=1e-6)
    assert longer[0] > none[0] and longer[1] > none[1]  # large pieces are charged
    assert longer[2] == none[2] and longer[3] == none[3]  # tiny ones are not: same bits
    # gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Sec. 3.1)
    assert g(1000) == pytest.approx(1000 * 2.0**-24 / (1 - 1000 * 2.0**-24), rel=1e-12)


@pytest.mark.parametrize("m, d, lift", [(12, 40, False), (40, 12, False), (12, 40, True)])
def test_gram_norm_error_bound_covers_the_float64_norm(m, d, lift):
    """The Gram form's ``sq`` (a signed sum that cancels near the arc-cosine kink) lies within its
    ``err`` of the same expression in float64, for both reduction layouts (m <= d, m > d); the
    ``||S_i X||^2`` term is charged its own chain, ``gram_rounding_terms(m, d)``."""
    from privkernels import dp_kip
    from privkernels.dp_kip.clipped_sums import gram_norm_terms, gram_rounding_terms

    rng = np.random.default_rng(m)
    spec = dp_kip.make_kernel("fc_ntk", (d,), 2, options={"sphere_lift": lift})
    xs = rng.normal(size=(m, d))
    xs[1] = xs[0] * 1.004 + 1e-4 * rng.normal(size=d)
    xs = jnp.asarray(xs, jnp.float32)
    ys = dp_kip.encode_labels(jnp.asarray(np.arange(m) % 2), 2)
    t = jnp.asarray(rng.normal(size=(32, d)), jnp.float32)
    yt = dp_kip.encode_labels(jnp.asarray(rng.integers(0, 2, 32)), 2)
    terms = jax.jit(lambda a, b: gram_norm_terms(spec.gram_fn, a, ys, b, yt, 1e-6))(xs, t)
    # the same ||g_i||^2 = ||S_i X + b_i x_i^T||_F^2 from the float32 S_i, b_i, formed in float64
    eye = np.eye(m)
    u, v = np.asarray(terms.u, np.float64), np.asarray(terms.v, np.float64)
    e_sym, dvec = np.asarray(terms.e_sym, np.float64), np.asarray(terms.dvec, np.float64)
    x64, t64 = np.asarray(xs, np.float64), np.asarray(t, np.float64)
    b_vec = np.asarray(terms.b_vec, np.float64)
    quad_piece = np.zeros(32)
    for i in range(32):
        s_i = -e_sym * (np.outer(u[i], v[i]) + np.outer(v[i], u[i])) + dvec[i] * eye
        g_i = s_i @ x64 + np.outer(b_vec[i], t64[i])
        assert abs(float(terms.sq[i]) - float(np.sum(g_i * g_i))) <= float(terms.err[i])
        quad_piece[i] = np.sum(s_i * s_i) * np.sum(x64 * x64)  # ||S_i||_F^2 ||X||_F^2
    gamma = rounding_bound(gram_rounding_terms(m, d))
    assert np.all(np.asarray(terms.err) >= 2.0 * gamma * quad_piece * (1 - 1e-4))


def _gram_sq_reduces(m: int, d: int, device) -> list[str]:
    """The compiled ``reduce`` lines of `gram_norm_terms`'s squared norms on ``device``."""
    from privkernels import dp_kip
    from privkernels.dp_kip.clipped_sums import gram_norm_terms

    spec = dp_kip.make_kernel("fc_ntk", (d,), 2)
    with jax.default_device(device):
        xs, t = jax.device_put(jnp.ones((m, d)), device), jax.device_put(jnp.ones((8, d)), device)
        ys, yt = jnp.ones((m, 2)), jnp.ones((8, 2))
        fn = jax.jit(lambda a, b: gram_norm_terms(spec.gram_fn, a, ys, b, yt, 1e-6).sq)
        hlo = fn.lower(xs, t).compile().as_text()
    return [line for line in hlo.splitlines() if " reduce(" in line]


def test_gram_quadratic_term_is_summed_by_rows_after_compilation():
    """`gram_rounding_terms` charges ``||S_i X||^2`` a chain of ``3m + d``: that holds only if the
    compiled program sums each row of the ``(m, m)`` products apart from the sum of rows. Without the
    optimisation barrier XLA merges the two into one reduction over all ``m^2`` entries (a chain of
    ``m^2``); this reads the compiled HLO: XLA:CPU's on every machine, and the default backend's
    too where that is not the CPU. The patterns are written from CPU programs; a GPU program that
    fails them has not been shown wrong, but the bound is unverified there until someone reads it
    (`benchmarks/results/gpu-h200-tests.md`)."""
    import re

    m, d = 12, 40
    cpu = jax.devices("cpu")[0]
    devices = [cpu] + ([jax.devices()[0]] if jax.default_backend() != "cpu" else [])
    for device in devices:
        reduces = _gram_sq_reduces(m, d, device)
        assert any(
            re.search(rf"f32\[\d+,{m}\]\S* reduce\(.*dimensions=\{{2\}}", r) for r in reduces
        ), device
        assert not any("dimensions={1,2}" in r for r in reduces), device
    # the same pair of sums without the barrier is merged on CPU (why the barrier is there)
    merged = jax.jit(lambda a: jnp.sum(jnp.sum(a * a, axis=2), axis=1))
    with jax.default_device(cpu):
        merged_hlo = merged.lower(jax.device_put(jnp.ones((8, m, m)), cpu)).compile().as_text()
    assert "dimensions={1,2}" in merged_hlo


def test_large_per_example_norms_are_summed_in_blocks_after_compilation():
    """`per_example_norms` for 78,400 entries per example (a (100, 784) support gradient) must not
    compile to one reduction (a float32 chain of 78,400, whose worst case exceeds `NORM_MARGIN`):
    block sums, then their sum. Small leaves keep one reduction. Reads the compiled HLO."""
    import re

    def reduces(shape):
        hlo = jax.jit(per_example_norms).lower({"w": jnp.ones(shape)}).compile().as_text()
        return [line for line in hlo.splitlines() if " reduce(" in line]

    big = reduces((8, 100, 784))
    assert not any("dimensions={1,2}" in r for r in big)
    assert any(re.search(r"f32\[8,\d+\]\S* reduce\(.*dimensions=\{2\}", r) for r in big)
    assert len(reduces((8, 40, 50))) == 1  # 2,000 entries: one reduction
    g = np.random.default_rng(3).normal(size=(4, 100, 784)).astype(np.float32)
    exact = np.sqrt(np.sum(g.astype(np.float64) ** 2, axis=(1, 2)))
    np.testing.assert_allclose(
        np.asarray(per_example_norms({"w": jnp.asarray(g)})), exact, rtol=1e-6
    )


def test_long_chains_raise_or_are_split_never_silently_drop_every_example():
    """A chain too long for ``gamma_n`` (``n u >= 1/2``) must not become ``inf * 0 = NaN`` norms that
    drop every example without a word: `rounding_error` raises, per-example norms beyond what two
    levels cover are summed in more levels, and the feature form splits its ``m f``-term ``||S||_F^2`` so
    a large e-NTK support (m 200, f 42,000: 8.4M squares) still clips and sums every example."""
    from privkernels.dp_kip.clipped_sums import feature_clipped_sum

    with pytest.raises(ValueError, match="too long"):
        rounding_error(jnp.ones(2), 100, ((jnp.ones(2), 1 << 23),), jnp.float32)
    # 2^26 entries per example (a paper-profile cnn_2l leaf has ~27M): too long for two levels,
    # summed 64 at a time in five levels instead (compiled, never allocated)
    huge = {"w": jax.ShapeDtypeStruct((1, 1 << 26), jnp.float32)}
    hlo = jax.jit(per_example_norms).lower(huge).compile().as_text()
    assert sum(" reduce(" in line for line in hlo.splitlines()) >= 4
    g = np.random.default_rng(1).normal(size=(2, 300_000)).astype(np.float32)
    from privkernels._numerics import _sum_by_64

    np.testing.assert_allclose(
        np.asarray(_sum_by_64(jnp.asarray(g * g))),
        np.sum(g.astype(np.float64) ** 2, axis=1),
        rtol=1e-6,
    )
    rng = np.random.default_rng(5)
    m, f, b = 200, 42_000, 4
    s = jnp.asarray(rng.normal(size=(m, f)), jnp.float32)
    phi = jnp.asarray(rng.normal(size=(b, f)), jnp.float32)
    ys = jnp.asarray(np.eye(2)[np.arange(m) % 2], jnp.float32)
    yt = jnp.asarray(np.eye(2)[np.arange(b) % 2], jnp.float32)
    total, _, loss_sum, n_clipped = jax.jit(feature_clipped_sum)(
        s, ys, phi, yt, jnp.ones(b), 1e-3, 1e-3
    )
    assert float(jnp.linalg.norm(total)) > 0 and float(loss_sum) > 0 and int(n_clipped) == b
    assert float(jnp.linalg.norm(total)) <= b * 1e-3 * (1 + 1e-4)
