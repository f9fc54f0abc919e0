"""What the adversary of the one-shape refactor (issue 51) found, each kept broken no more.

* B1: a bad kernel option reached the DP-NTK start's release (``init="dp_ntk"``) before
  it was refused: kernel option values are checked when the kernel is built.
* B2: a beta-close regression file relabelled add-remove loaded as standard DP: the
  Gaussian sampling and truncated Laplace records verify under beta-close only.
* B3: the PSD refusal of the Gaussian sampling mechanism printed values of K.
* Minor: the DP-SGD transform and its clipped sum take no nonsense; ``configure`` refuses
  what ``fit`` refuses; a public key equal to the release key is refused; a replace-one
  resume refuses beta-close settings as a fresh fit does; ``diagnostics`` is a bool.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels import dp_kip, dp_ntk, privacy
from privkernels import dp_ntk_regression as reg
from privkernels.privacy.dpsgd import dpsgd_noise, noisy_clipped_sum
from privkernels.privacy.report import PrivacyReport


def _images(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform(0, 1, size=(n, 8, 8)).astype(np.float32), np.arange(n) % 2


@pytest.mark.parametrize(
    ("kernel", "options"),
    [
        ("fc_ntk", {"depth": -1}),
        ("fc_ntk", {"W_std": float("nan")}),
        ("fc_ntk", {"b_std": -1.0}),
        ("scatternet", {"J": -1}),
        ("scatternet", {"L": 0}),
    ],
)
def test_b1_bad_kernel_options_are_refused_before_the_dp_ntk_start(monkeypatch, kernel, options):
    x, y = _images()
    forbid_noise(monkeypatch)
    with pytest.raises((ValueError, TypeError), match="kernel_options"):
        dp_kip.fit(jax.random.key(0), x, y, epsilon=1.0, kernel=kernel, kernel_options=options,
                   init=dp_kip.DPNTKInit(iterations=2), batch_size=10, progress=False)  # fmt: skip


def test_b2_a_beta_close_report_relabelled_add_remove_is_refused():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3)).astype(np.float32), (np.arange(16) % 2).astype(np.int32)
    with pytest.warns(privacy.PrivacyLeakWarning):
        model = reg.fit(jax.random.key(9), x, y, epsilon=0.5, width=16, n_classes=2,
                        progress=False, neighbouring="beta-close")  # fmt: skip
    stored = model.report.to_dict()
    assert PrivacyReport.from_dict(stored) == model.report
    for relation in ("add-remove", "replace-one"):
        with pytest.raises(ValueError, match="beta-close only"):
            PrivacyReport.from_dict({**stored, "neighbouring": relation})


def test_b3_the_psd_refusal_names_no_value_of_k():
    k = np.diag([1.0, -1.713, 0.5]).astype(np.float32)
    with pytest.raises(ValueError, match="positive semi-definite") as info:
        privacy.gaussian_sampling_mechanism(privacy.fresh_key(), k, 5, epsilon=0.5, delta=1e-5)
    assert not re.search(r"\d\.\d", str(info.value)), str(info.value)


@pytest.mark.parametrize("std", [0.0, -1.0, float("nan"), float("inf")])
def test_the_dp_sgd_transform_refuses_a_noise_std_that_is_not_positive(std):
    with pytest.raises(ValueError, match="noise_std"):
        dpsgd_noise(std, (1, 2))


def test_the_dp_sgd_transform_refuses_a_digest_that_is_not_two_words():
    with pytest.raises(ValueError, match="digest"):
        dpsgd_noise(1.0, (1, 2, 3))


@pytest.mark.parametrize("mask", [[1.0, 0.5, 0.0], [2, 1, 0], [1.0, float("nan"), 0.0]])
def test_noisy_clipped_sum_takes_only_a_zero_one_mask(mask):
    g = {"w": jnp.ones((3, 4)) * 0.1}
    with pytest.raises(ValueError, match="mask"):
        noisy_clipped_sum(privacy.fresh_key(), g, jnp.asarray(mask), clip_norm=1.0,
                          noise_multiplier=1.0)  # fmt: skip


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"n_classes": 1}, ValueError),
        ({"optimizer": "adam"}, TypeError),
        ({"init": "dp_ntk", "input_shape": (2, 2, 2, 2)}, ValueError),
    ],
)
def test_configure_refuses_what_fit_refuses(over, error):
    kw = dict(n=100, input_shape=(8, 8), n_classes=2, epsilon=1.0, kernel="fc_ntk",
              batch_size=10)  # fmt: skip
    with pytest.raises(error):
        dp_kip.configure(**{**kw, **over})


def test_a_public_key_equal_to_the_release_key_is_refused_before_any_noise(monkeypatch):
    x, y = _images()
    key = privacy.fresh_key()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="public_key is the release key"):
        dp_kip.fit(key, x, y, epsilon=1.0, kernel="fc_ntk", batch_size=10, progress=False,
                   public_key=key)  # fmt: skip
    with pytest.raises(ValueError, match="public_key is the release key"):
        dp_ntk.fit(key, x.reshape(40, -1), y, epsilon=1.0, iterations=1, batch_size=10,
                   progress=False, public_key=key)  # fmt: skip
    with pytest.raises(ValueError, match="public_key is the release key"):
        reg.fit(key, x.reshape(40, -1), y, epsilon=1.0, width=8, features=16,
                progress=False, public_key=key)  # fmt: skip


def test_a_replace_one_resume_refuses_beta_close_settings(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(20, 3)).astype(np.float32), (np.arange(20) % 2).astype(np.int32)
    path = tmp_path / "model.npz"
    reg.fit(privacy.fresh_key(), x, y, epsilon=1.0, width=8, features=16, n_classes=2,
            progress=False, checkpoint_path=path)  # fmt: skip
    common = dict(checkpoint_path=path, resume=True, progress=False, width=8, features=16)
    assert reg.fit(None, None, None, epsilon=1.0, **common).report.epsilon == pytest.approx(1.0)
    with pytest.raises(ValueError, match="beta does not apply"):
        reg.fit(None, None, None, epsilon=1.0, beta=0.5, **common)
    with pytest.raises(ValueError, match="delta is required"):
        reg.fit(None, None, None, epsilon=1.0, delta=None, **common)  # type: ignore[arg-type]


def test_diagnostics_must_be_a_bool(monkeypatch):
    x, y = _images()
    forbid_noise(monkeypatch)
    with pytest.raises(TypeError, match="diagnostics"):
        dp_kip.fit(jax.random.key(0), x, y, epsilon=1.0, kernel="fc_ntk", batch_size=10,
                   progress=False, diagnostics="x")  # fmt: skip


def test_dp_ntk_refuses_an_unknown_e_ntk_method_before_any_draw(monkeypatch):
    """Adversary C3 (2026-11-28): ``method`` was not checked by the plan, so the e-NTK
    weights were drawn and the refusal blamed the generator's output shape."""
    x, y = _images()
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="method must be one of"):
        dp_ntk.fit(jax.random.key(0), x, y, epsilon=1.0, n_classes=2, iterations=1,
                   batch_size=4, method="nope", progress=False)  # fmt: skip
