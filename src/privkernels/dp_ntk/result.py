"""The DP-NTK result: a trained generator, the release it was trained on, its report.

Saving, loading and sampling are post-processing: they read only the
released noisy embedding (and proportions) and data-independent parameters.
Modules are stored as their privkernels class path and fields (never pickled,
and only privkernels classes are rebuilt from a file).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from pathlib import Path
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from privkernels import checkpoint
from privkernels._validation import check_int, check_key, check_labels
from privkernels.dp_ntk.release import check_release_records, mean_embedding
from privkernels.dp_ntk.train import DPNTKConfig
from privkernels.generators import ColumnGroup, discretize, make_code
from privkernels.privacy.relations import ADD_REMOVE
from privkernels.privacy.report import PrivacyReport

__all__ = [
    "DPNTKResult",
    "load",
    "sample",
    "FORMAT",
    "check_fields",
    "module_spec",
    "module_from_spec",
]

#: The largest finite float32: a released total beyond it was never a count.
_FLOAT32_MAX = float(np.finfo(np.float32).max)

#: File format name and version of `DPNTKResult.save`.
FORMAT = "privkernels.dp_ntk.result/1"


@dataclasses.dataclass(frozen=True)
class DPNTKResult:
    """What `privkernels.dp_ntk.fit` returns.

    Attributes:
      generator: the flax generator module; ``generator.apply(generator_params, z, onehot)``.
      generator_params: trained generator parameters (pytree).
      network: the flax module whose e-NTK defines the kernel.
      ntk_params: its (data-independent, random) parameters.
      noisy_embedding: the released embedding ``(p, n_classes)`` float32.
      noisy_proportions: released class proportions ``(n_classes,)`` or None.
      report: the `PrivacyReport` of everything released.
      loss_history: ``(iterations,)`` float32 training loss (eq. 6) per iteration.
      config: the typed `DPNTKConfig`.
      groups: tabular output column groups (for discretising categorical heads).
      iteration: number of completed training iterations.
      noisy_total: under add-remove with a budget and released labels, the total ``n_hat``
        (float, >= 1) of the released class counts that divides the class sums
        (`privkernels.dp_ntk.release.noisy_total`; post-processing: ``n_hat *
        noisy_proportions`` are those counts); None otherwise (replace-one: n is public;
        uniform labels: the noisy n alone, kept inside the embedding) and in files
        written before it was kept.
    """

    generator: nn.Module
    generator_params: Any
    network: nn.Module
    ntk_params: Any
    noisy_embedding: jax.Array
    noisy_proportions: np.ndarray | None
    report: PrivacyReport
    loss_history: np.ndarray
    config: DPNTKConfig
    groups: tuple[ColumnGroup, ...] = ()
    iteration: int = 0
    noisy_total: float | None = None

    @property
    def n_classes(self) -> int:
        return self.config.n_classes

    @property
    def d_code(self) -> int:
        return self.config.d_code

    @property
    def data_shape(self) -> tuple[int, ...]:
        return self.config.data_shape

    @property
    def label_mode(self) -> str:
        return self.config.label_mode

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result (no optimiser state) to an ``.npz`` (no pickle)."""
        return checkpoint.save(path, release_arrays(self), release_meta(self, FORMAT))


def release_arrays(result: DPNTKResult) -> dict[str, Any]:
    arrays: dict[str, Any] = {
        "noisy_embedding": np.asarray(result.noisy_embedding),
        "loss_history": np.asarray(result.loss_history, np.float32),
    }
    if result.noisy_proportions is not None:
        arrays["noisy_proportions"] = np.asarray(result.noisy_proportions)
    if result.noisy_total is not None:
        arrays["noisy_total"] = np.asarray([result.noisy_total], np.float64)
    arrays.update(checkpoint.flatten_tree("generator_params", result.generator_params))
    arrays.update(checkpoint.flatten_tree("ntk_params", result.ntk_params))
    return arrays


def release_meta(result: DPNTKResult, format: str) -> dict[str, Any]:
    return {
        "format": format,
        "config": result.config.to_dict(),
        "report": result.report.to_dict(),
        "groups": [[g.kind, g.start, g.stop] for g in result.groups],
        "generator": module_spec(result.generator),
        "network": module_spec(result.network),
        "iteration": int(result.iteration),
    }


def load(
    path: str | os.PathLike[str],
    *,
    generator: nn.Module | None = None,
    network: nn.Module | None = None,
) -> DPNTKResult:
    """Read a `DPNTKResult` written by `DPNTKResult.save`.

    ``generator`` / ``network`` are rebuilt from the file when they are
    privkernels modules with simple fields; pass them otherwise.
    """
    arrays, meta = checkpoint.load(path, format=FORMAT)
    return result_from(arrays, meta, generator=generator, network=network)


