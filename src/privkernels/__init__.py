"""privkernels: differentially private kernel methods in JAX.

Three methods share one feature core (`privkernels.features`) and one
privacy core (`privkernels.privacy`):

* `privkernels.dp_ntk` -- DP-NTK private data generation (Yang et al.).
* `privkernels.dp_kip` -- DP-KIP private dataset distillation (Vinaroz & Park).
* `privkernels.dp_ntk_regression` -- DP NTK ridge regression (Gu et al.).

Submodules are imported lazily so ``import privkernels`` stays cheap.
"""

from __future__ import annotations

from privkernels._lazy import lazy_exports

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

#: lazy exports: name -> the module under privkernels that defines it (imported at first use)
_EXPORTS = {
    "PrivacyReport": "privacy.report",
    "PrivacyLeakWarning": "privacy.warnings",
    "enable_compilation_cache": "runtime",
    "fresh_key": "privacy.keys",
}

__all__ = [*_SUBMODULES, *_EXPORTS, "__version__"]

# imports at first access, not at module level: keeps ``import privkernels`` cheap
__getattr__, _ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)


def __dir__() -> list[str]:
    return sorted(__all__)
