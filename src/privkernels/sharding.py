"""Meshes over the example axis: the helpers every method's ``mesh=`` uses.

Every expensive private quantity of the three methods is a SUM over examples
(DP-NTK's mean embedding, DP-KIP's clipped-gradient sums) or has independent
rows (regression kernel rows). With ``mesh=`` (a one-dimensional
`jax.sharding.Mesh`, e.g. `example_mesh`), each device runs the
*same* core function on its own rows (``jax.shard_map``) and the partial sums
are added by one all-reduce; noise is then drawn ONCE from the caller's key on
the replicated sum, so the release is the one-device release up to float
summation order, for any number of devices or hosts.

Data can be host arrays (they are placed row-sharded, padded to a multiple of
the device count with masked zero rows) or global ``jax.Array`` s already
sharded over the mesh, e.g. built on each host from its own rows with
``jax.make_array_from_process_local_data``: then no host ever holds the whole
private dataset, labels included, and ``n`` is the global row count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "EXAMPLE_AXIS",
    "example_mesh",
    "mesh_axis",
    "shard_rows",
    "sum_over_shards",
    "to_host",
]

#: Name of the mesh axis the example dimension is sharded over.
EXAMPLE_AXIS = "examples"


def example_mesh(devices: Sequence[Any] | None = None, *, axis_name: str = EXAMPLE_AXIS) -> Mesh:
    """One-dimensional mesh ``(axis_name,)`` over ``devices`` (default ``jax.devices()``).

    On several hosts call ``jax.distributed.initialize()`` first: ``jax.devices()``
    then lists the devices of every process and the mesh spans all of them.
    """
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must not be empty")
    return Mesh(np.asarray(devs, dtype=object), (axis_name,))


def mesh_axis(mesh: Any) -> tuple[str, int]:
    """``(axis name, number of devices)`` of a one-dimensional example mesh."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if len(mesh.axis_names) != 1:
        raise ValueError(f"expected a 1-D mesh over the example axis, got axes {mesh.axis_names}")
    name = mesh.axis_names[0]
    return name, int(mesh.shape[name])


def _is_global(a: Any) -> bool:
    return isinstance(a, jax.Array) and not a.is_fully_addressable


def shard_rows(mesh: Mesh, *arrays: Any) -> tuple[tuple[jax.Array, ...], int]:
    """Place ``(n, ...)`` arrays row-sharded over ``mesh``; returns ``(arrays, n)``.

    Host (or single-device) arrays are padded with zero rows to a multiple of
    the device count; callers give padding rows zero weight (``n`` is the real
    count). Global arrays spanning several processes are used as they are and
    must already have a multiple of the device count rows (each process pads
    its own rows if needed).
    """
    name, d = mesh_axis(mesh)
    n = int(arrays[0].shape[0])
    sharding = NamedSharding(mesh, P(name))
    out = []
    for a in arrays:
        if int(a.shape[0]) != n:
            raise ValueError("arrays to shard must have the same number of rows")
        if _is_global(a):
            if n % d:
                raise ValueError(
                    f"a global array sharded over {d} devices needs a multiple of {d} rows, got {n}"
                )
            out.append(a)
            continue
        arr = jnp.asarray(a)
        pad = -n % d
        if pad:
            arr = jnp.concatenate([arr, jnp.zeros((pad, *arr.shape[1:]), arr.dtype)])
        out.append(jax.device_put(arr, sharding))
    return tuple(out), n


def sum_over_shards(
    local: Callable[..., Any], mesh: Mesh, in_specs: tuple[Any, ...], *args: Any
) -> Any:
    """Run ``local`` on every shard and add the per-device partial results.

    ``local`` returns its partial sum with a leading axis of length 1; the
    ``(D, ...)`` stack is summed outside the ``shard_map`` (XLA inserts the
    all-reduce), so reverse-mode derivatives w.r.t. sharded inputs are the plain
    per-shard ones. ``check_vma=False``: inside a shard, replicated parameters
    are ordinary local values (per-example gradients w.r.t. them stay local).
    """
    name, _ = mesh_axis(mesh)
    fn = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=P(name), check_vma=False)
    return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), fn(*args))


def to_host(a: Any) -> np.ndarray:
    """A NumPy copy of ``a``; a replicated global array is read from this process's copy."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        if a.is_fully_replicated:
            return np.asarray(a.addressable_data(0))

        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return np.asarray(a)
