"""privkernels.data without real data: schema encoding, user-supplied layouts
(census, covtype, isolet, credit, cifar10) on tiny hand-made files, splits and
synthetic generators."""

from __future__ import annotations

import gzip
import os
import pickle
import warnings

import jax
import numpy as np
import pytest

from privkernels import data
from privkernels.data import TabularSchema, stratified_split_indices
from privkernels.data.schema import MISSING_LEVEL, categorical, numeric
from privkernels.data.synthetic import gaussian_blobs, synthetic_images, synthetic_tabular
from privkernels.privacy.warnings import PrivacyLeakWarning


def small_schema(nullable: bool = True) -> TabularSchema:
    return TabularSchema.from_columns(
        "toy",
        [
            numeric("a", 0, 10, nullable=nullable),
            numeric("b", 0, 1000, transform="log"),
            categorical("c", ["x", "y", "z"], nullable=nullable),
            categorical("flag", ["0", "1"]),
        ],
    )


# --------------------------------------------------------------------------- schema
def test_schema_layout_and_names():
    s = small_schema()
    assert [(c.start, c.stop) for c in s.columns] == [(0, 2), (2, 3), (3, 7), (7, 9)]
    assert s.n_features == 9
    assert s.feature_names() == [
        "a",
        "a[missing]",
        "b",
        "c=x",
        "c=y",
        "c=z",
        f"c={MISSING_LEVEL}",
        "flag=0",
        "flag=1",
    ]
    assert s.categorical_slices == (slice(3, 7), slice(7, 9))
    assert s.numeric_value_indices().tolist() == [0, 2]
    assert "toy: d=9" in s.describe()
    with pytest.raises(ValueError, match="duplicate"):
        TabularSchema.from_columns("t", [numeric("a", 0, 1), numeric("a", 0, 1)])
    with pytest.raises(ValueError, match="hi > lo"):
        numeric("a", 1, 1)
    with pytest.raises(ValueError, match="category list"):
        categorical("c", [])


