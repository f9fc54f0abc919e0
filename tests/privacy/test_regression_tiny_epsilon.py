"""An epsilon too small for the Gaussian sampling mechanism in float64 is refused with a
clear `ValueError` before any noise (adversary s59: a bare ZeroDivisionError before)."""

from __future__ import annotations

import re
import warnings

import jax
import numpy as np
import pytest
from _privacy_helpers import forbid_noise

from privkernels import dp_ntk_regression as R


def test_beta_close_fit_refuses_an_epsilon_whose_sensitivity_underflows(monkeypatch):
    """With the automatic kernel shift, eps = 1e-300 makes M**2 underflow in eq. (1)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(20, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    # the network's weights are drawn first (public, data-independent): forbid the mechanisms
    forbid_noise(monkeypatch, samplers=False)
    with pytest.raises(ValueError, match="too small for the Gaussian sampling mechanism"):
        R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1e-300)


def _unit_rows() -> np.ndarray:
    x = np.random.default_rng(0).uniform(-1, 1, size=(20, 3))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _smallest_epsilon(message: str) -> float:
    found = re.search(r"smallest epsilon that works .* is ([0-9.]+e[-+][0-9]+)", message)
    assert found, message
    return float(found.group(1))


def test_beta_close_refuses_an_epsilon_whose_auto_shift_overflows_before_any_draw(monkeypatch):
    """eps = 1e-140: the automatic kernel shift (~1e138) overflows the float32 sample sum of
    the Gaussian sampling mechanism. Before: the mechanism was entered (its accountant
    charge marked released) and refused "K must be positive semi-definite"; now the fit's
    validation refuses it, naming the smallest epsilon that works, before any draw."""
    x = _unit_rows()
    forbid_noise(monkeypatch)  # the samplers too: nothing is drawn, not even the weights
    with pytest.raises(ValueError, match="too small for the Gaussian sampling") as err:
        R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1e-140)
    assert "semi-definite" not in str(err.value)
    assert _smallest_epsilon(str(err.value)) > 1e-140


@pytest.mark.slow
def test_the_named_smallest_epsilon_fits_and_half_of_it_is_refused(monkeypatch):
    x = _unit_rows()
    with pytest.raises(ValueError) as err:
        R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1e-140)
    eps_min = _smallest_epsilon(str(err.value))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=eps_min)
    alpha = np.asarray(model.alpha)
    assert np.all(np.isfinite(alpha)) and np.any(alpha != 0)  # the sum did not overflow
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="smallest epsilon that works"):
        R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=eps_min / 2)


def test_a_denormal_epsilon_is_a_value_error_before_any_draw(monkeypatch):
    """At epsilon 1e-320 the automatic shift itself is inf: a ValueError, not an
    OverflowError from the message's rounding."""
    forbid_noise(monkeypatch)
    x = np.random.default_rng(0).uniform(-1, 1, size=(20, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    with pytest.raises(ValueError, match="too small"):
        R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1e-320)


def _largest_shift(message: str) -> float:
    found = re.search(
        r"largest kernel_shift that works with this k is ([0-9.]+e[-+][0-9]+)", message
    )
    assert found, message
    return float(found.group(1))


@pytest.mark.parametrize("shift", [3e38, 1e37])
def test_beta_close_refuses_an_explicit_shift_whose_sample_sum_overflows_before_any_draw(
    shift, monkeypatch
):
    """An explicit kernel_shift past `_check_auto_shift`'s bound (SHIFT_SUM_MARGIN k s <= the
    largest float, k = 2**31 - 1 here): before, 3e38 drew the weights, entered the Gaussian
    sampling mechanism and failed "K must be positive semi-definite", and 1e37 released an
    all-zero model (the float32 sum overflowed); now validation refuses both, before any
    draw, naming the largest shift that works with the fit's k."""
    x = _unit_rows()
    forbid_noise(monkeypatch)  # the samplers too: nothing is drawn, not even the weights
    with pytest.raises(ValueError, match="too large for the Gaussian sampling") as err:
        R.fit(
            jax.random.key(7),
            x,
            x[:, 0],
            neighbouring="beta-close",
            epsilon=1.0,
            kernel_shift=shift,
        )
    assert "semi-definite" not in str(err.value)
    assert "k = 2147483647" in str(err.value)
    assert _largest_shift(str(err.value)) < shift


@pytest.mark.slow
def test_the_named_largest_shift_fits_and_twice_it_is_refused(monkeypatch):
    x = _unit_rows()
    with pytest.raises(ValueError) as err:
        R.fit(
            jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1.0, kernel_shift=1e37
        )
    largest = _largest_shift(str(err.value))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = R.fit(
            jax.random.key(7),
            x,
            x[:, 0],
            neighbouring="beta-close",
            epsilon=1.0,
            kernel_shift=largest,
        )
    alpha = np.asarray(model.alpha)
    assert np.all(np.isfinite(alpha)) and np.any(alpha != 0)  # the sum did not overflow
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="largest kernel_shift that works"):
        R.fit(
            jax.random.key(7),
            x,
            x[:, 0],
            neighbouring="beta-close",
            epsilon=1.0,
            kernel_shift=2 * largest,
        )


@pytest.mark.parametrize(
    "settings",
    [dict(kernel_shift=1e200, dtype="float64"), dict(kernel_shift=1.0, beta=1e-200)],
    ids=["huge_shift_float64", "tiny_beta"],
)
def test_a_tiny_sensitivity_allows_many_samples_instead_of_an_underflow_refusal(settings):
    """s62 attack c8 (and s61's left-alone float64 1e200 shift): M = n sigma^2 B^4 beta /
    eta_min below ~1e-154 was refused because eq. (1) squared it ("epsilon_alpha too
    small"); eq. (1) holds for every k there, so the fit draws the most samples it can."""
    x = _unit_rows()
    with warnings.catch_warnings(), jax.enable_x64(settings.get("dtype") == "float64"):
        warnings.simplefilter("ignore")
        model = R.fit(jax.random.key(7), x, x[:, 0], neighbouring="beta-close", epsilon=1.0,
                      **settings)  # fmt: skip
    assert model.config.k == 2**31 - 1
    assert np.all(np.isfinite(np.asarray(model.alpha)))
