"""Two processes x two CPU devices: the same releases as one process.

Each worker joins ``jax.distributed`` on 127.0.0.1 (gloo CPU collectives),
builds a 4-device example mesh, and turns ONLY its own half of the rows into
global arrays with ``jax.make_array_from_process_local_data`` (labels too).
It then releases the DP-NTK embedding and runs DP-KIP over the mesh. The test
compares with the same calls in this process, on one device, without a mesh:
same key, same release, up to float summation order.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from privkernels import dp_kip, dp_ntk, features

#: multi-device / multi-process end-to-end runs (subprocesses): CI runs them with -m slow
pytestmark = pytest.mark.slow

N, SHAPE, C = 104, (6, 6), 3

WORKER = textwrap.dedent(
    r"""
    import sys

    import numpy as np

    pid, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    n, h, w, c = (int(a) for a in sys.argv[4:8])
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from privkernels import dp_kip, dp_ntk, features, sharding

    assert jax.process_count() == 2 and len(jax.devices()) == 4
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, h, w)).astype(np.float32)
    y = (np.arange(n) % c).astype(np.int32)
    mine = slice(pid * n // 2, (pid + 1) * n // 2)  # this host's rows only
    mesh = sharding.example_mesh()
    rows = NamedSharding(mesh, P(sharding.EXAMPLE_AXIS))
    gx = jax.make_array_from_process_local_data(rows, x[mine])
    gy = jax.make_array_from_process_local_data(rows, y[mine])
    assert gx.shape[0] == n and not gx.is_fully_addressable
    net = features.fc_1l(16, out_features=c)
    emb, rep = dp_ntk.private_embedding(
        jax.random.key(0), gx, gy, n_classes=c, epsilon=1.0, network=net, mesh=mesh
    )
    res = dp_kip.fit(
        jax.random.key(1), gx, gy, kernel="fc_ntk", support_per_class=2, epsilon=1.0,
        batch_size=20, epochs=2, n_classes=c, progress=False, mesh=mesh,
    )
    np.savez(
        out,
        emb=np.asarray(emb),
        emb_eps=rep.epsilon,
        support=res.support_x,
        kip_eps=res.report.epsilon,
        steps=res.steps_done,
    )
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def workers(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("multiprocess")
    script = tmp / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(i),
                str(port),
                str(tmp / f"out{i}.npz"),
                *(str(v) for v in (N, *SHAPE, C)),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("multi-process workers timed out")
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-4000:]
    return [dict(np.load(tmp / f"out{i}.npz")) for i in range(2)]


@pytest.fixture(scope="module")
def single() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, *SHAPE)).astype(np.float32)
    y = (np.arange(N) % C).astype(np.int32)
    net = features.fc_1l(16, out_features=C)
    emb, _ = dp_ntk.private_embedding(
        jax.random.key(0), x, y, n_classes=C, epsilon=1.0, network=net
    )
    res = dp_kip.fit(
        jax.random.key(1), x, y, kernel="fc_ntk", support_per_class=2, epsilon=1.0,
        batch_size=20, epochs=2, n_classes=C, progress=False,
    )  # fmt: skip
    return {"emb": np.asarray(emb), "support": res.support_x, "steps": res.steps_done}


def test_two_processes_release_the_one_process_embedding(workers, single):
    for out in workers:  # both hosts hold the same (replicated) release
        np.testing.assert_allclose(out["emb"], single["emb"], rtol=1e-5, atol=1e-6)
        assert float(out["emb_eps"]) == pytest.approx(1.0)


def test_two_processes_release_the_one_process_dp_kip_support(workers, single):
    for out in workers:
        assert int(out["steps"]) == single["steps"]
        np.testing.assert_allclose(out["support"], single["support"], rtol=1e-5, atol=1e-5)
        assert float(out["kip_eps"]) == pytest.approx(1.0, rel=1e-3)
