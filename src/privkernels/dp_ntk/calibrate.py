"""Calibrated sampling: a generated pool tilted towards the released marginal code.

With a table network (`privkernels.features.marginal.MarginalSkip`), the released
class-conditional embedding (Yang et al., eq. 4) holds, for each class ``c`` and for each
of the network's ``k`` outputs, one noisy copy of

    t_c = (1 / n_c) sum_{i in c} s code(x_i) / ||g(x_i)||,

the gradient of the sum of logits w.r.t. the skip kernel (``g`` the unnormalised e-NTK
gradient), times the class proportion: column ``c`` of the release is ``p_c t_c`` plus
noise. The generator's target divides it by the released proportion (``label_mode=
"released"``, the table default), and so does `released_code`. In ``"uniform"`` mode no
proportion is released and the generator assumes ``p_c = 1/C``; on imbalanced data that
target is no class mean at all, so calibrated sampling refuses such a result. The generator matches the whole embedding (eq. 6) only approximately, and the
marginals show it (adult: mean 1-way total variation about 0.056 where the release's own
noise allows far less).

`sample_calibrated` draws, per class, a pool of ``pool_factor`` times the rows wanted,
computes each pool row's code block ``z_i`` (the same normalised feature, so the same
``1 / ||g||`` weighting as the release), and gives the pool the weights of largest entropy
that fit the released code up to its noise: the exponential tilt ``w_i ∝ exp(lam . z_i)``
with ``lam`` maximising

    lam . t_c - log sum_i exp(lam . z_i) - (penalty * v_c / 2) ||lam||^2,

the dual of ``min KL(w || uniform) + ||Z^T w - t_c||^2 / (2 penalty v_c)``, where ``v_c``
is the per-coordinate noise variance of ``t_c`` after averaging the ``k`` copies
(``(noise_std / p_c)^2 / k`` from the release's own record; under add-remove the record's
``noise_std`` is on the class sums, and is divided by the released total ``n_hat`` that
divided them). The dual is solved by
L-BFGS; where the optimiser stops short, or its weights do worse
on the primal than uniform weights, `Calibration` says so (``converged``); weights that fit
worse than uniform ones are never used. It then draws the rows from
the pool by these weights. Everything read is the release, the public network and
generated rows: post-processing, no privacy cost, and the report is unchanged.

The tilt can only reweight what the generator produces: a value the pool never holds stays
missing, and strong tilts concentrate on few pool rows (`Calibration.ess`). A non-private
result has no noise: its penalty variance is ``penalty * VAR_FLOOR``, a close fit whose
weights may sit on few rows.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize
from scipy.special import logsumexp

from privkernels._validation import check_bool, check_int, check_key, check_positive
from privkernels._warnings import user_stacklevel
from privkernels.dp_ntk.result import DPNTKResult, draw_labels, sample
from privkernels.features.entk import ApplyFn, entk_features
from privkernels.features.marginal import MarginalSkip
from privkernels.privacy.released import RELEASED_MEAN, RELEASED_SUMS
from privkernels.privacy.report import ADD_REMOVE, REPLACE_ONE

__all__ = [
    "DEFAULT_PENALTY",
    "Calibration",
    "CalibrationWarning",
    "check_calibrate",
    "class_proportions",
    "code_block",
    "pool_codes",
    "released_code",
    "sample_calibrated",
    "sample_rows",
    "tilt",
]

#: Smallest pool per class: a class with few wanted rows still gets a pool to tilt.
MIN_POOL = 500

#: Rows per feature chunk when reading a pool's code blocks (``chunk x p`` float32 at once).
CHUNK = 2048

#: The tilt's penalty, in units of the released code's noise variance: chosen on intrusion's
#: public-for-adult rows at eps 1 among 1, 10, 100 and 1000 (lowest 1-way TV; rule
#: ``benchmarks/results/dp-ntk-tabular-adult-calibrate-rule.md``).
DEFAULT_PENALTY = 100.0

#: Noise variance assumed for a non-private result (it has none), times the penalty.
VAR_FLOOR = 1e-10

#: L-BFGS iterations of one tilt.
MAX_ITER = 5000

#: Below this effective pool share, a class's rows repeat a few pool rows: warned.
LOW_ESS = 0.01


class CalibrationWarning(UserWarning):
    """Calibrated sampling fell short: a tilt did not converge, or its weights sit on few
    pool rows (the rows repeat). Says nothing about the private data: it reads the release."""


def check_calibrate(value: Any) -> bool:
    """The ``calibrate`` flag of the sampling methods: a bool (``"no"`` is not False)."""
    return check_bool(value, "calibrate")


class Calibration(NamedTuple):
    """What the tilt did, per class (``(C,)`` arrays; zeros for a class with no row drawn).

    Attributes:
      pool: pool rows generated.
      ess: effective sample size of the weights, ``1 / sum w^2``, over the pool size.
      misfit_before, misfit_after: ``||Z^T w - t_c||^2 / (q v_c)``, the mean squared
        distance to the released code in units of its noise variance, for uniform weights
        and for the tilt (about 1 where the pool fits the release up to its noise; NaN for a
        non-private result).
      converged: 1.0 where the tilt's optimiser reached the optimum (`tilt`), else 0.0 (its
        weights are then used if they beat uniform weights on the primal, else uniform ones).
    """

    pool: np.ndarray
    ess: np.ndarray
    misfit_before: np.ndarray
    misfit_after: np.ndarray
    converged: np.ndarray


def code_block(network: Any, ntk_params: Any) -> np.ndarray:
    """``(q * k,)`` int: the positions of the skip kernel (``(q, k)``, row-major) in the
    e-NTK feature's layout (`privkernels.features.entk`: ``ravel_pytree`` of the params).

    Raises ValueError when ``network`` is not a `MarginalSkip` (no marginal code released).
    """
    if not isinstance(network, MarginalSkip):
        raise ValueError(
            "calibrated sampling needs a table network (privkernels.features.marginal."
            f"MarginalSkip, e.g. privkernels.synth.default_table_network), got "
            f"{type(network).__name__}"
        )

    def mark(path: Any, leaf: Any) -> jax.Array:
        names = [getattr(p, "key", None) for p in path]
        is_skip = len(names) >= 2 and names[-2] == "skip" and names[-1] == "kernel"
        return jnp.full(jnp.shape(leaf), 1.0 if is_skip else 0.0, jnp.float32)

    flat, _ = ravel_pytree(jax.tree_util.tree_map_with_path(mark, ntk_params))
    idx = np.flatnonzero(np.asarray(flat))
    if idx.size == 0:
        raise ValueError("the network's parameters hold no skip/kernel leaf")
    return idx


def _embedding_noise_std(result: DPNTKResult) -> float:
    """The Gaussian noise std of one coordinate of the released mean embedding: replace-one,
    the record's ``noise_std`` on the mean; add-remove, the record's ``noise_std`` on the
    class sums divided by the released total ``n_hat`` that divided them
    (``result.noisy_total``)."""
    if not result.report.private:
        return 0.0
    if result.report.neighbouring not in (REPLACE_ONE, ADD_REMOVE):
        raise ValueError("calibrated sampling knows the noise scale of replace-one and "
                         f"add-remove releases only, not {result.report.neighbouring}")  # fmt: skip
    sums = result.report.neighbouring == ADD_REMOVE
    if sums and result.noisy_total is None:
        raise ValueError(
            "calibrated sampling of an add-remove release needs its noisy total n_hat, which "
            "this result does not hold (a file written before privkernels kept it): refit"
        )
    name = RELEASED_SUMS if sums else RELEASED_MEAN
    stds = [dict(m.params).get("noise_std") for m in result.report.mechanisms
            if m.released.startswith(name)]  # fmt: skip
    if len(stds) != 1 or stds[0] is None:
        raise ValueError("the report holds no single embedding record with a noise_std")
    std = float(stds[0]) / (float(cast(float, result.noisy_total)) if sums else 1.0)
    if not (np.isfinite(std) and std > 0):
        raise ValueError("the embedding record's noise_std is not a finite number > 0")
    return std


def class_proportions(result: DPNTKResult) -> np.ndarray:
    """``(C,)``: the released proportions floored at ``min_proportion``, as the generator's
    target divides by them (`privkernels.dp_ntk.train.target_embedding`).

    Raises ValueError for a ``"uniform"`` result: it released no proportions (module
    docstring)."""
    if result.noisy_proportions is None:
        raise ValueError(
            "calibrated sampling needs released class proportions (label_mode='released', "
            "the table default); this result was fitted with label_mode='uniform'"
        )
    p = np.asarray(result.noisy_proportions, np.float64)
    return np.maximum(p, result.config.min_proportion)


def released_code(result: DPNTKResult) -> tuple[np.ndarray, np.ndarray]:
    """``(t (C, q) float64, v (C,) float64)``: per class, the released code block divided by
    the class proportion (`class_proportions`: a class-conditional mean, as the generator
    matches it) and averaged over the network's ``k`` outputs, and its per-coordinate noise
    variance ``(noise_std / p_c)^2 / k`` given the released divisor (the noise of ``p_c``,
    and under add-remove of ``n_hat``, is left out: it scales the signal, not the noise;
    about +10% to +25% variance against the true class mean in a small case). A
    non-private result gets ``v = 0``; the tilt floors every variance at `VAR_FLOOR` (a
    large release's noise can be smaller)."""
    idx = code_block(result.network, result.ntk_params)
    C = result.n_classes
    props = class_proportions(result)  # refuses a uniform-mode result
    emb = np.asarray(result.noisy_embedding, np.float64)[idx, :] / props[None, :]
    k = int(result.network.base.out_features)  # type: ignore[attr-defined]
    t = emb.reshape(-1, k, C).mean(axis=1).T  # (C, q)
    v = (_embedding_noise_std(result) / props) ** 2 / k
    return t, v


def pool_codes(result: DPNTKResult, x: np.ndarray) -> np.ndarray:
    """``(m, q)`` float64: each row's code block of the normalised e-NTK feature, averaged
    over the ``k`` outputs (generated rows only; chunks of `CHUNK` rows)."""
    idx = code_block(result.network, result.ntk_params)
    k = int(result.network.base.out_features)  # type: ignore[attr-defined]
    out = []
    for start in range(0, x.shape[0], CHUNK):
        feats = entk_features(cast(ApplyFn, result.network.apply), result.ntk_params,
                              jnp.asarray(x[start : start + CHUNK]))  # fmt: skip
        out.append(np.asarray(feats, np.float64)[:, idx].reshape(-1, idx.size // k, k).mean(2))
    return np.concatenate(out, axis=0)


def tilt(
    z: np.ndarray, t: np.ndarray, var: float, *, max_iter: int = MAX_ITER
) -> tuple[np.ndarray, bool]:
    """``(w (m,), converged)``: the weights (sum 1) of the exponential tilt of ``z (m, q)``
    towards ``t (q,)`` with penalty variance ``var > 0`` (module docstring), and whether the
    optimiser reached the optimum.

    The dual ``log mean exp(Z lam) - lam . t + var |lam|^2 / 2`` is minimised by L-BFGS (the
    mean, not the sum, so the objective carries no ``log m`` offset that would swamp its
    tolerance); ``converged`` when its gradient ``Z^T w - t + var lam`` is below
    ``1e-3 sqrt(var)`` in every coordinate (a thousandth of the penalty's standard
    deviation). Weights that score worse than uniform weights on the primal
    ``KL(w || uniform) + |Z^T w - t|^2 / (2 var)`` are never returned: uniform weights are.
    """
    var = check_positive(var, "var")
    z = np.asarray(z, np.float64)
    t = np.asarray(t, np.float64)
    m = z.shape[0]
    mean = np.full(m, 1.0 / m)

    def weights(a: np.ndarray) -> np.ndarray:
        return np.asarray(np.exp(a - logsumexp(a)))

    def dual(lam: np.ndarray) -> tuple[float, np.ndarray]:
        a = z @ lam
        value = float(logsumexp(a, b=mean)) - float(lam @ t) + 0.5 * var * float(lam @ lam)
        return value, z.T @ weights(a) - t + var * lam

    def primal(w: np.ndarray) -> float:
        kl = float(np.sum(w * np.log(np.maximum(m * w, 1e-300))))
        return kl + float(np.sum((z.T @ w - t) ** 2)) / (2.0 * var)

    sol = minimize(dual, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B",
                   options={"maxiter": int(max_iter), "gtol": 1e-12, "ftol": 1e-15})  # fmt: skip
    w = weights(z @ sol.x)
    grad = z.T @ w - t + var * sol.x
    converged = bool(np.isfinite(grad).all() and np.abs(grad).max() <= 1e-3 * np.sqrt(var))
    if not (np.isfinite(w).all() and primal(w) <= primal(mean)):
        return mean, False
    return w, converged


def _misfit(z: np.ndarray, w: np.ndarray, t: np.ndarray, var: float) -> float:
    return float(np.sum((z.T @ w - t) ** 2) / (t.size * var)) if var > 0 else float("nan")


def sample_calibrated(
    key: jax.Array,
    result: DPNTKResult,
    n: int,
    *,
    pool_factor: int = 3,
    penalty: float = DEFAULT_PENALTY,
) -> tuple[np.ndarray, np.ndarray, Calibration]:
    """``n`` rows ``(x (n, d) float32, y (n,) int32)`` drawn from tilted generated pools.

    Labels as `privkernels.dp_ntk.sample` draws them (released proportions); for each class
    with ``n_c`` rows, a pool of ``max(pool_factor * n_c, MIN_POOL)`` generated rows of that
    class is tilted (`tilt`, penalty variance ``penalty * v_c``) and ``n_c`` rows are drawn
    from it with replacement by weight. ``key``: not the fit's key (see `sample`).

    Raises ValueError (before any draw) for a network without a marginal code, a uniform-mode
    release, an add-remove release without its noisy total (a file from before it was
    kept), or ``pool_factor``/``penalty`` out of range (TypeError: not a number). Warns
    (`CalibrationWarning`) where a class's tilt did not converge or its effective pool share
    is below `LOW_ESS`.
    """
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    pool_factor = check_int(pool_factor, "pool_factor", minimum=1)
    penalty = check_positive(penalty, "penalty")
    t, v = released_code(result)  # refuses a network without a code, and uniform mode
    variances = penalty * np.maximum(v, VAR_FLOOR)
    if not (np.isfinite(variances).all() and (variances > 0).all()):
        raise ValueError("penalty is too small or too large: penalty x noise variance must be "
                         "a finite number > 0")  # fmt: skip
    k_lab, k_pool, k_draw = jax.random.split(key, 3)
    y = draw_labels(k_lab, result, n)  # the labels `sample(k_lab, ...)` draws
    x = np.zeros((n, *result.config.data_shape), np.float32)
    C = result.n_classes
    info = {name: np.zeros(C) for name in Calibration._fields}
    for c in range(C):
        rows = np.flatnonzero(y == c)
        if rows.size == 0:
            continue
        m = max(pool_factor * rows.size, MIN_POOL)
        xc, _ = sample(jax.random.fold_in(k_pool, c), result, m, labels=np.full(m, c, np.int32))
        z = pool_codes(result, xc)
        w, ok = tilt(z, t[c], float(variances[c]))
        pick = np.asarray(jax.random.choice(jax.random.fold_in(k_draw, c), m, (rows.size,),
                                            p=jnp.asarray(w, jnp.float32)))  # fmt: skip
        x[rows] = xc[pick]
        info["pool"][c] = m
        info["ess"][c] = 1.0 / float(np.sum(w**2)) / m
        info["misfit_before"][c] = _misfit(z, np.full(m, 1.0 / m), t[c], float(v[c]))
        info["misfit_after"][c] = _misfit(z, w, t[c], float(v[c]))
        info["converged"][c] = float(ok)
    cal = Calibration(**info)
    _warn_shortfall(cal)
    return x, y, cal


def sample_rows(
    key: jax.Array, result: DPNTKResult, n: int, *, calibrate: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of `sample_calibrated` (its default penalty) when ``calibrate`` (a bool),
    else of `privkernels.dp_ntk.sample`: the one switch of the sampling methods."""
    if check_calibrate(calibrate):
        x, y, _ = sample_calibrated(key, result, n)
        return x, y
    return sample(key, result, n)


def _warn_shortfall(cal: Calibration) -> None:
    drawn = cal.pool > 0
    stopped = int(np.sum(drawn & (cal.converged == 0)))
    narrow = int(np.sum(drawn & (cal.ess < LOW_ESS)))
    if stopped or narrow:
        warnings.warn(
            f"calibrated sampling: the tilt did not converge for {stopped} class(es) and sits "
            f"on under {LOW_ESS:.0%} of the pool for {narrow} (rows repeat); see Calibration "
            "(sample_calibrated) or raise the penalty",
            CalibrationWarning,
            stacklevel=user_stacklevel(),
        )
