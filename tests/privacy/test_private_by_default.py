"""Private by default, end to end: regression tests of N1, N2, N3, N5 and N6 (issue 50).

N4 (files that cannot lie) has its own module, ``test_files_cannot_lie.py``. Each test
here failed on the code before the change (the note of each says how it failed).
"""

from __future__ import annotations

import inspect
import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels import dp_kip, dp_ntk, dp_ntk_regression, privacy
from privkernels.privacy import keys as K
from privkernels.privacy.report import NOT_STANDARD_DP
from privkernels.privacy.warnings import PrivacyLeakWarning, SeededKeyWarning
from privkernels.sklearn import (
    DPNTKClassifier,
    DPNTKGenerator,
    DPNTKRegressor,
    load,
)


def _xy(n=60, d=5, classes=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, d)).astype(np.float32), np.arange(n) % classes


# ----------------------------------------------------------------------------- N6 defaults


def test_every_public_fit_and_estimator_defaults_to_a_standard_relation():
    """N6: no default is beta-close (before: dp_ntk_regression.fit and both DP NTK
    regression estimators defaulted to it)."""
    from privkernels.synth import fit_table

    standard = {"replace-one", "add-remove"}
    for fn in (dp_ntk.fit, dp_kip.fit, dp_ntk_regression.fit):
        assert inspect.signature(fn).parameters["neighbouring"].default in standard, fn
    for cls in (DPNTKClassifier, DPNTKRegressor):
        assert cls().get_params()["neighbouring"] in standard
    assert "neighbouring" not in inspect.signature(fit_table).parameters  # dp_ntk.fit's default


def test_the_default_regressor_keeps_no_rows_close_to_the_training_data():
    """N6: the default estimator's saved model holds no privatized inputs X~ (before: 88.6%
    of X~'s rows lay within 1e-4 of the training rows) and its report is replace-one."""
    x, y = _xy(80, 4)
    est = DPNTKClassifier(classes=[0, 1]).fit(x, y)
    assert est.privacy_report_.neighbouring == "replace-one"
    assert est.model_.x_tilde.shape[0] == 0
    assert not est.privacy_report_.summary().startswith(NOT_STANDARD_DP)


def test_beta_close_is_asked_for_explicitly_warned_and_reported_first():
    x, y = _xy(40, 4)
    with pytest.warns(PrivacyLeakWarning, match="NOT standard differential privacy"):
        est = DPNTKClassifier(classes=[0, 1], neighbouring="beta-close", epsilon=0.8).fit(x, y)
    summary = est.privacy_report_.summary()
    assert summary.startswith(NOT_STANDARD_DP) and "beta-close" in summary.splitlines()[0]


# ----------------------------------------------------------------------------- N1 seeds


def test_an_int_random_state_is_warned_by_name_and_noted_in_the_report(capsys):
    """N1: before, an int seed gave no warning and no note."""
    x, y = _xy(40, 4)
    with pytest.warns(SeededKeyWarning, match="random_state=1234"):
        est = DPNTKClassifier(classes=[0, 1], random_state=1234).fit(x, y)
    assert K.SEEDED_KEY_NOTE in est.privacy_report_.notes
    assert "int seed" in est.privacy_report_.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededKeyWarning)  # None: fresh entropy, no warning
        fresh = DPNTKClassifier(classes=[0, 1]).fit(x, y)
    assert K.SEEDED_KEY_NOTE not in fresh.privacy_report_.notes


def test_a_functional_key_from_a_small_int_is_warned_and_noted():
    x, y = _xy(40, 4)
    with pytest.warns(SeededKeyWarning, match="small int"):
        model = dp_ntk_regression.fit(jax.random.key(7), x, y, epsilon=1.0, n_classes=2)
    assert K.SEEDED_KEY_NOTE in model.report.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededKeyWarning)
        model = dp_ntk_regression.fit(privacy.fresh_key(), x, y, epsilon=1.0, n_classes=2)
    assert K.SEEDED_KEY_NOTE not in model.report.notes
    assert K.looks_seeded(jax.random.key(0)) and K.looks_seeded(jax.random.PRNGKey(3))
    assert not K.looks_seeded(jax.random.split(jax.random.key(0))[0])


