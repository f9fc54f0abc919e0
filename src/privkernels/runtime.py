"""Runtime settings a user may opt into: the persistent compilation cache.

JAX compiles every jitted program on first use (the e-NTK embedding of MNIST
takes ~10 s to compile on an H100 and 0.3 s to run). privkernels already
reuses compiled programs within a process (equal settings share one
compilation: epochs, seeds and budgets never recompile). Across processes,
`enable_compilation_cache` stores compiled programs on disk, keyed by
the program and the JAX version, so a second run of the same table starts
warm. No data value is stored: compiled programs depend on shapes and
public settings only (data arrays are arguments, never constants). Which
programs were compiled is stored, though: the cache's entries after a
`privkernels.sklearn.PrivateSearchCV` show which candidates its hidden runs
tried, and so bound their number from below. Do not publish or share a cache
directory a private search wrote to (`docs/privacy.md`, "The process that ran
a search").
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

__all__ = ["enable_compilation_cache"]


def enable_compilation_cache(
    directory: str | os.PathLike[str], *, min_compile_time_secs: float = 0.5
) -> Path:
    """Store compiled XLA programs under ``directory`` (created) and reuse them.

    The entries show which programs ran (after a private search: which candidates
    its hidden runs tried); keep the directory as private as the process.

    Args:
      directory: a local directory for the cache.
      min_compile_time_secs: only programs that took at least this long to
        compile are stored (small ones are cheaper to recompile than to read).

    Returns:
      The cache directory.
    """
    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
