"""privkernels.data: loaders on the real shared data, error paths, digits, synthetic data.

Real-data tests read ``PRIVKERNELS_DATA`` and skip with a visible reason when a
file is absent. Expected counts are the published ones (MNIST/Fashion-MNIST
documentation, adult.names, UCI descriptions; see shared/data/SOURCES.md).
"""

from __future__ import annotations

import gzip
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from privkernels import data
from privkernels.data import Dataset, DatasetNotFoundError
from privkernels.privacy.warnings import PrivacyLeakWarning


# --------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def root() -> Path:
    value = os.environ.get("PRIVKERNELS_DATA")
    if not value:
        pytest.skip("real data not found: PRIVKERNELS_DATA is not set")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"real data not found under PRIVKERNELS_DATA={value} (not a directory)")
    return path


def need(root: Path, name: str) -> None:
    for rel in data.required_files(name):
        options = rel.split(" or ")
        if not any((root / o).is_file() for o in options):
            pytest.skip(f"{name}: {rel} not found under {root}")


def assert_valid_encoding(ds: Dataset) -> None:
    """Default tabular encoding: finite, in [0, 1], one-hot blocks sum to 0 or 1."""
    x = ds.x
    assert x.dtype == np.float32 and ds.y.dtype == np.int32
    assert x.ndim == 2 and x.shape[1] == ds.schema.n_features
    assert np.isfinite(x).all()
    assert x.min() >= 0.0 and x.max() <= 1.0
    for c in ds.schema.categorical_columns:
        s = x[:, c.slice].sum(axis=1)
        assert np.all((s == 0.0) | (s == 1.0)), c.name
        block = x[:, c.slice]
        assert np.all((block == 0.0) | (block == 1.0)), c.name
        n_zero = int((s == 0).sum())
        assert n_zero == sum(ds.info["unseen_categories"].get(c.name, {}).values()) + int(
            ds.info["missing_in_non_nullable"].get(c.name, 0)
        ), c.name
    for c in ds.schema.numeric_columns:
        if c.nullable:
            ind = x[:, c.missing_index]
            assert np.all((ind == 0.0) | (ind == 1.0))
            assert np.all(x[x[:, c.missing_index] == 1, c.value_index] == 0)
    assert ds.info["data_dependent"] == []
    assert ds.y.min() >= 0 and ds.y.max() < ds.n_classes
    assert len(ds.class_names) == ds.n_classes


def no_leak_warning(fn):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn()
    assert not [w for w in rec if issubclass(w.category, PrivacyLeakWarning)]
    return out


# --------------------------------------------------------------------------- registry
def test_list_datasets():
    names = data.list_datasets()
    for n in (
        "mnist",
        "fashion_mnist",
        "digits",
        "cifar10",
        "adult",
        "census",
        "cervical",
        "credit",
        "epileptic",
        "isolet",
        "covtype",
        "intrusion",
    ):
        assert n in names
    assert set(data.list_datasets("image")) | set(data.list_datasets("tabular")) == set(names)
    with pytest.raises(ValueError, match="unknown dataset"):
        data.load("nope")
    with pytest.raises(ValueError):
        data.list_datasets("audio")


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        data.load("digits", split="validation")
    with pytest.raises(ValueError, match="source"):
        data.load("digits", source="web")
    with pytest.raises(TypeError, match="unexpected option"):
        data.load("digits", colour=True)
    with pytest.raises(ValueError, match="max_rows"):
        data.load("digits", max_rows=0)


# --------------------------------------------------------------------------- digits (bundled with sklearn)
def test_digits_shape_range_split():
    tr = data.load("digits", split="train")
    te = data.load("digits", split="test")
    assert tr.x.shape == (1347, 8, 8) and te.x.shape == (450, 8, 8)
    assert tr.x.dtype == np.float32 and tr.y.dtype == np.int32
    assert tr.x.min() == 0.0 and tr.x.max() == 1.0 and te.x.max() <= 1.0
    assert tr.n_classes == 10 and set(np.unique(tr.y)) == set(range(10))
    # fixed data-independent split: first 1347 / last 450 of sklearn's order
    from sklearn.datasets import load_digits

    b = load_digits()
    np.testing.assert_array_equal(np.concatenate([tr.y, te.y]), b.target)
    np.testing.assert_allclose(np.concatenate([tr.x, te.x]), b.images / 16.0, atol=1e-7)
    again = data.load("digits", split="train")
    np.testing.assert_array_equal(again.x, tr.x)
    np.testing.assert_array_equal(again.y, tr.y)
    assert tr.schema is None


