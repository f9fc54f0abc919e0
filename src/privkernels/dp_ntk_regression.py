"""DP NTK regression (Gu, Liang, Sha, Shi, Song: *Differential privacy mechanisms
in neural tangent kernel regression*).

Kernel ridge regression with the discrete quadratic NTK (Def. 3.5 / 3.8)

    K(x, z) = (1/m) sum_r <<w_r, x> x, <w_r, z> z> = <x, z> * x^T S z,   S = W^T W / m,

made private as in Alg. 2 of the paper:

1. ``w_r ~ N(0, sigma^2 I_d)``, r < m: drawn from the key, data-independent.
2. ``K~ = (1/k) sum_j g_j g_j^T``, ``g_j ~ N(0, K)`` (Gaussian sampling mechanism,
   Alg. 1, Lemma 5.4 / D.1) with budget ``(eps_alpha, delta_alpha)``; then
   ``alpha = (K~ + reg I)^{-1} Y`` (post-processing; Sec. 6.2), solved by Cholesky.
3. ``X~ = X + TLap(Delta_X, eps_X, delta_X)`` per coordinate with the L1
   sensitivity ``Delta_X = sqrt(d) * beta`` (Lemma G.1, G.2); the test-time kernel
   rows are ``K(x, X~)`` (Lemma G.3, post-processing).
4. ``epsilon = eps_alpha + eps_X``, ``delta = delta_alpha + delta_X`` (Lemma I.1).

Neighbouring relation (Def. 4.1): ``beta``-close datasets. They have the same n
and the same labels; one record's *feature vector* moves by at most ``beta`` in
L2 norm. **Labels are not protected at all** (they enter ``alpha`` without noise)
and neither is membership: the guarantee hides tiny feature perturbations only.

Choice of k (Condition 5.3, Def. 5.1/5.2, Sec. 6.2 eq. (1)): the mechanism is
private when ``M <= Delta(k) = min(eps / sqrt(8 k log(1/delta)), eps / (8 log(1/delta)))``
where M bounds how much one neighbour can move the kernel relative to its
smallest eigenvalue. The paper takes ``M = n sigma^2 B^4 beta / eta_min``, which
turns ``M <= eps/sqrt(8 k log(1/delta))`` into eq. (1)
``k <= eps^2 eta_min^2 / (8 log(1/delta) n^2 sigma^4 B^8 beta^2)``. See :func:`max_k`
for the details (real n, the second branch of Delta, and the exact fixed-weights
bound we also enforce).

Multi-class (Sec. 6.1): one-hot ``Y (n, c)``, ``alpha (n, c)``, argmax of the scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from privkernels._validation import (
    check_array,
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
    check_key,
    check_labels,
    check_nonnegative,
    check_positive,
)
from privkernels.privacy.report import (
    BETA_CLOSE,
    MechanismRecord,
    PrivacyReport,
    non_private_report,
)
from privkernels.privacy.warnings import warn_privacy_leak

__all__ = [
    "DPNTKRegressionModel",
    "fit",
    "predict",
    "predict_labels",
    "max_k",
    "sensitivity_bound",
    "draw_weights",
    "project_to_ball",
    "smallest_eigenvalue",
    "LABELS_NOT_PROTECTED",
]

#: The caveat every private report of this module carries (Def. 4.1 keeps y_n).
LABELS_NOT_PROTECTED = (
    "LABELS ARE NOT PROTECTED: beta-close neighbours (Gu et al., Def. 4.1) keep every label "
    "and change one record's features by at most beta in L2; Y enters alpha = (K~ + reg I)^-1 Y "
    "without noise, so the labels are treated as public."
)


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DPNTKRegressionModel:
    """A fitted (private or non-private) quadratic-NTK ridge regression.

    Attributes:
      alpha: ``(n, c)`` ridge coefficients ``(K~ + reg I)^{-1} Y`` (private by
        post-processing of ``K~``; ``Y`` itself is not protected).
      x_tilde: ``(n, d)`` privatized training inputs ``X~`` (after projection to
        the ball); the non-private model stores the projected raw inputs.
      weights: ``(m, d)`` random NTK weights (data-independent).
      report: the :class:`~privkernels.privacy.report.PrivacyReport`.
      input_bound: radius B of the L2 ball every input (train and test) is projected to.
      n_classes: number of classes (one-hot targets), or None for real-valued targets.
      target_ndim: 1 when ``y`` was a 1-D real vector (``predict`` returns ``(n,)``).
      k: number of Gaussian samples used (None when non-private).
      reg: ridge added after the mechanism.
      kernel_shift: multiple of I added to K before the mechanism (0 = the paper).
      chunk_size: rows per chunk when evaluating kernel rows.
    """

    alpha: jax.Array
    x_tilde: jax.Array
    weights: jax.Array
    report: PrivacyReport
    input_bound: float
    n_classes: int | None
    target_ndim: int
    k: int | None
    reg: float
    kernel_shift: float
    chunk_size: int = 1024

    @property
    def private(self) -> bool:
        return self.report.private

    @property
    def dtype(self) -> Any:
        return self.alpha.dtype


# --------------------------------------------------------------------------------------
# Data-independent pieces
# --------------------------------------------------------------------------------------


def draw_weights(
    key: Any, d: int, *, width: int = 256, weight_std: float = 1.0, dtype: Any = jnp.float32
) -> jax.Array:
    """Random NTK weights ``w_r ~ N(0, weight_std^2 I_d)``, shape ``(width, d)`` (Def. 3.5).

    Data-independent: depends only on the key and the public ``d``.
    """
    from privkernels.features.quadratic_ntk import random_ntk_weights

    return random_ntk_weights(key, width, d, sigma=weight_std, dtype=dtype)


def project_to_ball(x: Any, radius: float = 1.0) -> jax.Array:
    """Project each row of ``x (n, d)`` onto the L2 ball of ``radius`` (a fixed,
    1-Lipschitz map, so beta-close records stay beta-close; the paper assumes
    ``||x_i|| <= B``, Sec. 3.3)."""
    radius = check_positive(radius, "input_bound")
    x = jnp.asarray(x)
    norms = jnp.linalg.norm(x, axis=-1, keepdims=True)
    scale = jnp.minimum(1.0, radius / jnp.maximum(norms, jnp.finfo(x.dtype).tiny))
    return x * scale


def _kernel_block(x1: jax.Array, x2: jax.Array, w: jax.Array) -> jax.Array:
    from privkernels.features import quadratic_ntk_kernel

    return quadratic_ntk_kernel(x1, x2, w)


def _chunking(n: int, chunk_size: int) -> tuple[int, int]:
    """Return ``(chunk, n_padded)`` with equal chunks and little padding."""
    n_chunks = max(1, math.ceil(n / max(1, chunk_size)))
    chunk = math.ceil(n / n_chunks)
    return chunk, n_chunks * chunk


def _kernel_matrix(x1: jax.Array, x2: jax.Array, w: jax.Array, chunk_size: int = 1024) -> jax.Array:
    """``K(x1, x2)`` of shape ``(n1, n2)`` (Def. 3.5), built ``chunk`` rows at a time by
    :func:`privkernels.features.quadratic_ntk_kernel` (one compiled chunk shape)."""
    from privkernels.features import quadratic_ntk_kernel

    chunk, _ = _chunking(x1.shape[0], chunk_size)
    return quadratic_ntk_kernel(x1, x2, w, chunk_size=chunk)


@partial(jax.jit, static_argnames=("chunk",))
def _scores_padded(
    xp: jax.Array, x_tilde: jax.Array, w: jax.Array, alpha: jax.Array, chunk: int
) -> jax.Array:
    blocks = xp.reshape(-1, chunk, xp.shape[-1])
    out = jax.lax.map(lambda b: _kernel_block(b, x_tilde, w) @ alpha, blocks)
    return out.reshape(-1, alpha.shape[-1])


@jax.jit
def _ridge_solve(kt: jax.Array, y: jax.Array, reg: jax.Array) -> jax.Array:
    """``(kt + reg I)^{-1} y`` by Cholesky (``kt`` PSD, ``reg > 0``)."""
    n = kt.shape[0]
    idx = jnp.arange(n)
    a = kt.at[idx, idx].add(reg)
    chol = jnp.linalg.cholesky(a)
    return jax.scipy.linalg.cho_solve((chol, True), y)


@partial(jax.jit, donate_argnums=(0,))
def _add_diagonal(k: jax.Array, value: jax.Array) -> jax.Array:
    idx = jnp.arange(k.shape[0])
    return k.at[idx, idx].add(value)


# --------------------------------------------------------------------------------------
# Sensitivity and k (Def. 5.1, 5.2, Lemma E.2-E.4, E.15, eq. (1))
# --------------------------------------------------------------------------------------


def _weights_op_norm_sq(weights: Any) -> float:
    """``||S||_op`` with ``S = W^T W / m`` (data-independent), in float64."""
    w = np.asarray(weights, dtype=np.float64)
    m = w.shape[0]
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return float(np.linalg.eigvalsh(gram)[-1]) / m


def sensitivity_bound(
    n: int,
    *,
    eta_min: float,
    beta: float = 1e-6,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    weights: Any = None,
) -> dict[str, float]:
    """Bounds on M (Def. 5.1) for beta-close neighbours; returns a dict.

    * ``"paper"``: ``M = n sigma^2 B^4 beta / eta_min``, the quantity behind eq. (1)
      (Lemma E.15 Part 2, ``sqrt(n) psi / eta_min`` with ``psi = sqrt(n) sigma^2 B^3 beta``,
      constants of the O(.) set to 1 and B^4 as printed in eq. (1)). It rests on the
      continuous kernel plus a concentration step that needs
      ``m = Omega(n d B^2 beta^-2 log(1/delta_2))`` (Condition 5.5), which no practical
      width satisfies.
    * ``"fixed_weights"`` (only when ``weights (m, d)`` are given): an exact bound for
      the discrete kernel with these weights, no probability over w. With
      ``S = W^T W / m``, ``K(x, v) = <x, v> x^T S v`` has gradient norm at most
      ``2 ||S|| B^3`` in x off the diagonal and ``4 ||S|| B^3`` on it (the same steps as
      Lemma E.2/E.3), so ``||K - K'||_F <= 2 ||S|| B^3 beta sqrt(2n + 2)`` =: ``r eta_min``,
      and ``M <= r / (1 - r)`` (``||A^{-1} - I||_F <= ||A - I||_F / (1 - ||A - I||)`` for
      ``A = K^{-1/2} K' K^{-1/2}``). Infinite when ``r >= 1``.
    * ``"used"``: the larger of the two (what :func:`fit` enforces).
    """
    n = check_int(n, "n")
    eta_min = check_positive(eta_min, "eta_min")
    beta = check_positive(beta, "beta")
    sigma = check_positive(weight_std, "weight_std")
    b = check_positive(input_bound, "input_bound")
    out = {"paper": n * sigma**2 * b**4 * beta / eta_min}
    if weights is not None:
        s_norm = _weights_op_norm_sq(weights)
        r = 2.0 * s_norm * b**3 * beta * math.sqrt(2 * n + 2) / eta_min
        out["fixed_weights"] = r / (1.0 - r) if r < 1.0 else math.inf
        out["weights_op_norm"] = s_norm
    out["used"] = max(out["paper"], out.get("fixed_weights", 0.0))
    return out


def _delta_branches(epsilon_alpha: float, delta_alpha: float) -> tuple[float, float]:
    log_term = math.log(1.0 / delta_alpha)
    return 8.0 * log_term, epsilon_alpha / max(math.sqrt(8.0 * log_term), 8.0 * log_term)


def _k_from_m(m_bound: float, epsilon_alpha: float, delta_alpha: float) -> float:
    """Largest real k with ``M <= eps / sqrt(8 k log(1/delta))`` (eq. (1) when M is
    the paper's M); ``-inf`` when even k = 1 violates ``M <= Delta(1)``."""
    eight_log, delta_at_1 = _delta_branches(epsilon_alpha, delta_alpha)
    if not m_bound <= delta_at_1:
        return -math.inf
    return epsilon_alpha**2 / (eight_log * m_bound**2)


def max_k(
    n: int,
    *,
    epsilon_alpha: float,
    delta_alpha: float,
    eta_min: float,
    beta: float = 1e-6,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    weights: Any = None,
) -> int:
    """Largest number of Gaussian samples k the privacy condition allows.

    ``epsilon_alpha, delta_alpha`` are the budget of the *kernel* release (in
    :func:`fit`: ``epsilon * epsilon_split``, ``delta * delta_split``). ``n`` is the real
    number of training examples, ``eta_min`` the public lower bound on the smallest
    eigenvalue of the sampled matrix, ``weight_std`` = sigma, ``input_bound`` = B.

    Condition 4 of Condition 5.3 is ``M <= Delta(k)`` with (Def. 5.2)
    ``Delta(k) = min(eps / sqrt(8 k log(1/delta)), eps / (8 log(1/delta)))``. Hence

    * k must satisfy ``k <= eps^2 / (8 log(1/delta) M^2)``; with the paper's
      ``M = n sigma^2 B^4 beta / eta_min`` this is exactly eq. (1)
      ``k <= eps^2 eta_min^2 / (8 log(1/delta) n^2 sigma^4 B^8 beta^2)``;
    * and, independently of k, ``M <= eps / (8 log(1/delta))`` (the second branch;
      the paper sidesteps it by taking ``k >= 8 log(1/delta)``, which is possible
      only when eq. (1) allows such a k; when it does not, no k is private).

    With ``weights`` the exact fixed-weights bound of :func:`sensitivity_bound` is
    enforced too (the larger M wins).

    Raises:
      ValueError: when no k >= 1 satisfies the condition; the message says which
        parameter to change and by what factor.
    """
    epsilon_alpha = check_epsilon(epsilon_alpha, "epsilon_alpha")
    delta_alpha = check_delta(delta_alpha, "delta_alpha")
    bounds = sensitivity_bound(
        n,
        eta_min=eta_min,
        beta=beta,
        weight_std=weight_std,
        input_bound=input_bound,
        weights=weights,
    )
    m_used = bounds["used"]
    k_real = _k_from_m(m_used, epsilon_alpha, delta_alpha)
    if k_real >= 1.0:
        return int(math.floor(k_real))
    _, delta_at_1 = _delta_branches(epsilon_alpha, delta_alpha)
    factor = m_used / delta_at_1
    which = (
        "paper's eq. (1)"
        if bounds["paper"] >= bounds.get("fixed_weights", 0.0)
        else "fixed-weights"
    )
    raise ValueError(
        f"no number of Gaussian samples k >= 1 is private here: the sensitivity M = {m_used:.4g} "
        f"({which} bound, M = n sigma^2 B^4 beta / eta_min with n={n}, sigma={weight_std}, "
        f"B={input_bound}, beta={beta}, eta_min={eta_min}) exceeds Delta(k=1) = "
        f"eps_alpha / max(sqrt(8 log(1/delta_alpha)), 8 log(1/delta_alpha)) = {delta_at_1:.4g} "
        f"(eps_alpha={epsilon_alpha}, delta_alpha={delta_alpha}); eq. (1) gives k <= "
        f"{max(k_real, 0.0) if math.isfinite(k_real) else 0.0:.3g}. Fix it by a factor of at least "
        f"{factor:.3g}: multiply epsilon (or epsilon_split) or eta_min by {factor:.3g}, or divide "
        f"beta or n by {factor:.3g}; a public eta_min that holds for every dataset is obtained "
        f"with kernel_shift=s (then eta_min=s is guaranteed)"
    )


# --------------------------------------------------------------------------------------
# fit / predict
# --------------------------------------------------------------------------------------


def _x64(enable: bool) -> Any:
    """A local 64-bit context when needed (never turns x64 *off* for the caller)."""
    return jax.enable_x64(True) if enable else contextlib.nullcontext()


def _resolve_dtype(dtype: Any) -> Any:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    return jnp.float32 if name == "float32" else jnp.float64


def _targets(y: Any, n: int, n_classes: int | None) -> tuple[np.ndarray, int | None, int]:
    """One-hot ``(n, c)`` targets for labels, or real targets as ``(n, c)``."""
    arr = np.asarray(y)
    if arr.ndim == 0:
        raise ValueError("y must be a 1-D array of labels or an (n,) / (n, c) array of targets")
    if n_classes is not None or (arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer)):
        if n_classes is None:
            # Labels are public under beta-close neighbours (Def. 4.1), so reading
            # their range is not a privacy leak for this method.
            n_classes = int(arr.max()) + 1 if arr.size else 1
            n_classes = max(n_classes, 2)
        labels = check_labels(arr, n_classes, "y", n_rows=n)
        return np.eye(n_classes, dtype=np.float64)[labels], n_classes, 2
    vals = check_array(arr, "y", ndim=(1, 2))
    vals = np.asarray(vals, dtype=np.float64)
    if vals.shape[0] != n:
        raise ValueError(f"y has {vals.shape[0]} rows but x has {n} rows")
    target_ndim = vals.ndim
    return (vals[:, None] if vals.ndim == 1 else vals), None, target_ndim


def fit(
    key: Any,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float | None = None,
    width: int = 256,
    reg: float = 10.0,
    beta: float = 1e-6,
    eta_min: float | None = None,
    input_bound: float = 1.0,
    epsilon_split: float = 0.5,
    delta_split: float = 0.5,
    k: int | None = None,
    n_classes: int | None = None,
    weight_std: float = 1.0,
    kernel_shift: float = 0.0,
    chunk_size: int = 1024,
    dtype: Literal["float32", "float64"] | Any = "float32",
    allow_unproven: bool = False,
) -> DPNTKRegressionModel:
    """Fit private quadratic-NTK ridge regression (Gu et al., Alg. 2).

    Args:
      key: ``jax.random.key``; split into (weights, kernel mechanism, input mechanism).
      x: ``(n, d)`` training inputs (higher-rank inputs are flattened per example);
        projected to the L2 ball of radius ``input_bound`` first.
      y: ``(n,)`` integer labels (one-hot targets, Sec. 6.1) or ``(n,)`` / ``(n, c)``
        real targets. **Not protected** (Def. 4.1).
      epsilon, delta: total budget; ``epsilon=None`` fits the non-private baseline
        (same kernel, ``alpha = (K + (kernel_shift + reg) I)^{-1} Y``, raw inputs).
      width: number of neurons m. reg: ridge lambda added after the mechanism.
      beta: neighbouring radius of Def. 4.1 (what the guarantee hides).
      eta_min: PUBLIC lower bound on the smallest eigenvalue of the matrix given to
        the mechanism, ``K + kernel_shift I``, for every dataset you could have.
        Required when private, except that it defaults to ``kernel_shift`` when that
        is > 0 (then it holds by construction). Never estimated from the data.
      epsilon_split, delta_split: fraction of the budget for the kernel release
        (``eps_alpha = epsilon * epsilon_split``); the rest goes to the inputs.
      k: number of Gaussian samples; default the largest allowed (:func:`max_k`
        with the real n and the drawn weights). A larger k is a ValueError.
      n_classes: number of classes for integer labels (default ``max(y) + 1``).
      weight_std: sigma of the NTK weights (paper: 1).
      kernel_shift: ``s >= 0``; the mechanism privatizes ``K + s I`` instead of K
        (0 = the paper). Its smallest eigenvalue is >= s for *every* dataset, so
        ``eta_min = s`` needs no assumption about the data. ``K~`` then estimates
        ``K + s I``, so the effective ridge is ``s + reg`` in expectation.
      chunk_size: rows per chunk when building kernel matrices.
      dtype: ``"float32"`` (default) or ``"float64"`` (computed under a local
        ``jax.enable_x64`` context).
      allow_unproven: the Gaussian sampling theorem (Lemma D.1) needs
        ``eps_alpha = epsilon * epsilon_split < 1``; larger values (the paper's
        Fig. 1 uses them) are refused unless this is True, and the report is
        then marked ``proven=False``.

    Eigenvalue assumption. When ``eta_min > kernel_shift`` the guarantee rests
    on ``lambda_min(K + kernel_shift I) >= eta_min``; it is checked in float64
    (one Cholesky factorisation of ``K + (kernel_shift - eta_min) I``) and a
    dataset that violates it is refused with a ValueError before any noise is
    drawn. Within the assumed domain this never refuses, so it costs nothing;
    the message carries no value computed from the data.

    Returns:
      :class:`DPNTKRegressionModel` with ``alpha (n, c)``, ``x_tilde (n, d)``,
      ``weights (m, d)`` and ``report`` (beta-close relation, two mechanisms).

    Raises:
      ValueError: on invalid input (TypeError on wrong kinds), before any noise is
        drawn; also when no k satisfies the privacy condition (see :func:`max_k`).
    """
    # ---------------- validation (nothing random happens before this block ends) ----
    key = check_key(key)
    dt = _resolve_dtype(dtype)
    private = epsilon is not None
    if private:
        epsilon = check_epsilon(epsilon)
        if delta is None:
            raise ValueError(
                "delta is required when epsilon is given (use epsilon=None for the non-private baseline)"
            )
        delta = check_delta(delta)
        epsilon_split = check_fraction(epsilon_split, "epsilon_split")
        delta_split = check_fraction(delta_split, "delta_split")
        if epsilon * epsilon_split >= 1.0 and not allow_unproven:
            raise ValueError(
                f"eps_alpha = epsilon * epsilon_split = {epsilon * epsilon_split:.4g} >= 1: the "
                "Gaussian sampling mechanism's guarantee (Gu et al. Lemma D.1, Def. 5.2) is stated "
                "for eps_alpha in (0, 1) only. Lower epsilon or epsilon_split, or pass "
                "allow_unproven=True to release anyway with a report marked unproven"
            )
    elif delta is not None:
        delta = check_delta(delta)
    width = check_int(width, "width")
    reg = check_positive(reg, "reg")
    beta = check_positive(beta, "beta")
    input_bound = check_positive(input_bound, "input_bound")
    weight_std = check_positive(weight_std, "weight_std")
    kernel_shift = check_nonnegative(kernel_shift, "kernel_shift")
    chunk_size = check_int(chunk_size, "chunk_size")
    if k is not None:
        k = check_int(k, "k")
    if n_classes is not None:
        n_classes = check_int(n_classes, "n_classes", minimum=1)
    if private:
        if eta_min is None:
            if kernel_shift > 0:
                eta_min = kernel_shift
            else:
                raise ValueError(
                    "eta_min is required for a private fit: a PUBLIC lower bound on the smallest "
                    "eigenvalue of the kernel matrix (the paper uses 7e-3), or pass kernel_shift=s > 0 "
                    "to make eta_min=s hold for every dataset"
                )
        eta_min = check_positive(eta_min, "eta_min")
    elif eta_min is not None:
        eta_min = check_positive(eta_min, "eta_min")

    x_arr = check_array(x, "x", finite=True)
    if x_arr.ndim < 2:
        raise ValueError(
            f"x must have shape (n, d) (or (n, ...) flattened per example), got {tuple(x_arr.shape)}"
        )
    n = int(x_arr.shape[0])
    d = int(np.prod(x_arr.shape[1:]))
    if d == 0:
        raise ValueError(f"x has no features (shape {tuple(x_arr.shape)})")
    y_mat, n_classes, target_ndim = _targets(y, n, n_classes)

    with _x64(dt == jnp.float64):
        k_w, k_alpha, k_x = jax.random.split(key, 3)
        # Data-independent weights first: the fixed-weights sensitivity bound needs them.
        weights = draw_weights(k_w, d, width=width, weight_std=weight_std, dtype=dt)

        if private:
            # validated above
            assert epsilon is not None and delta is not None and eta_min is not None
            eps_alpha = epsilon * epsilon_split
            eps_x = epsilon - eps_alpha
            delta_alpha = delta * delta_split
            delta_x = delta - delta_alpha
            bounds = sensitivity_bound(
                n,
                eta_min=eta_min,
                beta=beta,
                weight_std=weight_std,
                input_bound=input_bound,
                weights=weights,
            )
            k_allowed = max_k(
                n,
                epsilon_alpha=eps_alpha,
                delta_alpha=delta_alpha,
                eta_min=eta_min,
                beta=beta,
                weight_std=weight_std,
                input_bound=input_bound,
                weights=weights,
            )
            if k is None:  # capped where the sampler's int32 count ends (fewer samples: more noise)
                k = min(k_allowed, 2**31 - 1)
            elif k > k_allowed:
                raise ValueError(
                    f"k={k} exceeds the largest private k={k_allowed} for n={n}, eps_alpha={eps_alpha:.4g}, "
                    f"delta_alpha={delta_alpha:.3g}, eta_min={eta_min}, beta={beta} (eq. (1)); use k <= {k_allowed}"
                )
            # Lemma G.1: L1 sensitivity of X under beta-close neighbours
            sens_x = math.sqrt(d) * beta

        # ---------------- computation ------------------------------------------------
        xp = project_to_ball(jnp.asarray(np.asarray(x_arr).reshape(n, d), dtype=dt), input_bound)
        if private and eta_min is not None and eta_min > kernel_shift:
            _check_eta_min(xp, weights, eta_min, kernel_shift, chunk_size)
        kmat = _kernel_matrix(xp, xp, weights, chunk_size)
        if kernel_shift > 0:
            kmat = _add_diagonal(kmat, jnp.asarray(kernel_shift, dt))
        y_j = jnp.asarray(y_mat, dtype=dt)

        if not private:
            alpha = _ridge_solve(kmat, y_j, jnp.asarray(reg, dt))
            _check_finite(alpha, dt)
            report = non_private_report(
                "epsilon=None: non-private quadratic-NTK ridge regression baseline (kernel and inputs "
                "used without noise)"
            )
            return DPNTKRegressionModel(
                alpha=alpha,
                x_tilde=xp,
                weights=weights,
                report=report,
                input_bound=input_bound,
                n_classes=n_classes,
                target_ndim=target_ndim,
                k=None,
                reg=reg,
                kernel_shift=kernel_shift,
                chunk_size=chunk_size,
            )

        from privkernels.privacy import (
            gaussian_sampling_mechanism,
            truncated_laplace,
            truncated_laplace_bound,
        )

        # Alg. 2 lines 4-5 / Alg. 1: K~ = (1/k) sum_j g_j g_j^T, g_j ~ N(0, K + s I), by the
        # privacy core's mechanism (one Cholesky factorization of K + s I; eigh only if that fails).
        assert k is not None
        k_tilde = gaussian_sampling_mechanism(k_alpha, kmat, k)
        del kmat
        k_tilde = jnp.asarray(k_tilde, dtype=dt)
        # Sec. 6.2: alpha~ = (K~ + reg I)^{-1} Y (post-processing).
        alpha = _ridge_solve(k_tilde, y_j, jnp.asarray(reg, dt))
        del k_tilde
        _check_finite(alpha, dt)
        # Alg. 2 line 6 / Lemma G.2: X~ = X + TLap(sqrt(d) beta, eps_X, delta_X) per coordinate.
        noise = truncated_laplace(k_x, xp.shape, sensitivity=sens_x, epsilon=eps_x, delta=delta_x)
        x_tilde = xp + jnp.asarray(noise, dtype=dt)
        bound_x = float(truncated_laplace_bound(sens_x, eps_x, delta_x))

    report = _private_report(
        n=n,
        d=d,
        width=width,
        k=k,
        k_allowed=k_allowed,
        bounds=bounds,
        eps_alpha=eps_alpha,
        delta_alpha=delta_alpha,
        eps_x=eps_x,
        delta_x=delta_x,
        sens_x=sens_x,
        bound_x=bound_x,
        beta=beta,
        eta_min=eta_min,
        kernel_shift=kernel_shift,
        reg=reg,
        weight_std=weight_std,
        input_bound=input_bound,
    )
    return DPNTKRegressionModel(
        alpha=alpha,
        x_tilde=x_tilde,
        weights=weights,
        report=report,
        input_bound=input_bound,
        n_classes=n_classes,
        target_ndim=target_ndim,
        k=k,
        reg=reg,
        kernel_shift=kernel_shift,
        chunk_size=chunk_size,
    )


def _check_eta_min(
    xp: jax.Array, weights: jax.Array, eta_min: float, kernel_shift: float, chunk_size: int
) -> None:
    """Refuse (ValueError, before any noise) when ``lambda_min(K + s I) < eta_min``.

    ``K`` is rebuilt in float64 and ``K + (s - eta_min) I`` factorised by
    Cholesky: success certifies the assumption up to float64 rounding. The
    refusal depends on the data only outside the domain the guarantee assumes.
    """
    with jax.enable_x64(True):
        x64 = jnp.asarray(xp, jnp.float64)
        kmat = np.asarray(_kernel_matrix(x64, x64, jnp.asarray(weights, jnp.float64), chunk_size))
    kmat = 0.5 * (kmat + kmat.T)
    kmat[np.diag_indices_from(kmat)] += kernel_shift - eta_min
    try:
        np.linalg.cholesky(kmat)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"the kernel matrix violates the eigenvalue assumption lambda_min(K + {kernel_shift:g} I) "
            f">= eta_min = {eta_min:g} that the privacy guarantee needs; nothing was released. "
            "Use kernel_shift >= eta_min (then it holds for every dataset) or a smaller public "
            "eta_min"
        ) from None


