"""Feature core: e-NTK Jacobians, infinite FC-NTK, ScatterNet, quadratic NTK.

Every function is pure, jit/vmap friendly and chunked over examples.
"""

from __future__ import annotations

from privkernels._lazy import lazy_exports

_EXPORTS = {
    # e-NTK features (DP-NTK Sec. 2.3 / 3)
    "entk_features": "entk",
    "entk_mean_embedding": "entk",
    "entk_kernel": "entk",
    "is_dense_mlp": "entk",
    "make_entk_embedding_chunk_fn": "entk",
    # networks whose e-NTK the papers take
    "fc_1l": "networks",
    "fc_2l": "networks",
    "cnn_2l": "networks",
    "lenet": "networks",
    "init_params": "networks",
    # a public marginal code beside an e-NTK network (tabular DP-NTK)
    "MarginalSkip": "marginal",
    "marginal_code": "marginal",
    "marginal_scale": "marginal",
    "reference_rows": "marginal",
    "with_marginals": "marginal",
    # infinite-width FC-NTK (closed form; neural-tangents as optional backend)
    "fc_ntk_kernel": "fc_ntk",
    "fc_ntk_kernel_from_gram": "fc_ntk",
    # ScatterNet (kymatio JAX backend)
    "scatternet_features": "scatternet",
    "scatternet_num_features": "scatternet",
    # quadratic-activation NTK (Gu et al. Def. 3.5)
    "quadratic_ntk_kernel": "quadratic_ntk",
    "quadratic_ntk_features": "quadratic_ntk",
    "random_ntk_weights": "quadratic_ntk",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
