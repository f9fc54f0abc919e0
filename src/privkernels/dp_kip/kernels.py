"""DP-KIP kernels: ScatterNet features, the infinite FC-NTK, the e-NTK of a LeNet.

Vinaroz & Park, Sec. 3.3 and App. C. A `KernelSpec` is either a linear
kernel of a fixed feature map (``kind="features"``: ScatterNet, e-NTK; the KRR
solve can then run in feature space and clipping can happen there) or a
kernel function (``kind="kernel"``: FC-NTK, with its Gram form enabling exact
input-space clipping without per-example gradients). Every kernel is a fixed,
data-independent function; e-NTK network weights come from a key.

The FC-NTK option ``sphere_lift`` (not in the paper; the `privkernels.sklearn.
DPKIPClassifier` default) evaluates the kernel on `sphere_lift` of each row, so that the
kernel, and the KRR scores, no longer grow with a row's norm.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from privkernels import features
from privkernels._validation import check_int, check_nonnegative, check_positive
from privkernels.features.scatternet import check_group_norm, num_scattering_maps

__all__ = ["KERNELS", "KernelSpec", "make_kernel", "sphere_lift", "sphere_lift_gram"]

KERNELS = ("scatternet", "fc_ntk", "entk")

_FC_NTK_DEFAULTS: dict[str, Any] = {
    "depth": 1,
    "W_std": math.sqrt(2.0),
    "b_std": 0.1,
    "sphere_lift": False,
}
_SCATTER_DEFAULTS: dict[str, Any] = {"J": 2, "L": 8, "group_norm": "auto"}
_ENTK_DEFAULTS: dict[str, Any] = {"normalize": True}


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A kernel for KIP.

    Attributes:
      name: one of `KERNELS`.
      kind: ``"features"`` (linear kernel of ``feature_fn``) or ``"kernel"``.
      options: the resolved options (JSON-friendly).
      feature_fn: ``(b, *input_shape) -> (b, f)`` (``kind == "features"``).
      kernel_fn: ``(n1, *s), (n2, *s), same=None -> (n1, n2)`` (``kind == "kernel"``),
        symmetric, ``kernel_fn(a, b) == kernel_fn(b, a).T``. ``same``: row i of a and
        of b are one point (None: only when b is a), so the diagonal is a
        self-comparison (the FC-NTK computes it at c = 1 exactly).
      params: data-independent parameters (e-NTK network weights) or None.
      gram_fn: for dot-product kernels, ``(gram (n1, n2), sq1 (n1,), sq2 (n2,)),
        same=False -> (n1, n2)``, the kernel as a function of the flattened inputs'
        inner products and squared norms (``same``: a self-Gram); enables the exact
        Gram-form input-space clipping (`_gram_clipped_sum`). None otherwise.
    """

    name: str
    kind: str
    options: dict[str, Any]
    feature_fn: Callable[[jax.Array], jax.Array] | None = None
    kernel_fn: Callable[..., jax.Array] | None = None
    params: Any = None
    gram_fn: Callable[..., jax.Array] | None = None


def make_kernel(
    name: str,
    input_shape: tuple[int, ...],
    n_classes: int,
    *,
    options: Mapping[str, Any] | None = None,
    key: jax.Array | None = None,
    params: Any = None,
) -> KernelSpec:
    """Build the kernel ``name`` for inputs of shape ``input_shape``.

    ``key`` (only for ``"entk"``) draws the LeNet's data-independent parameters
    unless ``params`` are given.
    """
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
    if options is not None and not isinstance(options, Mapping):
        raise ValueError("kernel_options must be a dict of the kernel's options or None")
    opts = dict(options or {})
    if name == "fc_ntk":
        return _fc_ntk_kernel(opts, input_shape)
    if name == "scatternet":
        return _scatternet_kernel(opts, input_shape)
    return _entk_kernel(opts, input_shape, n_classes, key, params)


