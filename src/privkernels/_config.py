"""One JSON round trip for the typed, frozen configs of the three methods."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, TypeVar

__all__ = ["ConfigMixin"]

C = TypeVar("C", bound="ConfigMixin")


def _listify(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_listify(v) for v in value]
    return value


class ConfigMixin:
    """``to_dict`` / ``from_dict`` / ``fingerprint`` for a frozen config dataclass.

    Tuples become JSON lists and come back as tuples for fields annotated as
    tuples; unknown keys are refused (a file written by another version or
    method is not silently half-read).
    """

    def to_dict(self) -> dict[str, Any]:
        return {k: _listify(v) for k, v in dataclasses.asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - set(fields)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
        values = {
            k: tuple(v) if isinstance(v, list) and str(fields[k].type).startswith("tuple") else v
            for k, v in data.items()
        }
        return cls(**values)

    def fingerprint(self) -> str:
        """A short hash of the settings (resume refuses a checkpoint of other settings)."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
