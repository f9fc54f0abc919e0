"""Train-on-synthetic / test-on-real evaluation utilities."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privkernels import evaluation


def _blobs(n: int, d: int, n_classes: int, sep: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    # class centres depend only on (d, n_classes, sep): train and test share them
    centers = np.random.default_rng(1234).normal(size=(n_classes, d)) * sep
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y


def test_images_separable_and_chance() -> None:
    x, y = _blobs(400, 10, 3, sep=8.0, seed=0)
    xt, yt = _blobs(300, 10, 3, sep=8.0, seed=1)
    acc = evaluation.evaluate_images(
        x.reshape(-1, 2, 5), y, xt.reshape(-1, 2, 5), yt, overrides={"mlp": {"max_iter": 50}}
    )
    assert set(acc) == {"logreg", "mlp"}
    assert acc["logreg"] > 0.95 and acc["mlp"] > 0.95
    # labels unrelated to inputs -> about chance
    rng = np.random.default_rng(2)
    acc = evaluation.evaluate_images(x, rng.integers(0, 3, len(x)), xt, yt, classifiers=("logreg",))
    assert acc["logreg"] < 0.6


def test_images_deterministic_and_subsampling() -> None:
    x, y = _blobs(500, 6, 4, sep=1.0, seed=3)
    xt, yt = _blobs(200, 6, 4, sep=1.0, seed=13)
    kw = dict(max_train=200, seed=5, overrides={"mlp": {"max_iter": 20}})
    a = evaluation.evaluate_images(x, y, xt, yt, **kw)
    b = evaluation.evaluate_images(x, y, xt, yt, **kw)
    assert a == b
    xs, ys = evaluation.subsample(x, y, 200, seed=5)
    assert len(xs) == 200 and len(np.unique(xs, axis=0)) == 200


def test_single_class_training_data() -> None:
    x, y = _blobs(50, 4, 2, sep=1.0, seed=0)
    xt, yt = _blobs(80, 4, 2, sep=1.0, seed=1)
    acc = evaluation.evaluate_images(x, np.zeros(50, int), xt, yt)
    assert acc["logreg"] == pytest.approx(np.mean(yt == 0))
    res = evaluation.evaluate_tabular(
        x, np.zeros(50, int), xt, yt, classifiers=("logreg", "gaussian_nb")
    )
    assert res["mean"]["roc_auc"] == pytest.approx(0.5)


def test_tabular_binary_metrics() -> None:
    x, y = _blobs(300, 5, 2, sep=3.0, seed=4)
    xt, yt = _blobs(200, 5, 2, sep=3.0, seed=14)
    x01 = 1 / (1 + np.exp(-x))  # BernoulliNB binarises at 0.5
    xt01 = 1 / (1 + np.exp(-xt))
    res = evaluation.evaluate_tabular(x01, y, xt01, yt, max_train=300)
    assert res["task"] == "binary"
    assert set(res["per_classifier"]) == set(evaluation.TABULAR_CLASSIFIERS)
    assert len(evaluation.TABULAR_CLASSIFIERS) == 12
    for name, m in res["per_classifier"].items():
        assert 0.0 <= m["roc_auc"] <= 1.0 and 0.0 <= m["pr_auc"] <= 1.0, name
    assert res["mean"]["roc_auc"] > 0.85
    # a perfect score vector gives ROC-AUC 1
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(yt, yt.astype(float)) == 1.0


def test_tabular_multiclass_f1_and_determinism() -> None:
    x, y = _blobs(300, 5, 3, sep=3.0, seed=6)
    xt, yt = _blobs(150, 5, 3, sep=3.0, seed=16)
    names = ("logreg", "decision_tree", "random_forest", "lda")
    a = evaluation.evaluate_tabular(x, y, xt, yt, classifiers=names, seed=1)
    b = evaluation.evaluate_tabular(x, y, xt, yt, classifiers=names, seed=1)
    assert a == b
    assert a["task"] == "multiclass" and set(a["mean"]) == {"f1", "accuracy"}
    assert a["mean"]["f1"] > 0.8


def test_tabular_reports_accuracy() -> None:
    """Each classifier's accuracy is the share of test rows its predictions get right."""
    x, y = _blobs(200, 4, 2, sep=1.0, seed=2)
    xt, yt = _blobs(120, 4, 2, sep=1.0, seed=12)
    res = evaluation.evaluate_tabular(x, y, xt, yt, classifiers=("logreg", "lda"), seed=3)
    clf = evaluation.make_classifier("logreg", seed=3).fit(x.astype(np.float32), y)
    expected = np.mean(clf.predict(xt.astype(np.float32)) == yt)
    assert res["per_classifier"]["logreg"]["accuracy"] == pytest.approx(expected)
    assert 0.5 < expected < 1.0  # a separable-but-noisy case: neither trivial end
    per = res["per_classifier"]
    assert res["mean"]["accuracy"] == pytest.approx(
        (per["logreg"]["accuracy"] + per["lda"]["accuracy"]) / 2
    )
    single = evaluation.evaluate_tabular(x, np.ones(200, int), xt, yt, classifiers=("logreg",))
    assert single["mean"]["accuracy"] == pytest.approx(np.mean(yt == 1))


