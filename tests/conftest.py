"""Shared pytest fixtures."""

from __future__ import annotations

import gc
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import jax
import pytest

# Same key, same result, on GPUs too: XLA's GPU backend may pick non-deterministic
# algorithms (cuDNN convolution gradients, atomic scatter-adds) whose float sums depend
# on thread timing; the suite's bit-equality tests need the deterministic ones. Set
# before any backend starts; the flag is parsed and ignored on CPU. A value the user
# already gave (say ``=false``, to test the fast algorithms) is left as it is.
_DETERMINISTIC = "--xla_gpu_deterministic_ops"
if _DETERMINISTIC not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DETERMINISTIC}=true".strip()

# Compile fast on the CPU: most of the suite's time is XLA:CPU compiling small programs
# that then run for milliseconds, and LLVM's optimisation passes are most of that
# compilation (level 0 measured 30-45% less CPU time, e.g. tests/test_dp_kip.py 133 ->
# 93 s). HLO-level passes (fusion, algebraic rewrites) still run; the machine code is
# less optimised and may round differently in the last bits (bit-equality tests compare
# runs within one process, one level). Matrix products call Eigen at either level. Only
# where no accelerator plugin is
# installed (or JAX_PLATFORMS=cpu): the same level would apply to the GPU's kernels.
# ``PRIVKERNELS_TEST_XLA_OPT=1`` (or a level the user already gave) keeps XLA's default.
_OPT_LEVEL = "--xla_backend_optimization_level"
_ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin",
                        "jax_rocm7_plugin", "libtpu")  # fmt: skip


def _cpu_only() -> bool:
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return platforms == "cpu"
    return all(importlib.util.find_spec(name) is None for name in _ACCELERATOR_PLUGINS)


def pytest_configure(config: pytest.Config) -> None:
    """Level 0 for the default run only (``-m 'not slow'``, the addopts): ``-m slow`` and
    any other selection compile at XLA's default level, as users' programs do, and
    ``.ci/run`` runs the privacy tests once more at that level. Runs before any backend
    starts (collection and the tests come after), in each xdist worker too."""
    if (
        (config.option.markexpr or "").strip() == "not slow"
        and not os.environ.get("PRIVKERNELS_TEST_XLA_OPT")
        and _OPT_LEVEL not in os.environ["XLA_FLAGS"]
        and _cpu_only()
    ):
        os.environ["XLA_FLAGS"] = f"{os.environ['XLA_FLAGS']} {_OPT_LEVEL}=0"


#: `slow_node_ids`'s file: the node ids the default run leaves to ``-m slow``.
SLOW_LIST = Path(__file__).parent / "slow_tests.txt"


def slow_node_ids(path: Path = SLOW_LIST) -> list[str]:
    """The node ids listed in ``path`` (each non-comment line: seconds, a space, the id)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.split(" ", 1)[1] for ln in lines if ln.strip() and not ln.startswith("#")]


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `slow` the tests listed in `SLOW_LIST` (measured at 3 s or more in the default run)."""
    listed = set(slow_node_ids())
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The real-data directory from ``PRIVKERNELS_DATA``; skip visibly when absent."""
    value = os.environ.get("PRIVKERNELS_DATA")
    if not value:
        pytest.skip("PRIVKERNELS_DATA is not set: real-data tests skipped")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"PRIVKERNELS_DATA={value} is not a directory: real-data tests skipped")
    return path


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs() -> Iterator[None]:
    """Drop JAX's compiled programs after each test module.

    Every XLA:CPU executable holds about a dozen memory maps for its code. One
    pytest process compiles thousands of programs; kept alive, they reach Linux's
    default ``vm.max_map_count`` (65530) late in the suite, after which LLVM's next
    code allocation fails and the process dies with SIGSEGV inside
    ``backend_compile`` (CI exit 139, in ``tests/test_synth.py``). Clearing the
    caches between modules keeps the count to one module's worth.
    """
    yield
    jax.clear_caches()
    gc.collect()


class StopBeforeFit(BaseException):
    """Raised by the `halt_table_fit` stub: the CLI reached its table fit."""


@pytest.fixture
def halt_table_fit(monkeypatch: pytest.MonkeyPatch) -> type[StopBeforeFit]:
    """``privkernels.cli.fit_table`` replaced by a stub that raises `StopBeforeFit`, so a
    ``synth`` run stops just before its fit (and after every check and warning before it)."""

    def fit(*args: object, **kwargs: object) -> None:
        raise StopBeforeFit

    monkeypatch.setattr("privkernels.cli.fit_table", fit)
    return StopBeforeFit
