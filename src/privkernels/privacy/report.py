"""Privacy reports: what a ``fit`` released, at what cost, under which relation.

A `PrivacyReport` is a plain immutable value. Each method's ``fit``
returns one; `compose` combines the reports of several releases on the
same private dataset (basic sequential composition: epsilons and deltas add).
Tighter joint accounting (e.g. many DP-SGD steps) happens *inside* one
`MechanismRecord` via dp-accounting, and the record says which accountant.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from privkernels._json import loads_bounded
from privkernels.privacy.record import MechanismRecord, freeze_params
from privkernels.privacy.relations import (
    ADD_REMOVE,
    BETA_CLOSE,
    RELATIONS,
    REPLACE_ONE,
    check_neighbouring,
)
from privkernels.privacy.verify import check_record

__all__ = [
    "REPLACE_ONE",
    "ADD_REMOVE",
    "BETA_CLOSE",
    "Composition",
    "MechanismRecord",
    "PrivacyReport",
    "check_neighbouring",
    "compose",
    "non_private_report",
    "with_notes",
]

#: How `PrivacyReport.summary` opens for a beta-close report.
NOT_STANDARD_DP = (
    "NOT STANDARD DP (beta-close: only a move of at most beta in one record's features is "
    "hidden; labels and the records themselves are not): "
)


#: Record parameters `PrivacyReport.summary` leaves to the JSON (too long for a line).
_SUMMARY_OMITS = ("events",)


class Composition(enum.StrEnum):
    """How a report's records combine into its totals (a file may name no other rule).

    * ``SINGLE``: one record; the totals are its (epsilon, delta).
    * ``BASIC``: sequential composition: epsilons and deltas add.
    * ``NONE``: a non-private report (nothing was privatized).
    """

    SINGLE = "single"
    BASIC = "basic"
    NONE = "none"


def _tuplify(value: Any) -> Any:
    """JSON lists back to (nested) tuples, so records stay hashable."""
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
    """The total privacy cost of everything a call released.

    Attributes:
      epsilon, delta: total guarantee (``math.inf``/``1.0`` ... never used; a
        non-private run has ``private=False`` and ``epsilon=inf``).
      neighbouring: the neighbouring relation the guarantee refers to
        (`REPLACE_ONE`, `ADD_REMOVE`, `BETA_CLOSE`).
      mechanisms: every noisy release, in order.
      composition: how the per-mechanism guarantees were combined (`Composition`).
      private: False when nothing was privatized (the ``epsilon=None`` mode).
      data_independent: quantities released without noise *because they do
        not depend on the private data* (e.g. random network weights, n when
        public), each with the reason.
      notes: free-form caveats a user must read.
      proven: False when a release was made outside the range where its
        privacy theorem applies (only on explicit request, e.g. DP NTK
        regression with ``allow_unproven=True``); the numbers are then the
        ones the method would claim, not a proven guarantee.
    """

    epsilon: float
    delta: float
    neighbouring: str
    mechanisms: tuple[MechanismRecord, ...] = ()
    composition: Composition = Composition.BASIC
    private: bool = True
    data_independent: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    proven: bool = True

    def __post_init__(self) -> None:
        try:  # a rule is one of Composition's, never free text
            object.__setattr__(self, "composition", Composition(self.composition))
        except ValueError:
            raise ValueError(
                f"composition must be one of {[c.value for c in Composition]}, got "
                f"{self.composition!r}"
            ) from None
        if self.private:
            if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
                raise ValueError(f"a private report needs finite epsilon >= 0, got {self.epsilon}")
            if not (0 <= self.delta < 1):
                raise ValueError(f"a private report needs delta in [0, 1), got {self.delta}")

    @classmethod
    def from_mechanisms(
        cls,
        mechanisms: tuple[MechanismRecord, ...] | list[MechanismRecord],
        neighbouring: str,
        *,
        data_independent: tuple[str, ...] = (),
        notes: tuple[str, ...] = (),
        proven: bool = True,
    ) -> PrivacyReport:
        """Basic sequential composition of the given releases."""
        mechs = tuple(mechanisms)
        if not mechs:
            raise ValueError("a private report needs at least one mechanism")
        return cls(
            epsilon=sum(m.epsilon for m in mechs),
            delta=sum(m.delta for m in mechs),
            neighbouring=neighbouring,
            mechanisms=mechs,
            composition=Composition.BASIC if len(mechs) > 1 else Composition.SINGLE,
            private=True,
            data_independent=tuple(data_independent),
            notes=tuple(notes),
            proven=bool(proven),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        out = dataclasses.asdict(self)
        out["composition"] = str(self.composition.value)
        out["mechanisms"] = [
            {**dataclasses.asdict(m), "params": dict(m.params)} for m in self.mechanisms
        ]
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), default=float, **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyReport:
        """Inverse of `to_dict` (JSON lists come back as tuples), for a report read from a
        file: nothing in it is trusted. Each record's epsilon is re-derived from its own
        parameters (`privkernels.privacy.verify`), the relation must be a known one and the
        totals what the composition rule gives; any mismatch is a ``ValueError``, and so is
        a field of the wrong JSON type or text with terminal control characters."""
        try:
            return cls._from_checked_dict(_shape_checked(data))
        except (KeyError, TypeError, AttributeError, ArithmeticError) as err:
            what = f"the field {err.args[0]!r}" if isinstance(err, KeyError) else "a mistyped field"
            raise ValueError(
                f"a privacy report with a missing or malformed part ({what})"
            ) from None

    @classmethod
    def _from_checked_dict(cls, data: Mapping[str, Any]) -> PrivacyReport:
        mechs = tuple(
            MechanismRecord(
                name=m["name"],
                released=m["released"],
                epsilon=float(m["epsilon"]),
                delta=float(m["delta"]),
                sensitivity=None if m.get("sensitivity") is None else float(m["sensitivity"]),
                accountant=m.get("accountant", "closed-form"),
                params=freeze_params(
                    {k: _tuplify(v) for k, v in dict(m.get("params", {})).items()}
                ),
            )
            for m in data.get("mechanisms", ())
        )
        report = cls(
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            neighbouring=data["neighbouring"],
            mechanisms=mechs,
            composition=data.get("composition", "basic"),
            private=_flag(data, "private"),
            data_independent=tuple(data.get("data_independent", ())),
            notes=tuple(data.get("notes", ())),
            proven=_flag(data, "proven"),
        )
        _verify(report)
        return report

    @classmethod
    def from_json(cls, text: str) -> PrivacyReport:
        """Inverse of `to_json`."""
        return cls.from_dict(loads_bounded(text, "the privacy report"))

    def with_note(self, note: str) -> PrivacyReport:
        """This report with ``note`` appended (unchanged if it is already there)."""
        if note in self.notes:
            return self
        return dataclasses.replace(self, notes=self.notes + (note,))

    def summary(self) -> str:
        """One human-readable paragraph."""
        if not self.private:
            return "NON-PRIVATE: nothing was privatized; no guarantee holds."
        lines = [
            ("UNPROVEN (outside the range of the privacy theorem): " if not self.proven else "")
            + (NOT_STANDARD_DP if self.neighbouring == BETA_CLOSE else "")
            + f"({self.epsilon:.4g}, {self.delta:.3g})-DP under {self.neighbouring} neighbours "
            f"({self.composition.value} composition of {len(self.mechanisms)} release(s))"
        ]
        for m in self.mechanisms:
            extra = ", ".join(  # a search's events are long: to_json() holds them
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in m.params
                if k not in _SUMMARY_OMITS
            )
            lines.append(
                f"  - {m.released}: {m.name}, eps={m.epsilon:.4g}, delta={m.delta:.3g}, "
                f"accountant={m.accountant}" + (f", {extra}" if extra else "")
            )
        for item in self.data_independent:
            lines.append(f"  * data-independent (no cost): {item}")
        for note in self.notes:
            lines.append(f"  ! {note}")
        # only the first line starts at the margin: text read from a file cannot forge one
        return "\n".join(
            [lines[0], *(printable(line).replace("\n", "\n      ") for line in lines[1:])]
        )

    def __str__(self) -> str:  # pragma: no cover - formatting only
        return self.summary()


def non_private_report(reason: str = "epsilon=None: non-private baseline") -> PrivacyReport:
    """The report of a run that released its statistics without noise."""
    return PrivacyReport(
        epsilon=math.inf,
        delta=1.0,
        neighbouring="none",
        private=False,
        composition=Composition.NONE,
        notes=(reason,),
    )


def with_notes(report: PrivacyReport, notes: Sequence[str]) -> PrivacyReport:
    """``report`` with each of ``notes`` appended once (a non-private report too)."""
    for note in notes:
        report = report.with_note(note)
    return report


def compose(*reports: PrivacyReport | Sequence[PrivacyReport]) -> PrivacyReport:
    """Sequentially compose reports of releases on the *same* dataset.

    ``compose(a, b)`` or ``compose([a, b])`` (one list or tuple of reports).
    Epsilons and deltas add (basic composition: Dwork & Roth 2014, Thm. 3.16). All
    reports must use the same neighbouring relation; composing with a non-private
    report is non-private. Anything but reports raises ``TypeError``.
    """
    given: tuple[Any, ...] = reports
    if len(given) == 1 and isinstance(given[0], (list, tuple)):
        given = tuple(given[0])
    bad = sorted({type(r).__name__ for r in given if not isinstance(r, PrivacyReport)})
    if bad:
        raise TypeError(
            f"compose takes privacy reports (as arguments, or one list or tuple), got {bad}"
        )
    return _compose(given)


def _compose(reports: tuple[PrivacyReport, ...]) -> PrivacyReport:
    """Basic composition of ``reports`` (checked by `compose`)."""
    if not reports:
        raise ValueError("compose needs at least one report")
    if any(not r.private for r in reports):
        return non_private_report("composition includes a non-private release")
    relations = {r.neighbouring for r in reports}
    if len(relations) != 1:
        raise ValueError(
            f"cannot compose reports under different neighbouring relations: {relations}"
        )
    mechs: tuple[MechanismRecord, ...] = tuple(m for r in reports for m in r.mechanisms)
    return PrivacyReport(
        epsilon=sum(r.epsilon for r in reports),
        delta=sum(r.delta for r in reports),
        neighbouring=relations.pop(),
        mechanisms=mechs,
        composition=Composition.BASIC,
        private=True,
        data_independent=tuple(dict.fromkeys(d for r in reports for d in r.data_independent)),
        notes=tuple(dict.fromkeys(n for r in reports for n in r.notes)),
        proven=all(r.proven for r in reports),
    )


def _flag(data: Mapping[str, Any], name: str) -> bool:
    """A stored boolean (default True); a string such as ``"false"`` is refused, not cast."""
    value = data.get(name, True)
    if not isinstance(value, bool):
        raise ValueError(f"report field {name!r} must be true or false, got {type(value).__name__}")
    return value


def _verify(report: PrivacyReport) -> None:
    """A loaded report's relation, rule, records and totals, each re-derived (`from_dict`)."""
    if not report.private:
        if report.composition != Composition.NONE or report.mechanisms:
            raise ValueError("a non-private report holds no releases and composition 'none'")
        return
    check_neighbouring(report.neighbouring, RELATIONS)
    mechs = report.mechanisms
    if not mechs:
        raise ValueError("a private report without mechanisms")
    if report.composition == Composition.NONE:
        raise ValueError("a private report cannot have composition 'none'")
    if report.composition == Composition.SINGLE and len(mechs) != 1:
        raise ValueError(f"composition 'single' with {len(mechs)} records")
    for m in mechs:
        check_record(m, report.neighbouring)
    for key in ("epsilon", "delta"):
        total, parts = getattr(report, key), 0.0
        for m in mechs:  # summed in order, as compose and Budget.split do
            parts += getattr(m, key)
        if abs(total - parts) > 1e-9 * max(abs(total), abs(parts), 1e-300):
            raise ValueError(
                f"report {key}={total!r} is not the {report.composition.value} composition of "
                f"its mechanisms ({parts!r})"
            )


