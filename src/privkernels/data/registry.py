"""``load(name, ...)``: one entry point for every dataset of the toolkit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from privkernels.data import images, tabular
from privkernels.data.base import Dataset, resolve_data_dir, take_rows
from privkernels.data.tabular import load_tabular
from privkernels.data.tfds import import_tfds, load_tfds

__all__ = ["IMAGE_DATASETS", "TABULAR_DATASETS", "list_datasets", "load", "required_files"]

IMAGE_DATASETS = ("mnist", "fashion_mnist", "digits", "cifar10")
TABULAR_DATASETS = (
    "adult",
    "census",
    "cervical",
    "credit",
    "epileptic",
    "isolet",
    "covtype",
    "intrusion",
)


def list_datasets(kind: str | None = None) -> list[str]:
    """Names accepted by `load`; ``kind`` = ``"image"`` / ``"tabular"`` filters."""
    if kind is None:
        return [*IMAGE_DATASETS, *TABULAR_DATASETS]
    if kind == "image":
        return list(IMAGE_DATASETS)
    if kind == "tabular":
        return list(TABULAR_DATASETS)
    raise ValueError(f"kind must be None, 'image' or 'tabular', got {kind!r}")


def required_files(name: str) -> list[str]:
    """Files (relative to the data root) that ``load(name)`` reads, for both splits."""
    if name in ("mnist", "fashion_mnist"):
        return [" or ".join(p) for s in ("train", "test") for p in images.idx_relpaths(name, s)]
    if name == "cifar10":
        return images.cifar10_relpaths("train") + images.cifar10_relpaths("test")
    if name == "digits":
        return []
    if name in tabular.TABULAR:
        return tabular.tabular_relpaths(name)
    raise ValueError(f"unknown dataset {name!r}; choose from {list_datasets()}")


def _check_opt_int(value: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def load(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    split: str = "train",
    source: str = "raw",
    **options: Any,
) -> Dataset:
    """Load one split of a dataset from local files (never downloads).

    Args:
      name: one of `list_datasets`.
      data_dir: data root; default ``$PRIVKERNELS_DATA``. Layout: see
        `required_files` and the module docs of `privkernels.data.images`
        / `privkernels.data.tabular`.
      split: ``"train"`` or ``"test"`` (``"all"`` too for datasets without an
        official test split: cervical, epileptic, covtype, credit).
      source: ``"raw"`` (original files, NumPy parsing) or ``"tfds"`` (images
        only; needs the optional ``tfds`` extra and a prepared local TFDS dir).
      **options: all datasets: ``max_rows`` (first rows), ``subsample`` /
        ``subsample_seed`` (uniform subset with a fixed seed). Tabular: ``scale``
        (``"public"`` default | ``"data"`` -> PrivacyLeakWarning | ``"none"``),
        ``unknown`` (``"zero"`` | ``"error"``), ``bounds``, ``test_fraction``,
        ``split_seed`` and dataset-specific ones (``binary``, ``include_other_tests``,
        ``unknown_attack``). tfds: ``tfds_data_dir``.

    Returns:
      `Dataset` with ``x`` float32, ``y`` int32 ``(n,)``.

    Raises:
      DatasetNotFoundError: the files are missing (a ``FileNotFoundError`` whose
        message names them and where to put them).
      ValueError: a bad name, split or option value.
      TypeError: an unknown option.
      ImportError: ``source="tfds"`` without tensorflow-datasets.
    """
    if name not in list_datasets():
        raise ValueError(f"unknown dataset {name!r}; choose from {list_datasets()}")
    if source not in ("raw", "tfds"):
        raise ValueError(f"source must be 'raw' or 'tfds', got {source!r}")
    _check_opt_int(options.get("max_rows"), "max_rows")
    _check_opt_int(options.get("subsample"), "subsample")
    root: Path | None = resolve_data_dir(data_dir)

    if name in TABULAR_DATASETS:
        if source != "raw":
            raise ValueError(f"source={source!r} is only available for image datasets")

        return load_tabular(name, root, split, **options)

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' for {name!r}, got {split!r}")
    max_rows = options.pop("max_rows", None)
    subsample = options.pop("subsample", None)
    subsample_seed = options.pop("subsample_seed", 0)
    tfds_dir = options.pop("tfds_data_dir", None)
    if options:
        raise TypeError(f"load({name!r}) got unexpected option(s) {sorted(options)}")
    class_names = {
        "mnist": images.MNIST_CLASS_NAMES,
        "fashion_mnist": images.FASHION_MNIST_CLASS_NAMES,
        "cifar10": images.CIFAR10_CLASS_NAMES,
        "digits": images.MNIST_CLASS_NAMES,
    }[name]
    if source == "tfds":
        import_tfds()  # clear ImportError first, whatever the dataset
        ds = load_tfds(name, root, split, class_names, tfds_data_dir=tfds_dir)
    elif name == "digits":
        ds = images.load_digits(split)
    elif name == "cifar10":
        ds = images.load_cifar10(root, split)
    else:
        ds = images.load_idx_dataset(name, root, split, class_names)
    if max_rows is None and subsample is None:
        return ds
    x, y, info = take_rows(
        ds.x, ds.y, max_rows=max_rows, subsample=subsample, subsample_seed=subsample_seed
    )
    return Dataset(
        x=np.ascontiguousarray(x),
        y=y,
        n_classes=ds.n_classes,
        name=ds.name,
        split=ds.split,
        schema=None,
        class_names=ds.class_names,
        info={**ds.info, **info},
    )
