"""The quadratic NTK of DP NTK regression and its data-independent pieces (Gu et al., Def. 3.5).

``K(x, z) = (1/m) sum_r <<w_r, x> x, <w_r, z> z> = <x, z> * x^T S z`` with
``S = W^T W / m`` and ``w_r ~ N(0, sigma^2 I_d)`` drawn from the key; inputs are
projected to a ball of public radius (a fixed 1-Lipschitz map).
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax.sharding import PartitionSpec as P

from privkernels._validation import check_array, check_key, check_nonnegative, check_positive
from privkernels._warnings import user_stacklevel
from privkernels.features import quadratic_ntk_kernel
from privkernels.features.quadratic_ntk import compiled_quadratic_ntk_kernel, random_ntk_weights
from privkernels.privacy.warnings import ProjectionWarning, warn_privacy_leak
from privkernels.sharding import mesh_axis, shard_rows, to_host

__all__ = [
    "draw_weights",
    "project_to_ball",
    "check_input_bound",
    "check_target_bound",
    "feature_radius",
    "warn_projected",
    "INPUT_BOUND_RANGE",
    "input_map",
    "kernel_block",
    "kernel_matrix",
    "add_diagonal",
    "chunking",
    "smallest_eigenvalue",
]


def draw_weights(
    key: jax.Array, d: int, *, width: int = 256, weight_std: float = 1.0, dtype: Any = jnp.float32
) -> jax.Array:
    """Random NTK weights ``w_r ~ N(0, weight_std^2 I_d)``, shape ``(width, d)`` (Def. 3.5).

    Data-independent: depends only on the key and the public ``d``.
    """
    return random_ntk_weights(key, width, d, sigma=weight_std, dtype=dtype)


#: Radii the float32 projection handles: below 1e-6 a row's squared norm can
#: underflow to 0 and the row would pass unprojected (a norm far above the radius).
INPUT_BOUND_RANGE = (1e-6, 1e6)


def feature_radius(input_bound: float, intercept: bool) -> float:
    """The radius rows are projected to: ``input_bound``, or ``input_bound / sqrt(2)`` when
    `input_map` appends the intercept column (so the whole row stays in ``input_bound``)."""
    return float(input_bound) / (math.sqrt(2.0) if intercept else 1.0)


def _norm_bound(value: Any, name: str, what: str) -> float:
    """``value`` as a float in `INPUT_BOUND_RANGE` (float32 norms), else ``ValueError``."""
    value = check_positive(value, name)
    lo, hi = INPUT_BOUND_RANGE
    if not lo <= value <= hi:
        raise ValueError(
            f"{name} must lie in [{lo:g}, {hi:g}] (float32 norms), got {value!r}: "
            f"rescale the {what} by a public constant instead"
        )
    return value


def check_input_bound(value: Any, intercept: bool = False) -> float:
    """``input_bound`` as a float in `INPUT_BOUND_RANGE` (rescale the data otherwise); with
    ``intercept`` the features' ball (radius ``input_bound / sqrt(2)``, `input_map`) must
    lie in the range too, so that a fit refuses it before any noise."""
    value = _norm_bound(value, "input_bound", "inputs")
    lo = INPUT_BOUND_RANGE[0]
    if intercept and feature_radius(value, True) < lo:
        raise ValueError(
            f"input_bound must be >= {lo * math.sqrt(2.0):.7g} with fit_intercept=True (the "
            f"features' ball has radius input_bound / sqrt(2)), got {value!r}"
        )
    return value


def check_target_bound(value: Any) -> float:
    """``target_bound`` as a float in `INPUT_BOUND_RANGE` (the same float32 norms as the
    inputs'; rescale the targets otherwise), so that the sufficient statistics'
    sensitivity ``sqrt(2 + 4 target_bound^2)`` and the clipping are refused before noise."""
    return _norm_bound(value, "target_bound", "targets")


def project_to_ball(x: Any, radius: float = 1.0) -> jax.Array:
    """Project each row of ``x (n, d)`` onto the L2 ball of ``radius`` (a fixed,
    1-Lipschitz map, so beta-close records stay beta-close; the paper assumes
    ``||x_i|| <= B``, Sec. 3.3). ``radius`` in `INPUT_BOUND_RANGE`."""
    radius = check_input_bound(radius)
    x = jnp.asarray(x)
    norms = jnp.linalg.norm(x, axis=-1, keepdims=True)
    scale = jnp.minimum(1.0, radius / jnp.maximum(norms, jnp.finfo(x.dtype).tiny))
    return x * scale


def warn_projected(x: Any, radius: float, intercept: bool) -> bool:
    """Warn the caller (`ProjectionWarning`) when rows of the training inputs ``x (n, ...)``
    lie outside the ball `input_map` projects onto and the projection changes their
    relative scale; True if it warned. Rows that all have one norm (unit-norm rows, the
    documented recipe, with ``fit_intercept``) are only rescaled by one common factor.

    Only the fact goes to the caller (no count, no value); nothing enters the report.
    """
    arr = np.asarray(x, np.float64)
    r = feature_radius(radius, intercept)
    norms = np.linalg.norm(arr.reshape(arr.shape[0], -1), axis=1)
    if not np.any(norms > r * (1.0 + 1e-6)):
        return False
    if np.ptp(norms) <= 1e-6 * float(np.max(norms)):  # one common rescale: nothing is lost
        return False
    warnings.warn(
        f"some training rows lie outside the public ball of radius {r:g} (input_bound"
        f"{' / sqrt(2) with fit_intercept' if intercept else ''}) and were projected onto it, "
        "losing their scale: rescale the features by public constants, or privately with "
        "privkernels.sklearn.PrivateStandardScaler / PrivateMinMaxScaler (a Pipeline), "
        "or use the estimators' preprocessing='auto'",
        ProjectionWarning,
        stacklevel=user_stacklevel(),
    )
    return True


def input_map(x: Any, radius: float, intercept: bool) -> jax.Array:
    """The fixed per-record map applied before the kernel, ``(n, d) -> (n, d [+ 1])``.

    Without ``intercept``: `project_to_ball` of radius ``radius``. With it,
    a constant (bias) coordinate is appended, as in a linear model's intercept:
    ``[P_r(x), r]`` with ``r = radius / sqrt(2)`` (``P_r`` the projection to
    the ball of radius ``r'``), so every image lies in the ball of ``radius``.
    Both are data-independent and 1-Lipschitz in the features (beta-close records
    stay beta-close; the constant never changes), so they cost no privacy.
    """
    if not intercept:
        return project_to_ball(x, radius)
    r = feature_radius(check_positive(radius, "input_bound"), True)
    xb = project_to_ball(x, r)
    return jnp.concatenate([xb, jnp.full((xb.shape[0], 1), r, xb.dtype)], axis=1)


def kernel_block(x1: jax.Array, x2: jax.Array, w: jax.Array) -> jax.Array:
    return quadratic_ntk_kernel(x1, x2, w)


def chunking(n: int, chunk_size: int) -> tuple[int, int]:
    """Return ``(chunk, n_padded)`` with equal chunks and little padding."""
    n_chunks = max(1, -(-n // max(1, chunk_size)))
    chunk = -(-n // n_chunks)
    return chunk, n_chunks * chunk


def kernel_matrix(
    x1: jax.Array, x2: jax.Array, w: jax.Array, chunk_size: int = 1024, *, mesh: Any = None
) -> jax.Array:
    """``K(x1, x2)`` of shape ``(n1, n2)`` (Def. 3.5), built ``chunk`` rows at a time by
    `privkernels.features.quadratic_ntk_kernel` (one compiled chunk shape).

    With ``mesh`` the rows of ``x1`` are sharded over the devices and each
    device builds its rows with the same function against the replicated
    ``x2`` (every device needs all of ``x2``: this does not keep data on its host).
    """
    if mesh is None:
        chunk, _ = chunking(x1.shape[0], chunk_size)
        return quadratic_ntk_kernel(x1, x2, w, chunk_size=chunk)
    return _mesh_rows(x1, x2, w, chunk_size, mesh)


def _mesh_rows(x1: jax.Array, x2: jax.Array, w: jax.Array, chunk_size: int, mesh: Any) -> jax.Array:
    name, d = mesh_axis(mesh)
    (xs,), n1 = shard_rows(mesh, x1)
    chunk, _ = chunking(int(xs.shape[0]) // d, chunk_size)

    def local(xl: jax.Array, xr: jax.Array, wl: jax.Array) -> jax.Array:
        return compiled_quadratic_ntk_kernel(xl, xr, wl, chunk_size=chunk)

    fn = jax.shard_map(
        local, mesh=mesh, in_specs=(P(name), P(), P()), out_specs=P(name), check_vma=False
    )
    return jnp.asarray(to_host(jax.jit(fn)(xs, x2, w))[:n1])


@partial(jax.jit, donate_argnums=(0,))
def add_diagonal(k: jax.Array, value: jax.Array) -> jax.Array:
    idx = jnp.arange(k.shape[0])
    return k.at[idx, idx].add(value)


# --------------------------------------------------------------------------------------
# Sensitivity and k (Def. 5.1, 5.2, Lemma E.2-E.4, E.15, eq. (1))
# --------------------------------------------------------------------------------------


def smallest_eigenvalue(
    key: jax.Array,
    x: Any,
    *,
    width: int = 256,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    kernel_shift: float = 0.0,
    chunk_size: int = 1024,
) -> float:
    """DIAGNOSTIC that READS PRIVATE DATA: the true smallest eigenvalue of ``K + s I``.

    Uses the same weights as `fit` with the same ``key``, and float64 for the
    eigenvalue. Emits `PrivacyLeakWarning`:
    the value is computed from the private inputs without noise, and using it as
    ``eta_min`` makes the eigenvalue itself (and hence the choice of k) a
    non-private release. Use it to check an assumption on public or synthetic
    data, not to set ``eta_min`` for a private fit.
    """
    key = check_key(key)
    x_arr = check_array(x, "x", finite=True)
    if x_arr.ndim < 2:
        raise ValueError(f"x must have shape (n, d), got {tuple(x_arr.shape)}")
    kernel_shift = check_nonnegative(kernel_shift, "kernel_shift")
    warn_privacy_leak("smallest_eigenvalue: the smallest eigenvalue of the kernel matrix")
    n = int(x_arr.shape[0])
    d = int(np.prod(x_arr.shape[1:]))
    with jax.enable_x64(True):
        k_w, _, _ = jax.random.split(key, 3)
        w32 = draw_weights(k_w, d, width=width, weight_std=weight_std, dtype=jnp.float32)
        w = jnp.asarray(w32, jnp.float64)
        xp = project_to_ball(jnp.asarray(np.asarray(x_arr).reshape(n, d), jnp.float64), input_bound)
        kmat = np.asarray(kernel_matrix(xp, xp, w, chunk_size))

    lams = scipy.linalg.eigvalsh(kmat, subset_by_index=[0, 0], overwrite_a=True, check_finite=False)
    lam = lams[0]
    return float(lam) + kernel_shift