def test_subsample_and_max_rows_deterministic():
    a = data.load("digits", subsample=100, subsample_seed=3)
    b = data.load("digits", subsample=100, subsample_seed=3)
    c = data.load("digits", subsample=100, subsample_seed=4)
    np.testing.assert_array_equal(a.x, b.x)
    assert a.n == 100 and not np.array_equal(a.y, c.y)
    full = data.load("digits")
    np.testing.assert_array_equal(data.load("digits", max_rows=10).y, full.y[:10])


# --------------------------------------------------------------------------- missing data / optional backends
def test_missing_dataset_error_names_files(tmp_path, monkeypatch):
    with pytest.raises(DatasetNotFoundError) as err:
        data.load("mnist", data_dir=tmp_path)
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert "mnist/train-images-idx3-ubyte.gz" in msg and "mnist/train-labels-idx1-ubyte.gz" in msg
    assert str(tmp_path) in msg and "PRIVKERNELS_DATA" in msg and "never downloads" in msg
    for name in data.list_datasets("tabular"):
        with pytest.raises(DatasetNotFoundError) as err:
            data.load(name, data_dir=tmp_path)
        for rel in data.required_files(name):
            assert rel in str(err.value), (name, rel)
    with pytest.raises(DatasetNotFoundError, match="cifar-10-batches-py/data_batch_1"):
        data.load("cifar10", data_dir=tmp_path)
    monkeypatch.delenv("PRIVKERNELS_DATA", raising=False)
    with pytest.raises(DatasetNotFoundError, match="PRIVKERNELS_DATA"):
        data.load("adult")


def test_tfds_import_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import -> ImportError
    with pytest.raises(ImportError, match=r"privkernels\[tfds\]"):
        data.load("mnist", source="tfds", data_dir=tmp_path)
    with pytest.raises(ValueError, match="only available for image"):
        data.load("adult", source="tfds", data_dir=tmp_path)


def test_read_idx_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wb") as fh:
        fh.write(b"\x01\x02\x03\x04" + b"\x00" * 16)
    with pytest.raises(ValueError, match="not an IDX"):
        data.read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + b"\x00" * 4)
    with pytest.raises(ValueError, match="payload"):
        data.read_idx(short)
    ok = tmp_path / "ok"
    ok.write_bytes(b"\x00\x00\x08\x01" + (3).to_bytes(4, "big") + bytes([7, 8, 9]))
    np.testing.assert_array_equal(data.read_idx(ok), [7, 8, 9])
    with pytest.raises(ValueError, match="rank"):
        data.read_idx(ok, expect_ndim=3)


# --------------------------------------------------------------------------- real images
def test_mnist(root):
    need(root, "mnist")
    tr = data.load("mnist", split="train")
    te = data.load("mnist", split="test")
    assert tr.x.shape == (60000, 28, 28) and te.x.shape == (10000, 28, 28)
    assert tr.x.dtype == np.float32 and tr.y.dtype == np.int32
    assert tr.y[:5].tolist() == [5, 0, 4, 1, 9]
    assert te.y[:5].tolist() == [7, 2, 1, 0, 4]
    assert tr.x.min() == 0.0 and tr.x.max() == 1.0 and np.isfinite(tr.x).all()
    assert tr.counts().sum() == 60000 and (tr.counts() > 5000).all()


def test_fashion_mnist(root):
    need(root, "fashion_mnist")
    tr = data.load("fashion_mnist", split="train", data_dir=root)
    assert tr.x.shape == (60000, 28, 28)
    assert tr.y[:5].tolist() == [9, 0, 0, 3, 0]
    assert tr.counts().tolist() == [6000] * 10  # documented: 6000 per class
    te = data.load("fashion_mnist", split="test", max_rows=100)
    assert te.x.shape == (100, 28, 28) and te.class_names[9] == "Ankle boot"


# --------------------------------------------------------------------------- real tabular
def test_adult(root):
    need(root, "adult")
    tr = no_leak_warning(lambda: data.load("adult", split="train"))
    te = no_leak_warning(lambda: data.load("adult", split="test"))
    assert tr.n == 32561 and te.n == 16281
    assert tr.counts().tolist() == [24720, 7841]
    assert te.counts().tolist() == [12435, 3846]
    assert tr.n_classes == 2 and tr.class_names == ("<=50K", ">50K")
    assert_valid_encoding(tr)
    assert_valid_encoding(te)
    assert tr.x.shape[1] == te.x.shape[1] == tr.schema.n_features
    # '?' in workclass goes to the explicit <missing> level
    wc = tr.schema.column("workclass")
    assert tr.x[:, wc.missing_index].sum() > 0
    # age 39 of the first row under the public bounds [17, 90]
    age = tr.schema.column("age")
    assert tr.x[0, age.value_index] == pytest.approx((39 - 17) / (90 - 17), abs=1e-6)
    assert tr.schema.decode(tr.x[:1])["workclass"][0] == "State-gov"


