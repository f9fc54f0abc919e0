"""The scikit-learn estimators: parameters, clone, privacy_report_, save/load, check_estimator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer, StandardScaler

from privkernels.privacy import PrivacyLeakWarning
from privkernels.privacy.warnings import SeededKeyWarning
from privkernels.sklearn import (
    CLASSES_INFERRED_NOTE,
    DPKIPClassifier,
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    load,
)


@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)


def test_classifier_defaults_in_a_pipeline(cancer, tmp_path):
    xtr, xte, ytr, yte = cancer
    pipe = make_pipeline(  # the pipeline scales: the classifier's own scaling is off
        StandardScaler(),
        Normalizer(),
        DPNTKClassifier(classes=[0, 1], preprocessing=None, random_state=0),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # classes given: nothing read
        warnings.simplefilter("ignore", SeededKeyWarning)  # the tests' int keys
        pipe.fit(xtr, ytr)
    est = pipe[-1]
    assert est.privacy_report_.epsilon == pytest.approx(1.0)
    assert est.privacy_report_.neighbouring == "replace-one"  # standard DP by default
    assert pipe.score(xte, yte) > 0.85  # default settings at eps=1
    same = make_pipeline(StandardScaler(), Normalizer(), clone(est)).fit(xtr, ytr)
    np.testing.assert_array_equal(same.predict(xte), pipe.predict(xte))  # same seed, same model
    path = est.save(tmp_path / "clf.npz")
    back = load(path)
    z = pipe[:-1].transform(xte)
    assert isinstance(back, DPNTKClassifier)
    assert back.get_params() == {**est.get_params(), "random_state": None}  # the seed stays secret
    np.testing.assert_array_equal(back.predict(z), est.predict(z))
    assert back.privacy_report_ == est.privacy_report_


def test_inferred_classes_warn_and_are_noted(cancer):
    xtr, _, ytr, _ = cancer
    with pytest.warns(PrivacyLeakWarning, match="classes"):
        est = DPNTKClassifier(random_state=0).fit(xtr[:100] / 3000.0, ytr[:100])
    assert CLASSES_INFERRED_NOTE in est.privacy_report_.notes
    with pytest.raises(ValueError, match="outside classes"):
        DPNTKClassifier(classes=[0, 5], random_state=0).fit(xtr[:50], ytr[:50])
    with pytest.raises(ValueError, match="at least 2 classes, got 1"):  # a setting: checked first
        DPNTKClassifier(classes=[0], random_state=0).fit(xtr[:50], ytr[:50])


def test_regressor_and_bad_input():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    y = x @ rng.normal(size=5)
    est = DPNTKRegressor(epsilon=1.5, random_state=1).fit(x / 3, y)
    assert est.predict(x[:7] / 3).shape == (7,) and est.n_features_in_ == 5
    with pytest.raises(ValueError):
        DPNTKRegressor(epsilon=-1.0, random_state=0).fit(x, y)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        DPNTKRegressor(random_state=0).fit(bad, y)
    with pytest.raises(ValueError):
        est.predict(x[:, :3])  # wrong number of features


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_dpkip_classifier_support_and_roundtrip(tmp_path):
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0) * 2 - 1
    est = DPKIPClassifier(
        classes=list(range(10)), support_per_class=2, epochs=1, random_state=0
    ).fit(x[:600], y[:600])
    assert est.support_.shape == (20, 64)
    np.testing.assert_array_equal(est.support_labels_, np.repeat(np.arange(10), 2))
    assert est.privacy_report_.neighbouring == "replace-one"
    back = load(est.save(tmp_path / "kip.npz"))
    np.testing.assert_array_equal(back.predict(x[600:700]), est.predict(x[600:700]))
    img = DPKIPClassifier(
        kernel="scatternet", image_shape=(8, 8), classes=list(range(10)), support_per_class=1,
        epochs=1, random_state=0,
    ).fit((x[:300] + 1) / 2, y[:300])  # fmt: skip
    assert img.result_.config.clip_space == "feature"  # the fast path, same guarantee
    assert img.predict((x[:5] + 1) / 2).shape == (5,)


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_generator_arrays_and_frames(tmp_path):
    import pandas as pd

    x, y = load_digits(return_X_y=True)
    g = DPNTKGenerator(classes=list(range(10)), iterations=20, random_state=0).fit(x / 16.0, y)
    xs, ys = g.sample(50, random_state=3)
    assert xs.shape == (50, 64) and xs.min() >= 0 and xs.max() <= 1
    np.testing.assert_array_equal(g.sample(50, random_state=3)[0], xs)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        DPNTKGenerator(classes=list(range(10)), iterations=2, random_state=0).fit(x, y)
    with pytest.raises(ValueError, match="holds 49 values per row; X has 64") as err:
        DPNTKGenerator(classes=list(range(10)), image_shape=(7, 7)).fit(x / 16.0, y)
    assert str(len(x) * 64) not in str(err.value)  # no size that names n
    back = load(g.save(tmp_path / "g.npz"))
    np.testing.assert_array_equal(back.sample(50, random_state=3)[0], xs)
    import pickle

    assert g._sample_base is not None  # the fitted generator holds its sampling key ...
    copy = pickle.loads(pickle.dumps(g))  # ... a pickle leaves out every key and the seed
    assert getattr(copy, "_sample_base", None) is None and copy.random_state is None
    assert b"_sample_base" not in pickle.dumps(g)
    np.testing.assert_array_equal(copy.sample(50, random_state=3)[0], xs)
    df = pd.DataFrame(
        {
            "a": np.arange(100) % 7,
            "b": np.where(np.arange(100) % 3 == 0, "x", "y"),
            "t": np.arange(100) % 2,
        }
    )
    with pytest.warns(PrivacyLeakWarning):
        gt = DPNTKGenerator(label="t", iterations=5, random_state=0).fit(df)
    syn = gt.sample_df(40)
    assert list(syn.columns) == ["a", "b", "t"] and syn["a"].dtype == np.int64
    assert set(syn["b"]) <= {"x", "y"}


def test_get_params_clone_roundtrip():
    for est in (DPNTKRegressor(epsilon=3.0, width=64), DPNTKClassifier(classes=["a", "b"]),
                DPKIPClassifier(kernel="entk", epochs=2), DPNTKGenerator(label="y")):  # fmt: skip
        c = clone(est)
        assert c.get_params() == est.get_params() and c is not est


# scikit-learn's own estimator checks, where the privacy contract allows. Skipped, with reasons:
_PRIVACY_SKIPS = {
    # accuracy thresholds on tiny toy sets: a private fit at eps=1 on 20-150 rows is noise
    "check_classifiers_train": "accuracy threshold on tiny data; DP noise dominates",
    "check_classifiers_classes": "accuracy on a 3-class toy set; DP noise dominates",
    "check_regressors_train": "R^2 threshold on tiny data; DP noise dominates",
    "check_classifier_data_not_an_array": "compares two fits on list vs array input; "
    "each private fit with random_state=None draws fresh noise",
    "check_regressor_data_not_an_array": "as above",
    "check_fit_idempotent": "random_state=None draws fresh noise per fit (set it to compare)",
    "check_n_features_in_after_fitting": "error-message wording differs",
    "check_sample_weight_equivalence_on_dense_data": "no sample_weight (a weight would change "
    "the sensitivity)",
    # float32 kernel products: XLA picks its matmul blocking by shape, so scores of a row
    # differ by ~1e-7 relative between a batch and a sub-batch (the check's atol is 1e-7)
    "check_methods_subset_invariance": "float32 scores differ at 1e-7 across batch shapes",
    "check_methods_sample_order_invariance": "as above",
}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: DPNTKRegressor(width=32), marks=pytest.mark.slow),
        pytest.param(lambda: DPNTKClassifier(width=32), marks=pytest.mark.slow),
    ],
)
def test_sklearn_check_estimator(make):
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(make(), expected_failed_checks=_PRIVACY_SKIPS, on_fail=None)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 30


def test_classifier_replace_one_protects_whole_records(cancer):
    xtr, xte, ytr, yte = cancer
    pipe = make_pipeline(
        StandardScaler(),
        Normalizer(),
        DPNTKClassifier(classes=[0, 1], neighbouring="replace-one", random_state=0),
    ).fit(xtr, ytr)
    rep = pipe[-1].privacy_report_
    assert rep.neighbouring == "replace-one" and rep.epsilon == pytest.approx(1.0)
    assert not any("LABELS ARE NOT PROTECTED" in n for n in rep.notes)
    assert pipe.score(xte, yte) > 0.8  # 0.89-0.92 measured at eps=1 on 398 rows


def test_saved_estimator_never_holds_the_seed(tmp_path):
    """The noise is a function of random_state: a file holding it would undo the privacy."""
    import json

    x = np.random.default_rng(0).normal(size=(60, 3))
    est = DPNTKRegressor(random_state=1234).fit(x / 3, x[:, 0])
    path = est.save(tmp_path / "r.npz")
    with np.load(path) as z:
        meta = json.loads(str(z["__meta__"]))
    assert meta["estimator"]["params"]["random_state"] is None
    assert "1234" not in json.dumps(meta)
    assert load(path).random_state is None


def test_a_sample_seed_equal_to_the_fit_seed_draws_no_fit_key():
    """``sample(random_state=s)`` with the fit's own ``s``: none of the sampler's keys is one of
    the fit's keys (unfolded, ``split(key(s))[0]`` would be the fit's embedding key)."""
    import jax

    def bits(k):
        return tuple(np.asarray(jax.random.key_data(k)).ravel().tolist())

    fit_keys = {bits(k) for k in jax.random.split(jax.random.key(0), 4)}
    sample_key = DPNTKGenerator(random_state=0)._sample_key(0)
    assert {bits(k) for k in jax.random.split(sample_key)}.isdisjoint(fit_keys)
    assert bits(jax.random.split(jax.random.key(0))[0]) in fit_keys  # what the fold prevents
