"""Tabular datasets of DP-NTK Table 4 / DP-KIP Table 5, read from raw UCI/KDD files.

Every dataset has a hand-written public `TabularSchema`
(column names and kinds, category lists from the ``.names`` files / documentation,
numeric bounds from domain knowledge). The default encoding uses only that
schema, so it is data-independent; see `privkernels.data.schema` for the rules
(clip + scale numerics to [0, 1], one-hot categoricals, unseen category ->
all-zero block, missing -> indicator column / explicit ``<missing>`` level).

Layout under the data root (``data_dir`` or ``$PRIVKERNELS_DATA``); files may be
gzip-compressed where an alternative ``.gz`` name is listed:

=========  ======================================================================  ===========
name       files                                                                    split
=========  ======================================================================  ===========
adult      tabular/adult/adult.data, tabular/adult/adult.test                       official
cervical   tabular/cervical/kag_risk_factors_cervical_cancer.csv                    derived
epileptic  tabular/epileptic/Epileptic Seizure Recognition.csv                      derived
intrusion  tabular/intrusion/{kddcup.data_10_percent.gz, corrected.gz,              official
           training_attack_types.txt}
census     tabular/census/{census-income.data[.gz], census-income.test[.gz],        official
           census-income.names}
covtype    tabular/covtype/covtype.data.gz (or covtype.data)                       derived
isolet     tabular/isolet/{isolet1+2+3+4.data[.gz], isolet5.data[.gz]}             official
credit     tabular/credit/creditcard.csv (or creditcard.csv.gz)                     derived
=========  ======================================================================  ===========

"derived" splits: the file has no official test part, so ``split="train"`` /
``"test"`` come from `stratified_split_indices`
(per-class permutation seeded by ``split_seed``, default 0, ``test_fraction``
default 0.2). It depends only on the seed and the class sizes, never on feature
values. ``split="all"`` returns the whole file.

Labels: adult ``>50K`` -> 1 (trailing ``.`` of adult.test stripped); census
``50000+`` -> 1; cervical ``Biopsy``; epileptic ``y == 1`` (seizure) -> 1 else 0
(as DP-HP / DP-NTK; ``binary=False`` keeps 5 classes ``y - 1``); intrusion: attack
name -> {normal, dos, probe, r2l, u2r} via ``training_attack_types.txt`` plus the
static table `TEST_ONLY_ATTACKS` for attacks that appear only in
``corrected.gz``; covtype ``Cover_Type - 1`` (7 classes); isolet: vowel
(A, E, I, O, U) -> 1 vs consonant -> 0 (``binary=False``: 26 letters);
credit ``Class`` (fraud -> 1).

Note: DP-HP/DP-NTK additionally under-sample the majority class and re-split
with sklearn's ``train_test_split``; those steps read the private labels and are
not done here.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from privkernels._warnings import user_stacklevel
from privkernels.data.base import Dataset, require_files, stratified_split_indices, take_rows
from privkernels.data.schema import ColumnSpec, TabularSchema, categorical, numeric
from privkernels.privacy.warnings import warn_privacy_leak

__all__ = [
    "TABULAR",
    "TEST_ONLY_ATTACKS",
    "INTRUSION_CATEGORIES",
    "KDD_SERVICES",
    "load_tabular",
    "tabular_relpaths",
]

Table = dict[str, np.ndarray]


# --------------------------------------------------------------------------- file helpers
def _read_text(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head == b"\x1f\x8b":
        with gzip.open(path, "rb") as fh:
            return fh.read().decode("latin-1")
    return path.read_bytes().decode("latin-1")


_NOT_SHOWN = "(the value is not shown: it is data)"
_LOADTXT_AT = re.compile(r"at row (\d+), column (\d+)")


def _first_bad_float(tokens: np.ndarray) -> int:
    """1-based index of the first token of ``tokens`` (``(n,)`` str) ``float`` refuses."""
    for i, t in enumerate(tokens.tolist()):
        try:
            float(t)
        except ValueError:
            return i + 1
    return 0  # pragma: no cover (only called after numpy refused one)


def _to_float(tokens: Sequence[str] | np.ndarray, path: Path, column: str) -> np.ndarray:
    """Strings (``(n,)``) of ``column`` of ``path`` -> ``(n,)`` float64, NaN for '?' / ''.

    A cell that is no number is refused with the file, the column and the data row only:
    numpy's own message repeats the cell, so it is dropped (no cause, no context).
    """
    arr = np.char.strip(np.asarray(tokens, dtype=str))
    arr = np.where((arr == "?") | (arr == ""), "nan", arr)
    try:
        return arr.astype(np.float64)
    except ValueError:
        pass  # raised below, outside the handler, so numpy's error is not the context
    row = _first_bad_float(arr)
    raise ValueError(
        f"{path}: column {column!r} has a non-numeric cell in data row {row} {_NOT_SHOWN}"
    ) from None


def _loadtxt(path: Path, lines: Sequence[str], **kwargs: Any) -> np.ndarray:
    """``np.loadtxt(lines, delimiter=",", ndmin=2, **kwargs)`` (a 2-D array) whose refusal
    names ``path`` and, when numpy gives it, the data row and field, but no cell value."""
    try:
        return np.loadtxt(lines, delimiter=",", ndmin=2, **kwargs)
    except ValueError as err:
        at = _LOADTXT_AT.search(str(err))
    where = f" in data row {int(at[1]) + 1}, field {int(at[2])}" if at else ""
    raise ValueError(
        f"{path}: a malformed or non-numeric cell{where} {_NOT_SHOWN}; expected a "
        "comma-separated numeric table"
    ) from None


def _head(rows: list[Any], opts: Mapping[str, Any]) -> list[Any]:
    """Apply the ``max_rows`` option (first rows of the file)."""
    m = opts.get("max_rows")
    return rows if m is None else rows[: int(m)]


def _pick(paths: Sequence[Path], which: str) -> Path:
    """The file of an official split: ``paths[0]`` for ``"train"``, ``paths[1]`` for ``"test"``."""
    return paths[0] if which == "train" else paths[1]


def _class_codes(
    path: Path, codes: np.ndarray, n_codes: int, positive: Sequence[int], opts: Mapping[str, Any]
) -> np.ndarray:
    """Class codes ``1..n_codes`` (``(n,)``) as labels: with the ``binary`` option (default)
    1 for a code in ``positive``, else 0; without it ``code - 1``. ``(n,)`` int32."""
    if not np.isin(codes, np.arange(1, n_codes + 1)).all():
        raise ValueError(f"{path}: class codes must be in 1..{n_codes}")
    if opts.get("binary", True):
        return np.isin(codes, positive).astype(np.int32)
    return (codes - 1).astype(np.int32)


def _bounded_columns(
    names: Sequence[str],
    bounds: tuple[float, float, str],
    root: Path | None,
    opts: Mapping[str, Any],
) -> list[ColumnSpec]:
    """A schema's columns when every one is numeric with the same public ``(lo, hi, note)``."""
    lo, hi, note = bounds
    return [numeric(c, lo, hi, note=note) for c in names]