def printable(text: str) -> str:
    """``text`` with control and format characters (Unicode Cc, Cf) other than newline
    written as escapes (``\\x1b``): safe to print on a terminal, whatever a file held."""
    return "".join(ascii(ch)[1:-1] if _is_control(ch, "\n") else ch for ch in text)


def _is_control(ch: str, allowed: str) -> bool:
    """Whether ``ch`` is a control or format character (Unicode Cc, Cf) not in ``allowed``."""
    return ch not in allowed and unicodedata.category(ch) in ("Cc", "Cf")


def _shape_checked(data: Any) -> Mapping[str, Any]:
    """``data`` when its containers have the types `PrivacyReport.to_dict` writes and its
    free text holds no control characters (a note could otherwise rewrite the epsilon line
    of ``privkernels report`` on a terminal); else a ``ValueError`` that quotes none of it."""
    if not isinstance(data, Mapping):
        raise ValueError("a privacy report must be a JSON object")
    mechanisms = data.get("mechanisms", ())
    if not isinstance(mechanisms, (list, tuple)) or not all(
        isinstance(m, Mapping) and isinstance(m.get("params", {}), Mapping) for m in mechanisms
    ):
        raise ValueError("a privacy report's mechanisms must be a list of JSON objects")
    texts = [data.get("neighbouring"), data.get("composition")]
    for field in ("notes", "data_independent"):
        items = data.get(field, ())
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"a privacy report's {field} must be a list of strings")
        texts += list(items)
    texts += [m.get(k) for m in mechanisms for k in ("name", "released", "accountant")]
    for text in texts:
        if isinstance(text, str) and any(_is_control(ch, "\n\t") for ch in text):
            raise ValueError("a privacy report's text holds terminal control characters")
    return data