def test_scale_data_warns_and_is_recorded(root):
    need(root, "adult")
    with pytest.warns(PrivacyLeakWarning, match="min/max"):
        ds = data.load("adult", split="test", scale="data")
    assert ds.info["data_dependent"]
    assert "data_bounds" in ds.info
    pub = no_leak_warning(lambda: data.load("adult", split="test"))
    assert not np.allclose(ds.x, pub.x)
    # training-split bounds are used, so test values may leave [0, 1]; categories are unchanged
    for c in ds.schema.categorical_columns:
        np.testing.assert_array_equal(ds.x[:, c.slice], pub.x[:, c.slice])


def test_cervical(root):
    need(root, "cervical")
    full = data.load("cervical", split="all")
    assert full.n == 858 and int(full.y.sum()) == 55
    assert_valid_encoding(full)
    tr = data.load("cervical", split="train")
    te = data.load("cervical", split="test")
    assert tr.n + te.n == 858 and te.n == round(0.2 * 803) + round(0.2 * 55)
    assert int(te.y.sum()) == round(0.2 * 55)
    # missing values ('?') become indicator columns / <missing> levels
    ind = [c.missing_index for c in full.schema.columns if c.nullable]
    assert full.x[:, ind].sum() > 0
    # the split is a partition of the file rows: re-assemble it
    rows = {tuple(r) for r in full.x.tolist()}
    assert {tuple(r) for r in tr.x.tolist()} | {tuple(r) for r in te.x.tolist()} == rows
    np.testing.assert_array_equal(data.load("cervical", split="train").x, tr.x)
    other = data.load("cervical", split="train", split_seed=1)
    assert not np.array_equal(other.x, tr.x)
    small = data.load("cervical", split="all", include_other_tests=False)
    assert small.schema.n_features == full.schema.n_features - 3 * 3


def test_epileptic(root):
    need(root, "epileptic")
    full = data.load("epileptic", split="all")
    assert full.x.shape == (11500, 178) and int(full.y.sum()) == 2300
    assert_valid_encoding(full)
    five = data.load("epileptic", split="all", binary=False)
    assert five.n_classes == 5 and five.counts().tolist() == [2300] * 5
    np.testing.assert_array_equal(five.y == 0, full.y == 1)
    tr = data.load("epileptic", split="train")
    assert tr.n == 9200 and int(tr.y.sum()) == 1840


def test_intrusion_train(root):
    need(root, "intrusion")
    ds = no_leak_warning(lambda: data.load("intrusion", split="train"))
    assert ds.n == 494021 and ds.n_classes == 5
    assert ds.class_names == ("normal", "dos", "probe", "r2l", "u2r")
    assert (ds.counts() > 0).all()
    assert ds.counts()[0] == 97278  # 'normal.' rows of the 10% file (SOURCES.md)
    assert_valid_encoding(ds)
    sub = data.load("intrusion", split="train", max_rows=2000)
    np.testing.assert_array_equal(sub.x, ds.x[:2000])


def test_intrusion_test_split_maps_test_only_attacks(root):
    need(root, "intrusion")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no row may be dropped as uncategorised
        ds = data.load("intrusion", split="test")
    assert ds.n == 311029 and (ds.counts() > 0).all()
    assert_valid_encoding(ds)


def test_standardize_per_example():
    from privkernels.data import standardize_per_example

    rng = np.random.default_rng(0)
    x = (rng.random((5, 6, 7)) * np.arange(1, 6).reshape(5, 1, 1)).astype(np.float32)
    x[4] = 0.3  # constant example -> zeros, not NaN
    z = standardize_per_example(x)
    assert z.shape == x.shape and z.dtype == np.float32
    flat = z.reshape(5, -1).astype(np.float64)
    np.testing.assert_allclose(flat[:4].mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(flat[:4].std(axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(z[4], 0.0, atol=1e-6)
    # per example: one example's output does not depend on the others
    np.testing.assert_allclose(standardize_per_example(x[1:2]), z[1:2])
    assert standardize_per_example(x.astype(np.float64)).dtype == np.float64
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    for arg in (bad, np.zeros((0, 3)), np.zeros(4), np.zeros((3, 1))):
        with pytest.raises(ValueError):
            standardize_per_example(arg)
    with pytest.raises(ValueError, match="eps"):
        standardize_per_example(x, eps=0.0)
    with pytest.raises(TypeError):
        standardize_per_example(np.array([["a", "b"]], dtype=object))