def test_with_no_seed_the_saved_weights_depend_on_the_public_key_only(monkeypatch):
    """N1: random_state=None draws the noise key and the data-independent key apart, so
    the saved NTK weights (and sketch) are a function of the public key alone: two fits
    that share only the public key keep the same weights, two fits that share only the
    noise key keep different ones. Before, the weights came from the noise key's stream."""
    x, y = _xy(40, 4)
    draws = iter([K.fresh_key() for _ in range(3)])
    k1, k2, pub = next(draws), next(draws), next(draws)
    pairs = iter([(k1, pub), (k2, pub), (k1, K.fresh_key())])
    monkeypatch.setattr("privkernels.sklearn.seed_keys", lambda seed, **_: next(pairs))
    a = DPNTKClassifier(classes=[0, 1]).fit(x, y).model_
    b = DPNTKClassifier(classes=[0, 1]).fit(x, y).model_
    c = DPNTKClassifier(classes=[0, 1]).fit(x, y).model_
    np.testing.assert_array_equal(np.asarray(a.weights), np.asarray(b.weights))
    np.testing.assert_array_equal(np.asarray(a.sketch[0]), np.asarray(b.sketch[0]))
    assert not np.array_equal(np.asarray(a.weights), np.asarray(c.weights))
    assert not np.array_equal(np.asarray(a.alpha), np.asarray(b.alpha))  # other noise


@pytest.mark.parametrize("make", ["generator", "classifier"])
def test_neither_save_nor_pickle_keeps_a_seed_or_a_key(tmp_path, make):
    """N1: before, a pickled DPNTKGenerator kept random_state=0."""
    x, y = _xy(60, 4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededKeyWarning)
        if make == "generator":
            est = DPNTKGenerator(classes=[0, 1, 2], iterations=2, random_state=0).fit(x, y)
        else:
            est = DPNTKClassifier(classes=[0, 1, 2], random_state=0).fit(x, y)
    blob = pickle.dumps(est)
    copy = pickle.loads(blob)
    assert copy.random_state is None and est.random_state == 0
    assert not any(hasattr(copy, name) for name in ("_key", "_sample_base"))
    assert load(est.save(tmp_path / "m.npz")).random_state is None
    unfitted = pickle.loads(pickle.dumps(DPNTKClassifier(random_state=0)))
    assert unfitted.random_state == 0  # a configuration, no release yet: kept for joblib


def test_the_cli_warns_about_seed_by_flag_name(tmp_path, capsys):
    from privkernels.cli import main

    x, y = _xy(60, 4)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=y)
    args = ["distill", str(data), "--epsilon", "1", "--out", str(tmp_path / "s.npz"), "--quiet",
            "--epochs", "1"]  # fmt: skip
    with pytest.warns(SeededKeyWarning, match="--seed 5") as rec:
        assert main([*args, "--seed", "5"]) == 0
    assert len([w for w in rec if issubclass(w.category, SeededKeyWarning)]) == 1
    assert "int seed" in capsys.readouterr().out  # the printed summary carries the note


# ----------------------------------------------------------------------------- N2 batches