def _split_fields(lines: Sequence[str], n_fields: int, path: Path) -> list[list[str]]:
    rows = []
    for i, line in enumerate(lines):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != n_fields:
            raise ValueError(f"{path}: line {i + 1} has {len(parts)} fields, expected {n_fields}")
        rows.append(parts)
    return rows


# --------------------------------------------------------------------------- adult
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    # category lists verbatim from adult.names (UCI)
    "workclass": (
        "Private",
        "Self-emp-not-inc",
        "Self-emp-inc",
        "Federal-gov",
        "Local-gov",
        "State-gov",
        "Without-pay",
        "Never-worked",
    ),
    "education": (
        "Bachelors",
        "Some-college",
        "11th",
        "HS-grad",
        "Prof-school",
        "Assoc-acdm",
        "Assoc-voc",
        "9th",
        "7th-8th",
        "12th",
        "Masters",
        "1st-4th",
        "10th",
        "Doctorate",
        "5th-6th",
        "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse",
        "Divorced",
        "Never-married",
        "Separated",
        "Widowed",
        "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support",
        "Craft-repair",
        "Other-service",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
        "Handlers-cleaners",
        "Machine-op-inspct",
        "Adm-clerical",
        "Farming-fishing",
        "Transport-moving",
        "Priv-house-serv",
        "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": (
        "Wife",
        "Own-child",
        "Husband",
        "Not-in-family",
        "Other-relative",
        "Unmarried",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States",
        "Cambodia",
        "England",
        "Puerto-Rico",
        "Canada",
        "Germany",
        "Outlying-US(Guam-USVI-etc)",
        "India",
        "Japan",
        "Greece",
        "South",
        "China",
        "Cuba",
        "Iran",
        "Honduras",
        "Philippines",
        "Italy",
        "Poland",
        "Jamaica",
        "Vietnam",
        "Mexico",
        "Portugal",
        "Ireland",
        "France",
        "Dominican-Republic",
        "Laos",
        "Ecuador",
        "Taiwan",
        "Haiti",
        "Columbia",
        "Hungary",
        "Guatemala",
        "Nicaragua",
        "Scotland",
        "Thailand",
        "Yugoslavia",
        "El-Salvador",
        "Trinadad&Tobago",
        "Peru",
        "Hong",
        "Holand-Netherlands",
    ),
}
ADULT_FIELDS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)
# adult.names: unknown values are written '?'; in the distributed files they occur in
# workclass, occupation and native-country (a long-published property of this
# public benchmark), so only these get a <missing> level.
ADULT_NULLABLE = frozenset({"workclass", "occupation", "native-country"})
ADULT_NUMERIC = frozenset(
    {"age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"}
)


def _adult_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    cps = "CPS public-use conventions (top-codes)"
    num = {
        "age": numeric(
            "age", 17, 90, note="adult.names extraction rule AAGE>16; CPS top-codes age at 90"
        ),
        "fnlwgt": numeric(
            "fnlwgt", 0, 1_500_000, note="CPS final weight; generous round bound chosen a priori"
        ),
        "education-num": numeric(
            "education-num", 1, 16, note="16 education levels listed in adult.names"
        ),
        "capital-gain": numeric("capital-gain", 0, 99_999, transform="log", note=cps + ": 99999"),
        "capital-loss": numeric(
            "capital-loss", 0, 99_999, transform="log", note="5-digit CPS field"
        ),
        "hours-per-week": numeric("hours-per-week", 1, 99, note=cps + ": 99"),
    }
    cols = []
    for f in ADULT_FIELDS:
        if f in num:
            cols.append(num[f])
        else:
            cols.append(
                categorical(
                    f, ADULT_CATEGORIES[f], nullable=f in ADULT_NULLABLE, note="adult.names"
                )
            )
    return cols


