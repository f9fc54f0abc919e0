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
