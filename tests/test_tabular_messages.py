"""The tabular readers refuse malformed files without repeating a cell (cells are data).

Each case writes a tiny file in the layout of one reader with a marker in one cell and
checks that the marker is absent from the message and from every chained exception.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from privkernels import data
from privkernels.data import TabularSchema
from privkernels.data.frames import split_table
from privkernels.data.schema import numeric
from privkernels.data.tabular import (
    ADULT_FIELDS,
    CERVICAL_COLUMNS,
    CREDIT_COLUMNS,
    EPILEPTIC_COLUMNS,
)

SECRET = "SECRET-PATIENT-NOTE"
NUM_SECRET = "777.5x"


def _put(root: Path, rel: str, text: str) -> None:
    path = root / "tabular" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if rel.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)


def _chain(err: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _epileptic_row(first: str) -> str:
    return ",".join(["X21.V1.791", first, *(["0"] * 177), "1"])


def _epileptic_no_header(root: Path) -> str:
    _put(root, "epileptic/Epileptic Seizure Recognition.csv", _epileptic_row("4242") + "\n")
    return "4242"


def _epileptic_bad_cell(root: Path) -> str:
    header = ",".join(["", *EPILEPTIC_COLUMNS, "y"])
    _put(
        root, "epileptic/Epileptic Seizure Recognition.csv", f"{header}\n{_epileptic_row(SECRET)}\n"
    )
    return SECRET


def _credit_row(amount: str) -> str:
    return ",".join(["31337", *(["0.5"] * 28), amount, "1"])


def _credit_no_header(root: Path) -> str:
    _put(root, "credit/creditcard.csv", _credit_row("123.456") + "\n")
    return "31337"


def _credit_bad_cell(root: Path) -> str:
    header = ",".join(["Time", *CREDIT_COLUMNS, "Class"])
    _put(root, "credit/creditcard.csv", f"{header}\n{_credit_row(NUM_SECRET)}\n")
    return NUM_SECRET


def _cervical_bad_cell(root: Path) -> str:
    header = ",".join(f'"{c}"' if "," in c else c for c in (*CERVICAL_COLUMNS, "Biopsy"))
    row = [SECRET, *(["1"] * (len(CERVICAL_COLUMNS) - 1)), "0"]
    _put(root, "cervical/kag_risk_factors_cervical_cancer.csv", f"{header}\n{','.join(row)}\n")
    return SECRET


def _covtype_bad_cell(root: Path) -> str:
    row = ["2500", NUM_SECRET, *(["1"] * 52), "1"]
    _put(root, "covtype/covtype.data.gz", ",".join(row) + "\n")
    return NUM_SECRET


def _isolet_bad_cell(root: Path) -> str:
    row = ",".join([SECRET, *(["0.5"] * 616), "1."])
    _put(root, "isolet/isolet1+2+3+4.data", row + "\n")
    _put(root, "isolet/isolet5.data.gz", row + "\n")
    return SECRET


def _adult_bad_cell(root: Path) -> str:
    row = ", ".join([SECRET, *(["1"] * (len(ADULT_FIELDS) - 1)), "<=50K"])
    _put(root, "adult/adult.data", row + "\n")
    _put(root, "adult/adult.test", row + ".\n")
    return SECRET


def _intrusion_bad_cell(root: Path) -> str:
    row = ",".join([SECRET, "tcp", "http", "SF", *(["0"] * 37), "normal."])
    _put(root, "intrusion/kddcup.data_10_percent.gz", row + "\n")
    _put(root, "intrusion/corrected.gz", row + "\n")
    _put(root, "intrusion/training_attack_types.txt", "smurf dos\n")
    return SECRET


CASES = {
    "epileptic_no_header": ("epileptic", _epileptic_no_header),
    "epileptic_bad_cell": ("epileptic", _epileptic_bad_cell),
    "credit_no_header": ("credit", _credit_no_header),
    "credit_bad_cell": ("credit", _credit_bad_cell),
    "cervical_bad_cell": ("cervical", _cervical_bad_cell),
    "covtype_bad_cell": ("covtype", _covtype_bad_cell),
    "isolet_bad_cell": ("isolet", _isolet_bad_cell),
    "adult_bad_cell": ("adult", _adult_bad_cell),
    "intrusion_bad_cell": ("intrusion", _intrusion_bad_cell),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_file_is_refused_without_its_cells(tmp_path, case):
    name, write = CASES[case]
    secret = write(tmp_path)
    with pytest.raises(ValueError) as info:
        data.load(name, split="train", data_dir=tmp_path)
    chain = _chain(info.value)
    for err in chain:
        assert secret not in str(err) and secret not in repr(err)
    assert len(chain) == 1  # no chained numpy error carrying the cell
    assert str(tmp_path) in str(info.value)  # the file is named


def test_split_table_refusals_carry_no_value_in_their_chain():
    """`split_table`'s refusals of a non-numeric cell or a non-integer label drop the
    float()/int() error that repeats the value (its context, not only its display)."""
    schema = TabularSchema.from_columns("toy", [numeric("a", 0, 10)], label="y")
    bad_cell = {"a": np.array(["1", SECRET], dtype=object), "y": np.array(["0", "1"], dtype=object)}
    bad_label = {
        "a": np.array(["1", "2"], dtype=object),
        "y": np.array(["0", SECRET], dtype=object),
    }
    for table in (bad_cell, bad_label):
        with pytest.raises(ValueError) as info:
            split_table(table, schema)
        assert all(SECRET not in repr(err) for err in _chain(info.value))
        assert len(_chain(info.value)) == 1


def _idx(shape: tuple[int, ...], payload: bytes) -> bytes:
    dims = b"".join(int(d).to_bytes(4, "big") for d in shape)
    return bytes([0, 0, 0x08, len(shape)]) + dims + payload


def test_an_out_of_range_idx_label_is_not_echoed(tmp_path):
    """An MNIST-layout label file with a label >= 10 is refused without the label."""
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / "train-images-idx3-ubyte").write_bytes(_idx((2, 28, 28), bytes(2 * 28 * 28)))
    (folder / "train-labels-idx1-ubyte").write_bytes(_idx((2,), bytes([3, 251])))
    with pytest.raises(ValueError) as info:
        data.load("mnist", split="train", data_dir=tmp_path)
    assert "251" not in str(info.value).replace(str(tmp_path), "")
