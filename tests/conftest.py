"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The real-data directory from ``PRIVKERNELS_DATA``; skip visibly when absent."""
    value = os.environ.get("PRIVKERNELS_DATA")
    if not value:
        pytest.skip("PRIVKERNELS_DATA is not set: real-data tests skipped")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"PRIVKERNELS_DATA={value} is not a directory: real-data tests skipped")
    return path
