"""A marginal code beside an e-NTK network: the kernel then sees every column's histogram.

DP-NTK matches the normalised e-NTK mean embedding (Yang et al., eq. 4). For a
fully connected network on a tabular row, the e-NTK is close to a polynomial of
low degree in each numeric column, so its mean embedding pins down a column's
first moments but hardly its shape. Matching it, a generator may pile a numeric
column at one bound and still score well (adult: 48% of ages at 17 where the real
data hold 1.2%).

`MarginalSkip` adds a skip connection to the output from a fixed, public code of
the row: the row itself (one-hot blocks stay one-hot) and, for each numeric
column, ``bins + 1`` triangular functions ("hats") on ``[0, 1]``::

    f(x) = base(x) + W_s (s * code(x)),        code(x) = [x, hat(x_j) for numeric j]

Since ``f`` is linear in ``W_s``, the e-NTK feature holds ``s * code(x)`` once
per output (the gradient w.r.t. ``W_s``), and the mean embedding holds the
class-conditional mean of ``code(x)``: the (soft) 1-way marginal of every column.
The network is still a network and its feature is still normalised, so the
mechanism and its sensitivity (Prop. 3.1: ``||phi(x)|| <= 1``, hence ``2/n``
replace-one) are unchanged; only the kernel is different. ``s`` sets the share of
the feature's squared norm carried by the code (`marginal_scale`), from public
reference rows only.

With ``indicators=True`` the code also holds, per numeric column, the indicators of its
``bins`` equal-width bins (``floor(bins v)``, the last bin closed): the class-conditional
histogram itself, the statistic a marginal method (MST) releases. Hat moments do not pin
down bin masses: the knots sit on the bin edges, so half a unit of mass at each of two
knots and a whole unit midway between them give the same hats and bins differing by a
half in total variation. The indicators carry no gradient to a generated value (they are
piecewise constant), so they serve the release and calibrated sampling
(`privkernels.dp_ntk.calibrate`), not the generator's steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import check_bool, check_int
from privkernels.features.entk import ApplyFn, entk_features
from privkernels.features.networks import init_params

__all__ = ["MarginalSkip", "marginal_code", "marginal_scale", "reference_rows", "with_marginals"]


#: The finest code `with_marginals` builds: ``MAX_BINS + 1`` hats per numeric column (a
#: finer one only costs memory: ``rows x numeric columns x bins`` floats per batch).
MAX_BINS = 4096


def marginal_code(
    x: jax.Array, numeric: Sequence[int], bins: int, indicators: bool = False
) -> jax.Array:
    """``(b, d) -> (b, d + len(numeric) * (bins + 1))``: the row, then the hats; with
    ``indicators``, then each numeric column's ``bins`` bin indicators
    (``(b, d + len(numeric) * (2 bins + 1))``).

    Hat ``k`` of a numeric value ``v`` (clipped to ``[0, 1]``) is
    ``max(0, 1 - bins |v - k / bins|)``: a partition of unity, piecewise linear, so a
    generated value's gradient reaches the two hats around it. Indicator ``k`` is 1 where
    ``min(floor(bins v), bins - 1) == k``: the bins of `privkernels.evaluation.marginals`
    for a present value. A nullable column's missing value (encoded 0) falls in bin 0 here,
    where the evaluation counts it apart; its missing flag, a numeric index too, has hats
    and indicators of its own, so the code still holds the present values' bin 0.
    """
    indicators = check_bool(indicators, "indicators")
    x = x.reshape(x.shape[0], -1)
    if not numeric:
        return x
    v = jnp.clip(x[:, jnp.asarray(tuple(numeric))], 0.0, 1.0)  # (b, m)
    knots = jnp.arange(bins + 1, dtype=x.dtype) / bins
    hats = jnp.maximum(0.0, 1.0 - bins * jnp.abs(v[:, :, None] - knots))  # (b, m, bins + 1)
    parts = [x, hats.reshape(x.shape[0], -1)]
    if indicators:
        cell = jnp.minimum(jnp.floor(jax.lax.stop_gradient(v) * bins), bins - 1).astype(jnp.int32)
        parts.append(jax.nn.one_hot(cell, bins, dtype=x.dtype).reshape(x.shape[0], -1))
    return jnp.concatenate(parts, axis=1)


class MarginalSkip(nn.Module):
    """``base(x) + Dense(scale * marginal_code(x))`` (no bias); ``(b, d) -> (b, k)``.

    Attributes:
      base: a network with an ``out_features`` attribute (`fc_1l`, `fc_2l`, `cnn_2l`).
      numeric: indices of the numeric columns of the encoded row (public schema).
      bins: hats per numeric column, minus one.
      scale: the code's factor ``s`` (see `marginal_scale`).
      indicators: the bins' indicators in the code too (`marginal_code`).
    """

    base: nn.Module
    numeric: tuple[int, ...]
    bins: int = 16
    scale: float = 1.0
    indicators: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        code = marginal_code(x, self.numeric, self.bins, self.indicators)
        out = self.base.out_features  # type: ignore[attr-defined]
        skip = nn.Dense(out, use_bias=False, kernel_init=nn.initializers.zeros, name="skip")
        return self.base(x) + skip(self.scale * code)


def reference_rows(
    d: int, numeric: Sequence[int], blocks: Sequence[tuple[int, int]], n: int = 256, seed: int = 0
) -> np.ndarray:
    """``(n, d)`` float32 public rows: numeric columns ``U(0, 1)``, one random category per
    one-hot block ``[start, stop)``. Built from the schema's shapes and ``seed`` only."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, d), np.float32)
    x[:, list(numeric)] = rng.uniform(size=(n, len(numeric)))
    for a, b in blocks:
        x[np.arange(n), a + rng.integers(0, b - a, n)] = 1.0
    return x