def test_bad_inputs() -> None:
    x, y = _blobs(20, 3, 2, sep=1.0, seed=0)
    with pytest.raises(ValueError):
        evaluation.evaluate_images(x, y[:-1], x, y)
    with pytest.raises(ValueError):
        evaluation.evaluate_images(x, y, x[:, :2], y)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        evaluation.evaluate_tabular(bad, y, x, y)
    with pytest.raises(ValueError):
        evaluation.make_classifier("xgboost")


# ---------------------------------------------------------------- ConvNet augmentation


def _blob(n: int = 3, size: int = 16) -> np.ndarray:
    x = np.full((n, size, size), -1.0, np.float32)
    x[:, 5:10, 6:9] = 1.0
    return x


def test_augment_identity_and_key_discipline():
    x = _blob()
    np.testing.assert_array_equal(
        np.asarray(evaluation.augment_images(jax.random.key(0), x, evaluation.Augment())), x
    )
    aug = evaluation.Augment(shift=2, rotate=15.0, scale=0.1)
    a = evaluation.augment_images(jax.random.key(1), x, aug)
    b = evaluation.augment_images(jax.random.key(1), x, aug)
    c = evaluation.augment_images(jax.random.key(2), x, aug)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    assert a.shape == x.shape and a.dtype == jnp.float32
    # each image gets its own map
    assert not np.allclose(np.asarray(a[0]), np.asarray(a[1]))
    # bilinear resampling with the border extended stays inside the input's range
    assert float(a.min()) >= -1.0 - 1e-6 and float(a.max()) <= 1.0 + 1e-6


def test_augment_shift_only_translates():
    """With rotate = scale = 0 an image moves by at most ``shift`` pixels per axis."""
    x = _blob(n=64)
    out = np.asarray(evaluation.augment_images(jax.random.key(3), x, evaluation.Augment(shift=2)))
    rows, cols = np.arange(16.0), np.arange(16.0)
    for img in out:
        w = img + 1.0
        r = (w.sum(1) * rows).sum() / w.sum()
        c = (w.sum(0) * cols).sum() / w.sum()
        assert abs(r - 7.0) <= 2.0 + 1e-4 and abs(c - 7.0) <= 2.0 + 1e-4
        assert w.sum() == pytest.approx(30.0, rel=1e-4)  # the blob stays whole (no border hit)


def test_augment_flip_mirrors_left_right():
    """``flip=1`` mirrors every image exactly; ``flip=0.5`` mirrors some, leaves the rest."""
    x = _blob(n=64)
    out = np.asarray(evaluation.augment_images(jax.random.key(5), x, evaluation.Augment(flip=1.0)))
    np.testing.assert_array_equal(out, x[:, :, ::-1])
    half = np.asarray(evaluation.augment_images(jax.random.key(5), x, evaluation.Augment(flip=0.5)))
    mirrored = [bool(np.array_equal(o, xi[:, ::-1])) for o, xi in zip(half, x, strict=True)]
    kept = [bool(np.array_equal(o, xi)) for o, xi in zip(half, x, strict=True)]
    assert all(m != k for m, k in zip(mirrored, kept, strict=True))  # each image one or the other
    assert 16 <= sum(mirrored) <= 48  # Binomial(64, 0.5): outside this, p < 1e-4
    # a flip composes with a shift: the result is no longer the plain mirror image
    both = evaluation.augment_images(jax.random.key(6), x, evaluation.Augment(shift=1, flip=1.0))
    assert not np.allclose(np.asarray(both), out)
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="augment.flip"):
            evaluation.augment_images(jax.random.key(0), x, evaluation.Augment(flip=bad))


