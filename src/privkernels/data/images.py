"""Image datasets read from their raw distribution files (never downloaded).

* ``mnist`` / ``fashion_mnist``: the four IDX files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``
  (gzip or uncompressed) under ``<root>/mnist/`` resp. ``<root>/fashion_mnist/``;
  parsed with NumPy, magic numbers and shapes checked. ``x``: ``(n, 28, 28)``
  float32 = pixel / 255.
* ``digits``: scikit-learn's bundled 8x8 digits (UCI optdigits test part,
  1797 images, shipped inside scikit-learn, no file needed). ``x``: ``(n, 8, 8)``
  float32 = pixel / 16. Fixed data-independent split: the first 1347 images
  (75 %) are ``train``, the last 450 are ``test``.
* ``cifar10``: the python batches ``<root>/cifar10/cifar-10-batches-py/{data_batch_1..5,test_batch}``.
  ``x``: ``(n, 32, 32, 3)`` float32 = pixel / 255 (HWC). The pickles are read
  with a restricted unpickler that only admits NumPy array reconstruction.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from privkernels.data.base import Dataset, require_files

__all__ = [
    "MNIST_CLASS_NAMES",
    "FASHION_MNIST_CLASS_NAMES",
    "CIFAR10_CLASS_NAMES",
    "read_idx",
    "load_idx_dataset",
    "load_digits",
    "load_cifar10",
    "idx_relpaths",
    "cifar10_relpaths",
]

MNIST_CLASS_NAMES = tuple(str(i) for i in range(10))
FASHION_MNIST_CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
CIFAR10_CLASS_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)

_IDX_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}

DIGITS_N_TRAIN = 1347  # first 1347 of 1797 (75 %) -> train, last 450 -> test


def _open_maybe_gzip(path: Path) -> bytes:
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        return fh.read()


def read_idx(path: str | Path, *, expect_ndim: int | None = None) -> np.ndarray:
    """Parse an IDX file (gzip or not): ``magic = 0x0000 <dtype> <ndim>``, big-endian dims.

    Raises ``ValueError`` on a bad magic number, a rank other than ``expect_ndim``
    or a payload whose size does not match the header.
    """
    path = Path(path)
    raw = _open_maybe_gzip(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number; bytes not shown)")
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    if expect_ndim is not None and ndim != expect_ndim:
        raise ValueError(f"{path}: IDX rank {ndim}, expected {expect_ndim}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    size = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - offset != size:
        raise ValueError(
            f"{path}: header says {dims} ({size} bytes) but payload has {len(raw) - offset} bytes"
        )
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(dims)


def idx_relpaths(folder: str, split: str) -> list[tuple[str, str]]:
    prefix = "train" if split == "train" else "t10k"
    return [
        (f"{folder}/{prefix}-images-idx3-ubyte.gz", f"{folder}/{prefix}-images-idx3-ubyte"),
        (f"{folder}/{prefix}-labels-idx1-ubyte.gz", f"{folder}/{prefix}-labels-idx1-ubyte"),
    ]


def load_idx_dataset(
    name: str, root: Path | None, split: str, class_names: tuple[str, ...]
) -> Dataset:
    """MNIST-format dataset from ``<root>/<name>/``: ``x`` (n, 28, 28) float32 in [0, 1]."""
    img_path, lab_path = require_files(name, root, idx_relpaths(name, split))
    images = read_idx(img_path, expect_ndim=3)
    labels = read_idx(lab_path, expect_ndim=1)
    if images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise ValueError(f"{name}: expected uint8 IDX payloads, got {images.dtype}/{labels.dtype}")
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise ValueError(f"{name}: images {images.shape} do not match labels {labels.shape}")
    if labels.max(initial=0) >= 10:
        raise ValueError(f"{name}: labels outside 0..9 (not shown: they are data)")
    x = images.astype(np.float32) / np.float32(255.0)
    return Dataset(
        x=x,
        y=labels.astype(np.int32),
        n_classes=10,
        name=name,
        split=split,
        class_names=class_names,
        info={
            "files": [str(img_path), str(lab_path)],
            "preprocessing": "pixel / 255",
            "data_dependent": [],
        },
    )


def load_digits(split: str) -> Dataset:
    """scikit-learn 8x8 digits: ``x`` (n, 8, 8) = pixel / 16; first 1347 train, last 450 test."""
    # heavy (seconds to import): loaded on first use
    from sklearn.datasets import load_digits as _sk_digits

    bunch = _sk_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0)
    labels = np.asarray(bunch.target, dtype=np.int32)
    sl = slice(0, DIGITS_N_TRAIN) if split == "train" else slice(DIGITS_N_TRAIN, None)
    return Dataset(
        x=np.ascontiguousarray(images[sl]),
        y=labels[sl].copy(),
        n_classes=10,
        name="digits",
        split=split,
        class_names=MNIST_CLASS_NAMES,
        info={
            "source": "sklearn.datasets.load_digits",
            "preprocessing": "pixel / 16",
            "split_rule": f"first {DIGITS_N_TRAIN} rows train, remaining 450 test (fixed, data-independent)",
            "data_dependent": [],
        },
    )


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global except NumPy array reconstruction."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle global {module}.{name}")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as fh:
        obj = _NumpyOnlyUnpickler(io.BytesIO(fh.read()), encoding="bytes").load()
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict, got {type(obj).__name__}")
    data = obj.get(b"data", obj.get("data"))
    labels = obj.get(b"labels", obj.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: missing 'data' or 'labels' entry")
    data = np.asarray(data, dtype=np.uint8)
    labels = np.asarray(labels, dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{path}: data {data.shape} / labels {labels.shape} are not CIFAR-10 batches"
        )
    return data, labels


def cifar10_relpaths(split: str) -> list[str]:
    base = "cifar10/cifar-10-batches-py"
    if split == "train":
        return [f"{base}/data_batch_{i}" for i in range(1, 6)]
    return [f"{base}/test_batch"]


def load_cifar10(root: Path | None, split: str) -> Dataset:
    """CIFAR-10 python batches -> ``x`` (n, 32, 32, 3) float32 in [0, 1], HWC."""
    paths = require_files(
        "cifar10",
        root,
        cifar10_relpaths(split),
        note="Use the 'CIFAR-10 python version' (cifar-10-python.tar.gz) extracted under <root>/cifar10/.",
    )
    parts = [_read_cifar_batch(p) for p in paths]
    data = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() >= 10):
        raise ValueError("cifar10: labels outside 0..9")
    x = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / np.float32(255.0)
    return Dataset(
        x=np.ascontiguousarray(x),
        y=labels.astype(np.int32),
        n_classes=10,
        name="cifar10",
        split=split,
        class_names=CIFAR10_CLASS_NAMES,
        info={
            "files": [str(p) for p in paths],
            "preprocessing": "pixel / 255, CHW -> HWC",
            "data_dependent": [],
        },
    )