def _check_finite(alpha: jax.Array, dt: Any) -> None:
    if not bool(jnp.all(jnp.isfinite(alpha))):
        hint = " or dtype='float64'" if dt == jnp.float32 else ""
        raise FloatingPointError(
            "the Cholesky solve of (K~ + reg I) alpha = Y produced non-finite values; "
            f"use a larger reg{hint}"
        )


def _private_report(**p: Any) -> PrivacyReport:
    bounds: Mapping[str, float] = p["bounds"]
    kernel_rec = MechanismRecord.make(
        "gaussian_sampling",
        f"kernel matrix K~ = (1/k) sum g g^T, g ~ N(0, K + {p['kernel_shift']:g} I) ({p['n']}, {p['n']}); "
        "only alpha = (K~ + reg I)^-1 Y is kept",
        p["eps_alpha"],
        p["delta_alpha"],
        sensitivity=bounds["used"],
        accountant="closed-form: M <= Delta(k) (Gu et al. Lemma D.1, Def. 5.1/5.2, eq. (1))",
        k=p["k"],
        k_max=p["k_allowed"],
        m_bound_paper=bounds["paper"],
        m_bound_fixed_weights=bounds.get("fixed_weights", math.nan),
        eta_min=p["eta_min"],
        beta=p["beta"],
        n=p["n"],
        width=p["width"],
        weight_std=p["weight_std"],
        input_bound=p["input_bound"],
        kernel_shift=p["kernel_shift"],
        reg=p["reg"],
    )
    input_rec = MechanismRecord.make(
        "truncated_laplace",
        f"privatized training inputs X~ ({p['n']}, {p['d']}), used for test-time kernel rows K(x, X~)",
        p["eps_x"],
        p["delta_x"],
        sensitivity=p["sens_x"],
        accountant="closed-form (Gu et al. Lemma 3.2, G.1, G.2)",
        norm="L1 over one record: sqrt(d) * beta",
        per_coordinate_bound=p["bound_x"],
        scale=p["sens_x"] / p["eps_x"],
        beta=p["beta"],
        d=p["d"],
    )
    notes = [
        LABELS_NOT_PROTECTED,
        f"Neighbouring relation beta-close with beta={p['beta']:g} (Def. 4.1): the guarantee hides a move "
        "of one record's features by at most beta in L2, NOT its presence, its label, or a larger change.",
    ]
    if p["eta_min"] <= p["kernel_shift"]:
        notes.append(
            f"eta_min={p['eta_min']:g} <= kernel_shift={p['kernel_shift']:g}: the eigenvalue condition "
            "K + shift I >= eta_min I holds for every dataset (no assumption)."
        )
    else:
        notes.append(
            f"ASSUMPTION: lambda_min(K + {p['kernel_shift']:g} I) >= eta_min={p['eta_min']:g} for every "
            "dataset (and neighbour) in the domain. This dataset was checked (float64 Cholesky) and "
            "would have been refused otherwise; a neighbour outside the domain is not covered."
        )
    if p["eps_alpha"] >= 1.0:
        notes.append(
            f"UNPROVEN: eps_alpha={p['eps_alpha']:.4g} >= 1 lies outside the range eps_alpha in (0, 1) "
            "of Lemma D.1 (Condition 5.3, Def. 5.2); released only because allow_unproven=True. The "
            "paper's Figure 1 uses such values, but the cited theorem states no guarantee for them."
        )
    notes.append(
        "The paper's M (eq. (1)) drops the constants of O(.) bounds and relies on a width "
        "m = Omega(n d B^2 / beta^2 log(1/delta_2)) (Condition 5.5); k is also capped by an exact "
        "bound for the drawn weights (m_bound_fixed_weights), the larger M being used."
    )
    return PrivacyReport.from_mechanisms(
        [kernel_rec, input_rec],
        BETA_CLOSE,
        proven=p["eps_alpha"] < 1.0,
        data_independent=(
            f"random NTK weights w (m={p['width']}, d={p['d']}) ~ N(0, {p['weight_std']:g}^2 I): drawn "
            "from the key, independent of the data",
            f"projection of every input onto the L2 ball of radius {p['input_bound']:g}: a fixed map",
            f"n={p['n']} and d={p['d']}: equal for beta-close neighbours (public)",
            f"eta_min={p['eta_min']:g}: a public value supplied by the caller, not read from the data",
        ),
        notes=tuple(notes),
    )