def marginal_scale(
    base: nn.Module,
    base_params: Any,
    x_ref: Any,
    numeric: Sequence[int],
    bins: int,
    weight: float,
    indicators: bool = False,
) -> float:
    """``s`` such that the code carries ``weight`` of the e-NTK's squared norm, in the median.

    ``x_ref``: ``(r, d)`` PUBLIC reference rows (e.g. uniform rows of the schema), never
    private data. With ``G`` the base network's unnormalised e-NTK norm and ``c`` the
    code's norm, the skip block's norm is ``s c sqrt(k)`` for ``k`` outputs, so
    ``s^2 = weight / (1 - weight) * median(G^2) / (k * median(c^2))``.
    """
    if not 0.0 < float(weight) < 1.0:
        raise ValueError(f"weight must lie in (0, 1), got {weight!r}")
    x_ref = jnp.asarray(x_ref, jnp.float32)
    g = entk_features(cast(ApplyFn, base.apply), base_params, x_ref, normalize=False)
    g2 = float(np.median(np.asarray(jnp.sum(g * g, axis=1))))
    c = marginal_code(x_ref, tuple(numeric), bins, indicators)
    c2 = float(np.median(np.asarray(jnp.sum(c * c, axis=1))))
    k = int(base.out_features)  # type: ignore[attr-defined]
    return float(np.sqrt(weight / (1.0 - weight) * g2 / (k * c2)))


def with_marginals(
    base: nn.Module,
    numeric: Sequence[int],
    x_ref: Any,
    *,
    weight: float = 0.5,
    bins: int = 16,
    key: jax.Array | None = None,
    indicators: bool = False,
) -> MarginalSkip:
    """`MarginalSkip` around ``base`` with the scale from `marginal_scale`.

    ``key`` initialises the base network for the scale only (default: a fixed public
    key); the fit draws its own network parameters, and the scale depends on their
    distribution, not their values, up to the median's spread.
    """
    numeric = tuple(int(j) for j in numeric)
    bins = check_int(bins, "bins")
    indicators = check_bool(indicators, "indicators")
    if bins > MAX_BINS:
        raise ValueError(f"bins must be at most {MAX_BINS}, got {bins}")
    x_ref = np.asarray(x_ref, np.float32)
    params = init_params(jax.random.key(0) if key is None else key, base, x_ref.shape[1:])
    s = marginal_scale(base, params, x_ref, numeric, bins, weight, indicators)
    return MarginalSkip(base=base, numeric=numeric, bins=bins, scale=s, indicators=indicators)
