"""Scale-out over the example axis with JAX's SPMD machinery (``jax.shard_map``).

Every expensive quantity of the three methods is a SUM over private examples
(mean embeddings, clipped-gradient sums) or has independent rows (kernel
matrices). This module shards that example axis over a one-dimensional
:class:`jax.sharding.Mesh`:

* :func:`example_mesh` -- a mesh ``("examples",)`` over the given devices
  (default: all of ``jax.devices()``, i.e. every GPU/TPU of every host once
  ``jax.distributed.initialize()`` has run);
* :func:`shard_examples` -- pad the leading axis to a multiple of the device
  count (repeating the last row, which is a finite valid input) and return the
  sharded array with a mask marking the real rows;
* :func:`sharded_entk_mean_embedding` -- DP-NTK eq. (4): each device sums the
  per-chunk partial embeddings of its shard (the same pure chunk function as
  :func:`privkernels.features.entk.make_entk_embedding_chunk_fn`, so the
  structured dense-MLP path and the generic ``vmap(grad)`` path are both
  available), then one all-reduce (sum of the per-device partials). Differentiable w.r.t. ``x`` (DP-NTK generator);
* :func:`sharded_clipped_sum` / :func:`sharded_noisy_clipped_sum` -- DP-SGD /
  DP-KIP: per-example gradients are clipped ON EACH SHARD, summed, all-reduced,
  and THEN the Gaussian noise is drawn ONCE from the caller's key, exactly as
  :func:`privkernels.privacy.noisy_clipped_sum` draws it on one device (same key
  -> same noise, whatever the number of devices). Drawing noise per device
  would add ``D`` independent draws (``sqrt(D)`` times the calibrated std:
  wasteful) -- or, with a shared key, ``D`` identical draws (``D`` times the std
  but perfectly correlated): either way not the mechanism that was accounted;
* :func:`sharded_kernel_matrix` -- ``K(x1, x2)`` with the rows of ``x1``
  sharded, ``x2`` replicated; the result stays row-sharded.

With one device all of this still works (a mesh of size 1); results agree with
the single-device functions up to floating-point summation order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from privkernels._validation import check_array, check_int, check_labels, check_positive

__all__ = [
    "EXAMPLE_AXIS",
    "ShardedExamples",
    "example_mesh",
    "shard_examples",
    "sharded_entk_mean_embedding",
    "sharded_clipped_sum",
    "sharded_noisy_clipped_sum",
    "sharded_kernel_matrix",
]

#: Name of the mesh axis the example dimension is sharded over.
EXAMPLE_AXIS = "examples"

# Memory budgets (bytes per chunk on each device) when chunk_size is None.
_GENERIC_BUDGET = 1 << 28
_STRUCTURED_BUDGET = 1 << 27


class ShardedExamples(NamedTuple):
    """Padded, sharded examples: ``data`` leaves ``(n_pad, ...)``, ``mask (n_pad,)`` bool, ``n`` real rows."""

    data: Any
    mask: jax.Array
    n: int


# --------------------------------------------------------------------------- mesh helpers


def example_mesh(devices: Sequence[Any] | None = None, *, axis_name: str = EXAMPLE_AXIS) -> Mesh:
    """One-dimensional mesh ``(axis_name,)`` over ``devices`` (default ``jax.devices()``).

    On several hosts call ``jax.distributed.initialize()`` first: ``jax.devices()``
    then lists the devices of every process and the mesh spans all of them.
    """
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must not be empty")
    return Mesh(np.asarray(devs, dtype=object), (axis_name,))


def _axis(mesh: Mesh) -> tuple[str, int]:
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if len(mesh.axis_names) != 1:
        raise ValueError(f"expected a 1-D mesh over the example axis, got axes {mesh.axis_names}")
    name = mesh.axis_names[0]
    return name, int(mesh.shape[name])


def _pad_rows(a: jax.Array, n_pad: int, zero: bool = False) -> jax.Array:
    """Append ``n_pad`` rows: copies of the last row (a valid input) or zeros."""
    if n_pad == 0:
        return a
    extra = jnp.zeros((n_pad, *a.shape[1:]), a.dtype) if zero else jnp.repeat(a[-1:], n_pad, axis=0)
    return jnp.concatenate([a, extra], axis=0)


def _leading(tree: Any, name: str) -> int:
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"{name} has no array leaves")
    sizes = {int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves}
    if -1 in sizes or len(sizes) != 1:
        raise ValueError(
            f"every leaf of {name} needs the same leading example axis, got sizes {sorted(sizes)}"
        )
    n = sizes.pop()
    if n < 1:
        raise ValueError(f"{name} is empty")
    return n


def shard_examples(x: Any, mesh: Mesh, *, multiple: int = 1) -> ShardedExamples:
    """Pad the leading (example) axis and shard it over ``mesh``.

    Args:
        x: an array ``(n, ...)`` or a pytree of arrays sharing the leading ``n``.
        mesh: 1-D mesh (see :func:`example_mesh`).
        multiple: additionally pad so each device holds a multiple of this many
            rows (e.g. a chunk size).

    Returns:
        :class:`ShardedExamples` ``(data, mask, n)``: ``data`` with
        ``n_pad = ceil(n / (D * multiple)) * D * multiple`` rows (padding repeats
        the last row, so it is finite), ``mask[i] = i < n``; both placed with
        ``NamedSharding(mesh, P(axis))``.
    """
    name, d = _axis(mesh)
    multiple = check_int(multiple, "multiple", minimum=1)
    n = _leading(x, "x")
    block = d * multiple
    n_pad = -(-n // block) * block
    sharding = NamedSharding(mesh, P(name))
    data = jax.tree_util.tree_map(
        lambda a: jax.device_put(_pad_rows(jnp.asarray(a), n_pad - n), sharding), x
    )
    mask = jax.device_put(jnp.arange(n_pad) < n, sharding)
    return ShardedExamples(data, mask, n)


def _sum_partials(
    local: Callable[..., Any], mesh: Mesh, in_specs: tuple[Any, ...], *args: Any
) -> Any:
    """Run ``local`` on every shard and add the per-device partial results.

    ``local`` returns its partial sum with a leading axis of length 1; the
    ``(D, ...)`` stack is summed OUTSIDE the ``shard_map`` (XLA inserts the
    all-reduce), so reverse-mode derivatives w.r.t. sharded inputs are the
    plain per-shard ones. ``check_vma=False``: inside a shard, parameters are
    ordinary local values, so ``grad``/``vjp`` w.r.t. them (per-example
    gradients, the e-NTK deltas) stay per-device instead of being implicitly
    summed over devices as the transpose of an implicit ``pvary`` would.
    """
    name, _ = _axis(mesh)
    fn = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=P(name), check_vma=False)
    return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), fn(*args))


# --------------------------------------------------------------------------- e-NTK embedding


def _label_weights(
    y: Any, n_classes: int, n: int, sample_weights: Any
) -> tuple[jax.Array, np.ndarray | None]:
    """``(n, C)`` label weights ``w_i * onehot(y_i)`` (or ``w_i * Y_i``) and concrete labels if any."""
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    labels: np.ndarray | None = None
    if hasattr(y, "ndim") and y.ndim == 2:
        ymat = check_array(y, "y", ndim=2)
        if tuple(ymat.shape) != (n, n_classes):
            raise ValueError(
                f"y as a label matrix must have shape {(n, n_classes)}, got {tuple(ymat.shape)}"
            )
        lw = jnp.asarray(ymat, jnp.float32)
    elif isinstance(y, jax.core.Tracer):
        if y.ndim != 1 or y.shape[0] != n or not jnp.issubdtype(y.dtype, jnp.integer):
            raise ValueError(
                f"y must be ({n},) integer labels, got shape {y.shape} dtype {y.dtype}"
            )
        lw = jax.nn.one_hot(y, n_classes, dtype=jnp.float32)
    else:
        labels = np.asarray(check_labels(y, n_classes, "y", n_rows=n), np.int32)
        lw = jax.nn.one_hot(jnp.asarray(labels), n_classes, dtype=jnp.float32)
    if sample_weights is None:
        w = jnp.full((n,), 1.0 / n, jnp.float32)
    else:
        warr = check_array(sample_weights, "sample_weights", ndim=1)
        if warr.shape[0] != n:
            raise ValueError(f"sample_weights has {warr.shape[0]} entries but x has {n} rows")
        if not isinstance(warr, jax.core.Tracer) and bool(np.any(np.asarray(warr) < 0)):
            raise ValueError("sample_weights must be >= 0")
        w = jnp.asarray(warr, jnp.float32)
    return lw * w[:, None], labels


def _class_chunks(labels: np.ndarray, n_classes: int, chunk: int, d: int) -> tuple[np.ndarray, ...]:
    """Class-pure chunks (indices, mask, class) with the chunk count padded to a multiple of ``d``."""
    perm, mask, cls = [], [], []
    for c in range(n_classes):
        idx = np.flatnonzero(labels == c)
        for s in range(0, idx.size, chunk):
            part = idx[s : s + chunk]
            perm.append(np.concatenate([part, np.full(chunk - part.size, part[0], np.int64)]))
            mask.append(np.arange(chunk) < part.size)
            cls.append(c)
    while len(perm) % d:
        perm.append(np.zeros(chunk, np.int64))
        mask.append(np.zeros(chunk, bool))
        cls.append(0)
    return np.stack(perm).astype(np.int32), np.stack(mask), np.asarray(cls, np.int32)


@partial(jax.jit, static_argnames=("chunk_fn", "mesh", "n_classes"))
def _grouped_embedding(
    params: Any,
    xg: jax.Array,
    wg: jax.Array,
    cls: jax.Array,
    *,
    chunk_fn: Callable,
    mesh: Mesh,
    n_classes: int,
) -> jax.Array:
    name, _ = _axis(mesh)
    body_fn = jax.checkpoint(lambda p, xb, wb: chunk_fn(p, xb, wb[:, None])[:, 0])

    def local(p: Any, xs: jax.Array, ws: jax.Array, cs: jax.Array) -> jax.Array:
        probe = jax.eval_shape(body_fn, p, xs[0], ws[0])
        acc0 = jnp.zeros((probe.shape[0], n_classes), probe.dtype)

        def step(
            acc: jax.Array, inp: tuple[jax.Array, jax.Array, jax.Array]
        ) -> tuple[jax.Array, None]:
            xb, wb, c = inp
            return acc.at[:, c].add(body_fn(p, xb, wb)), None

        acc, _ = jax.lax.scan(step, acc0, (xs, ws, cs))
        return acc[None]

    return _sum_partials(local, mesh, (P(), P(name), P(name), P(name)), params, xg, wg, cls)


@partial(jax.jit, static_argnames=("chunk_fn", "mesh", "chunk"))
def _dense_embedding(
    params: Any, x: jax.Array, lw: jax.Array, *, chunk_fn: Callable, mesh: Mesh, chunk: int
) -> jax.Array:
    name, d = _axis(mesh)
    n = x.shape[0]
    block = d * chunk
    n_pad = -(-n // block) * block
    xs = _pad_rows(x, n_pad - n).reshape(n_pad // chunk, chunk, *x.shape[1:])
    ls = _pad_rows(lw, n_pad - n, zero=True).reshape(n_pad // chunk, chunk, lw.shape[1])
    body_fn = jax.checkpoint(chunk_fn)

    def local(p: Any, xl: jax.Array, ll: jax.Array) -> jax.Array:
        probe = jax.eval_shape(body_fn, p, xl[0], ll[0])
        acc0 = jnp.zeros(probe.shape, probe.dtype)

        def step(acc: jax.Array, inp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
            return acc + body_fn(p, *inp), None

        acc, _ = jax.lax.scan(step, acc0, (xl, ll))
        return acc[None]

    return _sum_partials(local, mesh, (P(), P(name), P(name)), params, xs, ls)


_CHUNK_FNS: dict[tuple[Any, ...], Callable] = {}


def _chunk_fn(
    apply_fn: Callable, params: Any, input_shape: tuple[int, ...], normalize: bool, method: str
) -> Callable:
    """Memoised ``make_entk_embedding_chunk_fn`` (a stable callable keeps jit caches warm)."""
    from privkernels.features.entk import make_entk_embedding_chunk_fn

    shapes = tuple(
        (tuple(np.shape(a)), str(jnp.result_type(a))) for a in jax.tree_util.tree_leaves(params)
    )
    key = (apply_fn, jax.tree_util.tree_structure(params), shapes, input_shape, normalize, method)
    try:
        hash(key)
    except TypeError:
        return make_entk_embedding_chunk_fn(
            apply_fn, params, input_shape, normalize=normalize, method=method
        )
    fn = _CHUNK_FNS.get(key)
    if fn is None:
        fn = make_entk_embedding_chunk_fn(
            apply_fn, params, input_shape, normalize=normalize, method=method
        )
        if len(_CHUNK_FNS) > 32:
            _CHUNK_FNS.clear()
        _CHUNK_FNS[key] = fn
    return fn


def sharded_entk_mean_embedding(
    apply_fn: Callable[[Any, jax.Array], jax.Array],
    params: Any,
    x: Any,
    y: Any,
    n_classes: int,
    *,
    mesh: Mesh | None = None,
    chunk_size: int | None = None,
    method: str = "auto",
    sample_weights: Any = None,
    normalize: bool = True,
) -> jax.Array:
    """e-NTK mean embedding (DP-NTK eq. 4) with the example axis sharded over ``mesh``.

    Same contract as :func:`privkernels.features.entk_mean_embedding`:
    ``mu = sum_i w_i phi(x_i) onehot(y_i)^T`` with ``w_i = 1/n`` by default. Each
    device scans fixed-size chunks of its shard with the pure chunk function of
    :func:`~privkernels.features.entk.make_entk_embedding_chunk_fn` (structured
    dense-MLP path or generic ``vmap(grad)`` path per ``method``) and the
    per-device partial sums are combined by one all-reduce. With concrete integer
    labels and the structured path, chunks are class-pure (one embedding column
    each, ``C`` times fewer FLOPs), as on one device.

    Args:
        apply_fn, params: e-NTK network (``apply_fn(params, (b, *s)) -> (b, k)``).
        x: ``(n, *s)`` inputs; differentiable (gradients flow through the gather,
            padding and ``shard_map``).
        y: ``(n,)`` int labels or ``(n, C)`` label matrix.
        n_classes: ``C``.
        mesh: 1-D mesh (default :func:`example_mesh` over all devices).
        chunk_size: examples per chunk on each device (default from a fixed
            memory budget that depends on shapes only).
        method: ``"auto"``, ``"structured"`` or ``"generic"``.
        sample_weights: optional ``(n,)`` weights replacing ``1/n``.
        normalize: use L2-normalised features.

    Returns:
        ``(p, C)`` float32, replicated on every device of ``mesh``.
    """
    from privkernels.features.entk import is_dense_mlp

    if not callable(apply_fn):
        raise TypeError("apply_fn must be callable as apply_fn(params, x_batch)")
    if method not in ("auto", "generic", "structured"):
        raise ValueError(f"method must be 'auto', 'generic' or 'structured', got {method!r}")
    mesh = example_mesh() if mesh is None else mesh
    _, d = _axis(mesh)
    xarr = check_array(x, "x")
    if xarr.ndim < 2:
        raise ValueError(
            f"x must have shape (n, *input_shape) with rank >= 2, got {tuple(xarr.shape)}"
        )
    xj = jnp.asarray(xarr)
    if not jnp.issubdtype(xj.dtype, jnp.floating):
        xj = xj.astype(jnp.float32)
    n = int(xj.shape[0])
    input_shape = tuple(int(s) for s in xj.shape[1:])
    lw, labels = _label_weights(y, n_classes, n, sample_weights)
    structured = method == "structured" or (
        method == "auto" and is_dense_mlp(apply_fn, params, input_shape)
    )
    chunk_fn = _chunk_fn(
        apply_fn, params, input_shape, bool(normalize), "structured" if structured else "generic"
    )
    leaves = jax.tree_util.tree_leaves(params)
    n_local = -(-n // d)
    if chunk_size is not None:
        chunk = check_int(chunk_size, "chunk_size", minimum=1)
    elif structured:
        mats = [np.shape(a) for a in leaves if np.ndim(a) == 2]
        cols = 1 if labels is not None else int(n_classes)
        per = sum(a + b + max(a, b) * cols for a, b in mats) or 1
        chunk = max(1, _STRUCTURED_BUDGET // (4 * per))
    else:
        p = sum(math.prod(np.shape(a)) for a in leaves)
        chunk = max(1, _GENERIC_BUDGET // (12 * max(p, 1)))
    if structured and labels is not None:
        counts = np.bincount(labels, minlength=n_classes)
        chunk = int(max(1, min(chunk, counts.max())))
        perm, mask, cls = _class_chunks(labels, int(n_classes), chunk, d)
        w_rows = jnp.sum(lw, axis=1)  # w_i (one-hot rows)
        xg = xj[jnp.asarray(perm)]
        wg = jnp.where(jnp.asarray(mask), w_rows[jnp.asarray(perm)], 0.0)
        return _grouped_embedding(
            params, xg, wg, jnp.asarray(cls), chunk_fn=chunk_fn, mesh=mesh, n_classes=int(n_classes)
        )
    chunk = int(max(1, min(chunk, n_local)))
    return _dense_embedding(params, xj, lw, chunk_fn=chunk_fn, mesh=mesh, chunk=chunk)


# --------------------------------------------------------------------------- clipped sums (DP-SGD / DP-KIP)


def _as_tuple(batch: Any) -> tuple[Any, ...]:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


@partial(jax.jit, static_argnames=("grad_fn", "mesh", "chunk"))
def _clipped_sum_impl(
    params: Any,
    batch: tuple[Any, ...],
    mask: jax.Array,
    clip_norm: jax.Array,
    *,
    grad_fn: Callable,
    mesh: Mesh,
    chunk: int,
) -> tuple[Any, jax.Array]:
    from privkernels.privacy.clipping import clip_per_example

    name, d = _axis(mesh)
    n = mask.shape[0]
    block = d * chunk
    n_pad = -(-n // block) * block
    k = n_pad // chunk
    bs = jax.tree_util.tree_map(
        lambda a: _pad_rows(a, n_pad - n).reshape(k, chunk, *a.shape[1:]), batch
    )
    ms = _pad_rows(mask.astype(bool), n_pad - n, zero=True).reshape(k, chunk)

    def chunk_sum(p: Any, xb: tuple[Any, ...], mb: jax.Array) -> tuple[Any, jax.Array]:
        g = grad_fn(p, *xb)
        clipped, norms = clip_per_example(g, clip_norm)  # type: ignore[arg-type]  # traced C is supported

        def masked(leaf: jax.Array) -> jax.Array:
            keep = jnp.reshape(mb, (mb.shape[0],) + (1,) * (leaf.ndim - 1))
            return jnp.sum(jnp.where(keep, leaf, jnp.zeros((), leaf.dtype)), axis=0)

        n_clip = jnp.sum(jnp.where(mb, (norms > clip_norm).astype(jnp.int32), 0))
        return jax.tree_util.tree_map(masked, clipped), n_clip

    body = jax.checkpoint(chunk_sum)

    def local(p: Any, xl: tuple[Any, ...], ml: jax.Array) -> tuple[Any, jax.Array]:
        probe = jax.eval_shape(body, p, jax.tree_util.tree_map(lambda a: a[0], xl), ml[0])
        acc0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), probe)

        def step(acc: Any, inp: tuple[Any, jax.Array]) -> tuple[Any, None]:
            xb, mb = inp
            return jax.tree_util.tree_map(jnp.add, acc, body(p, xb, mb)), None

        acc, _ = jax.lax.scan(step, acc0, (xl, ml))
        return jax.tree_util.tree_map(lambda a: a[None], acc)

    return _sum_partials(local, mesh, (P(), P(name), P(name)), params, bs, ms)


def sharded_clipped_sum(
    grad_fn: Callable[..., Any],
    params: Any,
    batch: Any,
    mask: Any,
    *,
    clip_norm: float,
    mesh: Mesh | None = None,
    chunk_size: int | None = None,
) -> tuple[Any, jax.Array]:
    """``sum_{i: mask_i} clip(g_i, C)`` with the examples sharded over ``mesh`` (no noise).

    Args:
        grad_fn: ``grad_fn(params, *batch_chunk) -> pytree`` of per-example
            gradients with a leading example axis (e.g. ``jax.vmap(jax.grad(loss_one),
            in_axes=(None, 0, 0))`` or ``lambda p, xt, yt:
            dp_kip.per_example_grads(spec, p, y_s, xt, yt)``). Must be hashable
            (it is a static jit argument): reuse one function object.
        params: parameters (replicated on every device).
        batch: array or tuple of arrays ``(b, ...)`` -- the (Poisson-)sampled examples.
        mask: ``(b,)`` bool/0-1: which rows are real (padding rows are excluded
            with ``where``, so even non-finite padding cannot leak in).
        clip_norm: ``C > 0`` (Abadi et al. 2016, Alg. 1 "clip gradient";
            :func:`privkernels.privacy.clip_per_example` on each shard).
        mesh: 1-D mesh (default :func:`example_mesh`).
        chunk_size: examples per chunk on each device (default ``ceil(b / D)``, at most 128).

    Returns:
        ``(summed, n_clipped)``: the pytree of ``grad_fn``'s leaves with the example
        axis summed out (replicated) and the number of real examples whose norm
        exceeded ``C``.
    """
    mesh = example_mesh() if mesh is None else mesh
    _, d = _axis(mesh)
    c = jnp.asarray(check_positive(clip_norm, "clip_norm"), jnp.float32)
    batch_t = tuple(jnp.asarray(check_array(a, "batch")) for a in _as_tuple(batch))
    b = _leading(batch_t, "batch")
    marr = jnp.asarray(check_array(mask, "mask", ndim=1))
    if marr.shape[0] != b:
        raise ValueError(f"mask must have shape ({b},), got {tuple(marr.shape)}")
    if chunk_size is None:
        chunk = max(1, min(128, -(-b // d)))
    else:
        chunk = check_int(chunk_size, "chunk_size", minimum=1)
    return _clipped_sum_impl(params, batch_t, marr, c, grad_fn=grad_fn, mesh=mesh, chunk=chunk)


def sharded_noisy_clipped_sum(
    key: Any,
    grad_fn: Callable[..., Any],
    params: Any,
    batch: Any,
    mask: Any,
    *,
    clip_norm: float,
    noise_multiplier: float,
    mesh: Mesh | None = None,
    chunk_size: int | None = None,
) -> Any:
    """One Gaussian-mechanism release of the clipped-gradient sum, sharded (DP-SGD / DP-KIP Alg. 1).

    ``sum_{i: mask_i} clip(g_i, C) + N(0, (sigma C)^2 I)``: clipping happens per
    example on each shard and the partial sums are all-reduced
    (:func:`sharded_clipped_sum`); the noise is then drawn ONCE, on the
    replicated sum, by :func:`privkernels.privacy.noisy_clipped_sum` with the
    caller's ``key``. It is therefore bit-for-bit the noise a single-device
    ``noisy_clipped_sum(key, clipped, mask, ...)`` adds, independent of the
    number of devices (validated before anything is drawn).

    Returns:
        Pytree like ``grad_fn``'s output with the example axis summed out.
    """
    from privkernels._validation import check_key
    from privkernels.privacy.clipping import noisy_clipped_sum

    key = check_key(key)
    sigma = check_positive(noise_multiplier, "noise_multiplier")
    summed, _ = sharded_clipped_sum(
        grad_fn, params, batch, mask, clip_norm=clip_norm, mesh=mesh, chunk_size=chunk_size
    )
    one = jax.tree_util.tree_map(lambda a: a[None], summed)
    return noisy_clipped_sum(
        key, one, jnp.ones((1,), bool), clip_norm=clip_norm, noise_multiplier=sigma
    )


# --------------------------------------------------------------------------- kernel matrices


@partial(jax.jit, static_argnames=("kernel_fn", "mesh", "chunk"))
def _kernel_rows(
    x1: jax.Array, x2: jax.Array, *, kernel_fn: Callable, mesh: Mesh, chunk: int
) -> jax.Array:
    name, d = _axis(mesh)
    n = x1.shape[0]
    block = d * chunk
    n_pad = -(-n // block) * block
    xs = _pad_rows(x1, n_pad - n)

    def local(xl: jax.Array, xr: jax.Array) -> jax.Array:
        blocks = xl.reshape(xl.shape[0] // chunk, chunk, *xl.shape[1:])
        rows = jax.lax.map(lambda xb: kernel_fn(xb, xr), blocks)
        return rows.reshape(xl.shape[0], rows.shape[-1])

    fn = jax.shard_map(
        local, mesh=mesh, in_specs=(P(name), P()), out_specs=P(name, None), check_vma=False
    )
    return fn(xs, x2)[:n]


def sharded_kernel_matrix(
    kernel_fn: Callable[[jax.Array, jax.Array], jax.Array],
    x1: Any,
    x2: Any,
    *,
    mesh: Mesh | None = None,
    chunk_size: int | None = None,
) -> jax.Array:
    """``K = kernel_fn(x1, x2)`` ``(n1, n2)`` with the rows (``x1``) sharded over ``mesh``.

    ``kernel_fn(a (na, *s), b (nb, *s)) -> (na, nb)`` must be traceable and
    hashable, e.g. ``functools.partial(fc_ntk_kernel, depth=1)`` or
    ``lambda a, b: quadratic_ntk_kernel(a, b, w)`` (keep one object to reuse
    compilations). Each device computes its rows ``chunk_size`` at a time
    (``lax.map``) against the replicated ``x2``; the result is row-sharded.
    """
    mesh = example_mesh() if mesh is None else mesh
    _, d = _axis(mesh)
    a = jnp.asarray(check_array(x1, "x1"))
    b = jnp.asarray(check_array(x2, "x2"))
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(
            f"x1 and x2 must have the same example shape, got {a.shape[1:]} and {b.shape[1:]}"
        )
    n_local = -(-int(a.shape[0]) // d)
    chunk = (
        n_local
        if chunk_size is None
        else min(check_int(chunk_size, "chunk_size", minimum=1), n_local)
    )
    return _kernel_rows(a, b, kernel_fn=kernel_fn, mesh=mesh, chunk=max(1, chunk))
