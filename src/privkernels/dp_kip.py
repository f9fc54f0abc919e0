"""DP-KIP: differentially private kernel inducing points (Vinaroz & Park).

Dataset distillation by kernel ridge regression (KRR): a small *support* set
``(X_s, Y_s)`` with ``m = support_per_class * n_classes`` points is learned so
that KRR trained on it predicts the labels of the large *target* (private)
dataset well. The KRR loss of one target example (paper eq. 3 / 6) is::

    loss_i(X_s) = || y_i - K(x_i, X_s) (K_ss + lambda I)^{-1} Y_s ||^2,
    lambda      = reg * tr(K_ss) / m                  (paper Sec. 3.2)

DP-KIP (paper Algorithm 1) optimises ``X_s`` with DP-SGD:

1. ``X_s ~ N(0, I)`` -- never initialised from real examples; labels are fixed,
   class-balanced, centred one-hot vectors ``onehot - 1/c`` (data independent).
2. each step Poisson-samples the target set with rate ``q = batch_size / n``
   (fixed-shape padded sample with a mask, never truncated),
3. computes the per-target-example gradients ``grad_{X_s} loss_i`` (explicit
   adjoints of the KRR solve: ``K_ss``, its Cholesky factor and ``alpha`` are
   computed once per step and only linear VJPs are batched over the targets,
   see ``_adjoint_grads``; for the FC-NTK, a dot-product kernel, the clipped sum
   is computed exactly in Gram form without materialising the per-example
   gradients, see ``_gram_clipped_sum``; ``vmap(grad)`` is kept as the reference),
4. clips each to L2 norm ``clip_norm``, sums them over the sampled batch,
5. adds ``N(0, (sigma * clip_norm)^2 I)`` (fresh noise every step),
6. divides by the *expected* batch size ``q * n`` and takes an optax (Adam) step.

Privacy: the Poisson-subsampled Gaussian mechanism composed over
``steps = epochs * round(1 / q)`` steps, accounted by dp-accounting (PLD by
default) under the **add/remove-one** neighbouring relation. ``sigma`` is
calibrated for exactly that sampling rate and number of steps; the reported
epsilon is ``dpsgd_epsilon(sigma, delta, q, steps_taken)``. The dataset size
``n`` is treated as public (it fixes ``q`` and the normaliser ``q * n``), as is
standard for DP-SGD.

Kernels (from :mod:`privkernels.features`):

* ``"scatternet"`` -- linear kernel of ScatterNet features (J=2, L=8):
  ``K = Phi_t Phi_s^T``. By default (``group_norm="auto"``) each example's 81
  scattering maps are standardised per position in 27 groups of 3, as in the
  authors' MNIST encoder (a fixed per-example map; see
  :func:`privkernels.features.scatternet_features`). It gained about 0.6-0.9
  points of DP-KIP accuracy on MNIST/FMNIST in our runs; ``group_norm=None``
  gives the raw features.
* ``"fc_ntk"`` -- infinite-width FC ReLU NTK (closed form).
* ``"entk"`` -- linear kernel of the L2-normalised e-NTK features of a LeNet
  with data-independent random parameters.

For linear-feature kernels the KRR solve is done in the smaller of the support
size ``m`` and the feature dimension ``f`` (push-through identity
``Phi_s^T (Phi_s Phi_s^T + lambda I_m)^{-1} = (Phi_s^T Phi_s + lambda I_f)^{-1} Phi_s^T``).

Per-example clipping space (``clip_space``):

* ``"input"`` -- the paper's choice: clip the gradient w.r.t. the support
  *pixels*. For ScatterNet/e-NTK this back-propagates a batch of
  ``batch x m`` cotangents through the feature map every step.
* ``"feature"`` -- (linear-feature kernels only) clip the per-example gradient
  w.r.t. the support *features* ``Phi_s = phi(X_s)``, add the Gaussian noise
  there and map the noisy sum to pixels with one vector-Jacobian product of the
  (data-independent) feature map at the current support. The map is
  post-processing of a DP release, so the guarantee is identical; it is much
  cheaper on CPU. Not the paper's algorithm; documented in the report.

Numerics (jitter policy): float32 by default. The ridge matrix
``K_ss + (reg + jitter) * tr(K_ss)/m * I`` is factorised by Cholesky
(``jitter`` defaults to 0, so the objective is exactly the paper's). If that
factor is not finite (``K_ss`` numerically rank deficient), the factorisation is
retried once with an extra ``FALLBACK_JITTER * tr(K_ss)/m`` on the diagonal.
This only depends on the support set (already private), not on private data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_array,
    check_delta,
    check_epsilon,
    check_int,
    check_key,
    check_labels,
    check_nonnegative,
    check_positive,
    infer_n_classes,
)
from privkernels.privacy.accounting import check_relation, check_sampling_rate
from privkernels.privacy.clipping import masked_clip_factors, rounding_bound, safe_norms
from privkernels.privacy.keys import params_digest

__all__ = [
    "KERNELS",
    "FALLBACK_JITTER",
    "DPKIPResult",
    "fit",
    "predict",
    "predict_labels",
    "accuracy",
    "init_support",
    "support_labels",
    "corruption_mask",
    "krr_loss",
    "per_example_grads",
    "make_kernel",
]

KERNELS = ("scatternet", "fc_ntk", "entk")
#: Relative diagonal shift used when the first Cholesky factor is not finite.
FALLBACK_JITTER = 1e-5

_FC_NTK_DEFAULTS = {"depth": 1, "W_std": math.sqrt(2.0), "b_std": 0.1}
_SCATTER_DEFAULTS: dict[str, Any] = {"J": 2, "L": 8, "group_norm": "auto"}
_ENTK_DEFAULTS: dict[str, Any] = {"normalize": True}


# --------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A kernel for KIP.

    Attributes:
      name: one of :data:`KERNELS`.
      kind: ``"features"`` (linear kernel of ``feature_fn``) or ``"kernel"``.
      options: the resolved options (JSON-friendly).
      feature_fn: ``(b, *input_shape) -> (b, f)`` (``kind == "features"``).
      kernel_fn: ``(n1, *s), (n2, *s) -> (n1, n2)`` (``kind == "kernel"``); must be
        symmetric, ``kernel_fn(a, b) == kernel_fn(b, a).T`` (used by the adjoint gradients).
      params: data-independent parameters (e-NTK network weights) or None.
      gram_fn: for dot-product kernels, ``(gram (n1, n2), sq1 (n1,), sq2 (n2,)) ->
        (n1, n2)``, the kernel as a function of the flattened inputs' inner
        products and squared norms; enables the exact Gram-form input-space
        clipping (:func:`_gram_clipped_sum`). None otherwise.
    """

    name: str
    kind: str
    options: dict[str, Any]
    feature_fn: Callable[[jax.Array], jax.Array] | None = None
    kernel_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    params: Any = None
    gram_fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array] | None = None


def make_kernel(
    name: str,
    input_shape: tuple[int, ...],
    n_classes: int,
    *,
    options: Mapping[str, Any] | None = None,
    key: Any = None,
    params: Any = None,
) -> KernelSpec:
    """Build the kernel ``name`` for inputs of shape ``input_shape``.

    ``key`` (only for ``"entk"``) draws the LeNet's data-independent parameters
    unless ``params`` are given.
    """
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
    opts = dict(options or {})
    from privkernels import features

    if name == "fc_ntk":
        full = {**_FC_NTK_DEFAULTS, **opts}
        unknown = set(full) - {"depth", "W_std", "b_std"}
        if unknown:
            raise ValueError(f"unknown kernel_options for fc_ntk: {sorted(unknown)}")

        def kfn(a: jax.Array, b: jax.Array) -> jax.Array:
            return features.fc_ntk_kernel(
                a.reshape(a.shape[0], -1),
                b.reshape(b.shape[0], -1),
                depth=int(full["depth"]),
                W_std=float(full["W_std"]),
                b_std=float(full["b_std"]),
            )

        dim = math.prod(input_shape)

        def gfn(gram: jax.Array, sq1: jax.Array, sq2: jax.Array) -> jax.Array:
            return features.fc_ntk_kernel_from_gram(
                gram,
                sq1,
                sq2,
                dim=dim,
                depth=int(full["depth"]),
                W_std=float(full["W_std"]),
                b_std=float(full["b_std"]),
            )

        return KernelSpec(name, "kernel", full, kernel_fn=kfn, gram_fn=gfn)

    if name == "scatternet":
        full = {**_SCATTER_DEFAULTS, **opts}
        unknown = set(full) - {"J", "L", "group_norm"}
        if unknown:
            raise ValueError(f"unknown kernel_options for scatternet: {sorted(unknown)}")
        if len(input_shape) not in (2, 3):
            raise ValueError(
                f"scatternet needs images (h, w) or (h, w, 3), got input shape {input_shape}"
            )
        J, L = int(full["J"]), int(full["L"])
        from privkernels.features.scatternet import check_group_norm, num_scattering_maps

        if full["group_norm"] == "auto":  # 27 groups of 3 for the default J=2, L=8
            n_maps = num_scattering_maps(J, L)
            full["group_norm"] = 27 if n_maps % 27 == 0 and n_maps >= 54 else None
        group_norm = (
            None
            if full["group_norm"] is None
            else check_group_norm(int(full["group_norm"]), J=J, L=L)
        )
        if min(input_shape[:2]) < 2**J:
            raise ValueError(
                f"scatternet with J={J} needs images of side >= {2**J}, got {input_shape}; "
                "pass kernel_options={'J': 1} or pad the images"
            )

        def ffn(xb: jax.Array) -> jax.Array:
            out = features.scatternet_features(xb, J=J, L=L, group_norm=group_norm)
            return out.reshape(out.shape[0], -1)

        return KernelSpec(name, "features", full, feature_fn=ffn)

    # e-NTK of a LeNet with random (data-independent) parameters.
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

    return KernelSpec(name, "features", full, feature_fn=efn, params=params)


