"""Optional ``source="tfds"`` backend (``pip install 'privkernels[tfds]'``).

Reads an already-prepared TensorFlow Datasets copy from a local directory with
``tfds.data_source(..., download=False)``; it never downloads. The TFDS data
directory is ``<root>/tfds`` (``root`` = ``data_dir`` or ``$PRIVKERNELS_DATA``)
unless ``tfds_data_dir=...`` is given. Images are returned in the same format
as the raw loaders (``(n, 28, 28)`` / ``(n, 32, 32, 3)`` float32 in [0, 1]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from privkernels.data.base import Dataset, DatasetNotFoundError

__all__ = ["TFDS_NAMES", "import_tfds", "load_tfds"]

# privkernels name -> (TFDS builder name, class names)
TFDS_NAMES = {"mnist": "mnist", "fashion_mnist": "fashion_mnist", "cifar10": "cifar10"}

_INSTALL_HINT = (
    "source='tfds' needs the optional dependency tensorflow-datasets: "
    "pip install 'privkernels[tfds]' (installs tensorflow-datasets, importlib_resources, pillow). "
    "Or use source='raw' (default), which reads the original files with NumPy."
)


def import_tfds() -> Any:
    """Import ``tensorflow_datasets`` or raise ImportError naming the ``tfds`` extra."""
    try:
        # optional dependency (extra 'tfds')
        import tensorflow_datasets as tfds  # type: ignore[import-not-found]
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return tfds


def load_tfds(
    name: str,
    root: Path | None,
    split: str,
    class_names: tuple[str, ...],
    *,
    tfds_data_dir: str | None = None,
) -> Dataset:
    """Load ``name``/``split`` from a local, prepared TFDS directory (no download)."""
    if name not in TFDS_NAMES:
        raise ValueError(f"source='tfds' supports {sorted(TFDS_NAMES)}, not {name!r}")
    tfds = import_tfds()
    if tfds_data_dir is None:
        if root is None:
            raise DatasetNotFoundError(
                f"source='tfds' for {name!r}: no data root; pass data_dir=... / tfds_data_dir=... "
                "or set PRIVKERNELS_DATA (the TFDS directory is <root>/tfds)."
            )
        tfds_data_dir = str(root / "tfds")
    try:
        source = tfds.data_source(
            TFDS_NAMES[name], split=split, data_dir=tfds_data_dir, download=False
        )
    except Exception as err:  # tfds raises its own AssertionError/DatasetNotFoundError types
        raise DatasetNotFoundError(
            f"TFDS dataset {TFDS_NAMES[name]!r} (split {split!r}) is not prepared under "
            f"{tfds_data_dir!r}: {err}. Prepare it there (array_record format) or use source='raw'."
        ) from err
    n = len(source)
    images = []
    labels = np.empty(n, dtype=np.int32)
    for i in range(n):
        rec = source[i]
        images.append(np.asarray(rec["image"], dtype=np.uint8))
        labels[i] = int(rec["label"])
    x = np.stack(images).astype(np.float32) / np.float32(255.0) if n else np.zeros((0,), np.float32)
    if x.ndim == 4 and x.shape[-1] == 1:
        x = x[..., 0]
    return Dataset(
        x=x,
        y=labels,
        n_classes=len(class_names),
        name=name,
        split=split,
        class_names=class_names,
        info={"source": "tfds", "tfds_data_dir": tfds_data_dir, "data_dependent": []},
    )