def result_from(
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    *,
    generator: nn.Module | None,
    network: nn.Module | None,
    generator_params: Any = None,
) -> DPNTKResult:
    """Rebuild a result from `release_arrays` / `release_meta` entries (a field that is
    missing or of the wrong kind is a ``ValueError`` naming it, no value; `check_fields`
    then holds the fields to each other)."""
    with checkpoint.reading("report"):
        report = PrivacyReport.from_dict(meta["report"])
    with checkpoint.reading("config"):
        config = DPNTKConfig.from_dict(meta["config"])
    if report.private and (
        config.epsilon is None or abs(report.epsilon - config.epsilon) > 1e-9 * config.epsilon
    ):
        raise ValueError("saved report and config disagree on the budget")
    check_release_records(
        report, epsilon=config.epsilon, delta=config.delta, split=config.split,
        label_mode=config.label_mode,
    )  # fmt: skip
    if generator is None:
        generator = module_from_spec(meta.get("generator"), "generator")
    if network is None:
        network = module_from_spec(meta.get("network"), "network")
    saved_generator = generator_params is None  # else a resume's, checked by unflatten_like
    with checkpoint.reading("arrays"):
        if saved_generator:
            generator_params = checkpoint.dict_tree(arrays, "generator_params")
        ntk_params = checkpoint.dict_tree(arrays, "ntk_params")
        noisy_embedding = jnp.asarray(arrays["noisy_embedding"])
        loss_history = np.asarray(arrays["loss_history"], np.float32)
    with checkpoint.reading("groups", ValueError):
        groups = tuple(ColumnGroup(*g) for g in meta["groups"])
    with checkpoint.reading("iteration", ValueError):
        iteration = check_int(meta["iteration"], "iteration", minimum=0)
    result = DPNTKResult(
        generator=generator, generator_params=generator_params, network=network,
        ntk_params=ntk_params, noisy_embedding=noisy_embedding,
        noisy_proportions=arrays.get("noisy_proportions"), report=report,
        loss_history=loss_history, config=config, groups=groups, iteration=iteration,
        noisy_total=_saved_total(arrays.get("noisy_total")),
    )  # fmt: skip
    check_fields(result, saved_generator=saved_generator)
    return result


def _saved_total(raw: np.ndarray | None) -> float | None:
    """The file's ``noisy_total``: absent (None), else a float ``(1,)`` array (a wrong kind
    is a ``ValueError`` naming the field; its range is `_check_arrays`')."""
    if raw is None:
        return None
    if np.shape(raw) != (1,) or np.asarray(raw).dtype.kind != "f":
        raise ValueError("the file's noisy_total is not a float (1,) array")
    return float(np.asarray(raw)[0])


def check_fields(result: DPNTKResult, *, saved_generator: bool = True) -> None:
    """Refuse (``ValueError`` naming the field, never a value) a result whose fields
    disagree with its arrays, at load rather than at `sample`: the arrays' shapes against
    ``config`` (`_check_arrays`), then the modules against their saved parameters
    (`_check_modules`), shapes only (`jax.eval_shape`: nothing is run or drawn).
    ``saved_generator=False``: ``generator_params`` is a placeholder its caller fills and
    checks (a resume rebuilds them from the checkpoint against the generator's shapes)."""
    _check_arrays(result)
    _check_modules(result, saved_generator)


def _check_arrays(result: DPNTKResult) -> None:
    """``noisy_embedding`` ``(p, n_classes)``, ``noisy_proportions`` ``(n_classes,)``,
    ``loss_history`` ``(iterations,)``, floats; ``groups`` inside a tabular row."""
    c, shape = result.config.n_classes, tuple(result.config.data_shape)
    emb, props = result.noisy_embedding, result.noisy_proportions
    if emb.ndim != 2 or emb.shape[1] != c or not jnp.issubdtype(emb.dtype, jnp.floating):
        raise ValueError("the file's noisy_embedding is not a float (p, n_classes) array "
                         "for its config's n_classes")  # fmt: skip
    if props is not None and (np.shape(props) != (c,) or np.asarray(props).dtype.kind != "f"):
        raise ValueError("the file's noisy_proportions is not a float (n_classes,) array")
    total = result.noisy_total
    sums = result.report.private and result.report.neighbouring == ADD_REMOVE and props is not None
    if total is not None and not (sums and 1.0 <= total <= _FLOAT32_MAX):
        raise ValueError("the file's noisy_total is not a released total (a float32-finite "
                         "number >= 1, kept only for a private add-remove release with "
                         "released labels)")  # fmt: skip
    if np.ndim(result.loss_history) != 1 or result.iteration < 0:
        raise ValueError("the file's loss_history / iteration do not describe a run")
    width = shape[-1] if len(shape) == 1 else 0
    if any(not 0 <= g.start < g.stop <= width for g in result.groups):
        raise ValueError("the file's groups do not lie inside one row of its config's data_shape")


