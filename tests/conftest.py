"""Shared pytest fixtures."""

from __future__ import annotations

import gc
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