# --------------------------------------------------------------------------------------
# KRR core
# --------------------------------------------------------------------------------------


def _cholesky_with_fallback(mat: jax.Array, scale: jax.Array) -> jax.Array:
    """Lower Cholesky factor; retried once with ``FALLBACK_JITTER * scale`` if not finite."""
    eye = jnp.eye(mat.shape[0], dtype=mat.dtype)
    chol = jnp.linalg.cholesky(mat)
    ok = jnp.all(jnp.isfinite(chol))
    return jax.lax.cond(
        ok,
        lambda: chol,
        lambda: jnp.linalg.cholesky(mat + FALLBACK_JITTER * scale * eye),
    )


def _ridge_factor(k_ss: jax.Array, ridge: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cholesky of ``K_ss + rho * tr(K_ss)/m I`` (paper eq. 3 ridge) with the jitter policy.

    Returns ``(chol (m, m) lower, scale = tr(K_ss)/m, rho)``: ``rho`` is ``ridge``,
    or ``ridge + FALLBACK_JITTER`` when the first factorisation was not finite.
    """
    m = k_ss.shape[0]
    k_ss = 0.5 * (k_ss + k_ss.T)
    scale = jnp.trace(k_ss) / m
    eye = jnp.eye(m, dtype=k_ss.dtype)
    mat = k_ss + ridge * scale * eye
    chol0 = jnp.linalg.cholesky(mat)
    ok = jnp.all(jnp.isfinite(chol0))
    rho = jnp.where(ok, ridge, ridge + FALLBACK_JITTER)
    chol = jax.lax.cond(
        ok, lambda: chol0, lambda: jnp.linalg.cholesky(mat + FALLBACK_JITTER * scale * eye)
    )
    return chol, scale, rho


def _ridge_solve(k_ss: jax.Array, y_s: jax.Array, ridge: float) -> jax.Array:
    """``(K_ss + ridge * tr(K_ss)/m I)^{-1} Y_s`` by Cholesky; ``(m, m), (m, c) -> (m, c)``."""
    chol, _, _ = _ridge_factor(k_ss, ridge)
    return jax.scipy.linalg.cho_solve((chol, True), y_s)


def _krr_adjoint_terms(
    k_ss: jax.Array, k_t: jax.Array, y_s: jax.Array, y_t: jax.Array, ridge: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Per-target KRR quantities shared by the explicit-adjoint gradients.

    ``A = K_ss + rho tr(K_ss)/m I`` (:func:`_ridge_factor`), ``alpha = A^{-1} Y_s``.
    Returns ``(r (b, c), u (b, m), v (b, m), rho)`` with ``r_i = alpha^T k_i - y_i``,
    ``u_i = A^{-1} k_i``, ``v_i = alpha r_i`` (see :func:`_adjoint_grads`).
    """
    chol, _, rho = _ridge_factor(k_ss, ridge)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y_s)  # (m, c)
    r = k_t @ alpha - y_t  # (b, c)
    u = jax.scipy.linalg.cho_solve((chol, True), k_t.T).T  # (b, m), A symmetric
    v = r @ alpha.T  # (b, m)
    return r, u, v, rho


