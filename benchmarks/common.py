"""Output conventions shared by every benchmark: JSON rows, Markdown table, PNGs."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import secrets
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "cpu_info",
    "machine_info",
    "provenance",
    "write_results",
    "markdown_table",
    "save_image_grid",
    "shrink_png",
    "Timer",
    "resolve_data_dir",
    "validation_split",
]


def release_key(seed: int, epsilon: float | None, *tags: Any) -> Any:
    """A distinct PRNG key per (seed, epsilon, tags): never one key for two budgets.

    Releases of the same data at two budgets from one key share their noise
    draw and can be solved for the un-noised value; every table cell therefore
    gets ``fold_in`` of a digest of its epsilon (and any further tags) into
    ``key(seed)``. ``epsilon=None`` (non-private baselines) is a tag like any other.
    """
    import jax

    from privkernels.privacy.keys import fold_digest, params_digest

    digest = params_digest("benchmark-cell", epsilon=epsilon, tags=tuple(str(t) for t in tags))
    return fold_digest(jax.random.key(int(seed)), digest)


def public_key(seed: int, *tags: Any) -> Any:
    """The key of a cell's data-independent draws (network weights, generator init, batch
    order): a function of ``seed`` and ``tags`` only, the same at every epsilon.

    Cells at several budgets then share these draws (common random numbers) and differ only
    in their noise, drawn from their own `release_key`, so a comparison across epsilons
    measures the noise, not the luck of a generator's start. Never the noise key itself.
    """
    import jax

    from privkernels.privacy.keys import fold_digest, params_digest

    digest = params_digest("benchmark-public", tags=tuple(str(t) for t in tags))
    return fold_digest(jax.random.key(int(seed)), digest)


def validation_split(n: int, n_val: int = 10_000, seed: int = 2026) -> tuple[Any, Any]:
    """The public split of ``n`` training rows used to choose settings without the test set.

    A permutation drawn from the public ``seed`` (data-independent) puts its
    first ``n_val`` rows in validation and the rest in the fit set. Returns
    ``(fit_idx, val_idx)``: sorted int64 arrays of ``n - n_val`` and ``n_val``
    row indices, disjoint, together ``range(n)``. The issue-16 validation
    scripts all use this one split.
    """
    if not 0 < n_val < n:
        raise ValueError(f"need 0 < n_val < n, got n_val={n_val}, n={n}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def machine_info() -> dict[str, Any]:
    """Describe the machine the numbers were measured on."""
    import jax

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }
    try:
        with open("/proc/meminfo") as fh:
            info["mem_total_kb"] = int(fh.readline().split()[1])
    except OSError:
        pass
    info.update(cpu_info())
    return info


#: Instruction-set flags that change the code XLA generates for the CPU, hence possibly
#: the low bits of a float result (a DP-KIP seed read 97.53 and 97.61 on two VM builds at
#: one commit and key; the older machine block could not say whether their CPUs differed).
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx_vnni", "amx_tile")  # fmt: skip


def cpu_info(path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The first processor of ``path`` (Linux): ``{"cpu": str, "isa": [flags],
    "flags_sha256": str}``; ``{}`` where the file cannot be read or names no processor.

    ``cpu`` is the vendor and model name with family, model and stepping (x86), or the
    implementer and part (ARM's ``/proc/cpuinfo``); ``isa`` the flags of `ISA_FLAGS` it
    has; ``flags_sha256`` the first 16 hex digits of the SHA-256 of all its flags (or ARM
    features), sorted, so two CPUs whose flag sets differ anywhere differ here.
    """
    try:
        with open(path, errors="replace") as fh:
            first = fh.read().split("\n\n")[0]
    except OSError:
        return {}
    fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}
    keys = ("vendor_id", "model name", "CPU implementer", "CPU part", "cpu")
    name = " ".join(fields[k] for k in keys if fields.get(k))
    if not name:
        return {}
    ids = ", ".join(f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields)
    flags = sorted(set((fields.get("flags") or fields.get("Features") or "").split()))
    return {
        "cpu": f"{name} ({ids})" if ids else name,
        "isa": [f for f in ISA_FLAGS if f in flags],
        "flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16],
    }