def test_augment_channels_last():
    x = np.stack([_blob(), -_blob()], -1)
    aug = evaluation.Augment(shift=1, rotate=10.0)
    out = np.asarray(evaluation.augment_images(jax.random.key(4), x, aug))
    assert out.shape == x.shape
    np.testing.assert_allclose(out[..., 1], -out[..., 0], atol=1e-6)  # one map per image


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_train_convnet_augment_and_weight_decay():
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.images[:40] / 8.0 - 1.0).astype(np.float32), d.target[:40]
    base = evaluation.train_convnet(jax.random.key(0), x, y, 10, steps=3, width=8)[1]
    again = evaluation.train_convnet(jax.random.key(0), x, y, 10, steps=3, width=8)[1]
    aug = evaluation.Augment(shift=1)
    with_aug = evaluation.train_convnet(jax.random.key(0), x, y, 10, steps=3, width=8, augment=aug)[
        1
    ]
    with_wd = evaluation.train_convnet(
        jax.random.key(0), x, y, 10, steps=3, width=8, weight_decay=0.1
    )[1]
    leaves = lambda p: np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(p)])  # noqa: E731
    np.testing.assert_array_equal(leaves(base), leaves(again))
    assert not np.allclose(leaves(base), leaves(with_aug))
    assert not np.allclose(leaves(base), leaves(with_wd))
    for bad in (evaluation.Augment(shift=-1.0), evaluation.Augment(rotate=float("nan"))):
        with pytest.raises(ValueError, match="augment"):
            evaluation.train_convnet(jax.random.key(0), x, y, 10, steps=1, width=8, augment=bad)
        with pytest.raises(ValueError, match="augment"):
            evaluation.augment_images(jax.random.key(0), x, bad)
    with pytest.raises(ValueError, match="weight_decay"):
        evaluation.train_convnet(
            jax.random.key(0), x, y, 10, steps=1, width=8, weight_decay=float("nan")
        )
    with pytest.raises(ValueError, match="weight_decay"):
        evaluation.train_convnet(jax.random.key(0), x, y, 10, steps=1, width=8, weight_decay=-1.0)