def _read_census_file(
    path: Path,
    fields: Sequence[str],
    numeric_fields: Collection[str],
    labels: tuple[str, str],
    opts: Mapping[str, Any],
    skip: Collection[str] = (),
) -> tuple[Table, np.ndarray]:
    """A headerless comma-separated CPS extract (UCI Adult, KDD Census-Income).

    One field a column, the income label last (``labels = (negative, positive)``; the
    trailing ``.`` of the test files stripped); lines starting ``|`` are comments. Returns
    ``({field: (n,) float64 for numeric_fields, else str}, (n,) int32 labels)`` without the
    ``skip`` fields.
    """
    lines = [ln for ln in _read_text(path).splitlines() if ln.strip() and not ln.startswith("|")]
    n_fields = len(fields) + 1
    rows = _split_fields(_head(lines, opts), n_fields, path)
    cols = list(zip(*rows, strict=True)) if rows else [()] * n_fields
    table: Table = {
        f: _to_float(cols[j], path, f) if f in numeric_fields else np.asarray(cols[j], dtype=str)
        for j, f in enumerate(fields)
        if f not in skip
    }
    found = [s.rstrip(".").strip() for s in cols[-1]]
    bad = sorted(set(found) - set(labels))
    if bad:
        raise ValueError(
            f"{path}: the label column holds values other than {labels} (not shown: they are data)"
        )
    y = np.fromiter((lab == labels[1] for lab in found), dtype=np.int32, count=len(found))
    return table, y


def _adult_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    return _read_census_file(
        _pick(paths, which), ADULT_FIELDS, ADULT_NUMERIC, ("<=50K", ">50K"), opts
    )


# --------------------------------------------------------------------------- cervical
CERVICAL_NUMERIC = {
    # public a-priori bounds (plausible human ranges), not read from the data
    "Age": (10, 90),
    "Number of sexual partners": (0, 30),
    "First sexual intercourse": (10, 40),
    "Num of pregnancies": (0, 15),
    "Smokes (years)": (0, 40),
    "Smokes (packs/year)": (0, 40),
    "Hormonal Contraceptives (years)": (0, 30),
    "IUD (years)": (0, 20),
    "STDs (number)": (0, 12),
    "STDs: Number of diagnosis": (0, 12),
    "STDs: Time since first diagnosis": (0, 30),
    "STDs: Time since last diagnosis": (0, 30),
}
CERVICAL_COLUMNS = (
    "Age",
    "Number of sexual partners",
    "First sexual intercourse",
    "Num of pregnancies",
    "Smokes",
    "Smokes (years)",
    "Smokes (packs/year)",
    "Hormonal Contraceptives",
    "Hormonal Contraceptives (years)",
    "IUD",
    "IUD (years)",
    "STDs",
    "STDs (number)",
    "STDs:condylomatosis",
    "STDs:cervical condylomatosis",
    "STDs:vaginal condylomatosis",
    "STDs:vulvo-perineal condylomatosis",
    "STDs:syphilis",
    "STDs:pelvic inflammatory disease",
    "STDs:genital herpes",
    "STDs:molluscum contagiosum",
    "STDs:AIDS",
    "STDs:HIV",
    "STDs:Hepatitis B",
    "STDs:HPV",
    "STDs: Number of diagnosis",
    "STDs: Time since first diagnosis",
    "STDs: Time since last diagnosis",
    "Dx:Cancer",
    "Dx:CIN",
    "Dx:HPV",
    "Dx",
    "Hinselmann",
    "Schiller",
    "Citology",
)
CERVICAL_OTHER_TESTS = ("Hinselmann", "Schiller", "Citology")


def _cervical_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    keep_tests = bool(opts.get("include_other_tests", True))
    cols = []
    for c in CERVICAL_COLUMNS:
        if not keep_tests and c in CERVICAL_OTHER_TESTS:
            continue
        if c in CERVICAL_NUMERIC:
            lo, hi = CERVICAL_NUMERIC[c]
            cols.append(numeric(c, lo, hi, nullable=True, note="a-priori human range"))
        else:
            cols.append(categorical(c, ("0", "1"), nullable=True, note="binary indicator"))
    # UCI: "missing values due to privacy concerns of the patients" (no per-column
    # list is published), so every feature column is declared nullable.
    return cols


def _cervical_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = paths[0]
    reader = csv.reader(io.StringIO(_read_text(path)))
    header = [h.strip() for h in next(reader)]
    rows = _head([r for r in reader if r], opts)
    idx = {h: i for i, h in enumerate(header)}
    missing = [c for c in (*CERVICAL_COLUMNS, "Biopsy") if c not in idx]
    if missing:
        raise ValueError(f"{path}: header lacks columns {missing}")
    table: Table = {}
    for c in CERVICAL_COLUMNS:
        tokens = [r[idx[c]] for r in rows]
        table[c] = (
            _to_float(tokens, path, c) if c in CERVICAL_NUMERIC else np.asarray(tokens, dtype=str)
        )
    y = _to_float([r[idx["Biopsy"]] for r in rows], path, "Biopsy")
    if np.isnan(y).any() or not np.isin(y, (0, 1)).all():
        raise ValueError(f"{path}: Biopsy must be 0/1")
    return table, y.astype(np.int32)


# --------------------------------------------------------------------------- epileptic
EPILEPTIC_COLUMNS = tuple(f"X{i}" for i in range(1, 179))


_EPILEPTIC_BOUNDS = (
    -2048,
    2047,
    "12-bit A/D converter range of the Bonn EEG recordings (Andrzejak et al. 2001)",
)


