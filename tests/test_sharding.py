"""Sharded (multi-device) e-NTK embeddings, clipped sums and kernel matrices.

The CPU backend exposes several devices only when
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` is set BEFORE jax
initialises, so the computations run in a fresh subprocess (one for the whole
module) that stores every result in an ``.npz``; the tests compare them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

N_DEVICES = 4

_WORKER = textwrap.dedent(
    r"""
    import sys
    from functools import partial

    import jax
    import jax.numpy as jnp
    import numpy as np

    from privkernels import features, privacy
    from privkernels import sharding as sh

    out = {}
    devs = jax.devices()
    out["n_devices"] = np.int32(len(devs))
    mesh4 = sh.example_mesh()
    mesh1 = sh.example_mesh(devs[:1])
    rng = np.random.default_rng(0)

    # --- shard_examples: padding + mask --------------------------------------
    se = sh.shard_examples(np.arange(30, dtype=np.float32).reshape(10, 3), mesh4)
    out["se_shape"] = np.asarray(se.data.shape)
    out["se_mask"] = np.asarray(se.mask)
    out["se_data"] = np.asarray(se.data)
    out["se_ndev"] = np.int32(len(se.data.sharding.device_set))

    # --- e-NTK mean embedding --------------------------------------------------
    x = rng.uniform(size=(37, 6, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=37).astype(np.int32)
    y[:3] = [0, 1, 2]
    mlp = features.fc_2l(16, 12, out_features=2)
    pm = features.init_params(jax.random.key(1), mlp, (6, 6))
    for method in ("structured", "generic"):
        out[f"emb_single_{method}"] = np.asarray(
            features.entk_mean_embedding(mlp.apply, pm, x, y, 3, method=method))
        out[f"emb_shard_{method}"] = np.asarray(
            sh.sharded_entk_mean_embedding(mlp.apply, pm, x, y, 3, mesh=mesh4, method=method, chunk_size=3))
    ymat = np.asarray(jax.nn.one_hot(y, 3)) * rng.uniform(0.5, 1.5, size=(37, 1)).astype(np.float32)
    out["emb_single_soft"] = np.asarray(features.entk_mean_embedding(mlp.apply, pm, x, ymat, 3))
    out["emb_shard_soft"] = np.asarray(sh.sharded_entk_mean_embedding(mlp.apply, pm, x, ymat, 3, mesh=mesh4))
    out["emb_shard1_structured"] = np.asarray(
        sh.sharded_entk_mean_embedding(mlp.apply, pm, x, y, 3, mesh=mesh1, method="structured"))

    cnn = features.cnn_2l(3, 8, out_features=1)
    pc = features.init_params(jax.random.key(2), cnn, (6, 6))
    xc, yc = x[:21], y[:21]
    out["cnn_single"] = np.asarray(features.entk_mean_embedding(cnn.apply, pc, xc, yc, 3))
    out["cnn_shard"] = np.asarray(sh.sharded_entk_mean_embedding(cnn.apply, pc, xc, yc, 3, mesh=mesh4, chunk_size=2))

    # gradient w.r.t. the inputs (DP-NTK generator side), traced labels and hard labels
    r = rng.standard_normal(out["emb_single_structured"].shape).astype(np.float32)

    def loss_single(xx):
        return jnp.sum(features.entk_mean_embedding(mlp.apply, pm, xx, y, 3) * r)

    def loss_shard(xx):
        return jnp.sum(sh.sharded_entk_mean_embedding(mlp.apply, pm, xx, y, 3, mesh=mesh4, chunk_size=4) * r)

    def loss_shard_traced(xx, yy):
        return jnp.sum(sh.sharded_entk_mean_embedding(mlp.apply, pm, xx, yy, 3, mesh=mesh4, chunk_size=4) * r)

    out["grad_single"] = np.asarray(jax.grad(loss_single)(jnp.asarray(x)))
    out["grad_shard"] = np.asarray(jax.jit(jax.grad(loss_shard))(jnp.asarray(x)))
    out["grad_shard_traced"] = np.asarray(jax.jit(jax.grad(loss_shard_traced))(jnp.asarray(x), jnp.asarray(y)))

    # --- per-example clipped sums + noise drawn once --------------------------
    xs = rng.standard_normal((23, 50)).astype(np.float32)
    ys = rng.standard_normal((23, 40)).astype(np.float32)
    params = {"w": jnp.asarray(0.1 * rng.standard_normal((50, 40)), jnp.float32),
              "b": jnp.zeros((40,), jnp.float32)}
    mask = np.ones(23, bool)
    mask[[2, 7, 19]] = False

    def loss_one(p, xi, yi):
        return jnp.sum((xi @ p["w"] + p["b"] - yi) ** 2)

    grad_fn = jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))
    C, sigma = 1.5, 1.0
    key = jax.random.key(7)
    clipped, norms = privacy.clip_per_example(grad_fn(params, xs, ys), C)
    out["norms_min"] = np.float32(np.min(np.asarray(norms)[mask]))
    exact = jax.tree_util.tree_map(lambda g: jnp.sum(g * mask.reshape((-1,) + (1,) * (g.ndim - 1)), 0), clipped)
    single = privacy.noisy_clipped_sum(key, clipped, mask, clip_norm=C, noise_multiplier=sigma)
    s4, nclip4 = sh.sharded_clipped_sum(grad_fn, params, (xs, ys), mask, clip_norm=C, mesh=mesh4, chunk_size=2)
    n4 = sh.sharded_noisy_clipped_sum(key, grad_fn, params, (xs, ys), mask, clip_norm=C,
                                      noise_multiplier=sigma, mesh=mesh4, chunk_size=2)
    n1 = sh.sharded_noisy_clipped_sum(key, grad_fn, params, (xs, ys), mask, clip_norm=C,
                                      noise_multiplier=sigma, mesh=mesh1)
    for leaf in ("w", "b"):
        out[f"exact_{leaf}"] = np.asarray(exact[leaf])
        out[f"single_noisy_{leaf}"] = np.asarray(single[leaf])
        out[f"shard_sum_{leaf}"] = np.asarray(s4[leaf])
        out[f"shard4_noisy_{leaf}"] = np.asarray(n4[leaf])
        out[f"shard1_noisy_{leaf}"] = np.asarray(n1[leaf])
    out["nclip4"] = np.int32(nclip4)
    out["nclip_expected"] = np.int32(np.sum(mask & (np.asarray(norms) > C)))

    # --- kernel matrices, rows sharded -----------------------------------------
    a = rng.standard_normal((19, 7)).astype(np.float32)
    b = rng.standard_normal((11, 7)).astype(np.float32)
    kfn = partial(features.fc_ntk_kernel, depth=2)
    out["k_single"] = np.asarray(kfn(a, b))
    kk = sh.sharded_kernel_matrix(kfn, a, b, mesh=mesh4, chunk_size=2)
    out["k_shard"] = np.asarray(kk)
    out["k_ndev"] = np.int32(len(kk.sharding.device_set))
    w = features.random_ntk_weights(jax.random.key(3), 16, 7)
    if w is not None:
        qfn = lambda u, v: features.quadratic_ntk_kernel(u, v, w)
        out["q_single"] = np.asarray(qfn(a, a))
        out["q_shard"] = np.asarray(sh.sharded_kernel_matrix(qfn, a, a, mesh=mesh4))

    np.savez(sys.argv[1], **out)
    """
)


@pytest.fixture(scope="module")
def res(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    path = tmp_path_factory.mktemp("sharding") / "out.npz"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={N_DEVICES}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    if proc.returncode != 0:
        pytest.fail(f"sharding worker failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-5) -> None:
    scale = float(np.max(np.abs(b))) or 1.0
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def test_worker_saw_four_devices(res: dict[str, np.ndarray]) -> None:
    assert int(res["n_devices"]) == N_DEVICES


def test_shard_examples_pads_with_mask(res: dict[str, np.ndarray]) -> None:
    assert tuple(res["se_shape"]) == (12, 3)
    np.testing.assert_array_equal(res["se_mask"], np.arange(12) < 10)
    data = res["se_data"]
    np.testing.assert_array_equal(data[:10], np.arange(30, dtype=np.float32).reshape(10, 3))
    np.testing.assert_array_equal(data[10:], np.repeat(data[9:10], 2, axis=0))  # finite padding
    assert int(res["se_ndev"]) == N_DEVICES


@pytest.mark.parametrize("method", ["structured", "generic"])
def test_sharded_embedding_matches_single_device(res: dict[str, np.ndarray], method: str) -> None:
    _close(res[f"emb_shard_{method}"], res[f"emb_single_{method}"])
    assert np.abs(res[f"emb_single_{method}"]).max() > 0


def test_sharded_embedding_soft_labels_one_device_and_cnn(res: dict[str, np.ndarray]) -> None:
    _close(res["emb_shard_soft"], res["emb_single_soft"])
    _close(res["emb_shard1_structured"], res["emb_single_structured"])
    _close(res["cnn_shard"], res["cnn_single"])
    # the structured and generic single-device paths agree (sanity of the reference)
    _close(res["emb_single_structured"], res["emb_single_generic"], rtol=1e-4)


def test_sharded_embedding_gradient_wrt_inputs(res: dict[str, np.ndarray]) -> None:
    assert np.abs(res["grad_single"]).max() > 0
    _close(res["grad_shard"], res["grad_single"], rtol=1e-4)
    _close(res["grad_shard_traced"], res["grad_single"], rtol=1e-4)


def test_sharded_clipped_sum_is_exact(res: dict[str, np.ndarray]) -> None:
    assert float(res["norms_min"]) > 1.5  # every real example is actually clipped
    for leaf in ("w", "b"):
        _close(res[f"shard_sum_{leaf}"], res[f"exact_{leaf}"])
    assert int(res["nclip4"]) == int(res["nclip_expected"]) == 20


def test_noise_is_drawn_once_with_the_callers_key(res: dict[str, np.ndarray]) -> None:
    std = 1.0 * 1.5  # noise_multiplier * clip_norm
    for leaf in ("w", "b"):
        noise_single = res[f"single_noisy_{leaf}"] - res[f"exact_{leaf}"]
        noise_4 = res[f"shard4_noisy_{leaf}"] - res[f"shard_sum_{leaf}"]
        noise_1 = res[f"shard1_noisy_{leaf}"] - res[f"exact_{leaf}"]
        # the same draw as one device, whatever the device count (up to rounding of sum + noise)
        np.testing.assert_allclose(noise_4, noise_single, rtol=0, atol=1e-4 * std)
        np.testing.assert_allclose(noise_1, noise_single, rtol=0, atol=1e-4 * std)
    # one draw of std sigma*C: 2000 coordinates; D=4 independent draws would give std 2*sigma*C
    noise = (res["shard4_noisy_w"] - res["shard_sum_w"]).ravel()
    assert noise.size == 2000
    assert 0.9 * std < float(np.std(noise)) < 1.1 * std


def test_sharded_kernel_matrix(res: dict[str, np.ndarray]) -> None:
    _close(res["k_shard"], res["k_single"])
    assert res["k_shard"].shape == (19, 11)
    assert int(res["k_ndev"]) == N_DEVICES
    if "q_single" in res:
        _close(res["q_shard"], res["q_single"])


def test_single_device_api_in_process() -> None:
    """In this (1-device) process the wrappers run on a mesh of size 1 and validate inputs."""
    import jax

    from privkernels import features
    from privkernels import sharding as sh

    mesh = sh.example_mesh()
    assert mesh.axis_names == (sh.EXAMPLE_AXIS,)
    mlp = features.fc_1l(8)
    p = features.init_params(jax.random.key(0), mlp, (4,))
    x = np.random.default_rng(0).uniform(size=(9, 4)).astype(np.float32)
    y = np.arange(9) % 2
    got = sh.sharded_entk_mean_embedding(mlp.apply, p, x, y, 2, mesh=mesh)
    _close(np.asarray(got), np.asarray(features.entk_mean_embedding(mlp.apply, p, x, y, 2)))
    with pytest.raises(ValueError, match="y"):
        sh.sharded_entk_mean_embedding(mlp.apply, p, x, np.full(9, 5), 2, mesh=mesh)
    with pytest.raises(ValueError, match="method"):
        sh.sharded_entk_mean_embedding(mlp.apply, p, x, y, 2, mesh=mesh, method="fast")
    with pytest.raises(ValueError, match="NaN"):
        sh.sharded_entk_mean_embedding(
            mlp.apply, p, np.full((9, 4), np.nan, np.float32), y, 2, mesh=mesh
        )
    with pytest.raises(ValueError, match="clip_norm"):
        sh.sharded_clipped_sum(lambda q, a: a, p, x, np.ones(9, bool), clip_norm=0.0, mesh=mesh)
