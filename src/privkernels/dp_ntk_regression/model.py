"""A fitted DP NTK regression model: config, save/load and prediction (Gu et al., Alg. 2 line 7).

Prediction is post-processing: ``K(x, X~) alpha`` uses only the released
``alpha`` (from the noisy kernel) and the noisy inputs ``X~``, never the raw
training inputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privkernels import checkpoint
from privkernels._batching import map_row_chunks
from privkernels._config import ConfigMixin
from privkernels._validation import check_array
from privkernels.dp_ntk_regression.kernel import input_map, kernel_block
from privkernels.dp_ntk_regression.kernel_mean import SENSITIVITY as KERNEL_MEAN_SENSITIVITY
from privkernels.dp_ntk_regression.kernel_mean import scores as km_scores
from privkernels.dp_ntk_regression.replace_one import ssp_features, ssp_sensitivity
from privkernels.dp_ntk_regression.sensitivity import sensitivity_bound
from privkernels.precision import full_precision
from privkernels.privacy.budget import Budget
from privkernels.privacy.relations import BETA_CLOSE, REPLACE_ONE, check_neighbouring
from privkernels.privacy.report import PrivacyReport

__all__ = [
    "RegressionConfig",
    "DPNTKRegressionModel",
    "load",
    "predict",
    "predict_labels",
    "FORMAT",
    "check_records",
]

#: File format name and version of `DPNTKRegressionModel.save`.
FORMAT = "privkernels.dp_ntk_regression.model/1"


@dataclasses.dataclass(frozen=True)
class RegressionConfig(ConfigMixin):
    """Public settings of a fit (``split`` = ``(kernel, inputs)`` budget fractions)."""

    width: int
    reg: float
    beta: float
    eta_min: float | None
    input_bound: float
    split: tuple[float, float]
    k: int | None
    weight_std: float
    kernel_shift: float
    chunk_size: int
    dtype: str
    n_classes: int | None
    target_ndim: int
    epsilon: float | None
    delta: float | None
    fit_intercept: bool = False
    neighbouring: str = "beta-close"
    features: int | None = None
    target_bound: float | None = None
    ridge: float | None = None
    solver: str = "ridge"


@dataclasses.dataclass(frozen=True)
class DPNTKRegressionModel:
    """A fitted (private or non-private) quadratic-NTK ridge regression.

    Attributes:
      alpha: ``(n, c)`` ridge coefficients ``(K~ + reg I)^{-1} Y`` (private by
        post-processing of ``K~``; ``Y`` itself is not protected under beta-close).
      x_tilde: ``(n, d')`` privatized training inputs ``X~`` after the input map
        (``d' = d + 1`` with ``fit_intercept``: the constant column is public and
        kept exact); the non-private model stores the mapped raw inputs.
      weights: ``(m, d')`` random NTK weights (data-independent).
      report: the `PrivacyReport`.
      config: the typed `RegressionConfig` (``k`` is the number of
        Gaussian samples used; None when non-private).
      sketch: ``(A (D, d'), B (D, m))`` of a replace-one fit
        (`privkernels.dp_ntk_regression.replace_one`), else None. Then ``alpha`` is
        the ``(D, c)`` weight vector on the sketched features and ``x_tilde`` is empty.
        With ``config.solver == "kernel-mean"`` (`privkernels.dp_ntk_regression.kernel_mean`)
        ``alpha`` holds the released class second moments ``(c, d', d')``, and ``weights``
        and ``x_tilde`` are empty ``(0, d')``.
    """

    alpha: jax.Array
    x_tilde: jax.Array
    weights: jax.Array
    report: PrivacyReport
    config: RegressionConfig
    sketch: tuple[jax.Array, jax.Array] | None = None

    @property
    def private(self) -> bool:
        return self.report.private

    @property
    def dtype(self) -> Any:
        return self.alpha.dtype

    @property
    def k(self) -> int | None:
        return self.config.k

    @property
    def n_classes(self) -> int | None:
        return self.config.n_classes

    @property
    def input_bound(self) -> float:
        return self.config.input_bound

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model (arrays, config, report) to an ``.npz`` (no pickle)."""
        arrays = {
            "alpha": np.asarray(self.alpha),
            "x_tilde": np.asarray(self.x_tilde),
            "weights": np.asarray(self.weights),
        }
        if self.sketch is not None:
            arrays["sketch_a"], arrays["sketch_b"] = (np.asarray(v) for v in self.sketch)
        meta = {"format": FORMAT, "config": self.config.to_dict(), "report": self.report.to_dict()}
        return checkpoint.save(path, arrays, meta)


def load(path: str | os.PathLike[str]) -> DPNTKRegressionModel:
    """Read a model written by `DPNTKRegressionModel.save` (report checked against config)."""
    arrays, meta = checkpoint.load(path, format=FORMAT)
    with checkpoint.reading("contents"):  # a crafted type or number: a ValueError, no traceback
        config = RegressionConfig.from_dict(meta["config"])
        report = PrivacyReport.from_dict(meta["report"])
        if report.private != (config.epsilon is not None) or (
            report.private and abs(report.epsilon - float(config.epsilon or 0)) > 1e-9
        ):
            raise ValueError("saved report and config disagree on the budget")
        check_records(report, config, weights=arrays["weights"], x_tilde=arrays["x_tilde"])
        _check_arrays(arrays, config)
    with x64(config.dtype == "float64"):
        dt = jnp.float64 if config.dtype == "float64" else jnp.float32
        return DPNTKRegressionModel(
            alpha=jnp.asarray(arrays["alpha"], dt),
            x_tilde=jnp.asarray(arrays["x_tilde"], dt),
            weights=jnp.asarray(arrays["weights"], dt),
            report=report,
            config=config,
            sketch=(
                (jnp.asarray(arrays["sketch_a"], dt), jnp.asarray(arrays["sketch_b"], dt))
                if "sketch_a" in arrays
                else None
            ),
        )


def _check_arrays(arrays: Any, config: RegressionConfig) -> None:
    """Refuse (``ValueError``) released arrays a fit does not write: non-finite or
    non-float values, or (classifiers) ``alpha`` without one column per class."""
    for name in ("alpha", "x_tilde", "weights", "sketch_a", "sketch_b"):
        a = np.asarray(arrays.get(name, np.zeros(1)))
        if a.dtype.kind != "f" or not np.all(np.isfinite(a)):
            raise ValueError(f"the file's {name} holds non-finite or non-float values")
    alpha = np.asarray(arrays["alpha"])
    axis = 0 if config.solver == "kernel-mean" else -1  # class moments (c, d', d')
    if config.n_classes is not None and alpha.shape[axis] != config.n_classes:
        raise ValueError("the file's alpha does not have one column per class of its config")


def check_records(
    report: PrivacyReport, config: RegressionConfig, *, weights: Any, x_tilde: Any
) -> None:
    """Refuse a loaded report that is not what `privkernels.dp_ntk_regression.fit` releases
    for ``config`` (each record's own consistency is `PrivacyReport.from_dict`'s).

    * replace-one: one Gaussian release of the sufficient statistics, sensitivity
      ``sqrt(2 + 4 target_bound^2)`` (kernel-mean: the class moments, ``sqrt(2)``);
    * beta-close: the Gaussian sampling release (its ``M`` at least the fixed-weights
      bound of the stored weights, its ``k`` the config's) then the truncated Laplace
      release of X~ (sensitivity ``sqrt(d) beta`` for the stored X~), each with its share
      of the budget.
    """
    check_neighbouring(config.neighbouring, (BETA_CLOSE, REPLACE_ONE))  # what fit releases
    if not report.private:
        return
    if report.neighbouring != config.neighbouring:
        raise ValueError(
            f"saved report is under {report.neighbouring}, the saved model's config under "
            f"{config.neighbouring}"
        )
    recs = report.mechanisms
    if config.neighbouring == REPLACE_ONE:
        sens = KERNEL_MEAN_SENSITIVITY if config.solver == "kernel-mean" else (
            ssp_sensitivity(float(config.target_bound or 1.0))
        )  # fmt: skip
        ok = len(recs) == 1 and recs[0].name == "gaussian" and report.proven
        ok = ok and math.isclose(float(recs[0].sensitivity or 0.0), sens, rel_tol=1e-9)
        ok = ok and math.isclose(recs[0].delta, float(config.delta or 0), rel_tol=1e-9)
    else:
        ok = _beta_close_records_match(recs, config, weights, x_tilde)
        # Lemma D.1 is stated for eps_alpha < 1: the report is proven exactly then
        ok = ok and report.proven == (recs[0].epsilon < 1.0)
    if not ok:
        raise ValueError(
            f"saved report does not hold the releases this {config.neighbouring} model makes "
            "(mechanisms, sensitivities, k or budget shares differ)"
        )


def _beta_close_records_match(recs: Any, config: RegressionConfig, weights: Any,
                              x_tilde: Any) -> bool:  # fmt: skip
    if len(recs) != 2 or [r.name for r in recs] != ["gaussian_sampling", "truncated_laplace"]:
        return False
    kernel, inputs = recs
    n, d = int(np.shape(x_tilde)[0]), int(np.shape(x_tilde)[1]) - int(config.fit_intercept)
    share_x, share_k = Budget(float(config.epsilon or 0), float(config.delta or 0)).split(
        config.split[1], config.split[0]
    )
    bound = sensitivity_bound(
        n, eta_min=float(config.eta_min or 0.0), beta=config.beta, weight_std=config.weight_std,
        input_bound=config.input_bound, weights=weights,
    )["used"]  # fmt: skip
    return (
        int(kernel.param_dict.get("k", -1)) == config.k
        and float(kernel.sensitivity or 0.0) >= bound * (1.0 - 1e-9)
        and math.isclose(
            float(inputs.sensitivity or 0.0), math.sqrt(d) * config.beta, rel_tol=1e-9
        )  # fmt: skip
        and math.isclose(kernel.epsilon, share_k.epsilon, rel_tol=1e-9)
        and math.isclose(inputs.epsilon, share_x.epsilon, rel_tol=1e-9)
        and math.isclose(kernel.delta, share_k.delta, rel_tol=1e-9)
        and math.isclose(inputs.delta, share_x.delta, rel_tol=1e-9)
    )


def x64(enable: bool) -> Any:
    """A local 64-bit context when needed (never turns x64 *off* for the caller)."""
    return jax.enable_x64(True) if enable else contextlib.nullcontext()


def _queries(model: DPNTKRegressionModel, x: Any) -> jax.Array:
    x_arr = check_array(x, "x", finite=True)
    if x_arr.ndim < 2:
        raise ValueError(f"x must have shape (n, d) (or (n, ...)), got {tuple(x_arr.shape)}")
    d = model.weights.shape[1] - int(model.config.fit_intercept)
    n = int(x_arr.shape[0])
    if int(np.prod(x_arr.shape[1:])) != d:
        raise ValueError(
            f"x has {int(np.prod(x_arr.shape[1:]))} features per example, the model expects {d}"
        )
    xr = jnp.asarray(np.asarray(x_arr).reshape(n, d), dtype=model.dtype)
    return input_map(xr, model.input_bound, model.config.fit_intercept)


@partial(jax.jit)
@full_precision
def _block_scores(xb: jax.Array, x_tilde: jax.Array, w: jax.Array, alpha: jax.Array) -> jax.Array:
    """``K(xb, X~) alpha``, ``(b, c)``. Full float32: the ridge coefficients ``alpha`` can be
    large and of both signs, so a reduced-precision (TF32) product loses the scores to
    cancellation (`privkernels.precision`)."""
    return kernel_block(xb, x_tilde, w) @ alpha


@partial(jax.jit)
@full_precision
def _feature_scores(psi: jax.Array, beta: jax.Array) -> jax.Array:
    """``psi beta``, ``(n, c)``: replace-one scores from the sketched features, full float32
    for the same reason as `_block_scores`."""
    return psi @ beta


def predict(model: DPNTKRegressionModel, x: Any) -> np.ndarray:
    """Scores ``K(x, X~) alpha`` (Alg. 2 line 7), NumPy ``(n_test, c)``.

    Test inputs go through the same input map (ball, intercept column); the kernel rows use the
    privatized inputs ``X~`` (never the raw training inputs). Returns ``(n_test,)``
    when the model was fitted on 1-D real targets. (Def. 3.8 has a 1/n factor that
    Alg. 2 omits; it changes no argmax.)
    """
    if not isinstance(model, DPNTKRegressionModel):
        raise TypeError(f"model must be a DPNTKRegressionModel, got {type(model).__name__}")
    with x64(model.dtype == jnp.float64):
        xq = _queries(model, x)
        if model.config.solver == "kernel-mean":  # scores = x^T M_c x
            out = km_scores(xq, model.alpha, input_bound=model.input_bound,
                            chunk_size=model.config.chunk_size)  # fmt: skip
            return out[:, 0] if model.config.target_ndim == 1 else out
        if model.sketch is not None:  # replace-one: scores = psi(x)^T beta
            psi = ssp_features(xq, model.weights, model.sketch, model.config.chunk_size)
            scores = np.asarray(_feature_scores(jnp.asarray(psi), model.alpha))
            return scores[:, 0] if model.config.target_ndim == 1 else scores
        scores = map_row_chunks(
            lambda xb: _block_scores(xb, model.x_tilde, model.weights, model.alpha),
            xq,
            model.config.chunk_size,
        )
    return scores[:, 0] if model.config.target_ndim == 1 else scores


def predict_labels(model: DPNTKRegressionModel, x: Any) -> np.ndarray:
    """``argmax`` of `predict` over classes, ``(n_test,)`` int32 (Sec. 6.1)."""
    if not isinstance(model, DPNTKRegressionModel):
        raise TypeError(f"model must be a DPNTKRegressionModel, got {type(model).__name__}")
    if model.n_classes is None:
        raise ValueError("predict_labels needs a model fitted on class labels (n_classes set)")
    return np.argmax(predict(model, x), axis=-1).astype(np.int32)