def _epileptic_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = paths[0]
    text = _read_text(path).splitlines()
    header = [h.strip().strip('"') for h in text[0].split(",")]
    if header[1:180] != [*EPILEPTIC_COLUMNS, "y"]:
        raise ValueError(
            f"{path}: the first line is not the expected header (an unnamed id column, "
            f"{EPILEPTIC_COLUMNS[0]}..{EPILEPTIC_COLUMNS[-1]}, y); its cells are not shown: they are data"
        )
    arr = _loadtxt(path, _head(text[1:], opts), usecols=range(1, 180), dtype=np.float64)
    table = {c: arr[:, j] for j, c in enumerate(EPILEPTIC_COLUMNS)}
    return table, _class_codes(path, arr[:, 178].astype(np.int64), 5, (1,), opts)


# --------------------------------------------------------------------------- intrusion (KDD Cup 99)
INTRUSION_CATEGORIES = ("normal", "dos", "probe", "r2l", "u2r")
# Attacks present only in the labelled test set (corrected.gz), mapped to their
# categories as documented for the 1998/99 DARPA evaluation.
TEST_ONLY_ATTACKS = {
    "apache2": "dos",
    "mailbomb": "dos",
    "processtable": "dos",
    "udpstorm": "dos",
    "mscan": "probe",
    "saint": "probe",
    "named": "r2l",
    "sendmail": "r2l",
    "snmpgetattack": "r2l",
    "snmpguess": "r2l",
    "worm": "r2l",
    "xlock": "r2l",
    "xsnoop": "r2l",
    "httptunnel": "u2r",
    "ps": "u2r",
    "sqlattack": "u2r",
    "xterm": "u2r",
}
KDD_FIELDS = (
    "duration",
    "protocol_type",
    "service",
    "flag",
    "src_bytes",
    "dst_bytes",
    "land",
    "wrong_fragment",
    "urgent",
    "hot",
    "num_failed_logins",
    "logged_in",
    "num_compromised",
    "root_shell",
    "su_attempted",
    "num_root",
    "num_file_creations",
    "num_shells",
    "num_access_files",
    "num_outbound_cmds",
    "is_host_login",
    "is_guest_login",
    "count",
    "srv_count",
    "serror_rate",
    "srv_serror_rate",
    "rerror_rate",
    "srv_rerror_rate",
    "same_srv_rate",
    "diff_srv_rate",
    "srv_diff_host_rate",
    "dst_host_count",
    "dst_host_srv_count",
    "dst_host_same_srv_rate",
    "dst_host_diff_srv_rate",
    "dst_host_same_src_port_rate",
    "dst_host_srv_diff_host_rate",
    "dst_host_serror_rate",
    "dst_host_srv_serror_rate",
    "dst_host_rerror_rate",
    "dst_host_srv_rerror_rate",
)
KDD_SERVICES = (
    # the 70 network services of the KDD Cup 99 feature extractor
    "aol",
    "auth",
    "bgp",
    "courier",
    "csnet_ns",
    "ctf",
    "daytime",
    "discard",
    "domain",
    "domain_u",
    "echo",
    "eco_i",
    "ecr_i",
    "efs",
    "exec",
    "finger",
    "ftp",
    "ftp_data",
    "gopher",
    "harvest",
    "hostnames",
    "http",
    "http_2784",
    "http_443",
    "http_8001",
    "imap4",
    "IRC",
    "iso_tsap",
    "klogin",
    "kshell",
    "ldap",
    "link",
    "login",
    "mtp",
    "name",
    "netbios_dgm",
    "netbios_ns",
    "netbios_ssn",
    "netstat",
    "nnsp",
    "nntp",
    "ntp_u",
    "other",
    "pm_dump",
    "pop_2",
    "pop_3",
    "printer",
    "private",
    "red_i",
    "remote_job",
    "rje",
    "shell",
    "smtp",
    "sql_net",
    "ssh",
    "sunrpc",
    "supdup",
    "systat",
    "telnet",
    "tftp_u",
    "tim_i",
    "time",
    "urh_i",
    "urp_i",
    "uucp",
    "uucp_path",
    "vmnet",
    "whois",
    "X11",
    "Z39_50",
)
KDD_SYMBOLIC: dict[str, tuple[str, ...]] = {
    "protocol_type": ("tcp", "udp", "icmp"),
    "service": KDD_SERVICES,
    "flag": ("OTH", "REJ", "RSTO", "RSTOS0", "RSTR", "S0", "S1", "S2", "S3", "SF", "SH"),
    "land": ("0", "1"),
    "logged_in": ("0", "1"),
    "is_host_login": ("0", "1"),
    "is_guest_login": ("0", "1"),
}
_KDD_RATE = frozenset(f for f in KDD_FIELDS if f.endswith("_rate"))
_KDD_LOG_COUNT = frozenset(
    {
        "wrong_fragment",
        "urgent",
        "hot",
        "num_failed_logins",
        "num_compromised",
        "num_root",
        "num_file_creations",
        "num_shells",
        "num_access_files",
        "num_outbound_cmds",
    }
)


