"""The noisy-sum input of DP-KIP: masked sums of clipped per-example gradients.

DP-KIP (Vinaroz & Park, Alg. 1 lines 5-7) clips each target example's
gradient w.r.t. the support to norm ``C`` and sums over the Poisson batch.
Four strategies compute that sum; `choose_strategy` picks one ONCE,
from public settings, before the training step is built
(`clipped_sum_fn` turns the name into the function):

* ``"gram"`` -- FC-NTK (a dot-product kernel) in input space: exact, in Gram
  form, without the ``(b, m, d)`` per-example gradients (`gram_clipped_sum`);
* ``"feature"`` -- linear-feature kernels with ``clip_space="feature"``:
  closed form w.r.t. the support features (`feature_clipped_sum`);
* ``"adjoint"`` -- explicit per-example gradients by KRR adjoints, then
  `privkernels.privacy.clip_per_example` (corrupted pixels, e-NTK in
  input space, ScatterNet in input space);
* ``"vmap"`` -- ``vmap(grad)`` per-example gradients (the reference);
* ``"exact"`` -- the non-private baseline: the plain gradient of the summed loss.

All of them zero the rows of padding and of examples whose norm is not
finite with ``where`` before any product, and the closed forms clip against a
cancellation-safe upper bound of the norm
(`privkernels.privacy.clipping.safe_norms`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from privkernels.dp_kip.grads import example_grads
from privkernels.dp_kip.kernels import KernelSpec
from privkernels.dp_kip.krr import krr_adjoint_terms, loss_one
from privkernels.precision import full_precision
from privkernels.privacy.clipping import (
    clip_per_example,
    masked_clip_factors,
    masked_sum,
    rounding_bound,
    rounding_error,
    safe_norms,
)

__all__ = [
    "STRATEGIES",
    "ClippedSumFn",
    "GramTerms",
    "choose_strategy",
    "clipped_sum_fn",
    "feature_clipped_sum",
    "gram_clipped_sum",
    "gram_norm_terms",
    "gram_rounding_terms",
]

STRATEGIES = ("gram", "feature", "adjoint", "vmap", "exact")

#: ``fn(work, y_s, t, y_t, mask, grad_mask, clip_norm) -> (summed, loss_sum, n_clipped)``; ``work`` is
#: ``{"x": support}`` or ``{"phi": support features}`` (plus ``"y"`` with learned labels).
ClippedSumFn = Callable[..., tuple[dict[str, jax.Array], jax.Array, jax.Array]]


@full_precision
def feature_clipped_sum(
    s: jax.Array,
    y_s: jax.Array,
    phi: jax.Array,
    y_t: jax.Array,
    mask: jax.Array,
    ridge: float,
    clip_norm: float,
    *,
    labels: bool = False,
) -> tuple[jax.Array, jax.Array | None, jax.Array, jax.Array]:
    """Masked sum of clipped per-example gradients w.r.t. the support features (and w.r.t.
    the support labels ``y_s (m, c)`` when ``labels``: learned labels), in closed form.

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
    cancellation-safe (`privkernels.privacy.clipping.safe_norms` with
    ``M_i = 2||v_i|| ||e_i|| + 2||u_i|| ||w_i|| + |gamma_i| ||S||_F``) and rows
    that are padding or not finite are zeroed before any product.

    With ``labels`` (a Python bool, not traced) each target's gradient w.r.t. ``(S, Y_s)``
    is clipped as one vector: the label part of ``||r_i||^2`` is ``2 u_i r_i^T`` (``M``
    does not depend on ``Y_s``), of norm ``2 ||u_i|| ||r_i||``, so a record still moves the
    released pair by at most ``clip_norm`` and the noise and accounting are those of the
    features alone: ``||g_i||^2`` gains ``4 ||u_i||^2 ||r_i||^2`` (sums of squares, no
    cancellation) and ``M_i`` gains ``2 ||u_i|| ||r_i||``; the chain grows by ``c``.

    Returns ``(clipped_sum (m, f), label_sum (m, c) or None, loss_sum, n_clipped)``
    over ``mask``.
    """
    m = s.shape[0]
    r, u, v, rho = krr_adjoint_terms(s @ s.T, phi @ s.T, y_s, y_t, ridge)
    stu = u @ s  # (b, f)
    e = phi - stu
    w = v @ s  # (b, f)
    gamma = 4.0 * rho * jnp.sum(u * v, -1) / m  # (b,)
    s_sq, s_chain = _sum_of_squares(s)
    uv = jnp.sum(u * v, -1)
    sq = (
        4.0 * jnp.sum(v * v, -1) * jnp.sum(e * e, -1)
        + 4.0 * jnp.sum(u * u, -1) * jnp.sum(w * w, -1)
        + gamma**2 * s_sq
        - 8.0 * uv * jnp.sum(e * w, -1)
        - 4.0 * gamma * jnp.sum(w * e, -1)
        + 4.0 * gamma * jnp.sum(stu * w, -1)
    )
    # Cancellation-safe norms (see gram_clipped_sum): M_i >= ||g_i|| from sums of squares.
    bound = (
        2.0 * jnp.sqrt(jnp.sum(v * v, -1) * jnp.sum(e * e, -1))
        + 2.0 * jnp.sqrt(jnp.sum(u * u, -1) * jnp.sum(w * w, -1))
        + jnp.abs(gamma) * jnp.sqrt(s_sq)
    )
    chain = 2 * m + s.shape[1]
    if labels:  # the label part 2 u_i r_i^T, clipped with the rest
        ur_sq = jnp.sum(u * u, -1) * jnp.sum(r * r, -1)
        sq = sq + 4.0 * ur_sq
        bound = bound + 2.0 * jnp.sqrt(ur_sq)
        chain += y_s.shape[1]
    # gamma^2 ||S||_F^2 has the chain of s_sq (plus gamma's m); every other term about 2m + f.
    c_sq = gamma**2 * s_sq
    err = rounding_error(bound, chain, ((c_sq, s_chain + m + 4),), s.dtype)
    norms = safe_norms(sq, bound, rounding_bound(chain, s.dtype), err)
    factor, keep = masked_clip_factors(norms, mask, clip_norm)
    vc = jnp.where(keep[:, None], v * factor[:, None], 0.0)
    uc = jnp.where(keep[:, None], u * factor[:, None], 0.0)
    e0 = jnp.where(keep[:, None], e, 0.0)
    w0 = jnp.where(keep[:, None], w, 0.0)
    g0 = jnp.where(keep, factor * gamma, 0.0)
    total = 2.0 * vc.T @ e0 - 2.0 * uc.T @ w0 - jnp.sum(g0) * s
    label_total = 2.0 * uc.T @ jnp.where(keep[:, None], r, 0.0) if labels else None
    loss_sum = jnp.sum(jnp.where(keep, jnp.sum(r * r, -1), 0.0))
    n_clipped = jnp.sum(keep * (norms > clip_norm))
    return total, label_total, loss_sum, n_clipped


#: Longest sum of squares inside a ``bound`` left to one reduction: below ``2^22``
#: terms it errs by at most ``gamma_n <= 1/3`` relative, which the factor 2 of
#: `privkernels.privacy.clipping.rounding_error` covers; longer ones are summed by rows
#: behind an optimisation barrier (a chain of ``rows + columns``).
_BOUND_ONE_REDUCTION = 1 << 22


def _sum_last_two(x: jax.Array, one: int = _BOUND_ONE_REDUCTION) -> jax.Array:
    """Sum over the last two axes ``(r, c)``: one reduction up to ``one`` terms, else row
    sums, an optimisation barrier and their sum (a chain of ``r + c``; XLA merges the two
    levels into one reduction of ``r c`` terms without the barrier)."""
    if x.shape[-2] * x.shape[-1] <= one:
        return jnp.sum(x, axis=(-2, -1))
    return jnp.sum(jax.lax.optimization_barrier(jnp.sum(x, axis=-1)), axis=-1)


def _sum_of_squares(s: jax.Array) -> tuple[jax.Array, int]:
    """``(||S||_F^2, its float32 chain)`` for ``S`` ``(m, f)``."""
    m, f = s.shape
    return _sum_last_two(s * s), (m * f if m * f <= _BOUND_ONE_REDUCTION else m + f)


# elements of the (chunk, m, m) per-example matrices in _gram_clipped_sum
_GRAM_CHUNK_ELEMS = 1 << 21


class GramTerms(NamedTuple):
    """Per-target pieces of the Gram-form gradients ``g_i = S_i X_s + b_i x_i^T``."""

    u: jax.Array  # (b, m)
    v: jax.Array  # (b, m)
    dvec: jax.Array  # (b, m): diagonal of S_i
    b_vec: jax.Array  # (b, m)
    e_sym: jax.Array  # (m, m): off-diagonal pattern, S_i = -E (.) (u v^T + v u^T) + diag(dvec)
    r: jax.Array  # (b, c) residuals
    sq: jax.Array  # (b,) ||g_i||^2 from the closed form (may cancel, see _gram_clipped_sum)
    bound: jax.Array  # (b,) ||S_i||_F ||X_s||_F + ||b_i|| ||x_i||  >= ||g_i||
    err: jax.Array  # (b,) bound on the rounding error of sq (`rounding_error`)


@full_precision
def gram_norm_terms(
    gram_fn: Callable[..., jax.Array],
    x_s: jax.Array,
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    ridge: float,
) -> GramTerms:
    """The per-target terms of `gram_clipped_sum` (see there for the derivation)."""
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
    # same=True: the support's own Gram, its diagonal at c = 1 exactly at every layer.
    k_ss, d_g = jax.jvp(lambda g: gram_fn(g, diag, diag, same=True), (gram,), (off,))
    _, d_1 = jax.jvp(lambda q: gram_fn(gram, q, diag, same=True), (diag,), (ones_m,))
    _, d_2 = jax.jvp(lambda q: gram_fn(gram, diag, q, same=True), (diag,), (ones_m,))
    _, d_tot = jax.jvp(
        lambda q: jnp.diagonal(gram_fn(gram + q * eye, diag + q, diag + q, same=True)),
        (0.0 * diag,),
        (ones_m,),
    )
    d_g, d_1, d_2 = d_g * off, d_1 * off, d_2 * off
    k_t, dt_g = jax.jvp(lambda g: gram_fn(g, sq_t, diag), (h,), (jnp.ones_like(h),))
    _, dt_2 = jax.jvp(lambda q: gram_fn(h, sq_t, q), (diag,), (ones_m,))
    r, u, v, rho = krr_adjoint_terms(k_ss, k_t, y_s, y_t, ridge)
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
        # always row sums, then their sum (see gram_rounding_terms)
        if m <= d:  # ||S X||^2 = sum((S G) * S): one (chunk m, m) GEMM
            sg = (sym.reshape(per * m, m) @ gram).reshape(per, m, m)
            quad = _sum_last_two(sg * sym, one=0)
        else:
            sx = (sym.reshape(per * m, m) @ x_s).reshape(per, m, d)
            quad = _sum_last_two(sx * sx, one=0)
        cross = jnp.sum(bc * jnp.einsum("bjk,bk->bj", sym, hc), axis=-1)
        return quad, cross, _sum_last_two(sym * sym)

    quad, cross, s_sq = jax.lax.map(quad_chunk, tuple(chunked(a) for a in (u, v, dvec, h, b_vec)))
    quad, cross, s_sq = (a.reshape(-1)[:nb] for a in (quad, cross, s_sq))
    # ||b_i x_i^T||^2 as ||b_i ||x_i|| ||^2, not ||b_i||^2 ||x_i||^2: under the sphere lift
    # ||b_i|| ~ 1 / ||x_i||, and for ||x_i|| ~ 1e19 the squares of b_i's entries flush to
    # zero in float32 while the term itself is O(1) (attack s64, A1: 4.9 C released).
    bx = b_vec * jnp.sqrt(sq_t)[:, None]
    bb_x = jnp.sum(bx * bx, -1)
    sq = quad + 2.0 * cross + bb_x
    x_sq = jnp.sum(diag)
    bound = jnp.sqrt(s_sq) * jnp.sqrt(x_sq) + jnp.sqrt(bb_x)
    err = rounding_error(bound, 2 * m + d, ((s_sq * x_sq, gram_rounding_terms(m, d)),), x_s.dtype)
    return GramTerms(u, v, dvec, b_vec, e_sym, r, sq, bound, err)


def gram_rounding_terms(m: int, d: int) -> int:
    """Operations behind the ``||S_i X||^2`` term of `gram_norm_terms`' ``sq``.

    ``m <= d``: ``G = X X^T`` (``d`` terms), ``S_i G`` (``m``), the product
    with ``S_i``, the ``m`` row sums (``m``) and their sum (``m``): ``d + 3m
    + 1``. ``m > d``: ``S_i X`` (``m``), squaring it (which doubles its
    error), row sums (``d``) and their sum (``m``): ``3m + d - 1``. The nested sum's error is at most
    ``gamma`` of its length times the same sum in absolute values, ``<=
    ||S_i||_F^2 ||X||_F^2`` (Higham, Sec. 3.1). The row sums are kept apart
    from their sum (an optimisation barrier): one reduction over the ``m^2``
    entries would need ``m^2`` here. The other terms of ``sq`` (``b . (S
    h)``, ``||b||^2 ||x||^2``) have chains of ``2m + d`` plus a few, inside
    the slack of `safe_norms`' default.
    """
    return 3 * int(m) + int(d) + 2


@full_precision
def gram_clipped_sum(
    gram_fn: Callable[..., jax.Array],
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
    `privkernels.dp_kip.grads.example_grads`, pulled back through the element-wise map
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
    therefore uses `privkernels.privacy.clipping.safe_norms`: the
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
    terms = gram_norm_terms(gram_fn, x_s, y_s, t, y_t, ridge)
    norms = safe_norms(terms.sq, terms.bound, rounding_bound(2 * m + d, x_s.dtype), terms.err)
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


@full_precision
def _autodiff_sum(
    work: dict[str, jax.Array],
    y_s: jax.Array,
    t: jax.Array,
    y_t: jax.Array,
    mask: jax.Array,
    grad_mask: jax.Array,
    clip_norm: float,
    *,
    spec: KernelSpec,
    space: str,
    ridge: float,
    method: str,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """The masked gradient sum by automatic differentiation of eq. 3's per-target loss.

    ``method="exact"``: the non-private baseline, the gradient of the masked summed
    loss (no clipping, no noise; ``clip_norm`` unused). ``"adjoint"`` / ``"vmap"``:
    per-example gradients (`example_grads` by that method), frozen pixels
    (``grad_mask`` 1) excluded, clipped to ``clip_norm`` and summed over ``mask``
    (Alg. 1 lines 5-7). ``work``: ``{"x": (m, *s)}`` (``"exact"`` in feature space:
    ``{"phi": (m, f)}``); ``t (b, *s)``, ``y_t (b, c)``, ``mask (b,)``. Returns
    ``(summed, loss_sum, n_clipped)`` (float32).
    """
    if method == "exact":
        fn = partial(loss_one, spec=spec, space=space, ridge=ridge)
        batch_loss = jax.vmap(fn, in_axes=(None, None, 0, 0))

        def total(p: dict[str, jax.Array]) -> jax.Array:
            return jnp.sum(jnp.where(mask > 0, batch_loss(p, y_s, t, y_t), 0.0))

        value, grads = jax.value_and_grad(total)(work)
        return grads, value, jnp.zeros((), jnp.float32)
    gx, losses = example_grads(spec, work["x"], y_s, t, y_t, ridge, method)
    g = {"x": gx * (1.0 - grad_mask)[None]}  # frozen pixels excluded before clipping
    clipped, norms = clip_per_example(g, clip_norm)
    keep = (mask > 0) & jnp.isfinite(norms)
    summed = masked_sum(clipped, keep)  # clipped leaves are float32 already
    n_clipped = jnp.sum(keep * (norms > clip_norm))
    return summed, jnp.sum(jnp.where(keep, losses, 0.0)), n_clipped


def _feature_strategy(work, y_s, t, y_t, mask, grad_mask, clip_norm, *, ridge):  # type: ignore[no-untyped-def]
    labels = "y" in work  # learned labels: the support's current labels, clipped jointly
    total, label_total, loss_sum, n_clipped = feature_clipped_sum(
        work["phi"], work["y"] if labels else y_s, t, y_t, mask, ridge, clip_norm, labels=labels
    )
    summed = {"phi": total} if label_total is None else {"phi": total, "y": label_total}
    return summed, loss_sum, n_clipped


def _gram_strategy(work, y_s, t, y_t, mask, grad_mask, clip_norm, *, gram_fn, ridge):  # type: ignore[no-untyped-def]
    x_s = work["x"]
    total, loss_sum, n_clipped = gram_clipped_sum(
        gram_fn, x_s.reshape(x_s.shape[0], -1), y_s, t, y_t, mask, ridge, clip_norm
    )
    return {"x": total.reshape(x_s.shape)}, loss_sum, n_clipped


def choose_strategy(
    spec: KernelSpec,
    *,
    space: str,
    private: bool,
    learn_labels: bool,
    corrupted: bool,
    grad_method: str = "auto",
) -> str:
    """The clipped-sum strategy for these public settings (chosen once, in ``fit``).

    ``grad_method``: ``"auto"`` (the fastest exact strategy), ``"adjoint"`` or
    ``"vmap"`` (explicit per-example gradients; the reference for tests).
    """
    if grad_method not in ("auto", "adjoint", "vmap"):
        raise ValueError(f"grad_method must be 'auto', 'adjoint' or 'vmap', got {grad_method!r}")
    if not private:
        return "exact"
    if learn_labels and space != "feature":
        raise ValueError(
            "learned labels under privacy need clip_space='feature' (their gradients are "
            "clipped jointly with the support features' in closed form)"
        )
    if space == "feature":
        return "feature"
    if grad_method == "auto" and spec.gram_fn is not None and not corrupted:
        return "gram"
    return "vmap" if grad_method == "vmap" else "adjoint"


def clipped_sum_fn(name: str, spec: KernelSpec, *, space: str, ridge: float) -> ClippedSumFn:
    """``fn(work, y_s, t, y_t, mask, grad_mask, clip_norm) -> (summed, loss_sum, n_clipped)``.

    ``clip_norm`` may be traced (one compilation serves every clip norm).
    """
    if name in ("exact", "adjoint", "vmap"):  # the explicit gradients are in input space
        space = space if name == "exact" else "input"
        return partial(_autodiff_sum, spec=spec, space=space, ridge=ridge, method=name)
    if name == "feature":
        return partial(_feature_strategy, ridge=ridge)
    if name == "gram":
        assert spec.gram_fn is not None
        return partial(_gram_strategy, gram_fn=spec.gram_fn, ridge=ridge)
    raise ValueError(f"unknown clipped-sum strategy {name!r}; one of {STRATEGIES}")
