"""Package surface: lazy exports resolve, the three method modules import."""

from __future__ import annotations

import importlib

import pytest

import privkernels


def test_version() -> None:
    assert privkernels.__version__.count(".") == 2


@pytest.mark.parametrize(
    "package",
    ["privkernels.features", "privkernels.privacy"],
)
def test_lazy_exports_resolve(package: str) -> None:
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"


def test_methods_import() -> None:
    from privkernels import dp_kip, dp_ntk, dp_ntk_regression

    for mod in (dp_ntk, dp_kip, dp_ntk_regression):
        assert callable(mod.fit)


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError):
        privkernels.not_a_module  # noqa: B018
