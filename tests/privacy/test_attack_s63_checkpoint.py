"""The s63 attack b4 (repro /work/adv10/repro/b4_kip_checkpoint_step_and_key_edits.py): a DP-KIP
checkpoint is a plain .npz, and two edits made a resume run DP-SGD steps its report does not
count. Each test but the last (the unedited file still resumes) fails on 595b388 and pins one
edit: the resume must be refused before any noise, and the checkpoint left as it was."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels import checkpoint, dp_kip
from privkernels.dp_kip.fitting import CHECKPOINT_FORMAT

KW = dict(
    epsilon=1.0, delta=1e-5, n_classes=2, kernel="fc_ntk", support_per_class=2, batch_size=10,
    epochs=2, progress=False,
)  # fmt: skip
KEY = jax.random.key(123456789)
_DROP = object()  # an `_edited` meta value: delete the entry


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, 4)).astype(np.float32), np.arange(40) % 2


@pytest.fixture(scope="module")
def partial(data, tmp_path_factory):
    """A checkpoint after 4 of the 8 planned steps (one epoch): ``(arrays, meta)``."""
    ck = tmp_path_factory.mktemp("b4") / "ck.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = dp_kip.fit(KEY, *data, max_steps=4, checkpoint_path=ck, **KW)
    arrays, meta = checkpoint.load(ck, format=CHECKPOINT_FORMAT)
    assert part.steps_done == meta["steps_done"] == int(arrays["state/step"]) == 4
    assert meta["history"]["step"] == [4]
    return arrays, meta


def _refused(monkeypatch, data, path, key, match):
    """Resume from ``path`` under ``key``: refused (``match``), no noise, the file unchanged."""
    before = path.read_bytes()
    forbid_noise(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=match) as err:
            dp_kip.fit(key, *data, checkpoint_path=path, resume=True, **KW)
    assert path.read_bytes() == before
    return str(err.value)


def _edited(partial, path, step=None, **meta_edits):
    arrays, meta = partial
    arrays = dict(arrays)
    if step is not None:
        arrays["state/step"] = np.full_like(arrays["state/step"], step)
    meta = {**meta, **meta_edits}
    checkpoint.save(path, arrays, {k: v for k, v in meta.items() if v is not _DROP})
    return path


@pytest.mark.parametrize(
    "edit",
    [
        dict(step=0),  # the repro: the support after 4 steps would get all 8 again
        dict(step=-4),  # 12 steps run, the final step 8 reported
        dict(step=0, steps_done=0),  # history still records step 4
        dict(step=2, steps_done=2),  # the same, mid-epoch
        dict(step=9, steps_done=9),  # past the plan
        dict(steps_done=2),  # the state says 4
        dict(steps_done=True),  # not a count
        dict(history={"epoch": [1.0], "step": [8]}),  # logged past the state
        dict(history={"epoch": [0.5, 1.0], "step": [4, 4]}),  # not increasing
        dict(history={"epoch": [1.0], "step": ["4"]}),
    ],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items())[:40],
)
def test_a_step_count_that_disagrees_is_refused_before_noise(
    monkeypatch, tmp_path, data, partial, edit
):
    path = _edited(partial, tmp_path / "ck.npz", **edit)
    msg = _refused(monkeypatch, data, path, KEY, "step count disagrees")
    assert "steps_done" in msg and "restart the run" in msg


def test_a_history_that_is_not_an_object_is_a_value_error_before_noise(
    monkeypatch, tmp_path, data, partial
):
    """A history edited into a list raised AttributeError from the resume's history check."""
    path = _edited(partial, tmp_path / "ck.npz", history=[4])
    assert "restart the run" in _refused(monkeypatch, data, path, KEY, "history is not a JSON")


@pytest.mark.parametrize(
    "key", [KEY, jax.random.key(1), jax.random.key(2)], ids=["same", "k1", "k2"]
)
def test_a_checkpoint_without_its_key_check_is_refused_before_noise(
    monkeypatch, tmp_path, data, partial, key
):
    """Without `key_check` the file resumed under any key (as one written before 2026-11-27):
    one prefix forked into several continuations with fresh noise, each reporting one run. A
    plain file cannot prove its age, so a file without it is refused whatever the key."""
    path = _edited(partial, tmp_path / "ck.npz", key_check=_DROP)
    msg = _refused(monkeypatch, data, path, key, "holds no key_check")
    assert "restart the run" in msg


def test_the_unedited_checkpoint_still_resumes_to_the_uninterrupted_run(tmp_path, data, partial):
    """The checks refuse edits only: the saved prefix resumes bit for bit to the full run."""
    full = dp_kip.fit(KEY, *data, **KW)
    path = _edited(partial, tmp_path / "ck.npz")
    done = dp_kip.fit(KEY, *data, checkpoint_path=path, resume=True, **KW)
    np.testing.assert_array_equal(done.support_x, full.support_x)
    assert done.steps_done == full.steps_done == 8 and done.report == full.report
    assert done.history["step"] == full.history["step"] == [4, 8]