def test_one_key_at_two_budgets_draws_independent_dp_kip_batches():
    """N2: before, fold_in(k_train, t) ignored the budget: two fits with one key at two
    epsilons drew identical Poisson batches with independent noise (one release at a
    smaller sigma, not eps1 + eps2). The batch sizes of the two runs now differ."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (np.arange(200) % 2).astype(np.int32)
    kw = dict(kernel="fc_ntk", support_per_class=1, delta=1e-5, clip_norm=1.0, batch_size=20,
              epochs=2, progress=False, n_classes=2, diagnostics=True)  # fmt: skip
    key, sizes = K.fresh_key(), []
    for eps in (1.0, 2.0, 1.0):
        with pytest.warns(PrivacyLeakWarning, match="diagnostics"):
            res = dp_kip.fit(key, x, y, epsilon=eps, **kw)
        sizes.append(np.concatenate([np.ravel(s) for s in res.history["batch_sizes"]]))
    assert not np.array_equal(sizes[0], sizes[1])  # another budget: other batches
    np.testing.assert_array_equal(sizes[0], sizes[2])  # the same call: the same batches


def test_step_keys_are_bound_to_the_plan():
    from privkernels.dp_kip.train import step_keys
    from privkernels.privacy import Budget, dpsgd_plan

    key = jax.random.key(3)
    plans = [dpsgd_plan(Budget(e, 1e-5), sampling_rate=0.1, steps=10, clip_norm=1.0,
                        accountant="rdp", neighbouring="add-remove") for e in (1.0, 2.0)]  # fmt: skip
    (b1, n1), (b2, n2) = (step_keys(key, 0, 10, p.digest) for p in plans)
    for a, b in ((b1, b2), (n1, n2)):
        da, db = np.asarray(jax.random.key_data(a)), np.asarray(jax.random.key_data(b))
        assert not np.any(np.all(da == db, axis=-1))
    again = step_keys(key, 0, 10, plans[0].digest)[0]
    np.testing.assert_array_equal(jax.random.key_data(again), jax.random.key_data(b1))


# ----------------------------------------------------------------------------- N3 GSM


def _whitened(kmat, out):
    """``L^{-1} K~ L^{-T}`` with ``L L^T = K``: the sampled ``Z Z^T / k`` itself."""
    lfac = np.linalg.cholesky(np.asarray(kmat, np.float64))
    inv = np.linalg.inv(lfac)
    return inv @ np.asarray(out, np.float64) @ inv.T


def test_one_key_at_two_budgets_or_shifts_draws_independent_gaussian_samples():
    """N3: before, the samples' key covered (k, n, dtype) only: one key at two shifts (or two
    budgets with the same k) drew the same Z, and two outputs gave K back to 5e-7."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, 8))
    kmat = jnp.asarray(a @ a.T / 8, jnp.float32)
    key = jax.random.key(11)
    outs = {}
    for eps, shift in ((0.5, 0.3), (0.9, 0.3), (0.5, 0.6)):
        outs[eps, shift] = privacy.gaussian_sampling_mechanism(
            key, kmat, 20, epsilon=eps, delta=1e-5, shift=shift
        )
    eye = np.eye(8)
    w = {p: _whitened(np.asarray(kmat) + p[1] * eye, o) for p, o in outs.items()}
    assert np.abs(w[0.5, 0.3] - w[0.9, 0.3]).max() > 0.1  # another budget: another Z
    assert np.abs(w[0.5, 0.3] - w[0.5, 0.6]).max() > 0.1  # another shift: another Z
    same = privacy.gaussian_sampling_mechanism(key, kmat, 20, epsilon=0.5, delta=1e-5, shift=0.3)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(outs[0.5, 0.3]))


def test_two_beta_close_fits_from_one_key_share_no_samples(monkeypatch):
    """N3 through fit: two budgets with the same k (the issue's case: kernel_shift='auto'
    often gives both k = 2500; here k is given); the whitened samples must differ."""
    seen = []
    original = privacy.gaussian_sampling_mechanism

    def spy(key, kmat, k, **kw):
        out = original(key, kmat, k, **kw)
        shifted = np.asarray(kmat, np.float64) + kw.get("shift", 0.0) * np.eye(len(kmat))
        seen.append((k, _whitened(shifted, out)))
        return out

    monkeypatch.setattr(privacy, "gaussian_sampling_mechanism", spy)
    x, y = _xy(30, 3)
    for eps in (0.5, 0.9):
        with pytest.warns(PrivacyLeakWarning):
            dp_ntk_regression.fit(jax.random.key(1), x, y, epsilon=eps, n_classes=2, k=500,
                                  neighbouring="beta-close")  # fmt: skip
    (k1, w1), (k2, w2) = seen
    assert k1 == k2  # the same k: before, the same samples
    assert np.abs(w1 - w2).max() > 0.1


