"""Replace-one DP NTK classification in the large-ridge limit: noisy class second moments.

The quadratic NTK of Def. 3.5 tends, as the width ``m`` grows, to
``K(x, z) = weight_std^2 <x, z>^2`` (``x^T S z -> weight_std^2 <x, z>``), whose
exact feature map is ``u(x) = x (x) x`` (``d'^2`` entries, no sketch). Kernel
ridge regression ``f = K(., X) (K + lambda I)^{-1} Y`` tends, as
``lambda -> inf``, to ``lambda^{-1} K(., X) Y``; its argmax over classes needs
only the class sums of the features, i.e. the per-class second moments

    ``M_c = sum_{i: y_i = c} x_i x_i^T / R^2``   (``R = input_bound``),

and predicts ``argmax_c x^T M_c x``. With few records per class the noise of the
sufficient statistics ``Psi^T Psi`` (`replace_one`) swamps the ridge solve;
this limit releases nothing but ``M`` and spends the whole budget on it.

Sensitivity under replace-one (one Gaussian release of ``M``, ``(c, d', d')``):
every mapped input has ``|x| <= R`` (`input_map`), so ``|u(x) / R^2| <= 1``, and
``<u(x), u(z)> = <x, z>^2 >= 0`` for ANY inputs. Replacing ``(x, a)`` by
``(z, b)`` changes ``M`` by ``-u(x) e_a^T + u(z) e_b^T`` (scaled by ``R^-2``):
for ``a != b`` its squared norm is ``|u(x)|^2 + |u(z)|^2 <= 2``; for ``a = b``
it is ``|u(x) - u(z)|^2 = |u(x)|^2 + |u(z)|^2 - 2 <x, z>^2 / R^4 <= 2``. So the
L2 sensitivity is ``sqrt(2)`` (`SENSITIVITY`). Labels only (one-hot targets are
non-negative); real targets could have ``<y, y'> < 0`` and are refused.
In float32 the ball map can leave ``|x|^2 / R^2`` at ``1 + 4e-7`` (rounding). The sums
themselves are NOT float32: a float32 running sum (and a float32 copy of the moments) rounds
each entry by up to its spacing, which grows with the class sizes; the attack of
2026-11-29 measured a neighbour's float32 moments moving by ``sqrt(2) (1 + 2e-5)`` at
n = 2e4 and up to ``(1 + 6.7e-3)`` at 1e6 rows. So `class_moments` sums in float64 on the
host and `release_moments` adds the noise there (`gaussian_release` ``host_float64``);
the noisy moments are cast to float32 afterwards (post-processing). What remains is the
ball map's rounding above (measured ``sqrt(2) (1 + 1.2e-7)`` at 2e5 rows, attack of
2026-11-29). A fit under ``jax.vmap`` of its key cannot sum on the host and is refused.
The noise is added to the full matrices and symmetrised afterwards
(post-processing).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._batching import map_row_chunks
from privkernels.dp_ntk_regression.replace_one import one_release_report
from privkernels.precision import full_precision
from privkernels.privacy.budget import Budget
from privkernels.privacy.release import gaussian_release
from privkernels.privacy.report import MechanismRecord, PrivacyReport

__all__ = ["SENSITIVITY", "class_moments", "release_moments", "scores", "kernel_mean_report"]

#: L2 sensitivity of the class second moments under replace-one (module docstring).
SENSITIVITY = math.sqrt(2.0)


def class_moments(
    x: jax.Array, labels: np.ndarray, n_classes: int, *, input_bound: float, chunk_size: int
) -> np.ndarray:
    """``M (c, d', d')`` float64: ``M_c = sum_{y_i = c} x_i x_i^T / input_bound^2``.

    ``x (n, d')`` is already mapped (`input_map`: every row has norm <= input_bound).
    Rows are grouped by class and summed in chunks, in float64 on the host (module
    docstring: a float32 sum would move by more than the sensitivity at large n).
    Memory ``O(c d'^2 + chunk d')``, whatever ``n``.
    """
    lab = np.asarray(labels)
    chunk = max(1, min(int(chunk_size), int(x.shape[0])))
    d = int(x.shape[1])
    out = np.zeros((n_classes, d, d), np.float64)
    for c in range(n_classes):
        rows = np.flatnonzero(lab == c)
        for start in range(0, len(rows), chunk):
            xb = np.asarray(x[rows[start : start + chunk]], np.float64) / float(input_bound)
            out[c] += xb.T @ xb
    return out


def release_moments(
    key: jax.Array, m: np.ndarray, *, budget: Budget, n: int
) -> tuple[jax.Array, MechanismRecord]:
    """One Gaussian release of ``M`` (sensitivity `SENSITIVITY`), the noise added in float64
    on the host; symmetrised and cast to float32 afterwards (post-processing)."""
    noisy, record = gaussian_release(
        key, m, budget=budget, sensitivity=SENSITIVITY, host_float64=True,
        released=f"class second moments sum_(y_i=c) x_i x_i^T / R^2 {tuple(m.shape)}", n=n,
    )  # fmt: skip
    xp = np if isinstance(noisy, np.ndarray) else jnp  # jnp: traced (an audit's vmap)
    sym = 0.5 * (noisy + xp.swapaxes(noisy, 1, 2))
    return jnp.asarray(sym, jnp.float32), record


@jax.jit
@full_precision
def _block_scores(xb: jax.Array, m: jax.Array) -> jax.Array:
    return jnp.einsum("ni,cij,nj->nc", xb, m, xb)


def scores(x: jax.Array, m: jax.Array, *, input_bound: float, chunk_size: int) -> np.ndarray:
    """``(n, c)`` scores ``x^T M_c x / input_bound^2`` of mapped queries (post-processing)."""
    m = jnp.asarray(m, jnp.float32)
    xs = jnp.asarray(x, jnp.float32) / float(input_bound)
    return map_row_chunks(lambda xb: _block_scores(xb, m), xs, chunk_size)


def kernel_mean_report(
    record: MechanismRecord, *, d: int, input_bound: float, inferred_note: str | None
) -> PrivacyReport:
    """The report of a kernel-mean fit: one Gaussian release, standard (epsilon, delta)-DP."""
    return one_release_report(
        record,
        data_independent=(
            f"exact feature map x (x) x of the infinite-width quadratic NTK (d={d}): no weights",
            f"per-record maps: projection onto the L2 ball of radius {input_bound:g} (the "
            "intercept column included), features scaled by 1 / radius^2",
        ),
        notes=(
            "solver='kernel-mean': the large-ridge limit of infinite-width quadratic-NTK ridge "
            "regression; only the class second moments are released.",
        ),
        inferred_note=inferred_note,
    )