def _kdd_numeric(f: str) -> ColumnSpec:
    if f in _KDD_RATE:
        return numeric(f, 0, 1, note="fraction (kddcup.names / KDD task description)")
    if f == "duration":
        return numeric(f, 0, 86_400, transform="log", note="seconds; bound: one day")
    if f in ("src_bytes", "dst_bytes"):
        return numeric(f, 0, 1e9, transform="log", note="bytes; bound 1e9 chosen a priori")
    if f in ("root_shell", "su_attempted"):
        return numeric(f, 0, 1, note="documented as a 0/1 flag")
    if f in ("count", "srv_count"):
        return numeric(f, 0, 511, note="connections in the past 2 s; the extractor caps at 511")
    if f in ("dst_host_count", "dst_host_srv_count"):
        return numeric(f, 0, 255, note="host-window counts; the extractor caps at 255")
    if f in _KDD_LOG_COUNT:
        return numeric(f, 0, 10_000, transform="log", note="event count; bound 1e4 chosen a priori")
    raise KeyError(f)  # pragma: no cover


def _intrusion_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    cols = [
        categorical(f, KDD_SYMBOLIC[f], note="kddcup.names (symbolic)")
        if f in KDD_SYMBOLIC
        else _kdd_numeric(f)
        for f in KDD_FIELDS
    ]
    return cols


def _attack_table(path: Path) -> dict[str, str]:
    table = {"normal": "normal"}
    for line in _read_text(path).splitlines():
        parts = line.split()
        if len(parts) == 2:
            table[parts[0].strip()] = parts[1].strip()
    for k, v in TEST_ONLY_ATTACKS.items():
        table.setdefault(k, v)
    return table


