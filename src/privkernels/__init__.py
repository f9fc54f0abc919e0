"""privkernels: differentially private kernel methods in JAX.

Three methods share one feature core (`privkernels.features`) and one
privacy core (`privkernels.privacy`):

* `privkernels.dp_ntk` -- DP-NTK private data generation (Yang et al.).
* `privkernels.dp_kip` -- DP-KIP private dataset distillation (Vinaroz & Park).
* `privkernels.dp_ntk_regression` -- DP NTK ridge regression (Gu et al.).

Submodules are imported lazily so ``import privkernels`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "audit",
    "checkpoint",
    "data",
    "dp_kip",
    "dp_ntk",
    "dp_ntk_regression",
    "evaluation",
    "features",
    "generators",
    "linalg",
    "precision",
    "privacy",
    "runtime",
    "sharding",
    "tuning",
)

__all__ = [
    *_SUBMODULES,
    "PrivacyReport",
    "PrivacyLeakWarning",
    "enable_compilation_cache",
    "fresh_key",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # imports at first access, not at module level: keeps ``import privkernels`` cheap
    if name in _SUBMODULES:
        return importlib.import_module(f"privkernels.{name}")
    if name == "PrivacyReport":
        from privkernels.privacy.report import PrivacyReport  # lazy: loads jax (seconds)

        return PrivacyReport
    if name == "enable_compilation_cache":
        from privkernels.runtime import enable_compilation_cache  # lazy: loads jax

        return enable_compilation_cache
    if name == "fresh_key":
        from privkernels.privacy.keys import fresh_key  # lazy: loads jax

        return fresh_key
    if name == "PrivacyLeakWarning":
        from privkernels.privacy.warnings import PrivacyLeakWarning  # lazy: no submodule at import

        return PrivacyLeakWarning
    raise AttributeError(f"module 'privkernels' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
