"""How a fit runs, apart from what it releases: the options every method's ``fit`` shares.

`RunOptions` holds the device mesh, the checkpoint (path and whether to resume), the
progress bar and the chunk size. None of them changes a release's privacy: they decide
where the computation runs, how much memory it takes and what survives an interruption.
Each method's ``fit`` takes them as keywords (its public contract) and builds one
`RunOptions` with `run_options`, validated once, before any data is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from privkernels._validation import check_bool, check_int

__all__ = ["RunOptions", "run_options"]


class RunOptions(NamedTuple):
    """The shared run options of the three ``fit`` functions.

    Attributes:
      mesh: a ``jax.sharding.Mesh`` over the example axis, or None (one device).
      checkpoint_path: where the run is checkpointed, or None.
      resume: continue the checkpoint at ``checkpoint_path``.
      progress: show a progress bar.
      chunk_size: rows per chunk in the method's batched loops (bounds memory), or None
        for the method's default.
    """

    mesh: Any = None
    checkpoint_path: Path | None = None
    resume: bool = False
    progress: bool = True
    chunk_size: int | None = None


def run_options(
    *,
    mesh: Any = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool = True,
    chunk_size: int | None = None,
) -> RunOptions:
    """Validated `RunOptions` (``TypeError``/``ValueError`` before anything is read):
    ``resume`` a bool, ``chunk_size`` a positive int or None. Whether the checkpoint
    exists, or may be written, is each method's check (its messages name its files)."""
    return RunOptions(
        mesh=mesh,
        checkpoint_path=None if checkpoint_path is None else Path(checkpoint_path),
        resume=check_bool(resume, "resume"),
        progress=bool(progress),
        chunk_size=None if chunk_size is None else check_int(chunk_size, "chunk_size", minimum=1),
    )
