"""``mesh=`` on a 4-device CPU mesh equals ``mesh=None`` for all three methods.

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

#: multi-device / multi-process end-to-end runs (subprocesses): CI runs them with -m slow
pytestmark = pytest.mark.slow

N_DEVICES = 4

_WORKER = textwrap.dedent(
    r"""
    import sys

    import jax
    import jax.numpy as jnp
    import numpy as np

    from privkernels import dp_kip, dp_ntk, features, sharding
    from privkernels import dp_ntk_regression as reg

    out = {}
    devs = jax.devices()
    out["n_devices"] = np.int32(len(devs))
    mesh = sharding.example_mesh()
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(37, 6, 6)).astype(np.float32)  # 37 rows: padded to 40 over 4 devices
    y = rng.integers(0, 3, size=37).astype(np.int32)

    # --- shard_rows: padding ---------------------------------------------------
    (xs,), n = sharding.shard_rows(mesh, x)
    out["shard_rows"] = np.asarray([xs.shape[0], n, len(xs.sharding.device_set)])
    out["shard_pad"] = np.asarray(xs)[37:]

    # --- feature core: e-NTK mean embedding --------------------------------------
    mlp = features.fc_2l(16, 12, out_features=3)
    pm = features.init_params(jax.random.key(1), mlp, (6, 6))
    for method in ("structured", "generic"):
        for m, tag in ((None, "single"), (mesh, "mesh")):
            out[f"emb_{tag}_{method}"] = np.asarray(features.entk_mean_embedding(
                mlp.apply, pm, x, y, 3, method=method, chunk_size=3, mesh=m))
    ymat = np.asarray(jax.nn.one_hot(y, 3)) * rng.uniform(0.5, 1.5, size=(37, 1)).astype(np.float32)
    out["emb_single_soft"] = np.asarray(features.entk_mean_embedding(mlp.apply, pm, x, ymat, 3))
    out["emb_mesh_soft"] = np.asarray(features.entk_mean_embedding(mlp.apply, pm, x, ymat, 3, mesh=mesh))
    cnn = features.cnn_2l(4, out_features=3)
    pc = features.init_params(jax.random.key(2), cnn, (6, 6))
    out["emb_single_cnn"] = np.asarray(features.entk_mean_embedding(cnn.apply, pc, x, y, 3))
    out["emb_mesh_cnn"] = np.asarray(features.entk_mean_embedding(cnn.apply, pc, x, y, 3, mesh=mesh))

    # --- DP-NTK: the release (and a whole fit) -----------------------------------
    net = features.fc_1l(16, out_features=3)
    for m, tag in ((None, "single"), (mesh, "mesh")):
        e, _ = dp_ntk.private_embedding(
            jax.random.key(3), x, y, n_classes=3, epsilon=1.0, network=net, mesh=m)
        out[f"ntk_emb_{tag}"] = np.asarray(e)
        r = dp_ntk.fit(jax.random.key(4), x, y, epsilon=1.0, network=net, n_classes=3,
                       iterations=3, batch_size=12, label_mode="released", progress=False, mesh=m)
        out[f"ntk_fit_emb_{tag}"] = np.asarray(r.noisy_embedding)
        out[f"ntk_fit_props_{tag}"] = np.asarray(r.noisy_proportions)
        out[f"ntk_fit_loss_{tag}"] = r.loss_history
        s, _ = dp_ntk.private_embedding(jax.random.key(3), x, y, n_classes=3, epsilon=1.0,
                                        network=net, mesh=m, neighbouring="add-remove")
        out[f"ntk_sums_{tag}"] = np.asarray(s)
        pn = features.init_params(jax.random.key(7), net, (6, 6))
        for total in (True, False):
            out[f"ntk_exact_{'sums' if total else 'mean'}_{tag}"] = np.asarray(
                features.entk_mean_embedding(net.apply, pn, x, y, 3, mesh=m, total=total))

    # --- DP-KIP: Gram form, feature space, explicit adjoint (corrupted pixels) -------
    xk = rng.normal(size=(41, 8, 8)).astype(np.float32)
    yk = (np.arange(41) % 3).astype(np.int32)
    runs = {
        "gram": dict(kernel="fc_ntk"),
        "feature": dict(kernel="scatternet", clip_space="feature"),
        "adjoint": dict(kernel="fc_ntk", corrupt_fraction=0.2),
    }
    for name, kw in runs.items():
        for m, tag in ((None, "single"), (mesh, "mesh")):
            r = dp_kip.fit(jax.random.key(5), xk, yk, support_per_class=2, epsilon=1.0,
                           batch_size=10, epochs=2, n_classes=3, progress=False, mesh=m, **kw)
            out[f"kip_{name}_{tag}"] = r.support_x
            out[f"kip_{name}_{tag}_eps"] = np.float64(r.report.epsilon)

    # --- DP NTK regression: kernel rows over the mesh -------------------------------
    xr = x.reshape(37, -1)
    xr = xr / np.linalg.norm(xr, axis=1, keepdims=True)
    for m, tag in ((None, "single"), (mesh, "mesh")):
        model = reg.fit(jax.random.key(6), xr, y, epsilon=0.8, kernel_shift=1.0, n_classes=3, mesh=m,
                    neighbouring="beta-close")
        out[f"reg_alpha_{tag}"] = np.asarray(model.alpha)
        out[f"reg_xt_{tag}"] = np.asarray(model.x_tilde)

    np.savez(sys.argv[1], **out)
    """
)


@pytest.fixture(scope="module")
def res(tmp_path_factory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("mesh")
    out = tmp / "out.npz"
    script = tmp / "worker.py"
    script.write_text(_WORKER)
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={N_DEVICES}",
        "JAX_PLATFORMS": "cpu",
    }
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(f"mesh worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return dict(np.load(out))


def _close(res, name, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(res[f"{name}_mesh"], res[f"{name}_single"], rtol=rtol, atol=atol)


def test_worker_saw_four_devices(res):
    assert int(res["n_devices"]) == N_DEVICES


def test_shard_rows_pads_to_a_multiple_of_the_devices(res):
    rows, n, ndev = res["shard_rows"]
    assert (rows, n, ndev) == (40, 37, N_DEVICES)
    assert np.all(res["shard_pad"] == 0)


@pytest.mark.parametrize("method", ["structured", "generic"])
def test_mesh_embedding_matches_single_device(res, method):
    np.testing.assert_allclose(
        res[f"emb_mesh_{method}"], res[f"emb_single_{method}"], rtol=1e-5, atol=1e-7
    )


def test_mesh_embedding_soft_labels_and_cnn(res):
    np.testing.assert_allclose(res["emb_mesh_soft"], res["emb_single_soft"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(res["emb_mesh_cnn"], res["emb_single_cnn"], rtol=1e-5, atol=1e-7)


def test_dp_ntk_release_and_fit_match(res):
    for name in ("ntk_emb", "ntk_fit_emb", "ntk_fit_props", "ntk_sums", "ntk_exact_sums"):
        _close(res, name)
    # add-remove: unit weights on the mesh too (the sums are n times the means)
    for tag in ("single", "mesh"):
        np.testing.assert_allclose(
            res[f"ntk_exact_sums_{tag}"], 37 * res[f"ntk_exact_mean_{tag}"], rtol=1e-5, atol=1e-6
        )
    _close(res, "ntk_fit_loss", rtol=1e-4)


@pytest.mark.parametrize("path", ["gram", "feature", "adjoint"])
def test_dp_kip_support_matches(res, path):
    _close(res, f"kip_{path}", atol=1e-5)
    assert float(res[f"kip_{path}_mesh_eps"]) == float(res[f"kip_{path}_single_eps"])


def test_regression_matches(res):
    _close(res, "reg_alpha")
    np.testing.assert_array_equal(res["reg_xt_mesh"], res["reg_xt_single"])
