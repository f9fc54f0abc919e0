"""DP-KIP with the ScatterNet kernel computes the targets' features once (``targets="repr"``).

The release must not change: the feature map is fixed and row-wise, so the per-example
gradients are the same whether the rows are featurised once or at every step. The choice
(`privkernels.dp_kip.fitting.target_rows`) reads the public planning size for the work
saved and the rows actually held for the memory spent.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

import privkernels.dp_kip.fitting as fitting
from privkernels import dp_kip
from privkernels.dp_kip.kernels import make_kernel
from privkernels.dp_kip.train import make_trainer

FIT = dict(
    kernel="scatternet",
    kernel_options={"J": 1},
    support_per_class=2,
    epsilon=1.0,
    delta=1e-5,
    clip_norm=0.1,
    batch_size=30,
    epochs=2,
    learning_rate=0.05,
    n_classes=3,
    progress=False,
)


def _images(n: int = 150, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n, dtype=np.int32) % 3
    x = rng.normal(size=(n, 8, 8)).astype(np.float32) + y[:, None, None]
    return x, y


def _fit_spy(monkeypatch, **kw):
    """``(result, targets)``: the release and what `fit` gave the trainer."""
    seen: list[str] = []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("targets", "inputs"))
        return make_trainer(*args, **kwargs)

    monkeypatch.setattr(fitting, "make_trainer", spy)
    x, y = _images()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        res = dp_kip.fit(jax.random.key(3), x, y, **{**FIT, **kw})
    return res, seen[-1]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"neighbouring": "add-remove", "sampling_rate": 30 / 150},
        {"clip_space": "input"},
        {"epsilon": None, "learn_labels": True},
    ],
    ids=["replace-one", "add-remove", "input-space", "non-private"],
)
def test_features_once_equal_features_per_step(monkeypatch, extra):
    once, t_once = _fit_spy(monkeypatch, **extra)
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", 0)  # forces features at every step
    per_step, t_step = _fit_spy(monkeypatch, **extra)
    assert (t_once, t_step) == ("repr", "inputs")
    np.testing.assert_array_equal(once.support_x, per_step.support_x)
    np.testing.assert_array_equal(once.support_targets, per_step.support_targets)


def test_target_repr_equals_the_feature_map_for_any_chunk():
    """The donated buffer and the overlapping last chunk write every row exactly."""
    spec = make_kernel("scatternet", (8, 8), 3, options={"J": 1})
    x, _ = _images(n=23)
    want = np.asarray(spec.feature_fn(x)).reshape(23, -1)
    for chunk in (1, 5, 22, 23, 100):
        got = dp_kip.krr.target_repr(spec, x, chunk)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_fc_ntk_entk_short_runs_and_meshes_keep_inputs(monkeypatch):
    _, t = _fit_spy(monkeypatch, kernel="fc_ntk", kernel_options=None)
    assert t == "inputs"  # not a feature kernel
    _, t = _fit_spy(monkeypatch, max_steps=2)
    assert t == "inputs"  # 2 steps of ~30 rows featurise fewer rows than the 150 held
    x, y = _images()
    cfg, _, _ = dp_kip.configure(
        n=len(y), input_shape=x.shape[1:], **{k: v for k, v in FIT.items() if k != "progress"}
    )
    spec = make_kernel("scatternet", x.shape[1:], 3, options={"J": 1})
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps, len(y) + 1) == "repr"
    assert fitting.target_rows(spec, cfg, object(), cfg.planned_steps, len(y) + 1) == "inputs"
    entk = make_kernel("entk", (12, 12), 3, key=jax.random.key(0))
    cfg12, _, _ = dp_kip.configure(
        n=len(y), input_shape=(12, 12), **{k: v for k, v in FIT.items() if k != "progress"}
    )
    assert fitting.target_rows(entk, cfg12, None, cfg12.planned_steps, len(y) + 1) == "inputs"


def test_memory_bound_counts_the_rows_held_under_add_remove(monkeypatch):
    """Under add-remove the planning size is public (batch / rate = 150 here) but the
    buffer holds every true row: 4x as many rows must fall back to inputs."""
    spec = make_kernel("scatternet", (8, 8), 3, options={"J": 1})
    f = dp_kip.krr.target_repr(spec, _images(2)[0], 2).shape[1]
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", 151 * f * 4)
    sizes: list[int] = []
    real = fitting.target_repr
    monkeypatch.setattr(
        fitting, "target_repr", lambda s, x, c: sizes.append(len(x)) or real(s, x, c)
    )
    seen: list[str] = []
    monkeypatch.setattr(
        fitting, "make_trainer", lambda *a, **k: seen.append(k["targets"]) or make_trainer(*a, **k)
    )
    for n in (150, 600):
        x, y = _images(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            dp_kip.fit(
                jax.random.key(3), x, y,
                **{**FIT, "neighbouring": "add-remove", "sampling_rate": 0.2},
            )  # fmt: skip
    assert seen == ["repr", "inputs"]
    assert sizes == [151]  # the private rows and the public zero row, nothing more


def test_a_resumed_run_counts_only_the_steps_left(monkeypatch, tmp_path):
    ck = tmp_path / "run.npz"
    done, t_first = _fit_spy(monkeypatch, checkpoint_path=ck)
    again, t_resumed = _fit_spy(monkeypatch, checkpoint_path=ck, resume=True)
    assert (t_first, t_resumed) == ("repr", "inputs")  # no steps left: nothing to featurise
    np.testing.assert_array_equal(done.support_x, again.support_x)


def test_memory_bound_uses_the_feature_size(monkeypatch):
    x, y = _images()
    cfg, _, _ = dp_kip.configure(
        n=len(y), input_shape=x.shape[1:], **{k: v for k, v in FIT.items() if k != "progress"}
    )
    spec = make_kernel("scatternet", x.shape[1:], 3, options={"J": 1})
    f = dp_kip.krr.target_repr(spec, x[:2], 2).shape[1]
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", (len(y) + 1) * f * 4)
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps, len(y) + 1) == "repr"
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", (len(y) + 1) * f * 4 - 1)
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps, len(y) + 1) == "inputs"


def test_make_trainer_refuses_unknown_targets():
    x, y = _images()
    cfg, plan, opt = dp_kip.configure(
        n=len(y), input_shape=x.shape[1:], **{k: v for k, v in FIT.items() if k != "progress"}
    )
    spec = make_kernel("scatternet", x.shape[1:], 3, options={"J": 1})
    with pytest.raises(ValueError, match="targets must be one of"):
        make_trainer(cfg, spec, plan, opt, n=len(y), min_pad=64, targets="features")
    with pytest.raises(ValueError, match="with a mesh the rows must be inputs"):
        make_trainer(cfg, spec, plan, opt, n=len(y), min_pad=64, mesh=object(), targets="repr")
    assert (
        make_trainer(cfg, spec, plan, opt, n=len(y), min_pad=64, targets="repr").targets == "repr"
    )
