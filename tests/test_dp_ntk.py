"""DP-NTK: sensitivity, noise scale, accounting, validation, training, checkpoints, sampling,
and the add-remove releases."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import privkernels.privacy as privacy
from privkernels import dp_ntk, features
from privkernels.generators import ConvCondGenerator, TabularGenerator
from privkernels.privacy.clipping import NORM_MARGIN

C = 3


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = d.target < C
    x = (d.images[keep] / 16.0).astype(np.float32)
    return x[:240], d.target[keep][:240].astype(np.int32)


@pytest.fixture(scope="module")
def net():
    return features.fc_1l(16, out_features=C)


def _exact(key, x, y, net, n_classes=C):
    emb, rep = dp_ntk.private_embedding(key, x, y, n_classes=n_classes, epsilon=None, network=net)
    assert not rep.private
    return np.asarray(emb, np.float64)


# --------------------------------------------------------------------- release


def test_sensitivity_replace_one(digits, net) -> None:
    x, y = digits
    x, y = x[:40], y[:40]
    n = len(x)
    key = jax.random.key(3)
    base = _exact(key, x, y, net)
    rng = np.random.default_rng(0)
    worst = 0.0
    candidates = [
        (x[-1], (y[0] + 1) % C),  # another real digit, different label
        (1.0 - x[0], (y[0] + 2) % C),  # inverted image, different label
        (np.zeros_like(x[0]), y[0]),  # blank image (smallest input)
        (rng.uniform(0, 50, x[0].shape).astype(np.float32), (y[0] + 1) % C),  # huge input
        (-x[0] * 20, (y[0] + 1) % C),
    ]
    for xi, yi in candidates:
        x2, y2 = x.copy(), y.copy()
        x2[0], y2[0] = xi, yi
        if np.bincount(y2, minlength=C).min() == 0:
            continue
        diff = np.linalg.norm(base - _exact(key, x2, y2, net))
        worst = max(worst, diff)
        assert diff <= 2.0 / n * (1 + 1e-4), (diff, 2.0 / n)
    assert worst > 1.0 / n  # the bound is nearly attained by a label change


def test_features_normalised_single_example(digits, net) -> None:
    x, y = digits
    emb = _exact(jax.random.key(0), x[:1], np.zeros(1, np.int32), net, n_classes=1)
    assert emb.shape[1] == 1
    assert np.linalg.norm(emb) == pytest.approx(1.0 / (1.0 + NORM_MARGIN), rel=1e-4)


def test_noise_scale_matches_sigma(digits, net) -> None:
    x, y = digits
    n = len(x)
    key = jax.random.key(11)
    eps, delta = 1.0, 1e-5
    exact = _exact(key, x, y, net)
    noisy, rep = dp_ntk.private_embedding(
        key, x, y, n_classes=C, epsilon=eps, delta=delta, network=net
    )
    noise = (np.asarray(noisy, np.float64) - exact).ravel()
    expected = privacy.gaussian_sigma(eps, delta) * 2.0 / n
    assert noise.size > 1000
    assert np.std(noise) == pytest.approx(expected, rel=0.05)
    assert abs(np.mean(noise)) < 4 * expected / math.sqrt(noise.size)
    assert stats.kstest(noise / expected, "norm").pvalue > 1e-3
    (m,) = rep.mechanisms
    assert m.sensitivity == pytest.approx(2.0 / n)
    assert rep.epsilon == eps and rep.delta == delta and rep.private
    assert rep.neighbouring == "replace-one"
    assert any("n" in d and "public" in d for d in rep.data_independent)
    assert any("e-NTK network parameters" in d for d in rep.data_independent)


def test_same_key_same_output(digits, net) -> None:
    x, y = digits
    a, _ = dp_ntk.private_embedding(
        jax.random.key(5), x, y, n_classes=C, epsilon=1.0, delta=1e-5, network=net
    )
    b, _ = dp_ntk.private_embedding(
        jax.random.key(5), x, y, n_classes=C, epsilon=1.0, delta=1e-5, network=net
    )
    c, _ = dp_ntk.private_embedding(
        jax.random.key(6), x, y, n_classes=C, epsilon=1.0, delta=1e-5, network=net
    )
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))


def test_epsilon_none_is_non_private(digits, net) -> None:
    x, y = digits
    res = dp_ntk.fit(
        jax.random.key(0),
        x,
        y,
        epsilon=None,
        network=net,
        iterations=2,
        batch_size=12,
        n_classes=C,
        progress=False,
    )
    assert not res.report.private
    assert math.isinf(res.report.epsilon)
    assert "non-private" in res.report.summary().lower() or "NON-PRIVATE" in res.report.summary()


def test_class_proportion_release_composes(digits, net) -> None:
    x, y = digits
    res = dp_ntk.fit(
        jax.random.key(1),
        x,
        y,
        epsilon=2.0,
        delta=1e-5,
        network=net,
        iterations=2,
        batch_size=12,
        n_classes=C,
        label_mode="released",
        split=(0.75, 0.25),
        progress=False,
    )
    rep = res.report
    assert len(rep.mechanisms) == 2
    emb_m, lab_m = rep.mechanisms
    assert emb_m.epsilon == pytest.approx(1.5) and lab_m.epsilon == pytest.approx(0.5)
    assert rep.epsilon == pytest.approx(emb_m.epsilon + lab_m.epsilon) == pytest.approx(2.0)
    assert rep.delta == pytest.approx(1e-5)
    assert lab_m.sensitivity == pytest.approx(math.sqrt(2) / len(x))
    assert emb_m.sensitivity == pytest.approx(2 / len(x))
    p = res.noisy_proportions
    assert p.shape == (C,) and np.all(p >= 0) and p.sum() == pytest.approx(1.0)


def test_class_proportions_noise(digits) -> None:
    _, y = digits
    n = len(y)
    true = np.bincount(y, minlength=C) / n
    eps, delta = 1.0, 1e-5
    std = privacy.gaussian_sigma(eps, delta) * math.sqrt(2) / n
    draws = np.stack(
        [
            dp_ntk.private_class_proportions(
                jax.random.key(i), y, n_classes=C, epsilon=eps, delta=delta
            )[0]
            for i in range(200)
        ]
    )
    # noise is small relative to the proportions here, so clipping never acts and
    # renormalisation only rescales; the spread must match sigma * sqrt(2)/n
    assert np.all(draws > 0)
    spread = np.std(draws - true, axis=0)
    assert np.all(spread < 1.5 * std) and np.all(spread > 0.5 * std)
    assert np.allclose(draws.mean(0), true, atol=4 * std / math.sqrt(200) + 1e-3)


# ----------------------------------------------------------------- validation


@pytest.fixture
def no_noise(monkeypatch):
    """Fail the test if any noise is drawn or any embedding computed."""

    def boom(*a, **k):
        raise AssertionError("noise drawn / data read before validation")

    monkeypatch.setattr(privacy, "gaussian_mechanism", boom)
    monkeypatch.setattr(features, "entk_mean_embedding", boom)
    monkeypatch.setattr(features, "init_params", boom)


@pytest.mark.parametrize(
    "change",
    [
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"epsilon": math.inf},
        {"delta": 0.0},
        {"delta": 1.0},
        {"delta": 2.0},
        {"nan": True},
        {"y_out": C},
        {"y_out": -1},
        {"y_short": True},
        {"x_1d": True},
        {"iterations": 0},
        {"split": (0.0, 1.0)},
    ],
)
def test_bad_input_raises_before_noise(digits, net, no_noise, change) -> None:
    x, y = digits
    x, y = x.copy(), y.copy()
    kw = {"epsilon": 1.0, "delta": 1e-5, "iterations": 2, "label_mode": "released"}
    for k in ("epsilon", "delta", "iterations", "split"):
        if k in change:
            kw[k] = change[k]
    if change.get("nan"):
        x[3, 2, 2] = np.nan
    if "y_out" in change:
        y[0] = change["y_out"]
    if change.get("y_short"):
        y = y[:-1]
    if change.get("x_1d"):
        x = x[:, 0, 0]
    with pytest.raises(ValueError):
        dp_ntk.fit(
            jax.random.key(0), x, y, network=net, batch_size=8, n_classes=C, progress=False, **kw
        )
    if "iterations" not in change and "split" not in change:
        with pytest.raises(ValueError):
            dp_ntk.private_embedding(
                jax.random.key(0),
                x,
                y,
                n_classes=C,
                epsilon=kw["epsilon"],
                delta=kw["delta"],
                network=net,
            )


def test_bad_key_type(digits, net) -> None:
    x, y = digits
    with pytest.raises(TypeError):
        dp_ntk.private_embedding(0, x, y, n_classes=C, epsilon=1.0, delta=1e-5, network=net)


# ------------------------------------------------------------------- training


def _mmd2(net, params, x_real, y_real, x_gen, y_gen) -> float:
    a = features.entk_mean_embedding(net.apply, params, jnp.asarray(x_real), jnp.asarray(y_real), C)
    b = features.entk_mean_embedding(net.apply, params, jnp.asarray(x_gen), jnp.asarray(y_gen), C)
    return float(jnp.sum((a - b) ** 2))


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_training_decreases_mmd(digits, net) -> None:
    x, y = digits
    gen = ConvCondGenerator(n_classes=C, output_shape=(8, 8), hidden=(32,), channels=(8, 4))
    kw = dict(
        epsilon=None,
        network=net,
        generator=gen,
        batch_size=60,
        learning_rate=0.01,
        n_classes=C,
        progress=False,
    )
    res0 = dp_ntk.fit(jax.random.key(2), x, y, iterations=1, **kw)
    res = dp_ntk.fit(jax.random.key(2), x, y, iterations=60, **kw)
    assert res.loss_history.shape == (60,)
    assert np.mean(res.loss_history[-10:]) < 0.5 * np.mean(res.loss_history[:3])
    # independent check with a different e-NTK network (not the one trained against)
    eval_params = features.init_params(jax.random.key(99), net, (8, 8))
    labels = np.repeat(np.arange(C), 100)
    x0, y0 = dp_ntk.sample(jax.random.key(7), res0, len(labels), labels=labels)
    x1, y1 = dp_ntk.sample(jax.random.key(7), res, len(labels), labels=labels)
    before = _mmd2(net, eval_params, x, y, x0, y0)
    after = _mmd2(net, eval_params, x, y, x1, y1)
    assert after < 0.5 * before, (before, after)
    assert x1.min() >= 0 and x1.max() <= 1


def test_fit_deterministic(digits, net) -> None:
    x, y = digits
    kw = dict(
        epsilon=1.0,
        delta=1e-5,
        network=net,
        iterations=3,
        batch_size=12,
        n_classes=C,
        progress=False,
    )
    a = dp_ntk.fit(jax.random.key(4), x, y, **kw)
    b = dp_ntk.fit(jax.random.key(4), x, y, **kw)
    np.testing.assert_array_equal(a.loss_history, b.loss_history)
    for la, lb in zip(
        jax.tree_util.tree_leaves(a.generator_params),
        jax.tree_util.tree_leaves(b.generator_params),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))


def test_checkpoint_resume_does_not_respend(digits, net, tmp_path, monkeypatch) -> None:
    x, y = digits
    kw = dict(
        epsilon=1.0,
        delta=1e-5,
        network=net,
        iterations=6,
        batch_size=12,
        n_classes=C,
        label_mode="released",
        progress=False,
    )
    full = dp_ntk.fit(jax.random.key(8), x, y, **kw)

    path = tmp_path / "ck.npz"

    def interrupt(it, loss):
        if it == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dp_ntk.fit(
            jax.random.key(8),
            x,
            y,
            checkpoint_path=path,
            checkpoint_every=2,
            callback=interrupt,
            **kw,
        )
    from privkernels import checkpoint
    from privkernels.dp_ntk import fitting

    _, meta = checkpoint.load(path, format=fitting.CHECKPOINT_FORMAT)
    assert meta["iteration"] == 4
    assert privacy.PrivacyReport.from_dict(meta["report"]) == full.report

    def boom(*a, **k):
        raise AssertionError("private data touched again on resume")

    for release in ("embedding_release", "proportions_release", "counts_release"):
        monkeypatch.setattr(fitting, release, boom)
    monkeypatch.setattr(privacy, "gaussian_mechanism", boom)
    resume = dict(network=net, checkpoint_path=path, resume=True, progress=False)
    probe = path.with_name(path.name + ".tmp.npz")  # where a save writes first
    probe.mkdir()  # so no save could succeed: the resume is refused before any training
    with pytest.raises(ValueError, match="cannot be written"):
        dp_ntk.fit(None, None, None, epsilon=1.0, **resume)
    probe.rmdir()
    resumed = dp_ntk.fit(None, None, None, epsilon=1.0, **resume)
    assert resumed.iteration == 6
    assert resumed.report == full.report  # same releases, nothing re-spent
    assert resumed.report.epsilon == pytest.approx(1.0) and len(resumed.report.mechanisms) == 2
    np.testing.assert_allclose(resumed.loss_history, full.loss_history, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(resumed.noisy_embedding), np.asarray(full.noisy_embedding)
    )
    for la, lb in zip(
        jax.tree_util.tree_leaves(resumed.generator_params),
        jax.tree_util.tree_leaves(full.generator_params),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(la), np.asarray(lb), rtol=1e-5, atol=1e-6)
    # extending the run, with x=None
    more = dp_ntk.fit(None, None, None, epsilon=1.0, iterations=8, **resume)
    assert more.iteration == 8 and more.report == full.report


# ------------------------------------------------------------------- sampling


def test_sample_labels_released_proportions() -> None:
    rng = np.random.default_rng(0)
    n = 400
    y = (rng.uniform(size=n) < 0.2).astype(np.int32)  # ~20% class 1
    x = np.concatenate([rng.uniform(size=(n, 3)), np.eye(2)[y]], axis=1).astype(np.float32)
    from privkernels.generators import ColumnGroup

    gen = TabularGenerator(
        n_classes=2,
        n_features=5,
        groups=(ColumnGroup("numeric", 0, 3), ColumnGroup("categorical", 3, 5)),
        hidden=(8,),
    )
    res = dp_ntk.fit(
        jax.random.key(0),
        x,
        y,
        epsilon=5.0,
        delta=1e-5,
        network=features.fc_1l(8),
        generator=gen,
        iterations=2,
        batch_size=20,
        n_classes=2,
        label_mode="released",
        progress=False,
    )
    p = res.noisy_proportions
    assert abs(p[1] - y.mean()) < 0.05
    xs, ys = dp_ntk.sample(jax.random.key(1), res, 4000)
    counts = np.bincount(ys, minlength=2)
    assert stats.chisquare(counts, 4000 * p).pvalue > 1e-3
    # categorical head discretised to exact one-hots, numeric head in [0, 1]
    assert np.all(xs[:, 3:].sum(1) == 1) and set(np.unique(xs[:, 3:])) <= {0.0, 1.0}
    assert xs[:, :3].min() >= 0 and xs[:, :3].max() <= 1


def test_sample_labels_uniform(digits, net) -> None:
    x, y = digits
    res = dp_ntk.fit(
        jax.random.key(0),
        x,
        y,
        epsilon=1.0,
        delta=1e-5,
        network=net,
        iterations=1,
        batch_size=12,
        n_classes=C,
        progress=False,
    )
    xs, ys = dp_ntk.sample(jax.random.key(3), res, 3000)
    assert xs.shape == (3000, 8, 8)
    assert stats.chisquare(np.bincount(ys, minlength=C)).pvalue > 1e-3
    xs2, ys2 = dp_ntk.sample(jax.random.key(3), res, 3000)
    np.testing.assert_array_equal(xs, xs2)
    np.testing.assert_array_equal(ys, ys2)


def test_fit_refuses_data_outside_the_generators_range_before_any_noise(monkeypatch):
    """Issue 17: a sigmoid generator cannot match pixels in 0..16; refused, nothing released."""
    import numpy as np

    from privkernels import dp_ntk, privacy

    drawn = []
    original = privacy.gaussian_mechanism

    def spy(*a, **k):
        drawn.append(1)
        return original(*a, **k)

    monkeypatch.setattr(privacy, "gaussian_mechanism", spy)
    x = np.random.default_rng(0).integers(0, 17, size=(40, 8, 8)).astype(np.float32)
    y = np.arange(40) % 4
    with pytest.raises(ValueError, match=r"outside \[0, 1\]") as err:
        dp_ntk.fit(jax.random.key(0), x, y, epsilon=1.0, n_classes=4, iterations=1)
    assert "16" not in str(err.value)  # no value from the data in the message
    assert drawn == []
    res = dp_ntk.fit(
        jax.random.key(0),
        x / 16.0,
        y,
        epsilon=1.0,
        n_classes=4,
        iterations=2,
        progress=False,
        batch_size=20,
    )  # the default network (fc_1l(800)) and the public rescaling work
    assert res.network.widths == (800,) and res.report.private and drawn


# ---------------------------------------------------------------- add-remove
# the class sums (sensitivity 1) and a noisy n, never n itself


def _sums(key, x, y, net) -> np.ndarray:
    """The exact class sums ``n * mu`` (the quantity released under add-remove), float64."""
    emb, _ = dp_ntk.private_embedding(key, x, y, n_classes=C, epsilon=None, network=net)
    return np.asarray(emb, np.float64) * len(x)


def test_class_sums_move_by_at_most_one_when_a_record_is_added_or_removed(digits, net) -> None:
    x, y = digits
    x, y = x[:40], y[:40]
    key = jax.random.key(3)
    base = _sums(key, x, y, net)
    rng = np.random.default_rng(0)
    extra = [
        (x[-1], (y[0] + 1) % C),
        (np.zeros_like(x[0]), y[0]),
        (rng.uniform(0, 50, x[0].shape).astype(np.float32), (y[0] + 2) % C),
        (-x[0] * 20, (y[0] + 1) % C),
    ]
    diffs = [np.linalg.norm(base - _sums(key, x[1:], y[1:], net))]  # removed
    for xi, yi in extra:  # added
        x2, y2 = np.concatenate([x, xi[None]]), np.append(y, yi).astype(np.int32)
        diffs.append(np.linalg.norm(base - _sums(key, x2, y2, net)))
    assert max(diffs) <= 1.0 + 1e-4, diffs
    assert min(diffs) > 0.99  # one unit-norm feature (less the normalisation margin)


def test_noise_on_the_sums_has_std_sigma_and_the_record_holds_no_n(digits, net) -> None:
    x, y = digits
    key = jax.random.key(11)
    eps, delta = 1.0, 1e-5
    exact = _sums(key, x, y, net)
    noisy, rep = dp_ntk.private_embedding(
        key, x, y, n_classes=C, epsilon=eps, delta=delta, network=net, neighbouring="add-remove"
    )
    noise = (np.asarray(noisy, np.float64) - exact).ravel()
    expected = privacy.gaussian_sigma(eps, delta)
    assert noise.size > 1000
    assert np.std(noise) == pytest.approx(expected, rel=0.05)
    assert stats.kstest(noise / expected, "norm").pvalue > 1e-3
    (m,) = rep.mechanisms
    assert m.sensitivity == 1.0 and "class sums" in m.released
    assert "n" not in m.param_dict  # n is private under add-remove
    assert rep.neighbouring == "add-remove" and rep.epsilon == eps
    assert not any("public" in d and "dataset size" in d for d in rep.data_independent)


@pytest.mark.parametrize("per_class", [True, False])
def test_count_release_noise_and_sensitivity(digits, per_class) -> None:
    _, y = digits
    eps, delta = 0.5, 1e-5
    true = np.bincount(y, minlength=C).astype(np.float64)
    true = true if per_class else np.asarray([true.sum()])
    draws = np.stack(
        [
            dp_ntk.private_class_counts(
                jax.random.key(i), y, n_classes=C, epsilon=eps, delta=delta, per_class=per_class
            )[0]
            for i in range(300)
        ]
    )
    std = privacy.gaussian_sigma(eps, delta)  # sensitivity 1
    assert draws.shape == (300, C if per_class else 1)
    spread = np.std(draws - true, axis=0)
    assert np.all(spread < 1.2 * std) and np.all(spread > 0.8 * std)
    assert np.allclose(draws.mean(0), true, atol=4 * std / math.sqrt(300))
    _, rep = dp_ntk.private_class_counts(
        jax.random.key(0), y, n_classes=C, epsilon=eps, delta=delta, per_class=per_class
    )
    assert rep.neighbouring == "add-remove" and rep.mechanisms[0].sensitivity == 1.0


def test_normalise_sums_is_post_processing_of_the_noisy_counts() -> None:
    sums = np.ones((4, 3), np.float32) * 6.0
    emb, props = dp_ntk.normalise_sums(sums, np.array([2.0, -5.0, 4.0]))
    np.testing.assert_allclose(np.asarray(emb), 1.0)  # n_hat = 2 + 0 + 4
    np.testing.assert_allclose(props, [1 / 3, 0.0, 2 / 3])
    emb, props = dp_ntk.normalise_sums(sums, np.array([-3.0, -1.0, -2.0]))
    np.testing.assert_allclose(np.asarray(emb), 6.0)  # n_hat floored at 1
    np.testing.assert_allclose(props, 1 / 3)


@pytest.mark.parametrize("label_mode", ["uniform", "released"])
def test_fit_composes_the_sums_and_a_noisy_n_to_the_budget(digits, net, label_mode) -> None:
    x, y = digits
    kw = dict(network=net, iterations=2, batch_size=12, n_classes=C, progress=False)
    res = dp_ntk.fit(
        jax.random.key(1), x, y, epsilon=2.0, delta=1e-5, neighbouring="add-remove",
        label_mode=label_mode, split=(0.75, 0.25), **kw,
    )  # fmt: skip
    rep = res.report
    assert rep.neighbouring == "add-remove" and len(rep.mechanisms) == 2
    sums_m, n_m = rep.mechanisms
    assert sums_m.epsilon == pytest.approx(1.5) and n_m.epsilon == pytest.approx(0.5)
    assert rep.epsilon == pytest.approx(2.0) and rep.delta == pytest.approx(1e-5)
    assert sums_m.sensitivity == 1.0 and n_m.sensitivity == 1.0
    per_class = label_mode == "released"
    assert ("class counts" in n_m.released) == per_class
    assert ("dataset size n" in n_m.released) == (not per_class)
    assert any("dataset size n: private" in note for note in rep.notes)
    assert (res.noisy_proportions is not None) == per_class
    # with a large budget the normalised sums are the mean embedding, up to the noise
    big = dp_ntk.fit(
        jax.random.key(1), x, y, epsilon=1e4, delta=1e-5, neighbouring="add-remove",
        label_mode=label_mode, **kw,
    )  # fmt: skip
    exact, _ = dp_ntk.private_embedding(
        jax.random.split(jax.random.key(1), 4)[0], x, y, n_classes=C, epsilon=None, network=net
    )
    err = np.linalg.norm(np.asarray(big.noisy_embedding) - np.asarray(exact))
    assert err < 0.05 * np.linalg.norm(np.asarray(exact))


def test_replace_one_is_unchanged_by_the_new_argument(digits, net) -> None:
    x, y = digits
    kw = dict(epsilon=1.0, network=net, iterations=2, batch_size=12, n_classes=C, progress=False)
    a = dp_ntk.fit(jax.random.key(2), x, y, **kw)
    b = dp_ntk.fit(jax.random.key(2), x, y, neighbouring="replace-one", **kw)
    assert a.report == b.report and a.report.neighbouring == "replace-one"
    np.testing.assert_array_equal(np.asarray(a.noisy_embedding), np.asarray(b.noisy_embedding))


@pytest.mark.parametrize("bad", ["add_remove", "substitute", None, 1])
def test_bad_relation_is_refused_before_any_noise(digits, net, monkeypatch, bad) -> None:
    x, y = digits

    def boom(*a, **k):
        raise AssertionError("noise drawn / data read before validation")

    monkeypatch.setattr(privacy, "gaussian_mechanism", boom)
    monkeypatch.setattr(features, "entk_mean_embedding", boom)
    with pytest.raises(ValueError, match="neighbouring"):
        dp_ntk.fit(jax.random.key(0), x, y, epsilon=1.0, neighbouring=bad, network=net,
                   n_classes=C, progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="neighbouring"):
        dp_ntk.private_embedding(jax.random.key(0), x, y, n_classes=C, epsilon=1.0,
                                 network=net, neighbouring=bad)  # fmt: skip


def test_resume_keeps_the_relation_it_was_released_under(digits, net, tmp_path) -> None:
    x, y = digits
    path = tmp_path / "ck.npz"
    kw = dict(network=net, batch_size=12, n_classes=C, progress=False)
    dp_ntk.fit(jax.random.key(4), x, y, epsilon=1.0, neighbouring="add-remove", iterations=2,
               checkpoint_path=path, **kw)  # fmt: skip
    with pytest.raises(ValueError, match="add-remove"):
        dp_ntk.fit(None, None, None, epsilon=1.0, iterations=3, checkpoint_path=path,
                   resume=True, **kw)  # fmt: skip
    more = dp_ntk.fit(None, None, None, epsilon=1.0, neighbouring="add-remove", iterations=3,
                      checkpoint_path=path, resume=True, **kw)  # fmt: skip
    assert more.iteration == 3 and more.report.neighbouring == "add-remove"


@pytest.mark.parametrize(
    "relation, label_mode, kinds",
    [
        ("replace-one", "uniform", ("mean",)),
        ("replace-one", "released", ("mean", "proportions")),
        ("add-remove", "uniform", ("sums", "n")),
    ],
)
def test_each_release_spends_the_share_the_plan_made(
    digits, net, monkeypatch, relation, label_mode, kinds
) -> None:
    """The budget is split once, by `privkernels.dp_ntk.settings.plan`, and every Gaussian
    release spends the very `Budget` the plan holds (no float round trip, no second split),
    in the order embedding, then labels or n; the shares add up to the total."""
    from privkernels.dp_ntk import fitting, release

    plans, spent = [], []
    real_plan, real_release = fitting.plan, release.gaussian_release

    def plan(*a, **k):
        plans.append(real_plan(*a, **k))
        return plans[-1]

    def gaussian_release(key, value, **kw):
        spent.append((kw["budget"], kw["released"]))
        return real_release(key, value, **kw)

    monkeypatch.setattr(fitting, "plan", plan)
    monkeypatch.setattr(release, "gaussian_release", gaussian_release)
    monkeypatch.setattr(fitting, "_train", lambda result, *_: result)  # the releases alone
    x, y = digits
    res = dp_ntk.fit(jax.random.key(5), x, y, epsilon=2.0, delta=1e-5, n_classes=C,
                     neighbouring=relation, label_mode=label_mode, split=(0.75, 0.25),
                     network=net, iterations=2, batch_size=12, progress=False)  # fmt: skip
    (p,) = plans
    shares = (p.releases.embedding, p.releases.labels)[: len(kinds)]
    assert len(spent) == len(kinds)
    assert all(b is share for (b, _), share in zip(spent, shares, strict=True))
    assert all(isinstance(b, privacy.Budget) for b, _ in spent)
    assert [r.released for r in res.report.mechanisms] == [what for _, what in spent]
    assert sum(b.epsilon for b, _ in spent) <= 2.0
    assert sum(b.epsilon for b, _ in spent) == pytest.approx(2.0)
    assert (p.releases.labels is None) == (len(kinds) == 1)


def test_the_fits_network_weights_are_the_ones_its_embedding_key_would_draw(
    digits, net, monkeypatch
) -> None:
    """The key contract: `fit_keys` takes the e-NTK weights' key from `embedding_keys`, the
    one split of the embedding key, so the weights a fit draws beforehand are those
    `embedding_release` draws itself from ``FitKeys.emb``."""
    from privkernels.dp_ntk import fitting, release, settings

    monkeypatch.setattr(fitting, "_train", lambda result, *_: result)  # the release alone
    x, y = digits
    key = jax.random.key(6)
    res = dp_ntk.fit(key, x, y, epsilon=None, n_classes=C, network=net, progress=False)
    own, _ = release.embedding_release(
        settings.fit_keys(key).emb, x, y, n_classes=C, budget=None, network=net
    )
    np.testing.assert_array_equal(np.asarray(res.noisy_embedding), np.asarray(own))