def _prepare_queries(model: DPNTKRegressionModel, x: Any) -> jax.Array:
    x_arr = check_array(x, "x", finite=True)
    if x_arr.ndim < 2:
        raise ValueError(f"x must have shape (n, d) (or (n, ...)), got {tuple(x_arr.shape)}")
    d = model.weights.shape[1]
    n = int(x_arr.shape[0])
    if int(np.prod(x_arr.shape[1:])) != d:
        raise ValueError(
            f"x has {int(np.prod(x_arr.shape[1:]))} features per example, the model expects {d}"
        )
    xr = jnp.asarray(np.asarray(x_arr).reshape(n, d), dtype=model.dtype)
    return project_to_ball(xr, model.input_bound)


def predict(model: DPNTKRegressionModel, x: Any) -> jax.Array:
    """Scores ``K(x, X~) alpha`` (Alg. 2 line 7), shape ``(n_test, c)``.

    Test inputs are projected onto the same ball; the kernel rows use the
    privatized inputs ``X~`` (never the raw training inputs). Returns ``(n_test,)``
    when the model was fitted on 1-D real targets. (Def. 3.8 has a 1/n factor that
    Alg. 2 omits; it changes no argmax.)
    """
    if not isinstance(model, DPNTKRegressionModel):
        raise TypeError(f"model must be a DPNTKRegressionModel, got {type(model).__name__}")
    with _x64(model.dtype == jnp.float64):
        xq = _prepare_queries(model, x)
        n = xq.shape[0]
        chunk, n_pad = _chunking(n, model.chunk_size)
        xqp = jnp.pad(xq, ((0, n_pad - n), (0, 0))) if n_pad > n else xq
        scores = _scores_padded(xqp, model.x_tilde, model.weights, model.alpha, chunk)[:n]
    return scores[:, 0] if model.target_ndim == 1 else scores


