"""The precision policy: full float32 wherever a result bounds a sensitivity.

Accelerators may run float32 matrix products at reduced precision by default
(TF32 on NVIDIA GPUs: a 10-bit mantissa). That is a privacy matter: a norm
computed from reduced-precision products can come out below the true norm of
what is added, so a clip to ``C`` or a normalisation to 1 would no longer bound
the sensitivity the accountant assumed; and fragile solves (Cholesky of a
Gram matrix, ridge solves, the Gaussian sampling factorisation) lose accuracy.

Policy (the decorator `full_precision` marks each function; a test
lowers them on CPU and checks every ``dot_general`` carries ``HIGHEST``):

* **full float32 (``HIGHEST``)** -- everything a guarantee depends on or that
  feeds a factorisation: DP-KIP's clipped sums, per-example gradients and KRR
  solves (`privkernels.dp_kip`), the FC-NTK and quadratic-NTK kernel
  matrices, the e-NTK mean embedding of private data (DP-NTK's release), the
  Gaussian sampling mechanism, the regression solves and the regression scores
  (ridge coefficients can be large and of both signs: TF32 loses the scores to
  cancellation).
* **the backend default** -- throughput-bound work that cannot touch a
  guarantee: the ScatterNet and e-NTK feature maps (what is clipped is
  computed from their output, at full precision), DP-NTK generator training
  (post-processing of the release), other predictions and evaluation.

On CPU both are full float32 (CPU products have no reduced mode), so the
policy changes no CPU result.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax

__all__ = ["HIGHEST", "full_precision", "matmul_precision"]

F = TypeVar("F", bound=Callable[..., Any])

#: The precision of every sensitive product.
HIGHEST = "highest"


def full_precision(fn: F) -> F:
    """Run ``fn`` (and everything it traces) with ``precision=HIGHEST`` matmuls."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jax.default_matmul_precision(HIGHEST):
            return fn(*args, **kwargs)

    wrapper.__full_precision__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def matmul_precision(name: str | None) -> Any:
    """A context manager for an explicit precision name (``None``: the backend default)."""
    if name is None or name == "default":
        return contextlib.nullcontext()
    return jax.default_matmul_precision(name)
