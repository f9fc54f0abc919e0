"""Datasets: local loaders (never download), public tabular schemas, synthetic data.

``load(name, *, data_dir=None, split="train", source="raw", **options) -> Dataset``
reads the original distribution files from ``data_dir`` (default
``$PRIVKERNELS_DATA``); ``list_datasets()`` names what it accepts and
``required_files(name)`` the files it expects. Tabular data is encoded with a
hand-written public schema only (data-independent); anything that reads the
private data (``scale="data"``) is opt-in and emits ``PrivacyLeakWarning``.
``privkernels.data.synthetic`` has small generators for tests.
"""

from __future__ import annotations

from privkernels._lazy import lazy_exports

_EXPORTS = {
    # entry points
    "load": "registry",
    "list_datasets": "registry",
    "required_files": "registry",
    # types and helpers
    "Dataset": "base",
    "DatasetNotFoundError": "base",
    "DATA_ENV_VAR": "base",
    "resolve_data_dir": "base",
    "stratified_split_indices": "base",
    "ColumnSpec": "schema",
    "TabularSchema": "schema",
    "MISSING_LEVEL": "schema",
    "read_idx": "images",
    "standardize_per_example": "preprocess",
    # synthetic generators
    "gaussian_blobs": "synthetic",
    "synthetic_images": "synthetic",
    "synthetic_tabular": "synthetic",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