def _feature_clipped_sum(
    s: jax.Array,
    y_s: jax.Array,
    phi: jax.Array,
    y_t: jax.Array,
    mask: jax.Array,
    ridge: float,
    clip_norm: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Masked sum of clipped per-example gradients w.r.t. the support features, in closed form.

    For the linear kernel ``K = S S^T`` (``S`` (m, f)), ``M = K + lambda I``,
    ``lambda = ridge ||S||_F^2 / m``, ``A = M^{-1} Y_s``, and one target
    ``(phi_i, y_i)`` with ``r_i = A^T S phi_i - y_i``, the gradient of
    ``||r_i||^2`` w.r.t. ``S`` is (matrix calculus on eq. 3)::

        g_i = 2 v_i e_i^T - 2 u_i w_i^T - gamma_i S,
        u_i = M^{-1} S phi_i,  v_i = A r_i,  e_i = phi_i - S^T u_i,  w_i = S^T v_i,
        gamma_i = 4 ridge (u_i . v_i) / m,

    so per-example norms and the clipped sum need only ``O(b m f)`` work and
    the ``(b, m, f)`` per-example gradients are never materialised. Equal to
    ``clip_per_example(vmap(grad))`` (tested). The norm used for clipping is
    cancellation-safe (:func:`privkernels.privacy.clipping.safe_norms` with
    ``M_i = 2||v_i|| ||e_i|| + 2||u_i|| ||w_i|| + |gamma_i| ||S||_F``) and rows
    that are padding or not finite are zeroed before any product.

    Returns ``(clipped_sum (m, f), loss_sum, n_clipped)`` over ``mask``.
    """
    m = s.shape[0]
    r, u, v, rho = _krr_adjoint_terms(s @ s.T, phi @ s.T, y_s, y_t, ridge)
    stu = u @ s  # (b, f)
    e = phi - stu
    w = v @ s  # (b, f)
    gamma = 4.0 * rho * jnp.sum(u * v, -1) / m  # (b,)
    s_sq = jnp.sum(s * s)
    uv = jnp.sum(u * v, -1)
    sq = (
        4.0 * jnp.sum(v * v, -1) * jnp.sum(e * e, -1)
        + 4.0 * jnp.sum(u * u, -1) * jnp.sum(w * w, -1)
        + gamma**2 * s_sq
        - 8.0 * uv * jnp.sum(e * w, -1)
        - 4.0 * gamma * jnp.sum(w * e, -1)
        + 4.0 * gamma * jnp.sum(stu * w, -1)
    )
    # Cancellation-safe norms (see _gram_clipped_sum): M_i >= ||g_i|| from sums of squares.
    bound = (
        2.0 * jnp.sqrt(jnp.sum(v * v, -1) * jnp.sum(e * e, -1))
        + 2.0 * jnp.sqrt(jnp.sum(u * u, -1) * jnp.sum(w * w, -1))
        + jnp.abs(gamma) * jnp.sqrt(s_sq)
    )
    norms = safe_norms(sq, bound, rounding_bound(2 * m + s.shape[1], s.dtype))
    factor, keep = masked_clip_factors(norms, mask, clip_norm)
    vc = jnp.where(keep[:, None], v * factor[:, None], 0.0)
    uc = jnp.where(keep[:, None], u * factor[:, None], 0.0)
    e0 = jnp.where(keep[:, None], e, 0.0)
    w0 = jnp.where(keep[:, None], w, 0.0)
    g0 = jnp.where(keep, factor * gamma, 0.0)
    total = 2.0 * vc.T @ e0 - 2.0 * uc.T @ w0 - jnp.sum(g0) * s
    loss_sum = jnp.sum(jnp.where(keep, jnp.sum(r * r, -1), 0.0))
    n_clipped = jnp.sum(keep * (norms > clip_norm))
    return total, loss_sum, n_clipped


# elements of the (chunk, m, m) per-example matrices in _gram_clipped_sum
_GRAM_CHUNK_ELEMS = 1 << 21


class _GramTerms(NamedTuple):
    """Per-target pieces of the Gram-form gradients ``g_i = S_i X_s + b_i x_i^T``."""

    u: jax.Array  # (b, m)
    v: jax.Array  # (b, m)
    dvec: jax.Array  # (b, m): diagonal of S_i
    b_vec: jax.Array  # (b, m)
    e_sym: jax.Array  # (m, m): off-diagonal pattern, S_i = -E (.) (u v^T + v u^T) + diag(dvec)
    r: jax.Array  # (b, c) residuals
    sq: jax.Array  # (b,) ||g_i||^2 from the closed form (may cancel, see _gram_clipped_sum)
    bound: jax.Array  # (b,) ||S_i||_F ||X_s||_F + ||b_i|| ||x_i||  >= ||g_i||


def _gram_norm_terms(
    gram_fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array],
    x_s: jax.Array,
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    ridge: float,
) -> _GramTerms:
    """The per-target terms of :func:`_gram_clipped_sum` (see there for the derivation)."""
    m, d = x_s.shape
    gram = x_s @ x_s.T
    gram = 0.5 * (gram + gram.T)
    diag = jnp.diagonal(gram)
    h = t @ x_s.T  # (b, m)
    sq_t = jnp.sum(t * t, axis=-1)  # (b,)
    # K is element-wise in the inner products, K_jk = F(G_jk, G_jj, G_kk): off the
    # diagonal its Jacobian is three (m, m) arrays (computed once, never batched over
    # targets). On the diagonal (c = 1, the NTK's kink) the three partials are large
    # and cancel, so only their sum is used, taken along t -> F(G + diag(t), ...).
    eye = jnp.eye(m, dtype=gram.dtype)
    off = 1.0 - eye
    ones_m = jnp.ones_like(diag)
    k_ss, d_g = jax.jvp(lambda g: gram_fn(g, diag, diag), (gram,), (off,))
    _, d_1 = jax.jvp(lambda q: gram_fn(gram, q, diag), (diag,), (ones_m,))
    _, d_2 = jax.jvp(lambda q: gram_fn(gram, diag, q), (diag,), (ones_m,))
    _, d_tot = jax.jvp(
        lambda q: jnp.diagonal(gram_fn(gram + q * eye, diag + q, diag + q)),
        (0.0 * diag,),
        (ones_m,),
    )
    d_g, d_1, d_2 = d_g * off, d_1 * off, d_2 * off
    k_t, dt_g = jax.jvp(lambda g: gram_fn(g, sq_t, diag), (h,), (jnp.ones_like(h),))
    _, dt_2 = jax.jvp(lambda q: gram_fn(h, sq_t, q), (diag,), (ones_m,))
    r, u, v, rho = _krr_adjoint_terms(k_ss, k_t, y_s, y_t, ridge)
    gamma = (2.0 * rho / m) * jnp.sum(u * v, axis=-1)  # (b,)
    # dl_i/dK_ss = C_i = -(u v^T + v u^T) - gamma I;  Gamma_i = D_g (.) C_i + diag(w_i)
    w = (
        -(u * (v @ d_1.T) + v * (u @ d_1.T))
        - (v * (u @ d_2) + u * (v @ d_2))
        + d_tot * (-2.0 * u * v - gamma[:, None])
        + 2.0 * v * dt_2
    )
    b_vec = 2.0 * v * dt_g  # dl_i/dh_i
    e_sym = d_g + d_g.T  # zero diagonal
    # S_i = Gamma_i + Gamma_i^T = -E (.) (u_i v_i^T + v_i u_i^T) + diag(2 w_i). The
    # (b, m, m) part runs in a loop over target chunks: XLA cannot fuse the (b, m) and
    # (m, m) producers into it across the loop boundary (fused, they were re-evaluated
    # m or b times per element), and memory stays O(chunk m^2).
    dvec = 2.0 * w
    nb = u.shape[0]
    per = max(1, _GRAM_CHUNK_ELEMS // (m * m + m * min(m, d)))
    n_chunks = -(-nb // per)
    per = -(-nb // n_chunks)
    pad = n_chunks * per - nb

    def chunked(a: jax.Array) -> jax.Array:
        a = jnp.concatenate([a, jnp.zeros((pad, *a.shape[1:]), a.dtype)]) if pad else a
        return a.reshape(n_chunks, per, *a.shape[1:])

    def quad_chunk(args: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array, jax.Array]:
        uc, vc, dc, hc, bc = args
        sym = -e_sym * (uc[:, :, None] * vc[:, None, :] + vc[:, :, None] * uc[:, None, :])
        sym = sym + dc[:, :, None] * eye
        if m <= d:  # ||S X||^2 = sum((S G) * S): one (chunk m, m) GEMM
            sg = (sym.reshape(per * m, m) @ gram).reshape(per, m, m)
            quad = jnp.sum(sg * sym, axis=(1, 2))
        else:
            sx = (sym.reshape(per * m, m) @ x_s).reshape(per, m, d)
            quad = jnp.sum(sx * sx, axis=(1, 2))
        cross = jnp.sum(bc * jnp.einsum("bjk,bk->bj", sym, hc), axis=-1)
        return quad, cross, jnp.sum(sym * sym, axis=(1, 2))

    quad, cross, s_sq = jax.lax.map(quad_chunk, tuple(chunked(a) for a in (u, v, dvec, h, b_vec)))
    quad, cross, s_sq = (a.reshape(-1)[:nb] for a in (quad, cross, s_sq))
    bb = jnp.sum(b_vec * b_vec, -1)
    sq = quad + 2.0 * cross + bb * sq_t
    bound = jnp.sqrt(s_sq) * jnp.sqrt(jnp.sum(diag)) + jnp.sqrt(bb * sq_t)
    return _GramTerms(u, v, dvec, b_vec, e_sym, r, sq, bound)


def _gram_clipped_sum(
    gram_fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array],
    x_s: jax.Array,
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    mask: jax.Array,
    ridge: float,
    clip_norm: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Masked sum of clipped per-example input-space gradients for a dot-product kernel.

    The paper's pixel-space clipping (Algorithm 1, lines 5-7), exact, without the
    ``(b, m, d)`` per-example gradients. When ``K`` depends on the inputs only
    through inner products (the FC-NTK), one target's loss is a function
    ``l_i(G, h_i)`` of ``G = X_s X_s^T`` (``(m, m)``) and ``h_i = X_s x_i``
    (``(m,)``), so its gradient has the form::

        g_i = S_i X_s + b_i x_i^T,   S_i = Gamma_i + Gamma_i^T,
        Gamma_i = dl_i/dG  (m, m),   b_i = dl_i/dh_i  (m,),

    with ``dl_i/dK_ss`` and ``dl_i/dk_i`` from the explicit KRR adjoints of
    :func:`_adjoint_grads`, pulled back through the element-wise map
    ``G -> K``. Then::

        ||g_i||^2 = sum((S_i G) * S_i) + 2 b_i . (S_i h_i) + ||b_i||^2 ||x_i||^2
        sum_i c_i g_i = (sum_i c_i S_i) X_s + (c * b)^T X_t

    costs ``O(b m^2 min(m, d) + m^2 d + b m d)`` instead of ``O(b m^2 d)``
    memory traffic. Equal to ``clip_per_example(vmap(grad))`` (tested).

    Cancellation. When two support points are nearly parallel (the arc-cosine
    kink off the diagonal) or ``K_ss`` is nearly singular, ``S_i`` has huge
    entries whose effects cancel in ``g_i``: the closed-form ``||g_i||^2`` is
    then a small difference of huge terms, can come out far too small, and an
    unclipped example would move the sum by many times ``C``. The clip factor
    therefore uses :func:`privkernels.privacy.clipping.safe_norms`: the
    computed square plus its rounding-error bound, relative to
    ``M_i = ||S_i||_F ||X_s||_F + ||b_i|| ||x_i|| >= ||g_i||`` (sums of squares,
    no cancellation). Examples whose norm is not finite, and padding rows, are
    zeroed with ``where`` before any product (``0 * NaN`` would be NaN).

    Args:
      x_s: ``(m, d)`` flattened support; y_s: ``(m, c)``.
      t: ``(b, d)`` flattened targets; y_t: ``(b, c)``; mask: ``(b,)`` (0 = padding).

    Returns ``(clipped_sum (m, d), loss_sum, n_clipped)`` over ``mask``.
    """
    m, d = x_s.shape
    terms = _gram_norm_terms(gram_fn, x_s, y_s, t, y_t, ridge)
    norms = safe_norms(terms.sq, terms.bound, rounding_bound(2 * m + d, x_s.dtype))
    factor, keep = masked_clip_factors(norms, mask, clip_norm)
    uc = jnp.where(keep[:, None], terms.u * factor[:, None], 0.0)
    vc = jnp.where(keep[:, None], terms.v * factor[:, None], 0.0)
    u0 = jnp.where(keep[:, None], terms.u, 0.0)
    v0 = jnp.where(keep[:, None], terms.v, 0.0)
    dc = jnp.where(keep[:, None], terms.dvec * factor[:, None], 0.0)
    bc = jnp.where(keep[:, None], terms.b_vec * factor[:, None], 0.0)
    tc = jnp.where(keep[:, None], t, 0.0)
    s_sum = -terms.e_sym * (uc.T @ v0 + vc.T @ u0) + jnp.diag(jnp.sum(dc, axis=0))
    total = s_sum @ x_s + bc.T @ tc
    loss_sum = jnp.sum(jnp.where(keep, jnp.sum(terms.r * terms.r, -1), 0.0))
    n_clipped = jnp.sum(keep * (norms > clip_norm))
    return total, loss_sum, n_clipped


def _krr_predict_repr(
    spec_kind: str,
    kernel_fn: Callable | None,
    s_repr: jax.Array,
    y_s: jax.Array,
    t_repr: jax.Array,
    ridge: float,
) -> jax.Array:
    """KRR predictions ``(b, c)`` for targets from the support representation.

    ``kind == "kernel"``: representations are inputs; ``"features"``: rows of
    ``Phi``. ``ridge = reg + jitter`` (relative to ``tr(K_ss)/m``).
    """
    if spec_kind == "kernel":
        assert kernel_fn is not None
        alpha = _ridge_solve(kernel_fn(s_repr, s_repr), y_s, ridge)
        return kernel_fn(t_repr, s_repr) @ alpha
    m, f = s_repr.shape
    if f < m:  # solve in feature space (Woodbury / push-through)
        scale = jnp.sum(s_repr * s_repr) / m
        gram = s_repr.T @ s_repr
        gram = 0.5 * (gram + gram.T) + ridge * scale * jnp.eye(f, dtype=s_repr.dtype)
        chol = _cholesky_with_fallback(gram, scale)
        w = jax.scipy.linalg.cho_solve((chol, True), s_repr.T @ y_s)
        return t_repr @ w
    alpha = _ridge_solve(s_repr @ s_repr.T, y_s, ridge)
    return (t_repr @ s_repr.T) @ alpha


def _support_repr(spec: KernelSpec, x_s: jax.Array) -> jax.Array:
    if spec.kind == "kernel":
        return x_s.reshape(x_s.shape[0], -1)
    assert spec.feature_fn is not None
    return spec.feature_fn(x_s)


def _target_repr(spec: KernelSpec, x: jax.Array) -> jax.Array:
    return _support_repr(spec, x)


def _encode_labels(y: jax.Array, n_classes: int, dtype: Any = jnp.float32) -> jax.Array:
    """Centred one-hot ``onehot(y) - 1/c``: ``(n,) int -> (n, c)``."""
    return jax.nn.one_hot(y, n_classes, dtype=dtype) - 1.0 / n_classes


def krr_loss(
    spec: KernelSpec,
    x_s: jax.Array,
    y_s: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    reg: float = 1e-6,
    jitter: float = 0.0,
) -> jax.Array:
    """Per-example KRR losses ``(b,)`` (paper eq. 3/6).

    Args:
      x_s: ``(m, *input_shape)`` support inputs; y_s: ``(m, c)`` support targets.
      x_t: ``(b, *input_shape)`` targets; y_t: ``(b, c)`` target label vectors.
    """
    pred = _krr_predict_repr(
        spec.kind,
        spec.kernel_fn,
        _support_repr(spec, x_s),
        y_s,
        _target_repr(spec, x_t),
        reg + jitter,
    )
    return jnp.sum((pred - y_t) ** 2, axis=-1)


def _loss_one(
    params: dict[str, jax.Array],
    y_s_fixed: jax.Array,
    t_i: jax.Array,
    y_i: jax.Array,
    *,
    spec: KernelSpec,
    space: str,
    ridge: float,
) -> jax.Array:
    """Loss of one target (representation ``t_i``) as a function of the support params."""
    if space == "feature":
        s_repr = params["phi"]
    else:
        s_repr = _support_repr(spec, params["x"])
    y_s = params.get("y", y_s_fixed)
    pred = _krr_predict_repr(spec.kind, spec.kernel_fn, s_repr, y_s, t_i[None], ridge)[0]
    return jnp.sum((pred - y_i) ** 2)


def _vmap_grads(
    spec: KernelSpec,
    x_s: jax.Array,
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    ridge: float,
) -> tuple[jax.Array, jax.Array]:
    """Reference path: ``vmap`` over targets of ``grad`` of :func:`_loss_one`.

    ``t`` is the target representation (:func:`_target_repr`). Returns the
    per-example gradients ``(b, m, *input_shape)`` and losses ``(b,)``.
    """
    fn = partial(_loss_one, spec=spec, space="input", ridge=ridge)
    g = jax.vmap(jax.grad(fn), in_axes=(None, None, 0, 0))({"x": x_s}, y_s, t, y_t)
    losses = jax.vmap(fn, in_axes=(None, None, 0, 0))({"x": x_s}, y_s, t, y_t)
    return g["x"], losses


def _adjoint_grads(
    spec: KernelSpec,
    x_s: jax.Array,
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    ridge: float,
) -> tuple[jax.Array, jax.Array]:
    """Per-example KRR gradients w.r.t. the support inputs by explicit adjoints.

    Same values as :func:`_vmap_grads` (up to float rounding; tested), much
    cheaper: everything that depends only on the support -- ``K_ss``, the
    Cholesky factor, ``alpha`` -- is computed once, and only *linear* maps
    (vector-Jacobian products of the kernel / feature map) are batched over the
    targets. ``vmap(grad)`` instead batches the Cholesky backward pass.

    Derivation (loss of paper eq. 3 / 6 for one target ``(x_i, y_i)``)::

        L_i = ||r_i||^2,  r_i = alpha^T k_i - y_i          (c,)
        alpha = A^{-1} Y_s,  A = K_ss + rho tr(K_ss)/m I,   k_i = K(X_s, x_i)  (m,)

    With ``u_i = A^{-1} k_i`` and ``v_i = alpha r_i`` (both ``(m,)``)::

        dL_i/dk_i   = 2 alpha r_i = 2 v_i
        dL_i/dalpha = 2 k_i r_i^T          -> dL_i/dA = -A^{-1} (dL_i/dalpha) alpha^T = -2 u_i v_i^T
        dL_i/dK_ss  = dL_i/dA + (rho/m) tr(dL_i/dA) I = -2 u_i v_i^T - (2 rho/m)(u_i . v_i) I

    (symmetrised, since the solve uses ``(K_ss + K_ss^T)/2``). These cotangents
    are pulled back to ``X_s`` by one linearisation of ``a -> K(a, X_s)`` at
    ``a = X_s`` (for the symmetric kernel the pullback through both arguments of
    ``K(X_s, X_s)`` is twice the first-argument one, for a symmetric cotangent), or of
    the feature map, for linear-feature kernels ``K_ss = Phi_s Phi_s^T``,
    ``k_i = Phi_s phi_i``: ``dL_i/dPhi_s = 2 sym(dL_i/dK_ss) Phi_s + 2 v_i phi_i^T``)
    applied to each target's cotangent separately, plus the VJP of the row
    ``X_s -> K(x_i, X_s)`` for the ``k_i`` term. Gradient ``i`` depends only on
    ``(x_i, y_i)`` and the support: no cross-example mixing, so per-example
    clipping bounds each example's contribution exactly as with ``vmap(grad)``.
    ``rho`` includes ``FALLBACK_JITTER`` when the fallback factorisation is
    taken, exactly as in :func:`_cholesky_with_fallback`.

    Args:
      x_s: ``(m, *input_shape)`` support; y_s: ``(m, c)``.
      t: ``(b, ...)`` target representation (:func:`_target_repr`: flat inputs
        for kernel kinds, features ``(b, f)`` for feature kinds); y_t: ``(b, c)``.
      ridge: ``reg + jitter`` (relative to ``tr(K_ss)/m``).

    Returns:
      ``(grads (b, m, *input_shape), losses (b,))``.
    """
    m = x_s.shape[0]
    if spec.kind == "features":
        assert spec.feature_fn is not None
        phi_s, pull_s = jax.vjp(spec.feature_fn, x_s)
        if phi_s.shape[1] < m:
            # KRR is solved in feature space (push-through) when f < m; keep the
            # reference path there so the objective is differentiated as computed.
            return _vmap_grads(spec, x_s, y_s, t, y_t, ridge)
        k_ss = phi_s @ phi_s.T
        k_t = t @ phi_s.T  # (b, m)
    else:
        assert spec.kernel_fn is not None
        kernel_fn = spec.kernel_fn
        # Linearise in the FIRST argument only: for a symmetric kernel
        # (K(a, b) = K(b, a)^T) and a symmetric cotangent C, the pullback of
        # X_s -> K(X_s, X_s) is twice that of a -> K(a, X_s) (halves the work).
        k_ss, pull_s = jax.vjp(lambda a: kernel_fn(a, x_s), x_s)
        k_t = kernel_fn(t, x_s)  # (b, m)
    r, u, v, rho = _krr_adjoint_terms(k_ss, k_t, y_s, y_t, ridge)
    eye = jnp.eye(m, dtype=k_ss.dtype)
    losses = jnp.sum(r * r, axis=-1)
    uv = jnp.sum(u * v, axis=-1)  # (b,)
    # symmetrised dL_i/dK_ss: -(u v^T + v u^T) - (2 rho/m)(u.v) I, per target
    ct_kss = (
        -(u[:, :, None] * v[:, None, :] + v[:, :, None] * u[:, None, :])
        - (2.0 * rho / m) * uv[:, None, None] * eye
    )
    pull = jax.vmap(lambda c: pull_s(c)[0])
    if spec.kind == "features":
        ct_phi = 2.0 * ct_kss @ phi_s + 2.0 * v[:, :, None] * t[:, None, :]  # (b, m, f)
        return pull(ct_phi), losses
    g_kss = pull(2.0 * ct_kss)  # symmetric kernel: d/dX_s = 2 x (first-argument pullback)

    def row_pull(t_i: jax.Array, c_i: jax.Array) -> jax.Array:
        _, pull_row = jax.vjp(lambda s: kernel_fn(t_i[None], s)[0], x_s)
        return pull_row(c_i)[0]

    return g_kss + jax.vmap(row_pull)(t, 2.0 * v), losses


def per_example_grads(
    spec: KernelSpec,
    x_s: jax.Array,
    y_s: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    reg: float = 1e-6,
    jitter: float = 0.0,
    method: Literal["adjoint", "vmap"] = "adjoint",
) -> jax.Array:
    """Per-target-example gradients ``(b, m, *input_shape)`` of the KRR loss w.r.t. ``x_s``.

    ``method="adjoint"`` (default): explicit adjoints of the KRR solve, with the
    support-side quantities computed once (see :func:`_adjoint_grads`).
    ``method="vmap"``: ``vmap`` over target examples of ``grad`` (the reference).
    Both give example ``i``'s gradient from ``(x_i, y_i)`` alone. Wrap in
    ``jax.jit`` (closing over ``spec``) for speed.
    """
    if method not in ("adjoint", "vmap"):
        raise ValueError(f"method must be 'adjoint' or 'vmap', got {method!r}")
    t = _target_repr(spec, x_t)
    fn = _adjoint_grads if method == "adjoint" else _vmap_grads
    return fn(spec, x_s, y_s, t, y_t, reg + jitter)[0]


# --------------------------------------------------------------------------------------
# support initialisation (data independent)
# --------------------------------------------------------------------------------------


def support_labels(n_classes: int, support_per_class: int) -> np.ndarray:
    """Class-balanced support labels ``(m,)`` int32: ``[0]*spc + [1]*spc + ...`` (data independent)."""
    return np.repeat(np.arange(n_classes, dtype=np.int32), support_per_class)


def init_support(
    key: Any, n_support: int, input_shape: tuple[int, ...], dtype: Any = jnp.float32
) -> jax.Array:
    """Support inputs ``(m, *input_shape)`` drawn i.i.d. from ``N(0, 1)`` (Alg. 1, step 1).

    Depends only on ``key`` and the shape: no real example is ever used.
    """
    return jax.random.normal(key, (n_support, *input_shape), dtype=dtype)


def corruption_mask(key: Any, shape: tuple[int, ...], fraction: float) -> np.ndarray:
    """Boolean mask (True = corrupted/frozen) with exactly ``round(fraction * size)`` entries.

    Drawn from ``key`` only (data independent); paper Table 4.
    """
    size = int(np.prod(shape))
    k = int(round(fraction * size))
    perm = np.asarray(jax.random.permutation(key, size))
    mask = np.zeros(size, dtype=bool)
    mask[perm[:k]] = True
    return mask.reshape(shape)


# --------------------------------------------------------------------------------------
# result, prediction
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DPKIPResult:
    """Output of :func:`fit`.

    Attributes:
      support_x: ``(m, *input_shape)`` float32 distilled inputs (the DP release).
      support_y: ``(m,)`` int32 class of each support point (data independent).
      support_targets: ``(m, c)`` float32 KRR targets (centred one-hot, or the
        learned labels in the non-private ``learn_labels`` mode).
      report: the :class:`~privkernels.privacy.report.PrivacyReport`.
      history: per-epoch lists (``epoch``, ``step``, ``seconds``, ``test_accuracy``,
        ``test_loss`` when a test set is given; ``train_loss``, ``batch_sizes`` with
        ``diagnostics=True``).
      corrupted: ``(m, *input_shape)`` bool mask of frozen (noise) pixels.
      config: kernel name/options, reg, jitter, n_classes, input_shape, ...
      kernel_params: data-independent kernel parameters (e-NTK LeNet) or None.
    """

    support_x: np.ndarray
    support_y: np.ndarray
    support_targets: np.ndarray
    report: Any
    history: dict[str, list[Any]]
    corrupted: np.ndarray
    config: dict[str, Any]
    kernel_params: Any = None

    @property
    def steps_done(self) -> int:
        return int(self.config["steps_done"])


def _spec_of(result: DPKIPResult) -> KernelSpec:
    cfg = result.config
    return make_kernel(
        cfg["kernel"],
        tuple(cfg["input_shape"]),
        int(cfg["n_classes"]),
        options=cfg["kernel_options"],
        params=result.kernel_params,
    )


def _make_predict_fn(spec: KernelSpec, ridge: float) -> Callable[..., jax.Array]:
    """Jitted ``(x_s, y_s, x_batch) -> (b, c)`` KRR predictions (compiled once per shape)."""

    @jax.jit
    def run(x_s: jax.Array, y_s: jax.Array, xb: jax.Array) -> jax.Array:
        s_repr = _support_repr(spec, x_s)
        return _krr_predict_repr(
            spec.kind, spec.kernel_fn, s_repr, y_s, _target_repr(spec, xb), ridge
        )

    return run


def _chunked_predict(
    run: Callable[..., jax.Array], x_s: jax.Array, y_s: jax.Array, x: jax.Array, chunk_size: int
) -> np.ndarray:
    """Apply ``run`` over ``x`` in fixed-size chunks (last one padded, so one compilation)."""
    n = x.shape[0]
    chunk_size = min(chunk_size, n)
    outs = []
    for start in range(0, n, chunk_size):
        xb = x[start : start + chunk_size]
        pad = chunk_size - xb.shape[0]
        if pad:
            xb = jnp.concatenate([xb, jnp.zeros((pad, *xb.shape[1:]), xb.dtype)])
        out = run(x_s, y_s, xb)
        outs.append(np.asarray(out[: out.shape[0] - pad]))
    return np.concatenate(outs, axis=0)


def predict(result: DPKIPResult, x: Any, *, chunk_size: int = 1000) -> np.ndarray:
    """KRR predictions ``(n, c)`` for ``x`` ``(n, *input_shape)`` from the support set.

    Post-processing of the DP release (no extra privacy cost).
    """
    x = check_array(x, "x")
    shape = tuple(result.config["input_shape"])
    if tuple(x.shape[1:]) != shape:
        raise ValueError(
            f"x must have shape (n, {', '.join(map(str, shape))}), got {tuple(x.shape)}"
        )
    check_int(chunk_size, "chunk_size")
    spec = _spec_of(result)
    ridge = float(result.config["reg"]) + float(result.config["jitter"])
    cfg = result.config
    run = _cached(
        (
            "predict",
            cfg["kernel"],
            json.dumps(spec.options, sort_keys=True),
            tuple(cfg["input_shape"]),
            ridge,
        )
        if cfg["kernel"] != "entk"
        else None,
        lambda: _make_predict_fn(spec, ridge),
    )
    return _chunked_predict(
        run,
        jnp.asarray(result.support_x),
        jnp.asarray(result.support_targets),
        jnp.asarray(x, jnp.float32),
        chunk_size,
    )


def predict_labels(result: DPKIPResult, x: Any, *, chunk_size: int = 1000) -> np.ndarray:
    """Argmax of :func:`predict`: ``(n,)`` int32 class labels."""
    return np.argmax(predict(result, x, chunk_size=chunk_size), axis=-1).astype(np.int32)


def accuracy(result: DPKIPResult, x: Any, y: Any, *, chunk_size: int = 1000) -> float:
    """KRR test accuracy of the support set on ``(x, y)``."""
    y = check_labels(y, int(result.config["n_classes"]), "y", n_rows=np.shape(x)[0])
    return float(np.mean(predict_labels(result, x, chunk_size=chunk_size) == y))


# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------


#: Compiled steps / predictors for data-independent kernels (fc_ntk, scatternet),
#: keyed by every static setting; a pure cache so repeated fits (seeds, tests)
#: reuse the XLA compilation. Bounded; never holds data.
_JIT_CACHE: OrderedDict[tuple[Any, ...], Callable] = OrderedDict()
_JIT_CACHE_SIZE = 16


def _cached(cache_key: tuple[Any, ...] | None, build: Callable[[], Callable]) -> Callable:
    if cache_key is None:
        return build()
    fn = _JIT_CACHE.get(cache_key)
    if fn is None:
        fn = build()
        _JIT_CACHE[cache_key] = fn
        while len(_JIT_CACHE) > _JIT_CACHE_SIZE:
            _JIT_CACHE.popitem(last=False)
    else:
        _JIT_CACHE.move_to_end(cache_key)
    return fn


def _make_step(
    spec: KernelSpec,
    *,
    space: str,
    private: bool,
    learn_labels: bool,
    ridge: float,
    clip_norm: float,
    noise_multiplier: float,
    n: int,
    q: float,
    pad_to: int,
    chunk_size: int,
    optimizer: Any,
    n_classes: int,
    grad_method: str = "adjoint",
    corrupted: bool = False,
    noise_digest: tuple[int, int] = (0, 0),
    normaliser: float | None = None,
) -> Callable:
    """Build the jitted DP-KIP step ``(state, x, y, key) -> (state, aux)``.

    ``x`` / ``y`` hold the ``n`` private rows followed by ONE public padding row
    (zeros) at index ``n``: padding entries of the Poisson sample point there.
    The noise key is ``fold_digest(k_noise, noise_digest)``, the digest of the
    mechanism's parameters (:mod:`privkernels.privacy.keys`). ``normaliser``
    divides the noisy sum (default ``q * n``; under add-remove a public value).

    ``grad_method`` selects how the per-example gradients of the private
    input-space branch (fixed labels) are computed: ``"adjoint"``
    (:func:`_adjoint_grads`; for dot-product kernels without corrupted pixels the
    exact Gram form :func:`_gram_clipped_sum` instead) or ``"vmap"``
    (``vmap(grad)``, the reference). Clipping, masking, summing and noise are the
    same for all of them.
    """
    if grad_method not in ("adjoint", "vmap"):
        raise ValueError(f"grad_method must be 'adjoint' or 'vmap', got {grad_method!r}")
    import optax

    from privkernels import privacy

    use_adjoint = private and space == "input" and not learn_labels and grad_method == "adjoint"
    use_gram = use_adjoint and spec.gram_fn is not None and not corrupted

    from privkernels.privacy.keys import fold_digest

    n_chunks = pad_to // chunk_size
    expected_batch = q * n if normaliser is None else normaliser
    loss_fn = partial(_loss_one, spec=spec, space=space, ridge=ridge)
    if private:
        pe_grad = jax.vmap(jax.grad(loss_fn), in_axes=(None, None, 0, 0))
    batch_loss = jax.vmap(loss_fn, in_axes=(None, None, 0, 0))

    def masked_sum_loss(
        p: Any, y_s: jax.Array, t: jax.Array, yt: jax.Array, mk: jax.Array
    ) -> jax.Array:
        return jnp.sum(batch_loss(p, y_s, t, yt) * mk)

    def step(state: dict[str, Any], x: jax.Array, y_enc: jax.Array, key: jax.Array):
        k_batch, k_noise = jax.random.split(key)
        k_noise = fold_digest(k_noise, noise_digest)
        batch = privacy.poisson_batch(k_batch, n, q, pad_to=pad_to, pad_index=n)
        idx = batch.indices
        mask = batch.mask.astype(jnp.float32)
        params = state["params"]
        grad_mask = state["grad_mask"]
        y_s = state["y_s"]
        if space == "feature":
            assert spec.feature_fn is not None
            phi_s, vjp_fn = jax.vjp(spec.feature_fn, params["x"])
            work = {"phi": phi_s}
            if learn_labels:
                work["y"] = params["y"]
        else:
            work = dict(params)

        def chunk_body(carry: Any, c: jax.Array):
            acc, loss_acc, clip_acc = carry
            sl = jax.lax.dynamic_slice_in_dim(idx, c * chunk_size, chunk_size)
            mk = jax.lax.dynamic_slice_in_dim(mask, c * chunk_size, chunk_size)
            xb = x[sl]
            yb = y_enc[sl]
            t = _target_repr(spec, xb)
            if private and space == "feature" and not learn_labels:
                summed_phi, lsum, ncl = _feature_clipped_sum(
                    work["phi"], y_s, t, yb, mk, ridge, clip_norm
                )
                summed = {"phi": summed_phi}
                clip_acc = clip_acc + ncl
                loss_acc = loss_acc + lsum
            elif use_gram:
                assert spec.gram_fn is not None
                m_s = work["x"].shape[0]
                total, lsum, ncl = _gram_clipped_sum(
                    spec.gram_fn,
                    work["x"].reshape(m_s, -1),
                    y_s,
                    t,
                    yb,
                    mk,
                    ridge,
                    clip_norm,
                )
                summed = {"x": total.reshape(work["x"].shape)}
                clip_acc = clip_acc + ncl
                loss_acc = loss_acc + lsum
            elif private:
                if use_adjoint:
                    gx, losses = _adjoint_grads(spec, work["x"], y_s, t, yb, ridge)
                    g = {"x": gx}
                else:
                    g = pe_grad(work, y_s, t, yb)
                    losses = batch_loss(work, y_s, t, yb)
                if space == "input":  # frozen (corrupted) pixels are excluded before clipping
                    g = {**g, "x": g["x"] * (1.0 - grad_mask)[None]}
                clipped, norms = privacy.clip_per_example(g, clip_norm)
                keep = (mk > 0) & jnp.isfinite(norms)

                def masked_sum(leaf: jax.Array) -> jax.Array:
                    shape = (leaf.shape[0],) + (1,) * (leaf.ndim - 1)
                    return jnp.sum(jnp.where(keep.reshape(shape), leaf, 0.0), axis=0)

                summed = jax.tree_util.tree_map(masked_sum, clipped)
                clip_acc = clip_acc + jnp.sum(keep * (norms > clip_norm))
                loss_acc = loss_acc + jnp.sum(jnp.where(keep, losses, 0.0))
            else:
                lval, summed = jax.value_and_grad(masked_sum_loss)(work, y_s, t, yb, mk)
                loss_acc = loss_acc + lval
            acc = jax.tree_util.tree_map(jnp.add, acc, summed)
            return (acc, loss_acc, clip_acc), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, work)
        (gsum, loss_sum, n_clipped), _ = jax.lax.scan(
            chunk_body, (zeros, jnp.float32(0.0), jnp.float32(0.0)), jnp.arange(n_chunks)
        )
        if private:
            leaves, treedef = jax.tree_util.tree_flatten(gsum)
            keys = jax.random.split(k_noise, len(leaves))
            noisy = [
                leaf + noise_multiplier * clip_norm * jax.random.normal(k, leaf.shape, leaf.dtype)
                for leaf, k in zip(leaves, keys, strict=True)
            ]
            gsum = jax.tree_util.tree_unflatten(treedef, noisy)
        grad = jax.tree_util.tree_map(lambda leaf: leaf / expected_batch, gsum)
        if space == "feature":
            (gx,) = vjp_fn(grad["phi"])
            new_grad = {"x": gx}
            if learn_labels:
                new_grad["y"] = grad["y"]
            grad = new_grad
        grad = {**grad, "x": grad["x"] * (1.0 - grad_mask)}
        updates, opt_state = optimizer.update(grad, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        # Frozen pixels never move (also guards against optimiser side effects).
        new_params = {**new_params, "x": jnp.where(grad_mask > 0, params["x"], new_params["x"])}
        new_state = {**state, "params": new_params, "opt_state": opt_state}
        aux = {"batch_size": batch.size, "loss_sum": loss_sum, "n_clipped": n_clipped}
        return new_state, aux

    del n_classes
    return jax.jit(step)


def _sampling_pad(n: int, q: float, chunk_size: int) -> int:
    """Fixed padded batch length: ``P[Binomial(n, q) > pad] <= 1e-9``, a multiple of ``chunk_size``.

    A larger sample is never truncated: :func:`fit` re-runs that step with a
    longer padding (same key, hence the same Poisson sample).
    """
    from privkernels.privacy.sampling import poisson_pad_to

    return int(poisson_pad_to(n, q, failure_prob=1e-9, pad_multiple=chunk_size))


def _balanced_chunk(n: int, q: float, chunk_size: int) -> int:
    """Chunk length <= ``chunk_size`` that splits the padded batch with little waste."""
    raw = _sampling_pad(n, q, 1)
    n_chunks = max(1, math.ceil(raw / chunk_size))
    return max(1, math.ceil(raw / n_chunks))


def _fingerprint(cfg: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _save_checkpoint(path: Path, state: dict[str, Any], meta: dict[str, Any]) -> None:
    leaves = jax.tree_util.tree_leaves(state)
    arrays = {f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    tmp = path.with_name(path.name + ".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps(meta, default=_json_default)), **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _load_checkpoint(path: Path, template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        leaves_t, treedef = jax.tree_util.tree_flatten(template)
        leaves = []
        for i, lt in enumerate(leaves_t):
            arr = data[f"leaf_{i}"]
            if arr.shape != np.shape(lt):
                raise ValueError(
                    f"checkpoint {path} does not match this configuration (leaf {i} shape)"
                )
            leaves.append(jnp.asarray(arr, dtype=jnp.asarray(lt).dtype))
    return jax.tree_util.tree_unflatten(treedef, leaves), meta


def fit(
    key: Any,
    x: Any,
    y: Any,
    *,
    kernel: Literal["scatternet", "fc_ntk", "entk"] = "scatternet",
    support_per_class: int,
    epsilon: float | None,
    delta: float = 1e-5,
    clip_norm: float = 1.0,
    batch_size: int,
    epochs: int,
    learning_rate: float = 1e-2,
    reg: float = 1e-6,
    jitter: float = 0.0,
    corrupt_fraction: float = 0.0,
    n_classes: int | None = None,
    x_test: Any = None,
    y_test: Any = None,
    kernel_options: Mapping[str, Any] | None = None,
    clip_space: Literal["auto", "input", "feature"] = "auto",
    accountant: Literal["pld", "rdp"] = "pld",
    learn_labels: bool = False,
    optimizer: Any = None,
    chunk_size: int = 128,
    eval_every: int = 1,
    diagnostics: bool = False,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    max_steps: int | None = None,
    progress: bool = True,
    neighbouring: Literal["replace-one", "add-remove"] = "replace-one",
    sampling_rate: float | None = None,
) -> DPKIPResult:
    """Distil ``(x, y)`` into ``support_per_class`` points per class with DP-KIP (Alg. 1).

    Args:
      key: ``jax.random.key``; split into support init, corruption mask, kernel
        parameters (e-NTK) and per-step keys ``fold_in(k_train, step)``.
      x: ``(n, *input_shape)`` float private target inputs (images ``(n, h, w)``
        or ``(n, h, w, 3)``; tabular ``(n, d)``).
      y: ``(n,)`` int labels in ``[0, n_classes)``.
      kernel: ``"scatternet"``, ``"fc_ntk"`` or ``"entk"``.
      support_per_class: distilled points per class (``m = spc * c``).
      epsilon: target epsilon, or ``None`` for the non-private KIP baseline.
      delta: target delta in (0, 1).
      clip_norm: per-example L2 clipping bound ``C``.
      batch_size: expected Poisson batch size, the normaliser of the noisy sum;
        ``q = batch_size / n`` under replace-one.
      epochs: ``steps = epochs * round(1 / q)``.
      learning_rate: Adam step size (ignored when ``optimizer`` is given).
      reg: ridge ``lambda = reg * tr(K_ss) / m``.
      jitter: extra relative diagonal (added to ``reg``) for the Cholesky solve.
      corrupt_fraction: fraction in ``[0, 1)`` of support pixels frozen at their
        ``N(0, 1)`` initial value and excluded from optimisation (Table 4).
      n_classes: default ``max(y) + 1`` (pass it to avoid reading it from data).
      x_test, y_test: optional *public* held-out set for the per-epoch test accuracy.
      kernel_options: fc_ntk ``depth/W_std/b_std`` (default 1, sqrt(2), 0.1);
        scatternet ``J/L/group_norm`` (default 2, 8, ``"auto"``: 27 groups when
        the number of scattering maps allows it, else none; ``None`` for raw
        features); entk ``normalize``.
      clip_space: ``"input"`` (paper), ``"feature"`` (linear-feature kernels;
        see the module docstring) or ``"auto"`` (``"input"``; ``"feature"`` for entk).
      accountant: ``"pld"`` (default) or ``"rdp"``.
      learn_labels: learn the support labels too (non-private mode only).
      optimizer: an optax ``GradientTransformation`` (default ``adam(learning_rate)``).
      chunk_size: target examples per vmapped chunk (bounds memory).
      eval_every: evaluate on the test set every this many epochs.
      diagnostics: record the un-noised training loss, clip fraction and
        Poisson batch sizes in the history. In the private mode this reads
        private data without noise and emits a ``PrivacyLeakWarning``.
      checkpoint_path: ``.npz`` file written every epoch (and on
        ``KeyboardInterrupt``) holding the support, optimiser and accountant
        state (steps done, sigma, q, planned steps).
      resume: continue from ``checkpoint_path``; the configuration (incl. the
        accountant state) must match; steps already taken stay counted.
      max_steps: stop after this many steps *in total* (for time-sliced runs);
        the report covers the steps actually taken.
      progress: show a tqdm bar per epoch.
      neighbouring: the relation the guarantee refers to. ``"replace-one"``
        (default): neighbours have the same ``n``, which is therefore public
        and sets ``q = batch_size / n``; accounted by PLD under replace-one.
        ``"add-remove"``: neighbours differ in size, so ``n`` must not be
        used: pass the public ``sampling_rate``; ``batch_size`` is then the
        public normaliser and the true ``n`` only sizes arrays (never released).
      sampling_rate: public Poisson rate ``q`` (required with ``"add-remove"``,
        refused with ``"replace-one"``).

    Returns:
      :class:`DPKIPResult`.

    Raises:
      ValueError: on bad input (TypeError on wrong kinds), before any noise is drawn.
    """
    from privkernels import privacy
    from privkernels.privacy.report import PrivacyReport, non_private_report

    # ---------------- validation (before any randomness) ----------------
    key = check_key(key)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    x = check_array(x, "x", min_rows=1)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (n, *input_shape), got {tuple(x.shape)}")
    n = int(x.shape[0])
    input_shape = tuple(int(s) for s in x.shape[1:])
    n_classes, n_classes_inferred = infer_n_classes(y, n_classes, minimum=2)
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes}")
    y = check_labels(y, n_classes, "y", n_rows=n)
    private = epsilon is not None
    if private:
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        clip_norm = check_positive(clip_norm, "clip_norm")
        if learn_labels:
            raise ValueError(
                "learn_labels=True is only allowed with epsilon=None (labels stay fixed in DP-KIP)"
            )
    support_per_class = check_int(support_per_class, "support_per_class", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if neighbouring not in ("replace-one", "add-remove"):
        raise ValueError(
            f"neighbouring must be 'replace-one' or 'add-remove', got {neighbouring!r}"
        )
    if neighbouring == "add-remove":
        if sampling_rate is None:
            raise ValueError(
                "neighbouring='add-remove' needs a public sampling_rate (add-remove neighbours "
                "differ in size, so q = batch_size / n would read the private n)"
            )
        sampling_rate = check_sampling_rate(sampling_rate)
    else:
        if sampling_rate is not None:
            raise ValueError(
                "sampling_rate is only for neighbouring='add-remove'; under replace-one "
                "q = batch_size / n (n is public for replace-one neighbours)"
            )
        if batch_size > n:
            raise ValueError(f"batch_size must be <= n = {n}, got {batch_size}")
    if private:
        check_relation(neighbouring, accountant)
    epochs = check_int(epochs, "epochs", minimum=1)
    learning_rate = check_positive(learning_rate, "learning_rate")
    reg = check_nonnegative(reg, "reg")
    jitter = check_nonnegative(jitter, "jitter")
    if reg + jitter <= 0:
        raise ValueError("reg + jitter must be > 0 for a well-posed ridge solve")
    cf = check_nonnegative(corrupt_fraction, "corrupt_fraction")
    if not (0.0 <= cf < 1.0):
        raise ValueError(f"corrupt_fraction must lie in [0, 1), got {corrupt_fraction!r}")
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    eval_every = check_int(eval_every, "eval_every", minimum=1)
    if max_steps is not None:
        max_steps = check_int(max_steps, "max_steps", minimum=1)
    if accountant not in ("pld", "rdp"):
        raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")
    if clip_space not in ("auto", "input", "feature"):
        raise ValueError(f"clip_space must be 'auto', 'input' or 'feature', got {clip_space!r}")
    if clip_space == "auto":  # e-NTK in pixel space needs second-order LeNet Jacobians
        space = "feature" if kernel == "entk" else "input"
    else:
        space = clip_space
    if space == "feature" and kernel == "fc_ntk":
        raise ValueError(
            "clip_space='feature' needs a linear-feature kernel (scatternet or entk), not fc_ntk"
        )
    if space == "feature" and learn_labels:
        raise ValueError("learn_labels is only supported with clip_space='input'")
    has_test = x_test is not None or y_test is not None
    if has_test:
        if x_test is None or y_test is None:
            raise ValueError("give both x_test and y_test, or neither")
        x_test = check_array(x_test, "x_test")
        if tuple(x_test.shape[1:]) != input_shape:
            raise ValueError(
                f"x_test must have shape (n, {input_shape}), got {tuple(x_test.shape)}"
            )
        y_test = check_labels(y_test, n_classes, "y_test", n_rows=int(x_test.shape[0]))
    if checkpoint_path is not None:
        checkpoint_path = Path(checkpoint_path)
        if resume and not checkpoint_path.exists():
            raise ValueError(f"resume=True but checkpoint {checkpoint_path} does not exist")
        if not resume and checkpoint_path.exists():
            raise ValueError(
                f"checkpoint {checkpoint_path} exists; pass resume=True to continue it "
                "(a fresh run would not count the steps already taken) or delete it"
            )
    elif resume:
        raise ValueError("resume=True needs checkpoint_path")

    # ---------------- plan + accountant ----------------
    q = batch_size / n if sampling_rate is None else float(sampling_rate)
    steps_per_epoch = max(1, round(1.0 / q))
    planned_steps = epochs * steps_per_epoch
    m = support_per_class * n_classes
    sigma = 0.0
    if private:
        sigma = float(
            privacy.dpsgd_noise_multiplier(
                epsilon,
                delta,
                sampling_rate=q,
                steps=planned_steps,
                accountant=accountant,
                neighbouring=neighbouring,
            )
        )

    k_init, k_corrupt, k_kernel, k_train = jax.random.split(key, 4)
    spec = make_kernel(kernel, input_shape, n_classes, options=kernel_options, key=k_kernel)
    if space == "feature" and spec.kind != "features":
        raise ValueError("clip_space='feature' needs a linear-feature kernel")

    x_s0 = init_support(k_init, m, input_shape)
    labels_s = support_labels(n_classes, support_per_class)
    y_s0 = _encode_labels(jnp.asarray(labels_s), n_classes)
    corrupted = (
        corruption_mask(k_corrupt, (m, *input_shape), cf)
        if cf > 0
        else np.zeros((m, *input_shape), bool)
    )

    optimizer_given = optimizer is not None
    if optimizer is None:
        import optax

        optimizer = optax.adam(learning_rate)
    params: dict[str, jax.Array] = {"x": x_s0}
    if learn_labels:
        params["y"] = y_s0
    state: dict[str, Any] = {
        "params": params,
        "opt_state": optimizer.init(params),
        "grad_mask": jnp.asarray(corrupted, jnp.float32),
        "y_s": y_s0,
    }
    cfg = {
        "kernel": kernel,
        "kernel_options": spec.options,
        "clip_space": space,
        "private": private,
        "epsilon": epsilon,
        "delta": delta if private else None,
        "clip_norm": clip_norm if private else None,
        "noise_multiplier": sigma,
        "sampling_rate": q,
        "planned_steps": planned_steps,
        "steps_per_epoch": steps_per_epoch,
        "neighbouring": neighbouring if private else None,
        "n": n if neighbouring == "replace-one" else None,
        "batch_size": batch_size,
        "epochs": epochs,
        "learning_rate": learning_rate,
        "reg": reg,
        "jitter": jitter,
        "corrupt_fraction": cf,
        "n_classes": n_classes,
        "support_per_class": support_per_class,
        "input_shape": list(input_shape),
        "learn_labels": learn_labels,
        "accountant": accountant,
        "custom_optimizer": optimizer_given,
    }
    fingerprint = _fingerprint(cfg)
    noise_digest = params_digest(
        "dpsgd",
        noise_multiplier=sigma,
        clip_norm=float(clip_norm) if private else 0.0,
        sampling_rate=q,
        steps=planned_steps,
        neighbouring=neighbouring,
        epsilon=epsilon,
        delta=delta if private else None,
    )
    steps_done = 0
    history: dict[str, list[Any]] = {"epoch": [], "step": [], "seconds": []}
    if has_test:
        history.update(test_accuracy=[], test_loss=[])
    if diagnostics:
        history.update(train_loss=[], clip_fraction=[], batch_sizes=[])
        if private:
            from privkernels.privacy.warnings import warn_privacy_leak

            warn_privacy_leak(
                "diagnostics=True: the training loss, clip fraction and Poisson batch sizes"
            )

    if resume:
        assert checkpoint_path is not None
        state, meta = _load_checkpoint(checkpoint_path, state)
        if meta.get("fingerprint") != fingerprint:
            raise ValueError(
                "checkpoint configuration differs from this call (epsilon, delta, sampling rate, "
                "planned steps, kernel, ...); resuming with another accountant state is not allowed"
            )
        steps_done = int(meta["steps_done"])
        history = meta["history"]
        if abs(float(meta["noise_multiplier"]) - sigma) > 1e-9 * max(1.0, sigma):
            raise ValueError("checkpoint noise multiplier differs from the recomputed one")

    chunk_size = _balanced_chunk(n, q, chunk_size)
    pad_to = _sampling_pad(n, q, chunk_size)
    step_fns: dict[int, Callable] = {}

    cacheable = kernel != "entk" and not optimizer_given
    base_key = (
        kernel,
        json.dumps(spec.options, sort_keys=True),
        input_shape,
        space,
        private,
        learn_labels,
        reg + jitter,
        float(clip_norm) if private else 0.0,
        sigma,
        n,
        q,
        noise_digest,
        float(batch_size),
        chunk_size,
        learning_rate,
        n_classes,
        cf > 0,
    )

    def get_step(pad: int) -> Callable:
        if pad not in step_fns:
            step_fns[pad] = _cached(
                ("step", *base_key, pad) if cacheable else None,
                lambda: _make_step(
                    spec,
                    space=space,
                    private=private,
                    learn_labels=learn_labels,
                    ridge=reg + jitter,
                    clip_norm=float(clip_norm) if private else 0.0,
                    noise_multiplier=sigma,
                    n=n,
                    q=q,
                    pad_to=pad,
                    chunk_size=chunk_size,
                    optimizer=optimizer,
                    n_classes=n_classes,
                    corrupted=cf > 0,
                    noise_digest=noise_digest,
                    normaliser=float(batch_size),
                ),
            )
        return step_fns[pad]

    # n private rows, then one public zero row: the index padding entries point at.
    x_dev = jnp.concatenate([jnp.asarray(x, jnp.float32), jnp.zeros((1, *input_shape))])
    y_dev = jnp.concatenate(
        [_encode_labels(jnp.asarray(y), n_classes), jnp.zeros((1, n_classes), jnp.float32)]
    )

    # test set representation precomputed once (public data)
    test_eval = None
    if has_test:
        xt_dev = jnp.asarray(x_test, jnp.float32)
        yt_np = np.asarray(y_test)
        yt_enc = np.asarray(_encode_labels(jnp.asarray(yt_np), n_classes))
        run_eval = _cached(
            ("predict", kernel, json.dumps(spec.options, sort_keys=True), input_shape, reg + jitter)
            if kernel != "entk"
            else None,
            lambda: _make_predict_fn(spec, reg + jitter),
        )

        def test_eval(st: dict[str, Any]) -> tuple[float, float]:
            ys = st["params"].get("y", st["y_s"])
            pred = _chunked_predict(run_eval, st["params"]["x"], ys, xt_dev, 1000)
            acc = float(np.mean(np.argmax(pred, -1) == yt_np))
            loss = float(np.mean(np.sum((pred - yt_enc) ** 2, -1)))
            return acc, loss

    def save(st: dict[str, Any], done: int) -> None:
        if checkpoint_path is not None:
            meta = {
                "fingerprint": fingerprint,
                "steps_done": done,
                "noise_multiplier": sigma,
                "sampling_rate": q,
                "planned_steps": planned_steps,
                "history": history,
                "config": cfg,
            }
            _save_checkpoint(checkpoint_path, st, meta)

    stop_at = planned_steps if max_steps is None else min(planned_steps, max_steps)
    t0 = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=epochs,
            initial=steps_done // steps_per_epoch,
            desc=f"DP-KIP[{kernel}]",
            unit="epoch",
        )
    ep_loss, ep_clip, ep_count, ep_sizes = 0.0, 0.0, 0.0, []
    # (state, steps done) is ONE value, committed by one assignment: an interrupt
    # can never save a state with the wrong step count (which would repeat a
    # step's batch and noise on resume).
    run = (state, steps_done)
    try:
        while run[1] < stop_at:
            step_key = jax.random.fold_in(k_train, run[1])
            new_state, aux = get_step(pad_to)(run[0], x_dev, y_dev, step_key)
            size = int(aux["batch_size"])
            if size > pad_to:
                # Never truncate: redo this step with a longer padding (same key ->
                # the same Poisson sample); the truncated update is discarded.
                big = int(math.ceil(size / chunk_size) * chunk_size)
                new_state, aux = get_step(big)(run[0], x_dev, y_dev, step_key)
            run = (new_state, run[1] + 1)
            state, steps_done = run
            if diagnostics:
                bs = size
                ep_sizes.append(bs)
                ep_loss += float(aux["loss_sum"])
                ep_clip += float(aux["n_clipped"])
                ep_count += bs
            if steps_done % steps_per_epoch == 0 or steps_done == stop_at:
                epoch = steps_done / steps_per_epoch
                history["epoch"].append(epoch)
                history["step"].append(steps_done)
                history["seconds"].append(time.perf_counter() - t0)
                if diagnostics:
                    history["train_loss"].append(ep_loss / max(ep_count, 1.0))
                    history["clip_fraction"].append(ep_clip / max(ep_count, 1.0))
                    history["batch_sizes"].append(ep_sizes)
                    ep_loss, ep_clip, ep_count, ep_sizes = 0.0, 0.0, 0.0, []
                if test_eval is not None:
                    last = steps_done == stop_at
                    if last or int(round(epoch)) % eval_every == 0:
                        acc, tl = test_eval(state)
                    else:
                        acc, tl = float("nan"), float("nan")
                    history["test_accuracy"].append(acc)
                    history["test_loss"].append(tl)
                    if bar is not None and not math.isnan(acc):
                        bar.set_postfix(test_acc=f"{acc:.4f}")
                params_x = state["params"]["x"]
                if not bool(jnp.all(jnp.isfinite(params_x))):
                    raise FloatingPointError(
                        "support set became non-finite; increase reg/jitter or lower the learning rate"
                    )
                save(state, steps_done)
                if bar is not None:
                    bar.update(1 if steps_done % steps_per_epoch == 0 else 0)
    except KeyboardInterrupt:
        save(*run)
        raise
    finally:
        if bar is not None:
            bar.close()

    # ---------------- report ----------------
    data_indep = (
        "support initialisation: N(0, 1) from the key (no real example used)",
        "support labels: class-balanced centred one-hot (onehot - 1/c), fixed",
        f"kernel: {kernel} {spec.options} (fixed feature map; e-NTK weights drawn from the key)",
        (
            "n (dataset size): equal for replace-one neighbours (public); sets q = batch_size/n"
            if neighbouring == "replace-one"
            else f"sampling rate q={q:.6g} and normaliser batch_size={batch_size}: public values "
            "given by the caller; the true n is not used in the release"
        ),
        "Poisson padding rows: one fixed public zero row, masked out",
    ) + (("corrupted-pixel mask: drawn from the key",) if cf > 0 else ())
    notes: tuple[str, ...] = ()
    if n_classes_inferred:
        notes += (N_CLASSES_INFERRED_NOTE,)
    if has_test:
        notes += (
            "history test accuracy uses x_test/y_test, assumed public / not part of the private data",
        )
    if space == "feature":
        notes += (
            "clip_space='feature': per-example gradients are clipped w.r.t. the support features and "
            "mapped to pixels after noising (post-processing); same guarantee, not the paper's variant",
        )
    if diagnostics and private:
        notes += ("diagnostics=True: history holds un-noised training statistics (not covered)",)
    if private:
        rec = privacy.dpsgd_record(
            f"noisy clipped sum of per-example KRR gradients w.r.t. the support ({space} space)",
            noise_multiplier=sigma,
            delta=delta,
            sampling_rate=q,
            steps=steps_done,
            clip_norm=float(clip_norm),
            accountant=accountant,
            neighbouring=neighbouring,
            planned_steps=planned_steps,
            target_epsilon=epsilon,
        )
        report = PrivacyReport.from_mechanisms(
            [rec], neighbouring, data_independent=data_indep, notes=notes
        )
    else:
        report = non_private_report("epsilon=None: non-private KIP baseline")
    cfg_out = {**cfg, "steps_done": steps_done, "fingerprint": fingerprint}
    final_y = state["params"].get("y", state["y_s"])
    return DPKIPResult(
        support_x=np.asarray(state["params"]["x"]),
        support_y=labels_s,
        support_targets=np.asarray(final_y),
        report=report,
        history=history,
        corrupted=corrupted,
        config=cfg_out,
        kernel_params=spec.params,
    )
