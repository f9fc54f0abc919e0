"""Compile once: no recompilation between seeds, budgets or epochs with the same shapes;
the persistent compilation cache is opt-in and writes entries to the given directory."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels import dp_kip, dp_ntk, features
from privkernels.dp_kip import train as kip_train
from privkernels.dp_ntk import train as ntk_train


def _data():
    rng = np.random.default_rng(0)
    return rng.uniform(size=(60, 4)).astype(np.float32), (np.arange(60) % 2).astype(np.int32)


def test_dp_kip_compiles_once_across_seeds_budgets_and_epochs():
    x, y = _data()
    kw = dict(kernel="fc_ntk", support_per_class=2, batch_size=12, epochs=3, n_classes=2,
              progress=False)  # fmt: skip
    dp_kip.fit(jax.random.key(0), x, y, epsilon=1.0, **kw)
    step, scan = next(reversed(kip_train._COMPILED.values()))
    size = scan._cache_size()
    assert size >= 1
    dp_kip.fit(jax.random.key(1), x, y, epsilon=3.0, **kw)  # another seed and budget
    assert next(reversed(kip_train._COMPILED.values()))[1] is scan
    assert scan._cache_size() == size


def test_dp_ntk_generator_training_compiles_once():
    x, y = _data()
    kw = dict(network=features.fc_1l(8, out_features=2), iterations=4, batch_size=8,
              n_classes=2, progress=False, checkpoint_every=2)  # fmt: skip
    dp_ntk.fit(jax.random.key(0), x, y, epsilon=1.0, **kw)
    size = ntk_train._scan._cache_size()
    dp_ntk.fit(jax.random.key(5), x, y, epsilon=2.0, **kw)
    assert ntk_train._scan._cache_size() == size


def test_persistent_cache_is_opt_in_and_used(tmp_path):
    script = textwrap.dedent(
        """
        import sys
        import jax, jax.numpy as jnp
        import privkernels
        privkernels.enable_compilation_cache(sys.argv[1], min_compile_time_secs=0.0)
        print(float(jax.jit(lambda a: jnp.sin(a) @ a.T)(jnp.ones((64, 64))).sum()))
        """
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cache = tmp_path / "xla-cache"
    subprocess.run([sys.executable, "-c", script, str(cache)], env=env, check=True, timeout=300)
    assert any(cache.rglob("*")), "nothing was written to the compilation cache"


def _memory_maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_clearing_caches_returns_the_memory_maps_of_compiled_programs():
    """What the conftest's per-module `jax.clear_caches()` relies on: compiled programs
    hold memory maps (the suite once reached vm.max_map_count and segfaulted), and
    clearing JAX's caches gives them back. That is XLA:CPU's machine code, so the programs
    are compiled for the CPU on every machine (a GPU program's code lives on the device)."""
    gc.collect()
    cpu = jax.devices("cpu")[0]

    @jax.jit
    def f(x):
        return jnp.sin(x) * 2.0 + jnp.sum(x)

    before = _memory_maps()
    for n in range(1, 61):
        out = f(jax.device_put(np.ones(n, np.float32), cpu)).block_until_ready()
        assert out.devices() == {cpu}
    grown = _memory_maps()
    assert grown - before > 120  # 60 executables, a few maps each
    jax.clear_caches()
    gc.collect()
    assert _memory_maps() - before < (grown - before) / 4


@pytest.mark.slow  # one ConvNet compile: 2-6 s on 2 shared cores
def test_train_convnet_and_its_accuracy_compile_once_across_calls(caplog):
    """A second `train_convnet` / `convnet_accuracy` with the same settings and shapes
    compiles nothing (both used to jit a fresh closure per call: 3.5 s and 1.7 s of
    recompiling per call at width 8)."""
    from privkernels import evaluation

    rng = np.random.default_rng(0)
    x, y = rng.uniform(size=(6, 4, 4)).astype(np.float32), np.arange(6) % 2
    kw = dict(steps=2, width=2, depth=1, batch_size=4)

    def run(seed: int) -> float:
        module, params = evaluation.train_convnet(jax.random.key(seed), x, y, 2, **kw)
        return evaluation.convnet_accuracy(module, params, x, y)

    run(0)
    caplog.clear()
    with jax.log_compiles(True), caplog.at_level("WARNING"):
        run(1)  # another key: the same programs
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled, compiled