def _git(*args: str) -> str:
    """Output of ``git args`` in the repository holding this file ('' when not a checkout)."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def provenance(command: str | None) -> dict[str, Any]:
    """What regenerates a results file: the command, the code and the package versions.

    ``git_dirty`` is True when tracked files differed from ``git_commit`` at run time
    (the numbers then come from uncommitted code). In a copy of the tree without ``.git``
    (a lent GPU machine) the commit is the one the caller names in the
    ``BENCHMARKS_GIT_COMMIT`` environment variable (``git_commit_source: environment``)
    and ``git_dirty`` is unknown (None). The variable also wins over a ``.git`` that reads
    another commit (the H200 copy of 2026-11-29 carried a stale one): ``git_head_seen``
    then records what that ``.git`` said.
    """
    versions: dict[str, str | None] = {}
    for dist in ("privkernels", "jax", "jaxlib", "numpy", "scikit-learn", "dp-accounting"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    head, named = _git("rev-parse", "HEAD"), os.environ.get("BENCHMARKS_GIT_COMMIT", "")
    extra: dict[str, Any] = {}
    if named and not head.startswith(named):  # a copy (a lent GPU machine): the caller names it
        commit, dirty, source = named, None, "environment"
        extra = {"git_head_seen": head} if head else {}
    else:
        commit, source = head, "git"
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if head else None
    return {
        "command": command,
        "git_commit": commit or None,
        "git_dirty": dirty,
        "git_commit_source": source,
        **extra,
        "versions": versions,
    }


def is_float_list(v: Any) -> bool:
    """A non-empty list of floats (per-seed values): a measurement, printed ``a / b``."""
    return isinstance(v, list) and bool(v) and all(isinstance(x, float) for x in v)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}"
    if is_float_list(v):
        return " / ".join(_fmt(x) for x in v)  # per-seed values
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Render rows as a GitHub Markdown table (columns default to the union of keys)."""
    if not rows:
        return "(no rows)\n"
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "| " + " | ".join(columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body]) + "\n"


