"""One checkpoint format for every method: arrays in an ``.npz`` + JSON metadata.

No pickle anywhere: a file is a NumPy ``.npz`` whose entries are plain arrays
and one ``__meta__`` entry holding a JSON string (format name and version, the
method's typed config, its privacy report, ...). Writes are atomic (a
temporary file in the same directory, then ``os.replace``), so an interrupted
write never leaves a half checkpoint behind.

Pytrees are stored leaf by leaf under ``prefix/<key path>`` names
(`flatten_tree`); they come back either into a template of the same
structure (`unflatten_like`, shapes checked: optimiser states) or, for
trees of nested dicts such as flax parameters, without one
(`dict_tree`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._json import loads_bounded

__all__ = [
    "save",
    "check_writable",
    "check_new",
    "load",
    "flatten_tree",
    "unflatten_like",
    "dict_tree",
    "key_to_array",
    "key_from_array",
    "jsonable",
    "reading",
]

_META = "__meta__"


def jsonable(value: Any) -> Any:
    """NumPy scalars and arrays to Python values (for ``json.dumps(default=...)``)."""
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def save(path: str | os.PathLike[str], arrays: Mapping[str, Any], meta: Mapping[str, Any]) -> Path:
    """Atomically write ``arrays`` (name -> array) and ``meta`` (JSON-able) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if _META in arrays:
        raise ValueError(f"{_META!r} is reserved")
    payload = {k: np.asarray(v) for k, v in arrays.items()}
    payload[_META] = np.asarray(json.dumps(dict(meta), default=jsonable))
    tmp = path.with_name(path.name + ".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, **payload)  # type: ignore[arg-type]
    os.replace(tmp, path)
    return path


def check_writable(path: str | os.PathLike[str]) -> Path:
    """``path`` as a `Path`, once `save` is known to be able to write it; else ``ValueError``.

    A fit calls this before it draws any noise, so that a path it cannot write (a
    directory, a folder under a regular file, no permission) fails before a release and
    not at the first save. Probes as `save` writes: creates the missing folders and the
    temporary file next to ``path``, then removes that file and the folders it created,
    so a call refused later (bad input) leaves the file system as it was.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint path {path} is a directory; give a file path")
    tmp = path.with_name(path.name + ".tmp.npz")
    created = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb"):
            pass
        tmp.unlink()
    except OSError as err:
        raise ValueError(
            f"checkpoint path {path} cannot be written ({type(err).__name__}: {err.strerror}); "
            "nothing was run"
        ) from err
    finally:
        for d in created:  # innermost first; one another process filled stays
            with contextlib.suppress(OSError):
                d.rmdir()
    return path


def check_new(path: Path, resume_does: str) -> None:
    """A fresh fit's checkpoint ``path``: writable (`check_writable`) and not an existing file,
    which the fit would overwrite; else ``ValueError`` naming what ``resume=True`` does."""
    check_writable(path)
    if path.exists():
        raise ValueError(
            f"checkpoint {path} exists; pass resume=True to {resume_does} or delete it"
        )


def load(
    path: str | os.PathLike[str], *, format: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read ``(arrays, meta)``; with ``format`` given, refuse a file of another format."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if _META not in arrays:
        raise ValueError(f"{path} is not a privkernels file (no metadata)")
    meta = loads_bounded(str(arrays.pop(_META)), f"the metadata of {path}")
    if not isinstance(meta, dict):
        raise ValueError(f"{path} holds metadata that is not a JSON object")
    if format is not None and meta.get("format") != format:
        raise ValueError(f"{path} holds {meta.get('format')!r}, expected {format!r}")
    return arrays, meta


def _path_name(path: tuple[Any, ...]) -> str:
    parts = []
    for p in path:
        for attr in ("key", "name", "idx"):
            if hasattr(p, attr):
                parts.append(str(getattr(p, attr)))
                break
        else:
            parts.append(str(p))
    return "/".join(parts)


def flatten_tree(prefix: str, tree: Any) -> dict[str, np.ndarray]:
    """``{prefix/<key path>: leaf}`` for every leaf of ``tree`` (typed keys as key data)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = f"{prefix}/{_path_name(path)}" if path else prefix
        out[name] = key_to_array(leaf)[0] if _is_key(leaf) else np.asarray(leaf)
    return out


def _is_key(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def unflatten_like(template: Any, arrays: Mapping[str, np.ndarray], prefix: str) -> Any:
    """Rebuild a tree shaped like ``template`` from `flatten_tree` entries (shapes checked)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaves = []
    for path, leaf in flat:
        name = f"{prefix}/{_path_name(path)}" if path else prefix
        if name not in arrays:
            raise ValueError(f"checkpoint has no entry {name!r}: it was written for another model")
        arr = arrays[name]
        if _is_key(leaf):
            leaves.append(jax.random.wrap_key_data(jnp.asarray(arr)))
            continue
        if tuple(arr.shape) != tuple(np.shape(leaf)):
            raise ValueError(
                f"checkpoint entry {name!r} has shape {arr.shape}, this model expects "
                f"{np.shape(leaf)}"
            )
        leaves.append(jnp.asarray(arr, dtype=jnp.asarray(leaf).dtype))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def dict_tree(arrays: Mapping[str, np.ndarray], prefix: str) -> Any:
    """Nested dicts of arrays from the entries under ``prefix/`` (no template needed)."""
    root: dict[str, Any] = {}
    found = False
    for name, arr in arrays.items():
        if not name.startswith(prefix + "/"):
            continue
        found = True
        node = root
        parts = name[len(prefix) + 1 :].split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = jnp.asarray(arr)
    if not found:
        raise ValueError(f"no entries under {prefix!r}")
    return root


def key_to_array(key: jax.Array) -> tuple[np.ndarray, bool]:
    """``(raw key data, typed)`` of a typed or raw PRNG key."""
    if _is_key(key):
        return np.asarray(jax.random.key_data(key)), True
    return np.asarray(key), False


def key_from_array(data: Any, typed: bool) -> jax.Array:
    """Inverse of `key_to_array`."""
    arr = jnp.asarray(data)
    return jax.random.wrap_key_data(arr) if typed else arr


@contextlib.contextmanager
def reading(field: str, *also: type[Exception]) -> Iterator[None]:
    """Turn a missing or malformed ``field`` of a model file into a ``ValueError`` naming
    it and no value (a crafted file raised ``KeyError``/``TypeError``/``OverflowError`` and
    a traceback in the CLI); ``also``: more errors to rename (a ``ValueError`` that would
    repeat the file's value)."""
    caught: tuple[type[Exception], ...] = (
        KeyError, TypeError, IndexError, AttributeError, OverflowError, *also,
    )  # fmt: skip
    try:
        yield
    except caught as err:
        raise ValueError(
            f"the file's {field} is missing or malformed ({type(err).__name__})"
        ) from None
