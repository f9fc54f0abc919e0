"""Empirical NTK (e-NTK) features, kernels and class-conditional mean embeddings.

DP-NTK (Yang et al., Sec. 2.3 and 3) uses the e-NTK feature map of a randomly
initialised network ``f_theta``::

    phi(x) = grad_theta f(x) / ||grad_theta f(x)||,     f(x) = sum_k f_theta(x)_k

("sum-of-logits" for multi-output networks) and the mean embedding (eq. 4)::

    mu = (1/n) sum_i phi(x_i) onehot(y_i)^T            # (p, n_classes)

whose replace-one sensitivity is ``2/n`` because ``||phi(x)|| = 1`` (Prop. 3.1).

Conventions
-----------
* ``apply_fn(params, x_batch) -> (b, k)``, e.g. ``module.apply`` of a module from
  `privkernels.features.networks` with ``params = init_params(...)``. The
  network must treat examples independently (no batch statistics).
* Feature layout: ``phi`` is the concatenation of the gradient's leaves in
  ``jax.tree_util.tree_leaves(params)`` order (dict keys sorted, as flax
  variables dicts are; e.g. ``Dense_0/bias, Dense_0/kernel, Dense_1/bias, ...``),
  each leaf raveled row-major -- exactly ``jax.flatten_util.ravel_pytree``.
  Every leaf of ``params`` is differentiated, so pass trainable leaves only.
* Zero gradients: when ``||grad f(x)|| = 0``, ``phi(x) = 0`` (no NaN, also in
  derivatives); the sensitivity bound ``||phi|| <= 1`` still holds. An example
  whose gradient is not finite (overflow) gets ``phi(x) = 0`` too, its rows
  zeroed with ``where`` before any product. Normalised features are scaled by
  ``1 / (1 + NORM_MARGIN)`` so float32 rounding never lifts a norm above 1.
* Memory: examples are processed in chunks of ``chunk_size`` (the last chunk
  padded by repeating a row and masked), so peak memory is ``O(chunk_size * p)``
  besides the output; the chunk loop is a ``lax.scan`` whose body is
  rematerialised (``jax.checkpoint``), so reverse-mode derivatives w.r.t. ``x``
  also stay ``O(chunk_size * p + n * d)``. ``chunk_size=None`` picks a size from
  a fixed memory budget (it depends on ``p`` and ``n`` only, never on data values).
* Everything is jit-compiled with ``apply_fn`` as a static argument: pass the same
  callable object (e.g. ``module.apply``) across calls to reuse the compilation;
  a fresh ``lambda`` each call re-traces. A new ``n`` re-traces the outer scan.

Structured fast path for dense MLPs
-----------------------------------
For a Dense layer ``z_l = a_{l-1} W_l + b_l`` the per-example gradient is
``dW_l = a_{l-1,i} delta_{l,i}^T`` and ``db_l = delta_{l,i}`` with
``delta_{l,i} = d f(x_i) / d z_{l,i}``. Hence

* ``||grad f(x_i)||^2 = sum_l (||a_{l-1,i}||^2 + 1[bias]) ||delta_{l,i}||^2``;
* the class-``c`` embedding block of ``W_l`` is ``A_{l-1}^T diag(w_i y_ic / ||g_i||) Delta_l``,

a matrix product: per-example gradients are never materialised. With concrete
integer labels the examples are laid out host-side in class-pure chunks, so each
block costs ``n * in * out`` FLOPs (instead of ``n * in * out * C`` for a dense
one-hot layout, used for traced labels, label matrices and inside ``vmap``);
pass labels as NumPy arrays (also inside a jitted step, as closed-over
constants) to get it. The number of class-pure chunks is ``sum_c ceil(n_c / chunk)``
(no empty chunks, no branches), so at most ``n_classes`` programs compile per
``n``; equal class counts (balanced batches) always share one. ``delta`` is
obtained by one backward pass through the batch (perturbing each Dense output by
zeros and differentiating w.r.t. the perturbation), so any parameter-free
operation between Dense layers (ReLU, LayerNorm without affine, reshapes) is
supported.

Selection (``method="auto"``): ``apply_fn`` is traced once abstractly
(``jax.eval_shape``: no FLOPs, no data values) under flax's
``nn.intercept_methods``. The structured path is used iff (a) the only modules
holding parameters are plain ``flax.linen.Dense`` layers (default
``dot_general``) applied to rank-2 ``(b, features)`` inputs, and (b) every leaf of
``params`` is, by object identity, exactly one Dense kernel or bias used by exactly
one call (no weight sharing, no transformed parameters). ``fc_1l`` / ``fc_2l``
qualify; ``cnn_2l`` / ``lenet`` (convolutions) use the generic path. Use
`is_dense_mlp` to query, ``method="structured"`` to insist (ValueError
otherwise) or ``method="generic"`` to force the ``vmap(grad)`` path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from privkernels._numerics import ONE_REDUCTION, TWO_LEVELS, blocked_sum
from privkernels._validation import check_array, check_int, check_labels
from privkernels.precision import matmul_precision
from privkernels.privacy.clipping import NORM_MARGIN
from privkernels.sharding import mesh_axis, shard_rows, sum_over_shards

__all__ = [
    "entk_features",
    "entk_mean_embedding",
    "entk_kernel",
    "is_dense_mlp",
    "check_method",
    "make_entk_embedding_chunk_fn",
]

ApplyFn = Callable[[Any, jax.Array], jax.Array]

_METHODS = ("auto", "generic", "structured")
# Memory budgets (bytes) used to pick chunk_size when it is None.
_GENERIC_BUDGET = 1 << 28  # per-chunk per-example gradients (and a normalised copy)
_STRUCTURED_BUDGET = 1 << 24  # per-chunk activations / deltas / scaled deltas


# --------------------------------------------------------------------------- helpers


def _is_tracer(a: Any) -> bool:
    return isinstance(a, jax.core.Tracer)


#: Smallest sum of squares a feature is normalised from; below it the feature is zeroed.
#: float32 squares under 2^-126 are flushed to zero on CPU (and in XLA generally), so a sum
#: of ``D`` terms may lose up to ``D 1.2e-38``; above this floor that is at most
#: ``D 1.2e-14`` of the sum (well inside the margin for any ``D`` below 1e9), and below it
#: the computed norm could be far too small (a "normalised" feature of norm 43 was built).
MIN_FEATURE_SQNORM = 1e-24


def _inv_norm(sq: jax.Array) -> jax.Array:
    """``1 / (sqrt(sq) (1 + NORM_MARGIN))`` where ``MIN_FEATURE_SQNORM <= sq < inf``, else 0.

    The margin (`privkernels.privacy.clipping.NORM_MARGIN`) keeps a
    normalised feature's computed norm at or below 1 in float32, which the
    ``2/n`` sensitivity needs; below `MIN_FEATURE_SQNORM` the feature is zeroed (a
    per-record rule: its contribution, 0, is still within the bound). NaN-free
    derivatives (double where).
    """
    pos = (sq >= MIN_FEATURE_SQNORM) & jnp.isfinite(sq)
    safe = jnp.where(pos, sq, jnp.ones_like(sq))
    scale = jnp.asarray(1.0 / (1.0 + NORM_MARGIN), sq.dtype)
    return jnp.where(pos, jax.lax.rsqrt(safe) * scale, jnp.zeros_like(sq))


def _zero_bad_rows(rows: list[jax.Array], ok: jax.Array) -> list[jax.Array]:
    """Zero every row ``i`` with ``ok[i]`` False, with ``where`` (``0 * inf`` is NaN).

    An example whose gradient overflows (e.g. a finite 3e38 input through a
    LayerNorm) then contributes exactly nothing instead of turning the whole
    sum into NaN, which would make the release fail for this dataset and not
    for its neighbour.
    """
    return [
        jnp.where(ok.reshape((-1,) + (1,) * (r.ndim - 1)), r, jnp.zeros((), r.dtype)) for r in rows
    ]


def _num_params(params: Any) -> int:
    return int(sum(math.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)))


def _pad_rows(a: jax.Array, n_pad: int, zero: bool) -> jax.Array:
    """Append ``n_pad`` rows: zeros, or copies of the last row (a finite, valid input)."""
    if n_pad == 0:
        return a
    extra = jnp.zeros((n_pad, *a.shape[1:]), a.dtype) if zero else jnp.repeat(a[-1:], n_pad, axis=0)
    return jnp.concatenate([a, extra], axis=0)


def _chunked(
    fn: Callable[..., Any],
    arrays: tuple[jax.Array, ...],
    chunk: int,
    reduce: bool,
    zero_pad: tuple[bool, ...] | None = None,
) -> Any:
    """Apply ``fn`` to fixed-size row chunks of ``arrays``.

    The last chunk is padded to ``chunk`` rows: inputs by repeating their last
    row, arrays flagged in ``zero_pad`` (the label-weight matrix) by zeros, so
    padding contributes nothing to a ``reduce=True`` sum. ``reduce=False``: ``fn``
    maps a chunk to a pytree of ``(chunk, ...)`` rows; return rows ``[:n]``.
    """
    n = arrays[0].shape[0]
    chunk = min(chunk, n)
    n_chunks = -(-n // chunk)
    if n_chunks == 1:
        return fn(*arrays)
    pad = n_chunks * chunk - n
    zero_pad = zero_pad or (False,) * len(arrays)
    stacked = tuple(
        _pad_rows(a, pad, z).reshape(n_chunks, chunk, *a.shape[1:])
        for a, z in zip(arrays, zero_pad, strict=True)
    )
    body = jax.checkpoint(fn)
    if reduce:
        init = jax.tree_util.tree_map(
            lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, *(s[0] for s in stacked))
        )

        def step(acc: Any, xs: tuple[jax.Array, ...]) -> tuple[Any, None]:
            return jax.tree_util.tree_map(jnp.add, acc, body(*xs)), None

        out, _ = jax.lax.scan(step, init, stacked)
        return out
    out = jax.lax.map(lambda xs: body(*xs), stacked)
    return jax.tree_util.tree_map(lambda o: o.reshape(n_chunks * chunk, *o.shape[2:])[:n], out)


def _call_jitted(
    core: Callable[..., Any], static: dict[str, Any], *args: Any, precision: str | None = None
) -> Any:
    """Run the jitted ``core`` (static kwargs incl. ``apply_fn``); eager if unhashable.

    ``precision``: matmul precision of the whole computation (``"highest"`` for a
    release of private data; None: the backend default, see `privkernels.precision`).
    """
    try:
        hash(tuple(static.values()))
    except TypeError:
        with matmul_precision(precision):
            return core(*args, **static)
    return _JITTED[core](*args, precision=precision, **static)


def _with_precision(core: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, precision: str | None, **static: Any) -> Any:
        with matmul_precision(precision):
            return core(*args, **static)

    return run


# --------------------------------------------------------------------------- generic path


def _generic_leaf_grads(apply_fn: ApplyFn, params: Any, xb: jax.Array) -> list[jax.Array]:
    """Raw per-example gradients of the summed outputs (vmap of grad): ``(b, p_leaf)`` leaves."""

    def f(p: Any, xi: jax.Array) -> jax.Array:
        return jnp.sum(apply_fn(p, xi[None]))

    grads = jax.vmap(jax.grad(f), in_axes=(None, 0))(params, xb)
    b = xb.shape[0]
    return [leaf.reshape(b, -1) for leaf in jax.tree_util.tree_leaves(grads)]


def _row_sqnorm(g: jax.Array) -> jax.Array:
    """``(b, d) -> (b,)`` sums of squares; leaves over 4,096 entries in two levels.

    One reduction's worst-case float32 error grows with ``d``, and the
    normalisation's margin (`_inv_norm`) covers chains up to about 8,000
    (`privkernels._numerics.blocked_sum`; a LeNet dense leaf has 48,000).
    """
    if g.shape[1] <= ONE_REDUCTION:
        return jnp.sum(g * g, axis=1)
    return blocked_sum(g * g, ONE_REDUCTION, TWO_LEVELS)


def _leaf_sqnorm(leaves: list[jax.Array]) -> jax.Array:
    return sum((_row_sqnorm(g) for g in leaves[1:]), _row_sqnorm(leaves[0]))


def _generic_features(apply_fn: ApplyFn, normalize: bool, params: Any, xb: jax.Array) -> jax.Array:
    leaves = _generic_leaf_grads(apply_fn, params, xb)
    sq = _leaf_sqnorm(leaves)
    leaves = _zero_bad_rows(leaves, jnp.isfinite(sq))
    g = jnp.concatenate(leaves, axis=1)
    if normalize:
        g = g * _inv_norm(sq)[:, None]
    return g


def _generic_embedding(
    apply_fn: ApplyFn, normalize: bool, params: Any, xb: jax.Array, lw: jax.Array
) -> jax.Array:
    """``(p, C)`` = sum_i phi(x_i) lw_i^T; each gradient leaf is reduced on its own
    (``g_leaf^T @ [lw / ||g||]``), so neither the ``(b, p)`` concatenation nor a
    normalised copy of it is formed."""
    leaves = _generic_leaf_grads(apply_fn, params, xb)
    sq = _leaf_sqnorm(leaves)
    ok = jnp.isfinite(sq)
    leaves = _zero_bad_rows(leaves, ok)
    m = jnp.where(ok[:, None], lw.astype(leaves[0].dtype), 0.0)
    if normalize:
        m = m * _inv_norm(sq)[:, None]
    return jnp.concatenate([g.T @ m for g in leaves], axis=0)


# --------------------------------------------------------------------------- structured path


class _DenseCall(NamedTuple):
    kernel_idx: int  # position of the kernel leaf in tree_leaves(params)
    bias_idx: int | None
    in_dim: int
    out_dim: int
    out_dtype: str


def _dense_plan(
    apply_fn: ApplyFn, params: Any, input_shape: tuple[int, ...], dtype: Any
) -> tuple[_DenseCall, ...] | str:
    """Return the Dense-call plan if ``apply_fn`` is a dense MLP, else a reason string."""
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        return "params has no leaves"
    calls: list[_DenseCall] = []
    problems: list[str] = []
    b = 2

    def traced(p: Any, x: jax.Array) -> jax.Array:
        ids = {id(leaf): i for i, leaf in enumerate(jax.tree_util.tree_leaves(p))}

        def icpt(
            next_fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any
        ) -> Any:
            mod = ctx.module
            if ctx.method_name != "__call__" or not isinstance(mod, nn.Dense):
                return next_fun(*args, **kwargs)
            path = getattr(mod.scope, "path", ())
            if (
                type(mod) is not nn.Dense
                or mod.dot_general is not None
                or mod.dot_general_cls is not None
            ):
                problems.append(f"non-standard Dense at {path}")
                return next_fun(*args, **kwargs)
            a = args[0] if args else kwargs.get("inputs")
            k: Any = mod.get_variable("params", "kernel")
            bias: Any = mod.get_variable("params", "bias")
            out = next_fun(*args, **kwargs)
            if a is None or a.ndim != 2 or a.shape[0] != b or out.ndim != 2:
                problems.append(f"Dense at {path} is not applied to (batch, features) rows")
            elif id(k) not in ids or (bias is not None and id(bias) not in ids):
                problems.append(f"Dense at {path} does not use a params leaf directly")
            else:
                calls.append(
                    _DenseCall(
                        ids[id(k)],
                        None if bias is None else ids[id(bias)],
                        int(a.shape[1]),
                        int(out.shape[1]),
                        str(out.dtype),
                    )
                )
            return out

        with nn.intercept_methods(icpt):
            return apply_fn(p, x)

    try:
        jax.eval_shape(traced, params, jax.ShapeDtypeStruct((b, *input_shape), dtype))
    except Exception as err:  # noqa: BLE001 - any failure means "not recognisable"
        return f"tracing apply_fn failed ({type(err).__name__}: {err})"
    if problems:
        return "; ".join(problems)
    if not calls:
        return "no flax.linen.Dense layer found"
    used = [c.kernel_idx for c in calls] + [c.bias_idx for c in calls if c.bias_idx is not None]
    if len(used) != len(set(used)):
        return "a parameter is used by more than one Dense call (weight sharing)"
    if sorted(used) != list(range(len(leaves))):
        return "params holds leaves that are not Dense kernels/biases (e.g. convolutions)"
    for c in calls:
        if np.shape(leaves[c.kernel_idx]) != (c.in_dim, c.out_dim):
            return "unexpected Dense kernel shape"
    return tuple(calls)


def is_dense_mlp(apply_fn: ApplyFn, params: Any, input_shape: Sequence[int]) -> bool:
    """Whether ``method="auto"`` would use the structured dense-MLP path.

    ``input_shape`` is the shape of ONE example. Only shapes are traced.
    """
    plan = _dense_plan(apply_fn, params, tuple(input_shape), jnp.float32)
    return not isinstance(plan, str)


def _structured_parts(
    apply_fn: ApplyFn, plan: tuple[_DenseCall, ...], params: Any, xb: jax.Array
) -> tuple[list[jax.Array], list[jax.Array]]:
    """Dense inputs ``A_l (b, in)`` and output deltas ``Delta_l (b, out)`` for a chunk."""
    b = xb.shape[0]
    perts = [jnp.zeros((b, c.out_dim), c.out_dtype) for c in plan]

    def f(perts: list[jax.Array]) -> tuple[jax.Array, list[jax.Array]]:
        inputs: list[jax.Array] = []

        def icpt(
            next_fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any
        ) -> Any:
            if ctx.method_name != "__call__" or type(ctx.module) is not nn.Dense:
                return next_fun(*args, **kwargs)
            j = len(inputs)
            if j >= len(perts):
                raise RuntimeError("apply_fn made more Dense calls than when it was planned")
            inputs.append(args[0] if args else kwargs["inputs"])
            return next_fun(*args, **kwargs) + perts[j]

        with nn.intercept_methods(icpt):
            out = apply_fn(params, xb)
        if len(inputs) != len(perts):
            raise RuntimeError("apply_fn made fewer Dense calls than when it was planned")
        return jnp.sum(out), inputs

    deltas, inputs = jax.grad(f, has_aux=True)(perts)
    return inputs, deltas


def _structured_sqnorm(
    plan: tuple[_DenseCall, ...], inputs: list[jax.Array], deltas: list[jax.Array]
) -> jax.Array:
    sq: Any = 0.0
    for c, a, d in zip(plan, inputs, deltas, strict=True):
        dd = jnp.sum(d * d, axis=1)
        aa = jnp.sum(a * a, axis=1)
        sq = sq + (aa + (1.0 if c.bias_idx is not None else 0.0)) * dd
    return sq


def _structured_embedding(
    apply_fn: ApplyFn,
    plan: tuple[_DenseCall, ...],
    normalize: bool,
    params: Any,
    xb: jax.Array,
    lw: jax.Array,
) -> jax.Array:
    """``(p, C)`` = sum_i phi(x_i) lw_i^T for a chunk, without per-example gradients."""
    inputs, deltas = _structured_parts(apply_fn, plan, params, xb)
    b, n_cls = lw.shape
    sq = _structured_sqnorm(plan, inputs, deltas)
    ok = jnp.isfinite(sq)
    inputs, deltas = _zero_bad_rows(inputs, ok), _zero_bad_rows(deltas, ok)
    m = jnp.where(ok[:, None], lw.astype(deltas[0].dtype), 0.0)
    if normalize:
        m = m * _inv_norm(sq)[:, None]
    blocks: dict[int, jax.Array] = {}
    for c, a, d in zip(plan, inputs, deltas, strict=True):
        if c.out_dim >= c.in_dim:
            # A^T (b, in) @ [Delta * m] (b, out*C) -> (in, out, C)
            dm = (d[:, :, None] * m[:, None, :]).reshape(b, c.out_dim * n_cls)
            kern = (a.T @ dm).reshape(c.in_dim * c.out_dim, n_cls)
        else:
            # [A * m]^T (in*C, b) @ Delta (b, out) -> (in, C, out) -> (in, out, C)
            am = (a[:, :, None] * m[:, None, :]).reshape(b, c.in_dim * n_cls)
            kern = (am.T @ d).reshape(c.in_dim, n_cls, c.out_dim).transpose(0, 2, 1)
            kern = kern.reshape(c.in_dim * c.out_dim, n_cls)
        blocks[c.kernel_idx] = kern
        if c.bias_idx is not None:
            blocks[c.bias_idx] = d.T @ m
    return jnp.concatenate([blocks[i] for i in range(len(blocks))], axis=0)


def _structured_rows(
    apply_fn: ApplyFn, plan: tuple[_DenseCall, ...], normalize: bool, params: Any, xb: jax.Array
) -> tuple[list[jax.Array], list[jax.Array], jax.Array]:
    inputs, deltas = _structured_parts(apply_fn, plan, params, xb)
    sq = _structured_sqnorm(plan, inputs, deltas)
    ok = jnp.isfinite(sq)
    inputs, deltas = _zero_bad_rows(inputs, ok), _zero_bad_rows(deltas, ok)
    scale = _inv_norm(sq) if normalize else jnp.ones(xb.shape[0])
    return inputs, deltas, scale


# --------------------------------------------------------------------------- jitted cores


def _features_core(
    params: Any, x: jax.Array, *, apply_fn: ApplyFn, normalize: bool, chunk: int
) -> jax.Array:
    fn = lambda xb: _generic_features(apply_fn, normalize, params, xb)
    return _chunked(fn, (x,), chunk, reduce=False)


def _embedding_core(
    params: Any,
    x: jax.Array,
    lw: jax.Array,
    *,
    apply_fn: ApplyFn,
    normalize: bool,
    chunk: int,
    plan: Any,
    mesh: Any = None,
) -> jax.Array:
    """``sum_i phi(x_i) lw_i^T``, ``(p, c)``, in chunks of ``chunk`` rows; with ``mesh`` the
    same on every shard of a row-sharded ``(x, lw)``, then one all-reduce."""
    if mesh is not None:
        name, _ = mesh_axis(mesh)

        def local(p: Any, xl: jax.Array, ll: jax.Array) -> jax.Array:
            out = _embedding_core(
                p, xl, ll, apply_fn=apply_fn, normalize=normalize, chunk=chunk, plan=plan
            )
            return out[None]

        return sum_over_shards(local, mesh, (P(), P(name), P(name)), params, x, lw)
    if plan is None:
        fn = lambda xb, lb: _generic_embedding(apply_fn, normalize, params, xb, lb)
    else:
        fn = lambda xb, lb: _structured_embedding(apply_fn, plan, normalize, params, xb, lb)
    return _chunked(fn, (x, lw), chunk, reduce=True, zero_pad=(False, True))


def _kernel_core(
    params: Any,
    x1: jax.Array,
    x2: jax.Array,
    *,
    apply_fn: ApplyFn,
    normalize: bool,
    chunk: int,
    plan: Any,
) -> jax.Array:
    if plan is None:
        phi1 = _chunked(
            lambda xb: _generic_features(apply_fn, normalize, params, xb), (x1,), chunk, False
        )
        rows = _chunked(
            lambda xb: _generic_features(apply_fn, normalize, params, xb) @ phi1.T,
            (x2,),
            chunk,
            False,
        )
        return rows.T
    rows_fn = lambda xb: _structured_rows(apply_fn, plan, normalize, params, xb)
    a1, d1, s1 = _chunked(rows_fn, (x1,), chunk, False)
    a2, d2, s2 = _chunked(rows_fn, (x2,), chunk, False)
    k = jnp.zeros((x1.shape[0], x2.shape[0]), s1.dtype)
    for c, aa1, dd1, aa2, dd2 in zip(plan, a1, d1, a2, d2, strict=True):
        ka = aa1 @ aa2.T
        if c.bias_idx is not None:
            ka = ka + 1.0
        k = k + ka * (dd1 @ dd2.T)
    return k * s1[:, None] * s2[None, :]


def _grouped_core(
    params: Any,
    x: jax.Array,
    w: jax.Array,
    perm: jax.Array,
    mask: jax.Array,
    cls: jax.Array,
    *,
    apply_fn: ApplyFn,
    normalize: bool,
    plan: Any,
    n_classes: int,
) -> jax.Array:
    """Structured embedding over class-pure chunks (hard, concrete labels).

    Chunk ``g`` holds examples ``perm[g]`` (``mask`` marks real rows; padding
    rows get weight 0), all of class ``cls[g]``; its ``(p,)`` block
    ``sum_i w_i phi(x_i)`` is added to column ``cls[g]``. The Dense products then
    cost ``n * in * out`` rather than ``n * in * out * C`` for the dense one-hot
    layout. Every chunk holds at least one real row (see `_class_layout`),
    so the scan body is branch-free: a ``lax.cond`` skipping empty chunks made
    the reverse pass several times slower than the work it saved.
    """
    p = _num_params(params)
    dtype = jnp.result_type(w.dtype, *jax.tree_util.tree_leaves(params))
    # One gather outside the loop (one scatter-add in the reverse pass).
    xs = x[perm]
    ws = jnp.where(mask, w[perm], jnp.zeros((), w.dtype))

    def chunk_vec(xb: jax.Array, wb: jax.Array) -> jax.Array:
        vec = _structured_embedding(apply_fn, plan, normalize, params, xb, wb[:, None])
        return vec[:, 0].astype(dtype)

    chunk_fn = jax.checkpoint(chunk_vec)  # residuals: the chunk's inputs only

    def step(acc: jax.Array, inp: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        xb, wb, c = inp
        return acc.at[c].add(chunk_fn(xb, wb)), None  # (C, p): contiguous row update

    if perm.shape[0] == 1:
        return jnp.zeros((n_classes, p), dtype).at[cls[0]].add(chunk_fn(xs[0], ws[0])).T
    acc, _ = jax.lax.scan(step, jnp.zeros((n_classes, p), dtype), (xs, ws, cls))
    return acc.T


def _grouped_chunk(labels: np.ndarray, n_classes: int, cap: int) -> int:
    """Chunk size (<= ``cap``) for class-pure chunks that wastes the fewest padded rows.

    Cost model: padded rows ``sum_c ceil(n_c / k) * k`` plus a fixed per-chunk
    overhead of 16 rows (scan step, output update). Host-side, on the label counts.
    """
    counts = np.bincount(labels, minlength=n_classes)
    counts = counts[counts > 0]
    cands = set(range(8, cap + 1, 8)) | {max(1, min(cap, int(counts.max())))}
    best, best_cost = cap, None
    for k in sorted(cands):
        g = int(np.sum(-(-counts // k)))
        cost = g * (k + 16)
        if best_cost is None or cost < best_cost:
            best, best_cost = k, cost
    return best


def _class_layout(
    labels: np.ndarray, n_classes: int, chunk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host-side index layout of class-pure ``chunk``-row chunks (padding masked).

    Returns ``perm (G, chunk)``, ``mask (G, chunk)`` and ``cls (G,)`` with
    ``G = sum_c ceil(n_c / chunk)``: no chunk is empty. ``G`` depends on the class
    counts only through that sum, which lies in ``[ceil(n / chunk),
    ceil(n / chunk) + n_classes - 1]``, so a given ``(n, chunk)`` compiles at most
    ``n_classes`` programs; label draws with the same class counts (e.g. the
    balanced DP-NTK generator batches) always reuse one.
    """
    counts = np.bincount(labels, minlength=n_classes)
    n_chunks = int(sum(-(-int(k) // chunk) for k in counts))
    perm = np.zeros((n_chunks, chunk), np.int32)
    mask = np.zeros((n_chunks, chunk), bool)
    cls = np.zeros((n_chunks,), np.int32)
    order = np.argsort(labels, kind="stable")
    g = 0
    start = 0
    for c in range(n_classes):
        idx = order[start : start + int(counts[c])]
        start += int(counts[c])
        for lo in range(0, idx.size, chunk):
            part = idx[lo : lo + chunk]
            perm[g, : part.size] = part
            perm[g, part.size :] = part[-1]  # padding repeats a real (finite) row
            mask[g, : part.size] = True
            cls[g] = c
            g += 1
    return perm, mask, cls


# jax.jit wrappers of the cores; jit's own cache is keyed by the static arguments.
_STATIC: dict[Callable[..., Any], tuple[str, ...]] = {
    _features_core: ("apply_fn", "normalize", "chunk"),
    _embedding_core: ("apply_fn", "normalize", "chunk", "plan", "mesh"),
    _grouped_core: ("apply_fn", "normalize", "plan", "n_classes"),
    _kernel_core: ("apply_fn", "normalize", "chunk", "plan"),
}
_JITTED: dict[Callable[..., Any], Callable[..., Any]] = {
    core: jax.jit(_with_precision(core), static_argnames=(*names, "precision"))
    for core, names in _STATIC.items()
}


# --------------------------------------------------------------------------- validation


def _check_apply(apply_fn: Any) -> None:
    if not callable(apply_fn):
        raise TypeError(
            f"apply_fn must be callable as apply_fn(params, x_batch), got {type(apply_fn).__name__}"
        )


def _check_x(x: Any, name: str) -> jax.Array:
    arr = check_array(x, name)
    if arr.ndim < 2:
        raise ValueError(
            f"{name} must be a batch of shape (n, *input_shape) with rank >= 2, got shape {tuple(arr.shape)}"
        )
    arr = jnp.asarray(arr)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.float32)
    return arr


def _check_chunk(chunk_size: Any) -> int | None:
    return None if chunk_size is None else check_int(chunk_size, "chunk_size", minimum=1)


def check_method(method: Any) -> str:
    """``method`` if it names an e-NTK core (``"auto"``, ``"generic"``, ``"structured"``),
    else ``ValueError`` (public: fits check it before any draw)."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    return str(method)


def _abstract_params_key(params: Any) -> tuple[Any, ...] | None:
    """``(treedef, ((shape, dtype), ...))`` of ``params``, or None if a leaf has no shape/dtype."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    if not all(hasattr(a, "shape") and hasattr(a, "dtype") for a in leaves):
        return None
    return treedef, tuple((tuple(a.shape), np.dtype(a.dtype)) for a in leaves)


@functools.lru_cache(maxsize=64)
def _cached_dense_plan(
    apply_fn: ApplyFn, params_key: tuple[Any, ...], input_shape: tuple[int, ...], dtype: np.dtype
) -> tuple[_DenseCall, ...] | str:
    """`_dense_plan` of abstract params (shapes and dtypes only), memoized.

    The plan is a function of the network, the parameter tree's structure, shapes and
    dtypes and the input shape alone (`_dense_plan` traces shapes, never values), so
    repeated calls reuse it instead of re-tracing the flax module (10-50 ms of host time
    per `entk_mean_embedding` call on the 2-core CPU). A pure cache of public constants:
    it holds no data.
    """
    treedef, avals = params_key
    abstract = jax.tree_util.tree_unflatten(
        treedef, [jax.ShapeDtypeStruct(shape, dt) for shape, dt in avals]
    )
    return _dense_plan(apply_fn, abstract, input_shape, dtype)


def _plan_of(apply_fn: ApplyFn, params: Any, x: jax.Array) -> tuple[_DenseCall, ...] | str:
    """`_dense_plan` for ``x``'s example shape, from the cache when ``apply_fn`` hashes."""
    key = _abstract_params_key(params)
    try:
        hash((apply_fn, key))
    except TypeError:
        key = None
    if key is None:
        return _dense_plan(apply_fn, params, tuple(x.shape[1:]), x.dtype)
    # dtypes as objects, not ``.str``: bfloat16 and the float8 types all read "<V2"/"<V1"
    return _cached_dense_plan(apply_fn, key, tuple(x.shape[1:]), np.dtype(x.dtype))


def _resolve_plan(method: str, apply_fn: ApplyFn, params: Any, x: jax.Array) -> Any:
    if method == "generic":
        return None
    plan = _plan_of(apply_fn, params, x)
    if isinstance(plan, str):
        if method == "structured":
            raise ValueError(f"method='structured' needs a dense MLP of flax Dense layers: {plan}")
        return None
    return plan


def _auto_chunk(n: int | None, per_example_bytes: int, budget: int) -> int:
    """Rows per chunk within ``budget`` bytes, capped at ``n`` (None: no cap, a size that
    depends on the public network alone)."""
    rows = max(1, budget // max(per_example_bytes, 1))
    return int(rows if n is None else max(1, min(n, rows)))


def _label_weights(
    y: Any, n_classes: int, n: int, sample_weights: Any
) -> tuple[jax.Array, jax.Array, np.ndarray | None]:
    """Validate labels/weights.

    Returns ``(lw, w, labels)``: the ``(n, C)`` matrix ``w_i * onehot(y_i)`` (or
    ``w_i * y_i`` for a label matrix), the ``(n,)`` weights ``w_i``, and the
    concrete int32 labels (None for a label matrix or traced labels).
    """
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    labels: np.ndarray | None = None
    if hasattr(y, "ndim") and y.ndim == 2:
        ymat = check_array(y, "y", ndim=2)
        if ymat.shape != (n, n_classes):
            raise ValueError(
                f"y as a label matrix must have shape (n, n_classes) = {(n, n_classes)}, got {ymat.shape}"
            )
        lw = jnp.asarray(ymat, jnp.float32)
    elif _is_tracer(y):
        if y.ndim != 1 or y.shape[0] != n or not jnp.issubdtype(y.dtype, jnp.integer):
            raise ValueError(
                f"y must be (n,) = ({n},) integer labels, got shape {y.shape} dtype {y.dtype}"
            )
        lw = jax.nn.one_hot(y, n_classes, dtype=jnp.float32)
    else:
        labels = check_labels(y, n_classes, "y", n_rows=n)
        lw = jax.nn.one_hot(jnp.asarray(labels), n_classes, dtype=jnp.float32)
    if sample_weights is None:
        w = jnp.full((n,), 1.0 / n, jnp.float32)
    else:
        w_arr = check_array(sample_weights, "sample_weights", ndim=1)
        if w_arr.shape[0] != n:
            raise ValueError(f"sample_weights has {w_arr.shape[0]} entries but x has {n} rows")
        if not _is_tracer(w_arr) and bool(np.any(np.asarray(w_arr) < 0)):
            raise ValueError("sample_weights must be >= 0")
        w = jnp.asarray(w_arr, jnp.float32)
    return lw * w[:, None], w, labels


# --------------------------------------------------------------------------- public API


def entk_features(
    apply_fn: ApplyFn, params: Any, x: Any, *, normalize: bool = True, chunk_size: int | None = None
) -> jax.Array:
    """e-NTK features ``phi(x_i) = grad_theta sum_k f(x_i)_k`` (DP-NTK Sec. 2.3 / 3).

    Args:
        apply_fn: ``apply_fn(params, x_batch) -> (b, k)``, a fixed function: compiled
            programs and the structured path's plan are cached by its identity (with the
            parameters' shapes), so a function whose body reads a module that is later
            rebound (a notebook cell run again) reuses the old network's programs; pass
            a new function (e.g. ``new_model.apply``) for a new network.
        params: parameter pytree (every leaf is differentiated).
        x: ``(n, *input_shape)`` float inputs.
        normalize: divide each row by its L2 norm (zero rows stay zero).
        chunk_size: examples per chunk (peak memory ``O(chunk_size * p)``); None = auto.

    Returns:
        ``(n, p)`` float32, ``p`` = number of parameters, columns in
        ``ravel_pytree(params)`` order. Differentiable w.r.t. ``x`` and ``params``.
    """
    _check_apply(apply_fn)
    x = _check_x(x, "x")
    chunk = _check_chunk(chunk_size)
    p = _num_params(params)
    if chunk is None:
        chunk = _auto_chunk(x.shape[0], 3 * 4 * p, _GENERIC_BUDGET)
    static = {"apply_fn": apply_fn, "normalize": bool(normalize), "chunk": chunk}
    return _call_jitted(_features_core, static, params, x)


def entk_mean_embedding(
    apply_fn: ApplyFn,
    params: Any,
    x: Any,
    y: Any,
    n_classes: int,
    *,
    chunk_size: int | None = None,
    method: str = "auto",
    sample_weights: Any = None,
    normalize: bool = True,
    mesh: Any = None,
    precision: str | None = "highest",
    total: bool = False,
) -> jax.Array:
    """Class-conditional e-NTK mean embedding (DP-NTK eq. 4 / eq. 5), streamed.

    ``mu = sum_i w_i phi(x_i) onehot(y_i)^T`` with ``w_i = 1/n`` by default, so
    that ``||mu(D) - mu(D')||_F <= 2/n`` for neighbouring datasets (Prop. 3.1).
    With ``sample_weights`` the given ``w_i`` are used as-is (no ``1/n``), e.g.
    ``1/n_{y_i}`` for the per-class means of Harder et al. (2021) used by DP-NTK on
    imbalanced tabular data; the sensitivity is then the caller's to derive
    (``2 max_i w_i`` for fixed weights), and weights computed from private data
    must be accounted for by the caller.

    Args:
        apply_fn, params: the e-NTK network (see `entk_features`).
        x: ``(n, *input_shape)`` inputs (differentiable: the DP-NTK generator
            backpropagates through this function).
        y: ``(n,)`` integer labels in ``[0, n_classes)``, or an ``(n, n_classes)``
            float label matrix (one-hot / soft labels, e.g. of generated data).
        n_classes: number of classes ``C``.
        chunk_size: examples per chunk; None = auto from a fixed memory budget.
        method: ``"auto"`` (structured when `is_dense_mlp`), ``"generic"``
            (vmap of per-example grads) or ``"structured"`` (dense MLPs only).
        sample_weights: optional ``(n,)`` non-negative weights replacing ``1/n``.
        normalize: use normalised features (required for the 2/n sensitivity).
        mesh: a one-dimensional device mesh over the example axis
            (`privkernels.sharding`): every device streams its own rows
            through the same chunk function and the partial sums are added by
            one all-reduce; equal to ``mesh=None`` up to summation order. ``x``
            and ``y`` may be global arrays sharded over the mesh (labels never
            leave their host); the one-hot layout is used (not class-pure chunks).
        precision: matmul precision: ``"highest"`` (default: an embedding of
            private data bounds a sensitivity, `privkernels.precision`) or
            None for the backend default (generator training, post-processing).
        total: the class *sums* (``w_i = 1`` exactly) instead of the means: for
            relations where n is private (add-remove), whose neighbours differ
            in n and so would differ in every ``1/n`` weight (and in the
            rounding of every term). Not with ``sample_weights``.

    Returns:
        ``(p, n_classes)`` float32 (replicated over ``mesh``); never materialises
        the ``(n, p)`` features.
    """
    _check_apply(apply_fn)
    x = _check_x(x, "x")
    n = x.shape[0]
    method = check_method(method)
    chunk = _check_chunk(chunk_size)
    if total and sample_weights is not None:
        raise ValueError("total=True sums with unit weights; it takes no sample_weights")
    if mesh is not None:
        if sample_weights is not None:
            raise ValueError("sample_weights are not supported with a mesh")
        return _mesh_embedding(
            apply_fn, params, x, y, n_classes, chunk, method, normalize, mesh, precision, total
        )
    if total:
        sample_weights = jnp.ones((n,), jnp.float32)
    cap = None if total else n  # sums (n private): no chunk size read from n or the labels
    lw, w, labels = _label_weights(y, n_classes, n, sample_weights)
    n_classes = lw.shape[1]
    plan = _resolve_plan(method, apply_fn, params, x)
    if plan is None:
        if chunk is None:
            chunk = _auto_chunk(cap, 3 * 4 * _num_params(params), _GENERIC_BUDGET)
        static = {"apply_fn": apply_fn, "normalize": bool(normalize), "chunk": chunk, "plan": None}
        return _call_jitted(_embedding_core, static, params, x, lw, precision=precision)
    if labels is not None:  # concrete hard labels: class-pure chunks, C times fewer FLOPs
        if chunk is None:
            per = sum(c.in_dim + c.out_dim + max(c.in_dim, c.out_dim) for c in plan)
            chunk = _auto_chunk(cap, 4 * per, _STRUCTURED_BUDGET)
            chunk = chunk if total else _grouped_chunk(labels, n_classes, chunk)
        perm, mask, cls = _class_layout(labels, n_classes, chunk if total else min(chunk, n))
        static = {
            "apply_fn": apply_fn,
            "normalize": bool(normalize),
            "plan": plan,
            "n_classes": n_classes,
        }
        return _call_jitted(
            _grouped_core, static, params, x, w, perm, mask, cls, precision=precision
        )
    if chunk is None:
        per = sum(c.in_dim + c.out_dim + max(c.in_dim, c.out_dim) * n_classes for c in plan)
        chunk = _auto_chunk(cap, 4 * per, _STRUCTURED_BUDGET)
    static = {"apply_fn": apply_fn, "normalize": bool(normalize), "chunk": chunk, "plan": plan}
    return _call_jitted(_embedding_core, static, params, x, lw, precision=precision)


def _mesh_embedding(
    apply_fn: ApplyFn,
    params: Any,
    x: jax.Array,
    y: Any,
    n_classes: int,
    chunk: int | None,
    method: str,
    normalize: bool,
    mesh: Any,
    precision: str | None,
    total: bool = False,
) -> jax.Array:
    """The mesh branch of `entk_mean_embedding` (weights ``1/n``, or 1 with ``total``;
    one-hot layout)."""
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    n = int(x.shape[0])
    div = 1 if total else n  # a division by 1 is exact: unit weights
    if getattr(y, "ndim", 1) == 2:
        lw = jnp.asarray(check_array(y, "y", ndim=2), jnp.float32) / div
    else:
        labels = check_labels(y, n_classes, "y", n_rows=n)
        lw = jax.jit(lambda a: jax.nn.one_hot(a, n_classes, dtype=jnp.float32) / div)(labels)
    plan = _resolve_plan(method, apply_fn, params, x)
    (xs, lws), _ = shard_rows(mesh, x, lw)  # padding rows have zero weight
    if any(not getattr(a, "is_fully_addressable", True) for a in (xs, lws)):
        params = jax.tree_util.tree_map(np.asarray, params)  # host copies: replicated inputs
    _, d = mesh_axis(mesh)
    local_rows = int(xs.shape[0]) // d
    if chunk is None:
        per = (
            3 * 4 * _num_params(params)
            if plan is None
            else 4 * sum(c.in_dim + c.out_dim + max(c.in_dim, c.out_dim) * n_classes for c in plan)
        )
        chunk = _auto_chunk(  # sums (n private): a size from the network alone
            None if total else local_rows,
            per,
            _GENERIC_BUDGET if plan is None else _STRUCTURED_BUDGET,
        )
    static = {
        "apply_fn": apply_fn,
        "normalize": bool(normalize),
        "chunk": min(chunk, local_rows),
        "plan": plan,
        "mesh": mesh,
    }
    return _call_jitted(_embedding_core, static, params, xs, lws, precision=precision)


def entk_kernel(
    apply_fn: ApplyFn,
    params: Any,
    x1: Any,
    x2: Any,
    *,
    normalize: bool = True,
    chunk_size: int | None = None,
    method: str = "auto",
) -> jax.Array:
    """e-NTK Gram matrix ``K = phi(x1) phi(x2)^T`` (DP-NTK Sec. 2.3), ``(n1, n2)``.

    Generic path: ``phi(x1)`` is materialised (``O(n1 p)``) and ``x2`` streamed in
    chunks. Structured path (dense MLPs): ``K = s1 s2^T * sum_l (A1 A2^T + 1[bias])
    * (D1 D2^T)`` from per-layer activations and deltas, never forming ``phi``.
    Differentiable w.r.t. both inputs.
    """
    _check_apply(apply_fn)
    x1 = _check_x(x1, "x1")
    x2 = _check_x(x2, "x2")
    if x1.shape[1:] != x2.shape[1:]:
        raise ValueError(
            f"x1 and x2 must have the same example shape, got {x1.shape[1:]} and {x2.shape[1:]}"
        )
    method = check_method(method)
    chunk = _check_chunk(chunk_size)
    plan = _resolve_plan(method, apply_fn, params, x1)
    if chunk is None:
        if plan is None:
            chunk = _auto_chunk(
                max(x1.shape[0], x2.shape[0]), 3 * 4 * _num_params(params), _GENERIC_BUDGET
            )
        else:
            chunk = max(x1.shape[0], x2.shape[0])
    static = {"apply_fn": apply_fn, "normalize": bool(normalize), "chunk": chunk, "plan": plan}
    return _call_jitted(_kernel_core, static, params, x1, x2)


def make_entk_embedding_chunk_fn(
    apply_fn: ApplyFn,
    params: Any,
    input_shape: Sequence[int],
    *,
    normalize: bool = True,
    method: str = "auto",
) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
    """Pure per-chunk embedding ``fn(params, x_chunk, lw_chunk) -> (p, C)``.

    ``lw_chunk`` is the ``(b, C)`` matrix ``w_i * onehot(y_i)`` (zero rows for
    padding); the full embedding is the SUM of ``fn`` over chunks. The function
    is jitted, shape-polymorphic in nothing (one compile per chunk shape) and
    has no Python state, so an example axis can be sharded (e.g. ``shard_map``
    over chunks followed by ``psum``). ``params`` fixes the plan (structure and
    shapes only); the returned function takes params as an argument.
    """
    _check_apply(apply_fn)
    method = check_method(method)
    shape = tuple(check_int(s, "input_shape entries") for s in input_shape)
    plan = _resolve_plan(method, apply_fn, params, jnp.zeros((1, *shape), jnp.float32))
    norm = bool(normalize)
    if plan is None:
        fn = lambda p, xb, lb: _generic_embedding(apply_fn, norm, p, xb, lb)
    else:
        fn = lambda p, xb, lb: _structured_embedding(apply_fn, plan, norm, p, xb, lb)
    return jax.jit(fn)