def test_train_convnet_soft_targets():
    """One-hot soft targets train like the integer labels; malformed targets are refused."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.images[:40] / 8.0 - 1.0).astype(np.float32), d.target[:40]
    # a depth-1 ConvNet: the loss on soft targets does not depend on the depth
    kw = dict(steps=3, width=8, depth=1)
    leaves = lambda p: np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(p)])  # noqa: E731
    mod, hard = evaluation.train_convnet(jax.random.key(0), x, y, 10, **kw)
    onehot = np.eye(10, dtype=np.float32)[y]
    soft = evaluation.train_convnet(jax.random.key(0), x, onehot, 10, **kw)[1]
    # the same loss up to rounding (Adam's first steps amplify rounding in ~0 gradients,
    # so compare what the networks compute)
    np.testing.assert_allclose(mod.apply(soft, x), mod.apply(hard, x), atol=2e-3)
    smooth = 0.9 * onehot + 0.01
    other = evaluation.train_convnet(jax.random.key(0), x, smooth, 10, **kw)[1]
    assert not np.allclose(leaves(other), leaves(hard), atol=1e-3)
    bad_rows = {
        "soft targets y must have shape": (onehot[:, :9], onehot[:39]),
        "rows of probabilities": (2 * onehot, onehot - 0.05, np.full((40, 10), 0.05)),
        "y contains": (np.full((40, 10), np.nan),),
    }
    for message, bads in bad_rows.items():
        for bad in bads:
            with pytest.raises(ValueError, match=message):
                evaluation.train_convnet(jax.random.key(0), x, bad, 10, steps=1, width=8, depth=1)


def test_mixup_pool_is_convex_and_keyed():
    x = np.stack([np.zeros((4, 4)), np.ones((4, 4))]).astype(np.float32)
    pool = np.asarray(evaluation.mixup_pool(jax.random.key(0), x, 4000))
    assert pool.shape == (4000, 4, 4) and pool.dtype == np.float32
    lam = pool[:, 0, 0]
    np.testing.assert_array_equal(pool, np.broadcast_to(lam[:, None, None], pool.shape))
    assert np.all((lam >= 0) & (lam <= 1))
    # i == j (same image) half the time -> 0 or 1; otherwise lam or 1 - lam, uniform
    mixed = lam[(lam > 0) & (lam < 1)]
    assert 0.4 < mixed.size / lam.size < 0.6 and np.unique(mixed).size > 0.99 * mixed.size
    np.testing.assert_allclose(np.quantile(mixed, [0.1, 0.5, 0.9]), [0.1, 0.5, 0.9], atol=0.04)
    again = np.asarray(evaluation.mixup_pool(jax.random.key(0), x, 4000))
    np.testing.assert_array_equal(pool, again)
    assert not np.array_equal(pool, np.asarray(evaluation.mixup_pool(jax.random.key(1), x, 4000)))
    assert evaluation.mixup_pool(jax.random.key(0), x, 0).shape == (0, 4, 4)
    with pytest.raises(ValueError, match="size"):
        evaluation.mixup_pool(jax.random.key(0), x, -1)


def test_soft_targets():
    s = np.array([[1.0, 0.0, -1.0], [0.2, 0.2, 0.2]], np.float32)
    t = evaluation.soft_targets(s, 0.5)
    np.testing.assert_allclose(t, np.asarray(jax.nn.softmax(2 * s, axis=-1)), rtol=1e-6)
    np.testing.assert_allclose(t.sum(1), 1.0, rtol=1e-6)
    assert evaluation.soft_targets(s, 0.05)[0, 0] > t[0, 0]  # colder: sharper
    with pytest.raises(ValueError, match="too small"):  # s / T overflows float32
        evaluation.soft_targets(s, 1e-40)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            evaluation.soft_targets(s, bad)
    with pytest.raises(ValueError, match="scores"):
        evaluation.soft_targets(s[0], 1.0)


def test_train_convnet_from_teacher_sees_only_support_and_mixups():
    """The teacher is asked about the support rows, then ``pool_size`` mixups of them;
    its softened scores are the targets (same key, same ConvNet)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images[:20] / 8.0 - 1.0).astype(np.float32)
    seen = []

    def teacher(batch):
        seen.append(np.asarray(batch))
        return 3.0 * np.eye(10, dtype=np.float32)[np.arange(len(batch)) % 10]

    kw = {"pool_size": 30, "temperature": 0.5, "steps": 2, "width": 8, "depth": 1}
    _, p1 = evaluation.train_convnet_from_teacher(jax.random.key(3), x, teacher, 10, **kw)
    (inputs,) = seen
    assert inputs.shape == (50, 8, 8)
    np.testing.assert_array_equal(inputs[:20], x)
    k_pool, k_train = jax.random.split(jax.random.key(3))
    np.testing.assert_array_equal(inputs[20:], evaluation.mixup_pool(k_pool, x, 30))
    targets = evaluation.soft_targets(teacher(inputs), 0.5)
    _, p2 = evaluation.train_convnet(k_train, inputs, targets, 10, steps=2, width=8, depth=1)
    leaves = lambda p: np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(p)])  # noqa: E731
    np.testing.assert_array_equal(leaves(p1), leaves(p2))
    with pytest.raises(ValueError, match="teacher must return"):
        evaluation.train_convnet_from_teacher(
            jax.random.key(3), x, lambda b: np.zeros((len(b), 9)), 10, **kw
        )
    with pytest.raises(ValueError, match="temperature"):
        evaluation.train_convnet_from_teacher(
            jax.random.key(3), x, teacher, 10, **{**kw, "temperature": 0.0}
        )


class _ListFieldNet(nn.Module):
    """A module with a list field: unhashable, so jit cannot take it as a static key."""

    widths: list

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


def test_convnet_accuracy_takes_a_module_jit_cannot_hash():
    net = _ListFieldNet([4])
    x = np.random.default_rng(0).uniform(size=(6, 4, 4)).astype(np.float32)
    params = net.init(jax.random.key(0), jnp.asarray(x))
    logits = np.asarray(net.apply(params, jnp.asarray(x)))
    y = np.argmax(logits, -1)
    assert evaluation.convnet_accuracy(net, params, x, y) == 1.0