def _intrusion_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = _pick(paths, which)
    attacks = _attack_table(paths[2])
    lines = _head([ln for ln in _read_text(path).splitlines() if ln], opts)
    sym_idx = [KDD_FIELDS.index(f) for f in ("protocol_type", "service", "flag")]
    num_idx = [j for j in range(41) if j not in sym_idx]
    nums = _loadtxt(path, lines, usecols=num_idx, dtype=np.float64)
    strs = _loadtxt(path, lines, usecols=(*sym_idx, 41), dtype="S32")
    table: Table = {}
    for j, c in enumerate(num_idx):
        f = KDD_FIELDS[c]
        table[f] = nums[:, j]  # binary symbolic fields (0/1) are numeric-coded categories
    for j, c in enumerate(sym_idx):
        table[KDD_FIELDS[c]] = strs[:, j]
    names_b, inv = np.unique(strs[:, 3], return_inverse=True)
    names = [b.decode("latin-1").strip().rstrip(".") for b in names_b.tolist()]
    cat_of = {c: i for i, c in enumerate(INTRUSION_CATEGORIES)}
    codes = np.array([cat_of.get(attacks.get(a, ""), -1) for a in names], dtype=np.int64)
    y = codes[np.asarray(inv).reshape(-1)]
    unknown = sorted(a for a, k in zip(names, codes.tolist(), strict=True) if k < 0)
    if unknown:
        if opts.get("unknown_attack", "drop") == "error":
            raise ValueError(
                f"{path}: some attack names have no category (not shown: they are data)"
            )
        keep = y >= 0
        warnings.warn(
            "intrusion: dropping the rows whose attack name has no category (names and counts "
            "not shown: they are data; unknown_attack='error' refuses them instead)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
        table = {k: v[keep] for k, v in table.items()}
        y = y[keep]
    return table, y.astype(np.int32)


# --------------------------------------------------------------------------- census (KDD Census-Income)
CENSUS_FIELDS = (
    "age",
    "class of worker",
    "detailed industry recode",
    "detailed occupation recode",
    "education",
    "wage per hour",
    "enroll in edu inst last wk",
    "marital stat",
    "major industry code",
    "major occupation code",
    "race",
    "hispanic origin",
    "sex",
    "member of a labor union",
    "reason for unemployment",
    "full or part time employment stat",
    "capital gains",
    "capital losses",
    "dividends from stocks",
    "tax filer stat",
    "region of previous residence",
    "state of previous residence",
    "detailed household and family stat",
    "detailed household summary in household",
    "instance weight",
    "migration code-change in msa",
    "migration code-change in reg",
    "migration code-move within reg",
    "live in this house 1 year ago",
    "migration prev res in sunbelt",
    "num persons worked for employer",
    "family members under 18",
    "country of birth father",
    "country of birth mother",
    "country of birth self",
    "citizenship",
    "own business or self employed",
    "fill inc questionnaire for veteran's admin",
    "veterans benefits",
    "weeks worked in year",
    "year",
)
CENSUS_NUMERIC = {
    "age": (0, 90, "linear", "CPS top-code 90"),
    "wage per hour": (0, 9_999, "log", "4-digit CPS field"),
    "capital gains": (0, 99_999, "log", "CPS top-code 99999"),
    "capital losses": (0, 99_999, "log", "5-digit CPS field"),
    "dividends from stocks": (0, 99_999, "log", "CPS top-code 99999"),
    "num persons worked for employer": (0, 6, "linear", "coded 0..6 (census-income.names)"),
    "weeks worked in year": (0, 52, "linear", "weeks in a year"),
}
CENSUS_IGNORED = ("instance weight",)  # census-income.names: must not be used by classifiers


def _parse_names_categories(path: Path) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for line in _read_text(path).splitlines():
        if line.startswith("|") or ":" not in line:
            continue
        name, _, rest = line.partition(":")
        rest = rest.strip()
        if rest.endswith("."):
            rest = rest[:-1]
        if rest in ("continuous", "ignore", "label"):
            continue
        out[name.strip()] = tuple(dict.fromkeys(s.strip() for s in rest.split(",")))
    return out


def _census_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    paths = require_files("census", root, [("tabular/census/census-income.names",)])
    cats = _parse_names_categories(paths[0])
    cols = []
    for f in CENSUS_FIELDS:
        if f in CENSUS_IGNORED:
            continue
        if f in CENSUS_NUMERIC:
            lo, hi, tr, note = CENSUS_NUMERIC[f]
            cols.append(numeric(f, lo, hi, transform=tr, note=note))  # type: ignore[arg-type]
        else:
            if f not in cats:
                raise ValueError(f"{paths[0]}: no category list for attribute {f!r}")
            cols.append(categorical(f, cats[f], nullable=True, note="census-income.names"))
    return cols


def _census_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = _pick(paths, which)
    labels = ("- 50000", "50000+")
    return _read_census_file(path, CENSUS_FIELDS, CENSUS_NUMERIC, labels, opts, CENSUS_IGNORED)


# --------------------------------------------------------------------------- covtype
COVTYPE_NUMERIC = (
    ("Elevation", 1500, 4500, "metres; Roosevelt National Forest terrain"),
    ("Aspect", 0, 360, "azimuth degrees"),
    ("Slope", 0, 90, "degrees"),
    ("Horizontal_Distance_To_Hydrology", 0, 2000, "metres; a-priori bound"),
    ("Vertical_Distance_To_Hydrology", -1000, 1000, "metres; a-priori bound"),
    ("Horizontal_Distance_To_Roadways", 0, 10000, "metres; a-priori bound"),
    ("Hillshade_9am", 0, 255, "index 0..255 (covtype.info)"),
    ("Hillshade_Noon", 0, 255, "index 0..255 (covtype.info)"),
    ("Hillshade_3pm", 0, 255, "index 0..255 (covtype.info)"),
    ("Horizontal_Distance_To_Fire_Points", 0, 10000, "metres; a-priori bound"),
)
COVTYPE_WILDERNESS = tuple(f"Wilderness_Area{i}" for i in range(1, 5))
COVTYPE_SOIL = tuple(f"Soil_Type{i}" for i in range(1, 41))
COVTYPE_CLASSES = (
    "Spruce/Fir",
    "Lodgepole Pine",
    "Ponderosa Pine",
    "Cottonwood/Willow",
    "Aspen",
    "Douglas-fir",
    "Krummholz",
)


def _covtype_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    cols = [numeric(n, lo, hi, note=note) for n, lo, hi, note in COVTYPE_NUMERIC]
    cols.append(
        categorical("Wilderness_Area", COVTYPE_WILDERNESS, note="covtype.info (4 binary columns)")
    )
    cols.append(categorical("Soil_Type", COVTYPE_SOIL, note="covtype.info (40 binary columns)"))
    return cols


def _onehot_tokens(block: np.ndarray, names: Sequence[str]) -> np.ndarray:
    ok = block.sum(axis=1) == 1
    tok = np.asarray(names, dtype=object)[np.argmax(block, axis=1)].astype(str)
    return np.where(ok, tok, "?")  # not exactly one flag set -> missing (all-zero block)


def _covtype_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    text = _read_text(paths[0]).splitlines()
    arr = _loadtxt(paths[0], _head([ln for ln in text if ln], opts), dtype=np.int64)
    if arr.shape[1] != 55:
        raise ValueError(f"{paths[0]}: expected 55 columns, got {arr.shape[1]}")
    table: Table = {n: arr[:, j].astype(np.float64) for j, (n, *_r) in enumerate(COVTYPE_NUMERIC)}
    table["Wilderness_Area"] = _onehot_tokens(arr[:, 10:14], COVTYPE_WILDERNESS)
    table["Soil_Type"] = _onehot_tokens(arr[:, 14:54], COVTYPE_SOIL)
    y = arr[:, 54]
    if not np.isin(y, np.arange(1, 8)).all():
        raise ValueError(f"{paths[0]}: Cover_Type must be 1..7")
    return table, (y - 1).astype(np.int32)


# --------------------------------------------------------------------------- isolet
ISOLET_COLUMNS = tuple(f"f{i}" for i in range(1, 618))
ISOLET_VOWELS = (1, 5, 9, 15, 21)  # A E I O U (labels 1..26)


_ISOLET_BOUNDS = (-1, 1, "isolet.names: features scaled into [-1, 1] by the dataset authors")


def _isolet_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = _pick(paths, which)
    lines = _head([ln for ln in _read_text(path).splitlines() if ln.strip()], opts)
    arr = _loadtxt(path, lines, dtype=np.float64)
    if arr.shape[1] != 618:
        raise ValueError(f"{path}: expected 618 columns, got {arr.shape[1]}")
    letters = np.rint(arr[:, 617]).astype(np.int64)
    table = {c: arr[:, j] for j, c in enumerate(ISOLET_COLUMNS)}
    return table, _class_codes(path, letters, 26, ISOLET_VOWELS, opts)


# --------------------------------------------------------------------------- credit
CREDIT_COLUMNS = (*(f"V{i}" for i in range(1, 29)), "Amount")


def _credit_columns(root: Path | None, opts: Mapping[str, Any]) -> list[ColumnSpec]:
    cols = [
        numeric(f"V{i}", -10, 10, note="anonymised PCA component; symmetric bound chosen a priori")
        for i in range(1, 29)
    ]
    cols.append(numeric("Amount", 0, 30_000, transform="log", note="euros; bound chosen a priori"))
    return cols


def _credit_read(
    paths: Sequence[Path], which: str, opts: Mapping[str, Any]
) -> tuple[Table, np.ndarray]:
    path = paths[0]
    lines = _read_text(path).splitlines()
    header = [h.strip().strip('"') for h in lines[0].split(",")]
    want = ["Time", *CREDIT_COLUMNS, "Class"]
    if header != want:
        raise ValueError(
            f"{path}: the first line is not the expected header ({', '.join(want[:3])}, ..., "
            f"{', '.join(want[-2:])}; {len(want)} columns); its cells are not shown: they are data"
        )
    body = _head([ln.replace('"', "") for ln in lines[1:] if ln.strip()], opts)
    arr = _loadtxt(path, body, dtype=np.float64)
    table = {c: arr[:, j + 1] for j, c in enumerate(CREDIT_COLUMNS)}
    y = arr[:, 30]
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{path}: Class must be 0/1")
    return table, y.astype(np.int32)


# --------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class TabularDef:
    """One dataset: its files, split, public schema (``label``, ``description`` and the
    ``columns`` function) and reader (``read(paths, which, opts) -> (table, (n,) int
    labels)``)."""

    name: str
    files: tuple[str | tuple[str, ...], ...]
    official_split: bool
    label: str
    description: str
    columns: Callable[[Path | None, Mapping[str, Any]], list[ColumnSpec]]
    read: Callable[[Sequence[Path], str, Mapping[str, Any]], tuple[Table, np.ndarray]]
    class_names: Callable[[Mapping[str, Any]], tuple[str, ...]]
    options: tuple[str, ...] = ()
    note: str = ""

    def schema(self, root: Path | None, opts: Mapping[str, Any]) -> TabularSchema:
        """The hand-written public `TabularSchema` (no data read; ``root`` for census' names)."""
        return TabularSchema.from_columns(
            self.name, self.columns(root, opts), label=self.label, description=self.description
        )


TABULAR: dict[str, TabularDef] = {
    "adult": TabularDef(
        "adult",
        ("tabular/adult/adult.data", "tabular/adult/adult.test"),
        True,
        "income>50K",
        "UCI Adult (Census Income), 14 attributes",
        _adult_columns,
        _adult_read,
        lambda o: ("<=50K", ">50K"),
    ),
    "cervical": TabularDef(
        "cervical",
        ("tabular/cervical/kag_risk_factors_cervical_cancer.csv",),
        False,
        "Biopsy",
        "UCI Cervical cancer (Risk Factors)",
        _cervical_columns,
        _cervical_read,
        lambda o: ("biopsy negative", "biopsy positive"),
        options=("include_other_tests",),
    ),
    "epileptic": TabularDef(
        "epileptic",
        ("tabular/epileptic/Epileptic Seizure Recognition.csv",),
        False,
        "y",
        "UCI Epileptic Seizure Recognition, 178 EEG samples",
        partial(_bounded_columns, EPILEPTIC_COLUMNS, _EPILEPTIC_BOUNDS),
        _epileptic_read,
        lambda o: (
            ("no seizure", "seizure")
            if o.get("binary", True)
            else ("seizure", "tumour area", "healthy area", "eyes closed", "eyes open")
        ),
        options=("binary",),
    ),
    "intrusion": TabularDef(
        "intrusion",
        (
            "tabular/intrusion/kddcup.data_10_percent.gz",
            "tabular/intrusion/corrected.gz",
            "tabular/intrusion/training_attack_types.txt",
        ),
        True,
        "attack category",
        "KDD Cup 1999 (10% training data / corrected test)",
        _intrusion_columns,
        _intrusion_read,
        lambda o: INTRUSION_CATEGORIES,
        options=("unknown_attack",),
    ),
    "census": TabularDef(
        "census",
        (
            ("tabular/census/census-income.data", "tabular/census/census-income.data.gz"),
            ("tabular/census/census-income.test", "tabular/census/census-income.test.gz"),
            "tabular/census/census-income.names",
        ),
        True,
        "income 50000+",
        "UCI KDD Census-Income (1994/95 CPS), 40 attributes",
        _census_columns,
        _census_read,
        lambda o: ("- 50000", "50000+"),
        note="Files of the UCI 'Census-Income (KDD)' dataset (census-income.data.gz / .test.gz / .names).",
    ),
    "covtype": TabularDef(
        "covtype",
        (("tabular/covtype/covtype.data.gz", "tabular/covtype/covtype.data"),),
        False,
        "Cover_Type",
        "UCI Covertype (Roosevelt National Forest)",
        _covtype_columns,
        _covtype_read,
        lambda o: COVTYPE_CLASSES,
        note="covtype.data.gz of the UCI 'Covertype' dataset.",
    ),
    "isolet": TabularDef(
        "isolet",
        (
            ("tabular/isolet/isolet1+2+3+4.data", "tabular/isolet/isolet1+2+3+4.data.gz"),
            ("tabular/isolet/isolet5.data", "tabular/isolet/isolet5.data.gz"),
        ),
        True,
        "letter",
        "UCI ISOLET spoken letters",
        partial(_bounded_columns, ISOLET_COLUMNS, _ISOLET_BOUNDS),
        _isolet_read,
        lambda o: (
            ("consonant", "vowel")
            if o.get("binary", True)
            else tuple(chr(ord("A") + i) for i in range(26))
        ),
        options=("binary",),
        note="UCI ISOLET ships .Z files: decompress them (e.g. `uncompress` or `gzip -d`) first.",
    ),
    "credit": TabularDef(
        "credit",
        (("tabular/credit/creditcard.csv", "tabular/credit/creditcard.csv.gz"),),
        False,
        "Class",
        "Kaggle/ULB credit card fraud (Time dropped)",
        _credit_columns,
        _credit_read,
        lambda o: ("legitimate", "fraud"),
        note="creditcard.csv of the Kaggle 'Credit Card Fraud Detection' (ULB) dataset.",
    ),
}


def tabular_relpaths(name: str) -> list[str]:
    """Expected files (relative to the data root) of a tabular dataset."""
    return [f if isinstance(f, str) else " or ".join(f) for f in TABULAR[name].files]


def _override_bounds(
    schema: TabularSchema, bounds: Mapping[str, tuple[float, float]] | None
) -> TabularSchema:
    if not bounds:
        return schema
    cols = []
    for c in schema.columns:
        if c.name in bounds:
            if c.kind != "numeric":
                raise ValueError(f"bounds given for non-numeric column {c.name!r}")
            lo, hi = bounds[c.name]
            c = replace(c, bounds=(float(lo), float(hi)), note="user-supplied public bound")
        cols.append(c)
    unknown = set(bounds) - set(schema.column_names)
    if unknown:
        raise ValueError(f"bounds given for unknown column(s) {sorted(unknown)}")
    return TabularSchema(schema.name, tuple(cols), schema.label, schema.description)


def _data_bounds(schema: TabularSchema, table: Table) -> dict[str, tuple[float, float]]:
    out = {}
    for c in schema.numeric_columns:
        v = table[c.name]
        v = v[~np.isnan(v)]
        out[c.name] = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    return out


def _select(table: Table, y: np.ndarray, idx: np.ndarray) -> tuple[Table, np.ndarray]:
    return {k: v[idx] for k, v in table.items()}, y[idx]


def load_tabular(
    name: str,
    root: Path | None,
    split: str,
    *,
    scale: str = "public",
    unknown: str = "zero",
    bounds: Mapping[str, tuple[float, float]] | None = None,
    max_rows: int | None = None,
    subsample: int | None = None,
    subsample_seed: int = 0,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    **options: Any,
) -> Dataset:
    """Load and encode a tabular dataset (see the module docstring for files and rules).

    Args:
      scale: ``"public"`` (default, data-independent), ``"data"`` (the training split's
        min/max: ``PrivacyLeakWarning``) or ``"none"`` (raw numeric values).
      unknown: categorical value outside the public list -> ``"zero"`` block or ``"error"``.
      bounds: override public numeric bounds ``{column: (lo, hi)}`` (must itself be public).
      max_rows: read only the first rows of the file (before any derived split).
      subsample: keep this many rows of the split, uniformly at random (``subsample_seed``);
        test_fraction, split_seed: the derived split (no official test set).
      **options: dataset-specific (``binary`` for epileptic/isolet, ``include_other_tests``
        for cervical, ``unknown_attack`` for intrusion).
    """
    spec = TABULAR[name]
    bad = set(options) - set(spec.options)
    if bad:
        raise TypeError(
            f"load({name!r}) got unexpected option(s) {sorted(bad)}; "
            f"dataset options: {list(spec.options)}"
        )
    valid_splits = ("train", "test") if spec.official_split else ("train", "test", "all")
    if split not in valid_splits:
        raise ValueError(f"split must be one of {valid_splits} for {name!r}, got {split!r}")
    if scale not in ("public", "data", "none"):
        raise ValueError(f"scale must be 'public', 'data' or 'none', got {scale!r}")
    paths = require_files(name, root, spec.files, note=spec.note)
    schema = _override_bounds(spec.schema(root, options), bounds)
    ropts = dict(options, max_rows=max_rows)
    data_dependent: list[str] = []

    def read_split(which: str) -> tuple[Table, np.ndarray]:
        if spec.official_split:
            return spec.read(paths, which, ropts)
        table, y = spec.read(paths, "all", ropts)
        if which == "all":
            return table, y
        tr, te = stratified_split_indices(y, test_fraction=test_fraction, seed=split_seed)
        return _select(table, y, tr if which == "train" else te)

    table, y = read_split(split)  # max_rows is applied by the readers, before any derived split

    data_bounds = None
    if scale == "data":
        train_table = table if split == "train" else read_split("train")[0]
        data_bounds = _data_bounds(schema, train_table)
        warn_privacy_leak(
            f"scale='data' for {name!r}: the min/max of every numeric column of the training split"
        )
        data_dependent.append("numeric min/max scaling from the training split")

    if subsample is not None:
        idx = np.arange(y.shape[0])
        _, idx_kept, sub_info = take_rows(
            idx, idx, subsample=subsample, subsample_seed=subsample_seed
        )
        table, y = _select(table, y, idx_kept)
    else:
        sub_info = {}

    x, enc_info = schema.encode(table, scale=scale, data_bounds=data_bounds, unknown=unknown)  # type: ignore[arg-type]
    info: dict[str, Any] = {
        "files": [str(p) for p in paths],
        "split_rule": "official"
        if spec.official_split
        else f"stratified per-class permutation, numpy default_rng([split_seed={split_seed}, class]), "
        f"test_fraction={test_fraction}",
        "data_dependent": data_dependent,
        **enc_info,
        **sub_info,
    }
    if max_rows is not None:
        info["max_rows"] = int(max_rows)
    if data_bounds is not None:
        info["data_bounds"] = data_bounds
    return Dataset(
        x=x,
        y=y.astype(np.int32),
        n_classes=len(spec.class_names(options)),
        name=name,
        split=split,
        schema=schema,
        class_names=spec.class_names(options),
        info=info,
    )
