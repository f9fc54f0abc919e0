"""DP-KIP with the ScatterNet kernel computes the targets' features once (``targets="repr"``).

The release must not change: the feature map is fixed and row-wise, so the per-example
gradients are the same whether the rows are featurised once or at every step. The choice
is made from public values only (`privkernels.dp_kip.fitting.target_rows`).
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


@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_features_once_equal_features_per_step(monkeypatch, relation):
    extra = {"neighbouring": relation}
    if relation == "add-remove":
        extra["sampling_rate"] = 30 / 150
    once, t_once = _fit_spy(monkeypatch, **extra)
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", 0)  # forces features at every step
    per_step, t_step = _fit_spy(monkeypatch, **extra)
    assert (t_once, t_step) == ("repr", "inputs")
    np.testing.assert_allclose(once.support_x, per_step.support_x, rtol=0, atol=1e-6)
    assert once.report.epsilon == per_step.report.epsilon
    assert once.report.to_dict() == per_step.report.to_dict()


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
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps) == "repr"
    assert fitting.target_rows(spec, cfg, object(), cfg.planned_steps) == "inputs"
    entk = make_kernel("entk", (12, 12), 3, key=jax.random.key(0))
    cfg12, _, _ = dp_kip.configure(
        n=len(y), input_shape=(12, 12), **{k: v for k, v in FIT.items() if k != "progress"}
    )
    assert fitting.target_rows(entk, cfg12, None, cfg12.planned_steps) == "inputs"


def test_decision_reads_no_private_size_under_add_remove():
    """Under add-remove only the public rate and batch size shape the decision."""
    spec = make_kernel("scatternet", (8, 8), 3, options={"J": 1})
    common = {k: v for k, v in FIT.items() if k != "progress"}
    common.update(neighbouring="add-remove", sampling_rate=0.2)
    picks = set()
    for n in (100, 150, 151, 10_000):
        cfg, _, _ = dp_kip.configure(n=n, input_shape=(8, 8), **common)
        assert cfg.n is None
        picks.add(fitting.target_rows(spec, cfg, None, cfg.planned_steps))
    assert picks == {"repr"}


def test_memory_bound_uses_the_feature_size(monkeypatch):
    x, y = _images()
    cfg, _, _ = dp_kip.configure(
        n=len(y), input_shape=x.shape[1:], **{k: v for k, v in FIT.items() if k != "progress"}
    )
    spec = make_kernel("scatternet", x.shape[1:], 3, options={"J": 1})
    f = dp_kip.krr.target_repr(spec, x[:2], 2).shape[1]
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", len(y) * f * 4)
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps) == "repr"
    monkeypatch.setattr(fitting, "TARGET_REPR_BYTES", len(y) * f * 4 - 1)
    assert fitting.target_rows(spec, cfg, None, cfg.planned_steps) == "inputs"


def test_make_trainer_refuses_unknown_targets():
    x, y = _images()
    cfg, plan, opt = dp_kip.configure(
        n=len(y), input_shape=x.shape[1:], **{k: v for k, v in FIT.items() if k != "progress"}
    )
    spec = make_kernel("scatternet", x.shape[1:], 3, options={"J": 1})
    with pytest.raises(ValueError, match="targets must be one of"):
        make_trainer(cfg, spec, plan, opt, n=len(y), min_pad=64, targets="features")