def predict_labels(model: DPNTKRegressionModel, x: Any) -> jax.Array:
    """``argmax`` of :func:`predict` over classes, ``(n_test,)`` int32 (Sec. 6.1)."""
    if not isinstance(model, DPNTKRegressionModel):
        raise TypeError(f"model must be a DPNTKRegressionModel, got {type(model).__name__}")
    if model.n_classes is None:
        raise ValueError("predict_labels needs a model fitted on class labels (n_classes set)")
    return jnp.argmax(predict(model, x), axis=-1).astype(jnp.int32)


def smallest_eigenvalue(
    key: Any,
    x: Any,
    *,
    width: int = 256,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    kernel_shift: float = 0.0,
    chunk_size: int = 1024,
) -> float:
    """DIAGNOSTIC that READS PRIVATE DATA: the true smallest eigenvalue of ``K + s I``.

    Uses the same weights as :func:`fit` with the same ``key``, and float64 for the
    eigenvalue. Emits :class:`~privkernels.privacy.warnings.PrivacyLeakWarning`:
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
        kmat = np.asarray(_kernel_matrix(xp, xp, w, chunk_size))
    import scipy.linalg

    lams = scipy.linalg.eigvalsh(kmat, subset_by_index=[0, 0], overwrite_a=True, check_finite=False)
    lam = lams[0]
    return float(lam) + kernel_shift