# ----------------------------------------------------------------------------- N5 clipping


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_clipping_holds_the_bound_with_low_precision_leaves(dtype):
    """N5: before, the clip factor was cast to the leaf dtype and rounded up: clipped norms
    up to 1.00167 C. The clipped values are now float32 and never above C."""
    worst = 0.0
    for seed in range(20):
        g = 3.0 * jax.random.normal(jax.random.key(seed), (64, 300))
        tree = {"a": g.astype(dtype), "b": (2.0 * g[:, :7]).astype(dtype)}
        clipped, _ = privacy.clip_per_example(tree, 1.0)
        assert all(leaf.dtype == jnp.float32 for leaf in clipped.values())
        sq = sum(np.sum(np.asarray(v, np.float64) ** 2, axis=1) for v in clipped.values())
        worst = max(worst, float(np.sqrt(sq).max()))
        total = privacy.noisy_clipped_sum(
            K.fresh_key(), clipped, np.ones(64, bool), clip_norm=1.0, noise_multiplier=1.0
        )
        assert all(v.dtype == jnp.float32 for v in total.values())
    assert worst <= 1.0


def test_seeded_keys_of_every_implementation_are_seen():
    for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
        assert K.looks_seeded(jax.random.key(5, impl=impl)), impl
        assert not K.looks_seeded(jax.random.split(jax.random.key(5, impl=impl))[0]), impl


def test_an_int_seed_is_noted_whatever_its_key_looks_like():
    """Under x64 a seed of 2**32 or more has a non-zero high word; the estimator still notes
    the int seed in the report."""
    x, y = _xy(40, 4)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededKeyWarning)
        est = DPNTKClassifier(classes=[0, 1], random_state=2**32 + 5).fit(x, y)
    assert K.SEEDED_KEY_NOTE in est.privacy_report_.notes


def test_a_clip_norm_below_the_float32_floor_is_refused():
    """Per-example norms are float32 sums of squares: below ~1e-19 they underflow to 0 and an
    example would pass unclipped against a tiny C."""
    g = {"a": jnp.full((2, 3), 1e-23, jnp.float32)}
    with pytest.raises(ValueError, match="at least"):
        privacy.clip_per_example(g, 1e-30)
    with pytest.raises(ValueError, match="at least"):
        privacy.dpsgd_plan(privacy.Budget(1.0, 1e-5), sampling_rate=0.1, steps=10,
                           clip_norm=1e-30, accountant="rdp", neighbouring="add-remove")  # fmt: skip


def test_e_ntk_normalisation_survives_flushed_squares():
    """Squares below 2^-126 are flushed to zero in float32: a row of such entries with one
    just above would be 'normalised' to norm 43. Features whose sum of squares is below
    MIN_FEATURE_SQNORM are now zeroed (a per-record rule, within the bound)."""
    from privkernels.features.entk import entk_features

    u = np.float32(np.sqrt(0.98 * 2.0**-126))  # u * u is subnormal: flushed
    w = np.float32(np.sqrt(1.05 * 2.0**-126))  # w * w is normal: kept
    x = np.full((1, 2000), u, np.float32)
    x[0, 0] = w
    params = {"W": jnp.ones((2000, 1), jnp.float32)}
    phi = entk_features(lambda p, xb: xb.reshape(xb.shape[0], -1) @ p["W"], params, x)
    assert float(np.sqrt(np.sum(np.asarray(phi, np.float64) ** 2))) <= 1.0
    ordinary = entk_features(lambda p, xb: xb @ p["W"], params, np.ones((1, 2000), np.float32))
    assert float(np.sqrt(np.sum(np.asarray(ordinary, np.float64) ** 2))) == pytest.approx(1.0, 1e-3)