def _check_modules(result: DPNTKResult, saved_generator: bool) -> None:
    """The network and generator the file names, built for its config, have exactly the
    saved parameters' tree, shapes and dtypes; the generator makes examples of
    ``data_shape`` whose e-NTK embedding has the saved embedding's shape (eq. (6))."""
    cfg, key = result.config, jax.random.key(0)  # a key for shapes only: nothing is drawn
    for what, module in (("generator", result.generator), ("network", result.network)):
        try:
            hash(module)  # the modules are static arguments of the jitted sampling
        except TypeError:
            raise ValueError(f"the file's {what} fields hold a list where a tuple belongs; "
                             f"pass {what}=") from None  # fmt: skip
        if getattr(module, "n_classes", cfg.n_classes) != cfg.n_classes:
            raise ValueError(f"the file's {what} field n_classes disagrees with its config")
    x = jax.ShapeDtypeStruct((2, *cfg.data_shape), jnp.float32)
    z = jax.ShapeDtypeStruct((2, cfg.d_code), jnp.float32)
    onehot = jax.ShapeDtypeStruct((2, cfg.n_classes), jnp.float32)
    net = _abstract("network", result.network.init, key, x)
    _same_tree("ntk_params", net, result.ntk_params)
    gen = _abstract("generator", result.generator.init, key, z, onehot)
    if saved_generator:
        _same_tree("generator_params", gen, result.generator_params)
    out = _abstract("generator", result.generator.apply, gen, z, onehot)
    if tuple(out.shape) != (2, *cfg.data_shape):
        raise ValueError("the file's generator does not make examples of its config's data_shape")
    embed = functools.partial(
        mean_embedding, result.network, result.ntk_params, y=np.zeros(2, np.int32),
        n_classes=cfg.n_classes, chunk_size=cfg.chunk_size, method=cfg.method, precision=None,
    )  # fmt: skip
    if tuple(_abstract("network", embed, out).shape) != tuple(result.noisy_embedding.shape):
        raise ValueError("the file's noisy_embedding does not have its network's e-NTK shape")


def _abstract(what: str, fn: Any, *args: Any) -> Any:
    """``jax.eval_shape(fn, *args)``; a module that cannot be traced is the file's ``what``."""
    try:
        return jax.eval_shape(fn, *args)
    except Exception as err:  # any failure to build or apply the module the file names
        raise ValueError(f"the file's {what} does not build for its config's shapes; pass "
                         f"{what}=") from err  # fmt: skip


def _same_tree(what: str, expected: Any, saved: Any) -> None:
    """Refuse ``saved`` unless its leaves' paths, shapes and dtypes are ``expected``'s."""

    def leaves(tree: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
        flat = jax.tree_util.tree_flatten_with_path(tree)[0]
        return {jax.tree_util.keystr(p): (tuple(v.shape), np.dtype(v.dtype)) for p, v in flat}

    if leaves(expected) != leaves(saved):
        raise ValueError(f"the file's {what} do not match the module its fields build "
                         "(tree, shapes or dtypes)")  # fmt: skip


# --------------------------------------------------------------------------- modules


def _to_jsonable(v: Any) -> Any:
    if isinstance(v, ColumnGroup):
        return {"__column_group__": [v.kind, v.start, v.stop]}
    if isinstance(v, (tuple, list)):
        return (
            {"__tuple__": [_to_jsonable(e) for e in v]}
            if isinstance(v, tuple)
            else [_to_jsonable(e) for e in v]
        )
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, nn.Module):  # a nested privkernels module (e.g. MarginalSkip's base)
        spec = module_spec(v)
        if spec is None:
            raise TypeError(f"cannot serialise {type(v).__name__}")
        return {"__module__": spec}
    raise TypeError(f"cannot serialise {type(v).__name__}")


def _from_jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        if "__column_group__" in v:
            return ColumnGroup(*v["__column_group__"])
        if "__tuple__" in v:
            return tuple(_from_jsonable(e) for e in v["__tuple__"])
        if "__module__" in v:
            return module_from_spec(v["__module__"], "network or generator")
        return {k: _from_jsonable(e) for k, e in v.items()}
    if isinstance(v, list):
        return [_from_jsonable(e) for e in v]
    return v