def test_schema_encode_rules():
    s = small_schema()
    table = {
        "a": np.array([-5.0, 5.0, 20.0, np.nan]),
        "b": np.array([0.0, 1000.0, 31.0, 5000.0]),
        "c": np.array(["x", "z", "?", "w"]),  # '?' -> <missing>, 'w' unseen -> zeros
        "flag": np.array(["1.0", "0", "1", "0.0"]),  # float-written codes are canonicalised
        "extra": np.array(["ignored"] * 4),
    }
    x, info = s.encode(table)
    assert x.dtype == np.float32 and x.shape == (4, 9)
    np.testing.assert_allclose(x[:, 0], [0.0, 0.5, 1.0, 0.0])  # clipped to [0, 10]
    np.testing.assert_array_equal(x[:, 1], [0, 0, 0, 1])  # missing indicator
    np.testing.assert_allclose(x[:, 2], [0.0, 1.0, np.log1p(31) / np.log1p(1000), 1.0], rtol=1e-6)
    np.testing.assert_array_equal(
        x[:, 3:7], [[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(x[:, 7:9], [[0, 1], [1, 0], [0, 1], [1, 0]])
    assert info["unseen_categories"] == {"c": {"w": 1}}
    with pytest.raises(ValueError, match="not in the public category list") as err:
        s.encode(table, unknown="error")
    assert "'w'" not in str(err.value) and "1 row" not in str(err.value)  # no private value
    with pytest.raises(ValueError, match="lacks column"):
        s.encode({"a": table["a"]})
    # a missing value in a non-nullable column is counted, never crashes
    x2, info2 = small_schema(nullable=False).encode(table)
    assert info2["missing_in_non_nullable"] == {"a": 1, "c": 1}
    assert x2.shape == (4, 7) and np.isfinite(x2).all()


def test_schema_project_and_decode_roundtrip():
    s = small_schema()
    rng = np.random.default_rng(0)
    raw = rng.normal(0.5, 0.6, size=(50, s.n_features)).astype(np.float32)
    p = s.project(raw)
    assert p.min() >= 0 and p.max() <= 1
    for sl in s.categorical_slices:
        np.testing.assert_array_equal(p[:, sl].sum(1), 1.0)
    np.testing.assert_array_equal(s.project(p), p)  # idempotent
    dec = s.decode(p)
    table = {
        k: (v if k in ("a", "b") else np.where(v == MISSING_LEVEL, "?", v).astype(str))
        for k, v in dec.items()
    }
    x, _ = s.encode(table)
    np.testing.assert_allclose(x, p, atol=1e-5)


def test_stratified_split_properties():
    y = np.repeat(np.arange(3), [50, 30, 20])[np.random.default_rng(1).permutation(100)]
    tr, te = stratified_split_indices(y, test_fraction=0.2, seed=0)
    assert np.intersect1d(tr, te).size == 0 and np.union1d(tr, te).size == 100
    assert np.bincount(y[te]).tolist() == [10, 6, 4]
    tr2, te2 = stratified_split_indices(y, test_fraction=0.2, seed=0)
    np.testing.assert_array_equal(te, te2)
    _, te3 = stratified_split_indices(y, test_fraction=0.2, seed=1)
    assert not np.array_equal(te, te3)
    with pytest.raises(ValueError):
        stratified_split_indices(y, test_fraction=1.0)


# --------------------------------------------------------------------------- user-supplied layouts
def _write_gz(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def test_census_layout(tmp_path):
    from privkernels.data.tabular import CENSUS_FIELDS, CENSUS_IGNORED, CENSUS_NUMERIC

    folder = tmp_path / "tabular" / "census"
    folder.mkdir(parents=True)
    names = ["| comment line: ignored", "- 50000, 50000+.", ""]
    row_a, row_b = [], []
    for f in CENSUS_FIELDS:
        if f in CENSUS_NUMERIC or f in CENSUS_IGNORED:
            names.append(f"{f}: continuous.")
            row_a.append("30")
            row_b.append("1e9")  # far above every public bound -> clipped to 1
        else:
            names.append(f"{f}: Not in universe, Alpha, Beta.")
            row_a.append("Alpha")
            row_b.append("?")
    (folder / "census-income.names").write_text("\n".join(names) + "\n")
    body = [
        ", ".join([*row_a, "- 50000."]),
        ", ".join([*row_b, "50000+."]),
        ", ".join([*row_a[:-1], "Gamma", "50000+."]),
    ]
    _write_gz(folder / "census-income.data.gz", "\n".join(body) + "\n")
    (folder / "census-income.test").write_text(body[0] + "\n")
    tr = data.load("census", data_dir=tmp_path)
    assert tr.n == 3 and tr.y.tolist() == [0, 1, 1] and tr.n_classes == 2
    n_cat = len(CENSUS_FIELDS) - len(CENSUS_NUMERIC) - len(CENSUS_IGNORED)
    assert n_cat == 33 and len(tr.schema.numeric_columns) == 7
    assert tr.schema.n_features == 7 + 33 * 4  # 3 categories + <missing> each
    assert tr.x.min() >= 0 and tr.x.max() <= 1
    assert np.all(tr.x[1, tr.schema.numeric_value_indices()] == 1.0)
    assert tr.info["unseen_categories"] == {"year": {"Gamma": 1}}
    assert data.load("census", split="test", data_dir=tmp_path).n == 1


def test_covtype_layout(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        wild = np.eye(4, dtype=int)[i % 4]
        soil = np.eye(40, dtype=int)[i % 40]
        num = [2500 + i, i * 9, 10, 100, -20, 1000, 200, 220, 140, 3000]
        rows.append(",".join(map(str, [*num, *wild, *soil, 1 + i % 7])))
    _write_gz(tmp_path / "tabular" / "covtype" / "covtype.data.gz", "\n".join(rows) + "\n")
    full = data.load("covtype", split="all", data_dir=tmp_path)
    assert full.x.shape == (40, 10 + 4 + 40) and full.n_classes == 7
    np.testing.assert_array_equal(full.y, np.arange(40) % 7)
    w = full.schema.column("Wilderness_Area")
    np.testing.assert_array_equal(full.x[:, w.slice].argmax(1), np.arange(40) % 4)
    tr = data.load("covtype", split="train", data_dir=tmp_path)
    te = data.load("covtype", split="test", data_dir=tmp_path)
    assert tr.n + te.n == 40
    del rng


def test_isolet_layout(tmp_path):
    folder = tmp_path / "tabular" / "isolet"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def rows(letters):
        return "\n".join(
            ", ".join([*(f"{v:.4f}" for v in rng.uniform(-1, 1, 617)), f"{k}."]) for k in letters
        )

    (folder / "isolet1+2+3+4.data").write_text(rows(range(1, 27)) + "\n")
    _write_gz(folder / "isolet5.data.gz", rows([1, 2]) + "\n")
    tr = data.load("isolet", data_dir=tmp_path)
    assert tr.x.shape == (26, 617) and tr.y.sum() == 5  # A E I O U
    assert data.load("isolet", data_dir=tmp_path, binary=False).y.tolist() == list(range(26))
    assert data.load("isolet", split="test", data_dir=tmp_path).y.tolist() == [1, 0]


def test_credit_layout(tmp_path):
    folder = tmp_path / "tabular" / "credit"
    folder.mkdir(parents=True)
    header = ",".join(
        f'"{c}"' for c in ["Time", *(f"V{i}" for i in range(1, 29)), "Amount", "Class"]
    )
    lines = [header]
    for i in range(30):
        vals = [
            str(i),
            *(f"{(-1) ** i * 0.5 * j:.3f}" for j in range(28)),
            f"{i * 10.5:.2f}",
            f'"{int(i % 5 == 0)}"',
        ]
        lines.append(",".join(vals))
    (folder / "creditcard.csv").write_text("\n".join(lines) + "\n")
    ds = data.load("credit", split="all", data_dir=tmp_path)
    assert ds.x.shape == (30, 29) and int(ds.y.sum()) == 6
    assert ds.x.min() >= 0 and ds.x.max() <= 1
    tr = data.load("credit", split="train", data_dir=tmp_path)
    assert int(tr.y.sum()) == 5  # round(0.8 * 6)
    with pytest.warns(PrivacyLeakWarning):
        d2 = data.load("credit", split="all", data_dir=tmp_path, scale="data")
    assert d2.x[:, -1].max() == pytest.approx(1.0)  # Amount scaled by its data max
    custom = data.load("credit", split="all", data_dir=tmp_path, bounds={"Amount": (0, 304.5)})
    assert custom.x[:, -1].max() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown column"):
        data.load("credit", split="all", data_dir=tmp_path, bounds={"Nope": (0, 1)})


def test_cifar10_layout_and_safe_unpickling(tmp_path):
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        arr = rng.integers(0, 256, size=(4, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=4).tolist()
        batches[name] = (arr, labels)
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": arr, b"labels": labels, b"batch_label": b"x"}, fh, protocol=2)
    tr = data.load("cifar10", data_dir=tmp_path)
    assert tr.x.shape == (20, 32, 32, 3) and tr.x.dtype == np.float32
    arr0 = batches["data_batch_1"][0]
    # channel-major rows -> HWC: red plane first
    np.testing.assert_allclose(tr.x[0, :, :, 0], arr0[0, :1024].reshape(32, 32) / 255.0)
    np.testing.assert_allclose(tr.x[0, :, :, 2], arr0[0, 2048:].reshape(32, 32) / 255.0)
    assert (
        data.load("cifar10", split="test", data_dir=tmp_path).y.tolist() == batches["test_batch"][1]
    )

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({b"data": Evil(), b"labels": []}, fh)
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        data.load("cifar10", split="test", data_dir=tmp_path)


# --------------------------------------------------------------------------- synthetic
def test_synthetic_deterministic_and_keys():
    a = gaussian_blobs(0, 60, 5, 3)
    b = gaussian_blobs(0, 60, 5, 3)
    c = gaussian_blobs(1, 60, 5, 3)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, c.x)
    assert a.x.shape == (60, 5) and a.counts().tolist() == [20, 20, 20]
    k1 = synthetic_images(jax.random.key(3), 20)
    k2 = synthetic_images(jax.random.key(3), 20)
    k3 = synthetic_images(jax.random.PRNGKey(3), 20)  # raw keys accepted too
    np.testing.assert_array_equal(k1.x, k2.x)
    assert k3.x.shape == (20, 28, 28)
    with pytest.raises(TypeError):
        gaussian_blobs("seed", 10, 2, 2)
    with pytest.raises(ValueError):
        gaussian_blobs(0, 0, 2, 2)


def test_synthetic_images_learnable():
    tr = synthetic_images(0, 400, n_classes=10)
    te = synthetic_images(1, 200, n_classes=10)
    assert tr.x.min() >= 0 and tr.x.max() <= 1 and tr.x.dtype == np.float32
    # nearest class mean on raw pixels already separates the classes
    means = np.stack([tr.x[tr.y == c].mean(0).ravel() for c in range(10)])
    d2 = ((te.x.reshape(200, 1, -1) - means[None]) ** 2).sum(-1)
    assert (d2.argmin(1) == te.y).mean() > 0.9
    col = synthetic_images(0, 8, shape=(32, 32, 3))
    assert col.x.shape == (8, 32, 32, 3)


def test_synthetic_tabular_schema():
    ds = synthetic_tabular(
        0, 300, n_numeric=3, categorical_sizes=(2, 4), n_classes=3, missing_rate=0.1
    )
    assert ds.x.shape == (300, ds.schema.n_features) == (300, 3 * 2 + 3 + 5)
    assert ds.x.min() >= 0 and ds.x.max() <= 1
    for sl in ds.schema.categorical_slices:
        np.testing.assert_array_equal(ds.x[:, sl].sum(1), 1.0)
    assert set(np.unique(ds.y)) <= {0, 1, 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        synthetic_tabular(1, 10)


def test_an_unexpected_adult_label_is_not_echoed(tmp_path):
    """A label outside the schema's two is refused without its value (it is data)."""
    real = os.path.join(os.environ.get("PRIVKERNELS_DATA", ""), "tabular", "adult", "adult.data")
    if not os.path.isfile(real):
        pytest.skip("needs the adult file under PRIVKERNELS_DATA (shared/data)")
    folder = tmp_path / "tabular" / "adult"
    folder.mkdir(parents=True)
    with open(real) as f:
        rows = [next(f) for _ in range(20)]
    rows[3] = rows[3].rsplit(",", 1)[0] + ", SECRET-LABEL-42\n"
    (folder / "adult.data").write_text("".join(rows))
    (folder / "adult.test").write_text("".join(rows[:2]))
    with pytest.raises(ValueError) as err:
        data.load("adult", data_dir=tmp_path)
    assert "SECRET" not in str(err.value) and "not shown" in str(err.value)