def write_results(
    out: Path,
    name: str,
    rows: list[dict[str, Any]],
    *,
    meta: dict[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    command: str | None = None,
    rerun: dict[str, Any] | None = None,
    started: dict[str, Any] | None = None,
    machine: dict[str, Any] | None = None,
    created: str | None = None,
) -> tuple[Path, Path]:
    """Write ``name.json`` (rows, machine, meta, provenance) and ``name.md``; return both.

    ``command`` is the shell command that regenerates the file; ``rerun`` (a table run's
    ``{"table", "profile", "seeds", "options"}``) lets ``python -m benchmarks rerun``
    repeat it. ``started`` is `provenance` taken when the run began (the code that ran);
    by default it is taken now. ``machine`` and ``created`` default to this machine and
    now (`benchmarks.merge` passes its parts').
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "table": name,
        "created": created or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine or machine_info(),
        "provenance": started if started is not None else provenance(command),
        "meta": meta or {},
        "rows": rows,
    }
    if rerun is not None:
        payload["rerun"] = rerun
    jpath = out / f"{name}.json"
    jpath.write_text(results_json(payload))
    mpath = out / f"{name}.md"
    m = payload["machine"]
    header = (
        f"# {name}\n\nMeasured {payload['created']} on {m['processor']} "
        f"({m['cpu_count']} cores, JAX {m['jax']} on {m['jax_backend']}).\n\n"
    )
    prov = payload["provenance"]
    if command:
        header += f"Command: `{command}` at {prov['git_commit']}"
        header += " (uncommitted changes)" if prov["git_dirty"] else ""
        header += ".\n\n"
    if meta:
        header += "".join(f"- {k}: {_fmt(v)}\n" for k, v in meta.items()) + "\n"
    mpath.write_text(header + markdown_table(rows, columns))
    return jpath, mpath


def results_json(payload: dict[str, Any]) -> str:
    """``payload`` as indented JSON with each of its ``rows`` on one line (a results file
    holds hundreds of rows: one line each keeps the tree small and a diff per row)."""
    rows = payload.get("rows")
    if not isinstance(rows, list) or not rows:
        return json.dumps(payload, indent=2, default=_json_default) + "\n"
    mark = f"@@rows-{secrets.token_hex(8)}@@"  # no row can hold the placeholder by chance
    text = json.dumps({**payload, "rows": [mark]}, indent=2, default=_json_default)
    lines = ",\n    ".join(json.dumps(row, default=_json_default) for row in rows)
    return text.replace(f'"{mark}"', lines, 1) + "\n"


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def save_image_grid(
    path: Path,
    images: np.ndarray,
    labels: Iterable[int] | None = None,
    *,
    n_cols: int = 10,
    title: str | None = None,
) -> Path:
    """Save images ``(n, h, w)`` or ``(n, h, w, 3)``/``(n, 3, h, w)`` as one PNG grid.

    With labels, images are arranged one class per column.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    imgs = np.asarray(images, dtype=np.float32)
    if imgs.ndim == 4 and imgs.shape[1] in (1, 3) and imgs.shape[-1] not in (1, 3):
        imgs = np.transpose(imgs, (0, 2, 3, 1))
    if imgs.ndim == 4 and imgs.shape[-1] == 1:
        imgs = imgs[..., 0]
    if labels is not None:
        lab = np.asarray(list(labels))
        classes = np.unique(lab)
        per = [np.flatnonzero(lab == c) for c in classes]
        n_rows = max(len(p) for p in per)
        n_cols = len(classes)
        grid = [
            [per[j][i] if i < len(per[j]) else None for j in range(n_cols)] for i in range(n_rows)
        ]
    else:
        n_rows = int(math.ceil(len(imgs) / n_cols))
        grid = [
            [i * n_cols + j if i * n_cols + j < len(imgs) else None for j in range(n_cols)]
            for i in range(n_rows)
        ]
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(n_cols * 0.9, n_rows * 0.9 + (0.4 if title else 0)), squeeze=False
    )
    for i in range(n_rows):
        for j in range(n_cols):
            ax = axes[i][j]
            ax.axis("off")
            idx = grid[i][j]
            if idx is None:
                continue
            img = imgs[idx]
            lo, hi = float(img.min()), float(img.max())
            img = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return shrink_png(path)


#: Largest committed image: grids are thumbnails, the numbers live in the JSON.
MAX_PNG_BYTES = 60_000


def shrink_png(path: Path, *, side: int = 400, max_bytes: int = MAX_PNG_BYTES) -> Path:
    """Rewrite the PNG at ``path`` as at most ``max_bytes`` bytes; a smaller file is kept.

    A grey image (an image grid) becomes a thumbnail that fits ``side`` x ``side`` pixels
    with 8 grey levels; a colour one (a plot) keeps its size with a 64-colour palette.
    Either is then scaled down 15% at a time until it fits. Returns ``path``.
    """
    if Path(path).stat().st_size <= max_bytes:
        return Path(path)
    from PIL import Image  # matplotlib's dependency; benchmarks only

    with Image.open(path) as src:
        img = src.convert("RGB")
    small = np.asarray(img.resize((64, 64)), np.int16)
    if bool(np.all(np.ptp(small, axis=-1) < 8)):
        img.thumbnail((side, side), Image.Resampling.LANCZOS)
        pal = img.convert("L").quantize(colors=8)
    else:
        pal = img.quantize(colors=64)
    while True:
        pal.save(path, "PNG", optimize=True)
        if Path(path).stat().st_size <= max_bytes or min(pal.size) < 32:
            return Path(path)
        w, h = pal.size
        pal = pal.resize((int(w * 0.85), int(h * 0.85)), Image.Resampling.NEAREST)


class Timer:
    """Context manager measuring wall-clock seconds (``.seconds``)."""

    def __enter__(self) -> Timer:
        self._t0 = time.perf_counter()
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0


def resolve_data_dir(data_dir: str | None) -> str | None:
    """``--data-dir`` if given, else ``PRIVKERNELS_DATA``, else None."""
    return data_dir or os.environ.get("PRIVKERNELS_DATA") or None