def _int_option(value: Any, name: str) -> int:
    """An integer kernel option ``>= 1`` (a float with an integer value is taken as one)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int(value, name, minimum=1)


def _fc_ntk_kernel(opts: dict[str, Any], input_shape: tuple[int, ...]) -> KernelSpec:
    """The infinite-width FC-NTK (closed form on flattened inputs, and from their Gram),
    on the rows themselves or, with ``sphere_lift``, on `sphere_lift` of them."""
    full = {**_FC_NTK_DEFAULTS, **opts}
    unknown = set(full) - set(_FC_NTK_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown kernel_options for fc_ntk: {sorted(unknown)}")
    _int_option(full["depth"], "kernel_options['depth']")  # values checked before any
    check_positive(full["W_std"], "kernel_options['W_std']")  # release (a DP-NTK start)
    check_nonnegative(full["b_std"], "kernel_options['b_std']")
    if not isinstance(full["sphere_lift"], bool):
        raise ValueError("kernel_options['sphere_lift'] must be True or False")
    lift = bool(full["sphere_lift"])
    dim = math.prod(input_shape)
    net = {
        "depth": int(full["depth"]),
        "W_std": float(full["W_std"]),
        "b_std": float(full["b_std"]),
    }

    def kfn(a: jax.Array, b: jax.Array | None, same: bool | None = None) -> jax.Array:
        a2 = a.reshape(a.shape[0], -1)
        b2 = None if b is None or b is a else b.reshape(b.shape[0], -1)
        if lift:
            a2, b2 = sphere_lift(a2), None if b2 is None else sphere_lift(b2)
        return features.fc_ntk_kernel(a2, b2, same=same, **net)

    def gfn(gram: jax.Array, sq1: jax.Array, sq2: jax.Array, same: bool = False) -> jax.Array:
        d = dim
        if lift:
            gram, sq1, sq2 = sphere_lift_gram(gram, sq1, sq2, dim)
            d = dim + 1
        return features.fc_ntk_kernel_from_gram(gram, sq1, sq2, same=same, dim=d, **net)

    return KernelSpec("fc_ntk", "kernel", full, kernel_fn=kfn, gram_fn=gfn)


def sphere_lift(x: jax.Array) -> jax.Array:
    """``sqrt(d) [x, sqrt(d)] / sqrt(||x||^2 + d)`` of each row: ``(n, d) -> (n, d + 1)``.

    Every lifted row has norm ``sqrt(d)`` (a typical standardised row's), and its angle to
    the added axis is a monotone function of ``||x||``: the FC-NTK of lifted rows keeps the
    norm as information without growing with it (``benchmarks/results/
    defaults-dp-kip-lift-rule.md``). A fixed map of one row and its public width.
    """
    d = x.shape[1]
    # rows scaled by their largest entry first (at least 1), so that ||x||^2 cannot
    # overflow for any finite row (a row of entries ~1e19 lifts to its true limit)
    s = jnp.maximum(jnp.max(jnp.abs(x), axis=1, keepdims=True), 1.0)
    xs = x / s
    col = math.sqrt(d) / s
    z = jnp.concatenate([xs, col], axis=1)
    return z * (math.sqrt(d) / jnp.sqrt(jnp.sum(xs * xs, axis=1, keepdims=True) + col * col))


def sphere_lift_gram(
    gram: jax.Array, sq1: jax.Array, sq2: jax.Array, dim: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`sphere_lift`'s Gram form: the lifted rows' ``(gram (n1, n2), sq1 (n1,), sq2 (n2,))``
    from the raw ones, ``gram' = d (gram + d) / sqrt((sq1 + d)(sq2 + d))``, ``sq' = d``."""
    d = float(dim)
    scale = jnp.sqrt(sq1 + d)[:, None] * jnp.sqrt(sq2 + d)[None, :]
    lifted = d * (gram + d) / scale
    return lifted, jnp.full_like(sq1, d), jnp.full_like(sq2, d)


def _scatternet_kernel(opts: dict[str, Any], input_shape: tuple[int, ...]) -> KernelSpec:
    """ScatterNet features (kymatio's maps, optional group standardisation), flattened."""
    full = {**_SCATTER_DEFAULTS, **opts}
    unknown = set(full) - {"J", "L", "group_norm"}
    if unknown:
        raise ValueError(f"unknown kernel_options for scatternet: {sorted(unknown)}")
    if len(input_shape) not in (2, 3):
        raise ValueError(
            f"scatternet needs images (h, w) or (h, w, 3), got input shape {input_shape}"
        )
    J = _int_option(full["J"], "kernel_options['J']")  # checked before any release
    L = _int_option(full["L"], "kernel_options['L']")

    if full["group_norm"] == "auto":  # 27 groups of 3 for the default J=2, L=8
        n_maps = num_scattering_maps(J, L)
        full["group_norm"] = 27 if n_maps % 27 == 0 and n_maps >= 54 else None
    group_norm = (
        None if full["group_norm"] is None else check_group_norm(int(full["group_norm"]), J=J, L=L)
    )
    if min(input_shape[:2]) < 2**J:
        raise ValueError(
            f"scatternet with J={J} needs images of side >= {2**J}, got {input_shape}; "
            "pass kernel_options={'J': 1} or pad the images"
        )

    def ffn(xb: jax.Array) -> jax.Array:
        out = features.scatternet_features(xb, J=J, L=L, group_norm=group_norm)
        return out.reshape(out.shape[0], -1)

    return KernelSpec("scatternet", "features", full, feature_fn=ffn)


def _entk_kernel(
    opts: dict[str, Any],
    input_shape: tuple[int, ...],
    n_classes: int,
    key: jax.Array | None,
    params: Any,
) -> KernelSpec:
    """The e-NTK of a LeNet with random (data-independent) parameters."""
    full = {**_ENTK_DEFAULTS, **opts}
    unknown = set(full) - {"normalize"}
    if unknown:
        raise ValueError(f"unknown kernel_options for entk: {sorted(unknown)}")
    if len(input_shape) not in (2, 3) or min(input_shape[:2]) < 12:
        raise ValueError(
            f"entk (LeNet) needs images (h, w) or (h, w, ch) with sides >= 12, got input shape {input_shape}"
        )
    module = features.lenet(out_features=n_classes)
    if params is None:
        if key is None:
            raise ValueError(
                "make_kernel('entk') needs a key (or params) for the LeNet initialisation"
            )
        params = features.init_params(key, module, tuple(input_shape))
    normalize = bool(full["normalize"])

    def efn(xb: jax.Array) -> jax.Array:
        return features.entk_features(module.apply, params, xb, normalize=normalize)

    return KernelSpec("entk", "features", full, feature_fn=efn, params=params)