def module_spec(m: nn.Module) -> dict[str, Any] | None:
    """``{"class": "pkg.mod.Class", "fields": {...}}`` when every field is JSON-able."""
    try:
        fields = {
            f.name: _to_jsonable(getattr(m, f.name))
            for f in dataclasses.fields(m)
            if f.name not in ("parent", "name") and f.init
        }
    except TypeError:
        return None
    return {"class": f"{type(m).__module__}.{type(m).__qualname__}", "fields": fields}


def module_from_spec(spec: dict[str, Any] | None, what: str) -> nn.Module:
    """Rebuild a privkernels module from `module_spec` (never imports other code)."""
    if spec is None:
        raise ValueError(f"the file cannot rebuild the {what}; pass {what}=")
    path = spec.get("class") if isinstance(spec, dict) else None
    if not isinstance(path, str) or not isinstance(spec.get("fields"), dict):
        raise ValueError(f"the file's {what} entry is malformed; pass {what}=")
    if not path.startswith("privkernels.") or any(p.startswith("_") for p in path.split(".")):
        # never import arbitrary code named in a file, nor a private name
        raise ValueError(f"the file names {what} class {path!r} outside privkernels; pass {what}=")
    mod, cls = path.rsplit(".", 1)
    try:
        klass = getattr(importlib.import_module(mod), cls, None)
    except ImportError:
        klass = None
    if not (isinstance(klass, type) and issubclass(klass, nn.Module)):  # never call a function
        raise ValueError(f"the file names {what} class {path!r}, not a flax module; pass {what}=")
    try:
        return cast(nn.Module, klass(**{k: _from_jsonable(v) for k, v in spec["fields"].items()}))
    except (TypeError, RecursionError) as err:  # unknown fields, odd payloads, deep nesting
        raise ValueError(f"the file's {what} fields do not build {path!r}; pass {what}=") from err


# --------------------------------------------------------------------------- sampling


@functools.partial(jax.jit, static_argnames=("generator",))
def _generator_apply(
    params: Any, z: jax.Array, onehot: jax.Array, *, generator: nn.Module
) -> jax.Array:
    return cast(jax.Array, generator.apply(params, z, onehot))


def draw_labels(key: jax.Array, result: DPNTKResult, n: int) -> np.ndarray:
    """``(n,)`` int32: the labels `sample` draws with ``key`` when none are given, from the
    released noisy class proportions (``"released"``) or uniformly (``"uniform"``), with
    ``split(key)[0]``. ``key`` as in `sample` (not the fit's key)."""
    k_lab = jax.random.split(key)[0]
    C = result.n_classes
    if result.label_mode == "released" and result.noisy_proportions is not None:
        p = jnp.asarray(result.noisy_proportions, jnp.float32)
        return np.asarray(jax.random.choice(k_lab, C, (n,), p=p / p.sum()), np.int32)
    return np.asarray(jax.random.randint(k_lab, (n,), 0, C), np.int32)


def sample(
    key: jax.Array,
    result: DPNTKResult,
    n: int,
    *,
    labels: Any = None,
    discretize_categorical: bool = True,
    batch_size: int = 10000,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` synthetic examples ``(x (n, *data_shape) float32, y (n,) int32)``.

    Labels are drawn uniformly over the classes (``label_mode="uniform"``) or
    from the released noisy class proportions (``"released"``), unless given.
    Tabular categorical heads are turned into exact one-hots when
    ``discretize_categorical``. ``key`` must not be the fit's key: ``split(key)[0]`` is
    then the fit's embedding key (``split(k, 2)[0] == split(k, 4)[0]``), so the labels
    drawn would be bits of the noise keys; take e.g. ``fold_in(fit_key, tag)`` or a fresh key.
    """
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    k_z = jax.random.split(key)[1]
    C = result.n_classes
    if labels is not None:
        y = check_labels(labels, C, "labels", n_rows=n)
    else:
        y = draw_labels(key, result, n)
    apply = functools.partial(_generator_apply, generator=result.generator)
    xs = []
    for i, start in enumerate(range(0, n, batch_size)):
        yb = jnp.asarray(y[start : start + batch_size])
        z, oh = make_code(jax.random.fold_in(k_z, i), yb, d_code=result.d_code, n_classes=C)
        xs.append(np.asarray(apply(result.generator_params, z, oh), np.float32))
    x = np.concatenate(xs, axis=0)
    if discretize_categorical and any(g.kind == "categorical" for g in result.groups):
        x = discretize(x, result.groups)
    return x, y
