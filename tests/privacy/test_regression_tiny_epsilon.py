"""An epsilon too small for the Gaussian sampling mechanism in float64 is refused with a
clear `ValueError` before any noise (adversary s59: a bare ZeroDivisionError before)."""

from __future__ import annotations

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
