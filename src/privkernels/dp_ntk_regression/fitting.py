"""``dp_ntk_regression.fit`` (Gu et al., Alg. 2): noisy kernel, noisy inputs, one ridge solve."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from privkernels import checkpoint
from privkernels._validation import (
    N_CLASSES_INFERRED_NOTE,
    check_array,
    check_bool,
    check_fit_rows,
    check_fraction,
    check_int,
    check_labels,
    check_nonnegative,
    check_positive,
    infer_n_classes,
)
from privkernels.dp_ntk_regression import kernel_mean as km
from privkernels.dp_ntk_regression import replace_one as r1
from privkernels.dp_ntk_regression.kernel import (
    add_diagonal,
    check_input_bound,
    check_target_bound,
    draw_weights,
    input_map,
    kernel_matrix,
    warn_projected,
)
from privkernels.dp_ntk_regression.model import (
    DPNTKRegressionModel,
    RegressionConfig,
    load,
    x64,
)
from privkernels.dp_ntk_regression.sensitivity import max_k, sensitivity_bound, shift_for_k
from privkernels.dp_ntk_regression.settings import BETA_CLOSE_ONLY, Settings, refuse_unused
from privkernels.linalg import ridge_solve
from privkernels.options import RunOptions, run_options
from privkernels.privacy.accountant import charged_release
from privkernels.privacy.budget import Budget, as_budget
from privkernels.privacy.keys import public_key_of, release_key
from privkernels.privacy.release import gaussian_sampling_release, truncated_laplace_release
from privkernels.privacy.report import (
    BETA_CLOSE,
    REPLACE_ONE,
    MechanismRecord,
    PrivacyReport,
    check_neighbouring,
    non_private_report,
    with_notes,
)
from privkernels.privacy.warnings import warn_beta_close

__all__ = ["fit", "check_replace_one_settings", "LABELS_NOT_PROTECTED", "AUTO_SHIFT_SAMPLES"]

#: ``kernel_shift="auto"`` picks the shift at which eq. (1) allows this many
#: Gaussian samples (chosen on validation splits: ``git show b99f0d9:scripts/regression_defaults.py``).
AUTO_SHIFT_SAMPLES = 2500

#: Headroom of the Gaussian sampling mechanism's k-sample sum over the shift:
#: ``SHIFT_SUM_MARGIN * k * s`` must stay below the release dtype's largest float
#: (`_check_auto_shift`, `_check_explicit_shift`).
SHIFT_SUM_MARGIN = 4.0

#: The caveat every private report of this module carries (Def. 4.1 keeps y_n).
LABELS_NOT_PROTECTED = (
    "LABELS ARE NOT PROTECTED: beta-close neighbours (Gu et al., Def. 4.1) keep every label "
    "and change one record's features by at most beta in L2; Y enters alpha = (K~ + reg I)^-1 Y "
    "without noise, so the labels are treated as public."
)


def fit(
    key: jax.Array,
    x: Any,
    y: Any,
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    n_classes: int | None = None,
    mesh: Any = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool = True,
    width: int = 256,
    reg: float = 0.1,
    beta: float = 1e-6,
    eta_min: float | None = None,
    input_bound: float = 1.0,
    split: tuple[float, float] = (0.5, 0.5),
    k: int | None = None,
    weight_std: float = 1.0,
    kernel_shift: float | Literal["auto"] = "auto",
    fit_intercept: bool = True,
    neighbouring: Literal["replace-one", "beta-close"] = "replace-one",
    features: int | None = None,
    target_bound: float = 1.0,
    ridge_factor: float | None = None,
    solver: Literal["ridge", "kernel-mean"] = "ridge",
    chunk_size: int = 1024,
    dtype: Literal["float32", "float64"] | Any = "float32",
    allow_unproven: bool = False,
    public_key: jax.Array | None = None,
    budget_accountant: Any = None,
) -> DPNTKRegressionModel:
    """Fit private quadratic-NTK ridge regression (Gu et al., Alg. 2).

    Args:
      key: ``jax.random.key`` of the release; split into (weights, kernel mechanism, input
        mechanism), or (weights, sketch, noise) under replace-one. A key that visibly comes
        from a small int draws reproducible, not secret, noise
        (`privkernels.privacy.SeededKeyWarning`, report note; use `privkernels.fresh_key`).
      x: ``(n, d)`` training inputs (higher-rank inputs are flattened per example);
        projected to the L2 ball of radius ``input_bound`` (in ``[1e-6, 1e6]``) first.
      y: ``(n,)`` integer labels (one-hot targets, Sec. 6.1) or ``(n,)`` / ``(n, c)``
        real targets. **Not protected** (Def. 4.1).
      epsilon, delta, width ... allow_unproven (but the run options): the fit's
        `privkernels.dp_ntk_regression.settings.Settings`, documented there.
      n_classes: for integer labels; None reads ``max(y) + 1`` (``PrivacyLeakWarning``,
        report note; labels are public under beta-close anyway).
      mesh: a device mesh over the example axis: the kernel rows are computed over
        it (each device its rows, against all inputs); the mechanisms then run on
        one device. Beta-close only: replace-one fits refuse it (they run on one device).
      checkpoint_path, resume: the fitted model is saved there; ``resume=True``
        returns the saved model without reading the data (same budget, relation, solver
        and, under beta-close, ``beta`` required; an unproven report only with
        ``allow_unproven``). A path that cannot be written is refused before any noise
        (`checkpoint.check_writable`).
      progress: accepted for the common contract (a fit is one solve).
      chunk_size: rows per chunk when building kernel matrices.
      public_key: the key of the data-independent draws (NTK weights, sketch), independent
        of ``key`` (a fresh key: the saved weights then say nothing about the noise key);
        None derives them from ``key``.
      budget_accountant: the `privkernels.privacy.BudgetAccountant` charged ``(epsilon,
        delta)`` (None: the default accountant of an open ``with`` block, or none); it
        refuses the fit before any noise when that does not fit in what remains. A resume
        releases nothing and charges nothing.

    Returns:
      `DPNTKRegressionModel` (beta-close report with two mechanisms).

    Raises:
      ValueError: on invalid input (TypeError on wrong kinds), before any noise is
        drawn; also when no k satisfies the privacy condition (see `max_k`).
    """
    s = Settings(
        epsilon=epsilon, delta=delta, width=width, reg=reg, beta=beta, eta_min=eta_min,
        input_bound=input_bound, split=split, k=k, weight_std=weight_std,
        kernel_shift=kernel_shift, fit_intercept=fit_intercept, neighbouring=neighbouring,
        features=features, target_bound=target_bound, ridge_factor=ridge_factor,
        solver=solver, dtype=dtype, allow_unproven=allow_unproven,
    )  # fmt: skip
    opts = run_options(mesh=mesh, checkpoint_path=checkpoint_path, resume=resume,
                       progress=progress, chunk_size=chunk_size)  # fmt: skip
    check_neighbouring(neighbouring, (BETA_CLOSE, REPLACE_ONE))  # a resume too
    check_fit_rows(x, "x")
    if neighbouring == BETA_CLOSE and epsilon is not None:
        warn_beta_close()
    ck = opts.checkpoint_path
    if opts.resume:
        return _resume(ck, x, y, s)
    if ck is not None:  # before the release, not when the model is saved
        checkpoint.check_new(ck, "return the saved model")
    key, seeded = release_key(key)
    inputs = Inputs(x, y, n_classes, public_key)
    model = charged_release(budget_accountant, epsilon, delta, neighbouring,
                            lambda: _noted(_fit(key, s, opts, inputs), seeded))  # fmt: skip
    if ck is not None:
        model.save(ck)
    return model


def check_replace_one_settings(**settings: Any) -> None:
    """Refuse, before any data is read or noise drawn, the replace-one settings `fit` would
    refuse: an unknown keyword (``TypeError``, as the call would), a beta-close parameter,
    a ``solver``, ``dtype``, ``mesh`` or value out of range. For callers that release
    something of their own before calling `fit` (the estimators' private scaling), so a
    typo costs no budget. ``settings``: `fit`'s keywords but ``key``, ``x`` and ``y``.
    """
    params = inspect.signature(fit).parameters
    unknown = sorted(set(settings) - (set(params) - {"key", "x", "y"}))
    if unknown:
        raise TypeError(f"fit() got unexpected keyword argument(s) {unknown}")
    given = {**{k: p.default for k, p in params.items() if k not in ("key", "x", "y")},
             **settings}  # fmt: skip
    fields = {f.name for f in dataclasses.fields(Settings)}
    s = Settings(**{k: v for k, v in given.items() if k in fields})
    opts = run_options(**{k: v for k, v in given.items() if k in RunOptions._fields})
    check_neighbouring(s.neighbouring, (REPLACE_ONE,))
    _check_solver(s)
    if s.solver == "kernel-mean":
        _check_kernel_mean_settings(s)
    _check_float32(s)
    _check_one_device(opts)
    _refuse_beta_close_settings(s)
    if s.features is not None:
        check_int(s.features, "features")
    check_target_bound(s.target_bound)
    if s.ridge_factor is not None:
        check_nonnegative(s.ridge_factor, "ridge_factor")
    check_bool(settings.get("allow_unproven", False), "allow_unproven")
    _replace_one_config(s, opts, None, 1)
    as_budget(s.epsilon, s.delta)


def _check_solver(s: Settings) -> None:
    if s.solver not in ("ridge", "kernel-mean"):
        raise ValueError(f"solver must be 'ridge' or 'kernel-mean', got {s.solver!r}")


def _check_float32(s: Settings) -> None:
    """A replace-one (ridge) fit runs in float32."""
    if s.dtype not in ("float32", np.float32, jnp.float32):
        raise ValueError("neighbouring='replace-one' runs in float32")


def _check_one_device(opts: RunOptions) -> None:
    """Replace-one fits run on one device (only the beta-close kernel matrix is sharded)."""
    if opts.mesh is not None:
        raise ValueError("mesh= shards the beta-close kernel matrix; replace-one fits run on "
                         "one device: pass mesh=None")  # fmt: skip


class Inputs(NamedTuple):
    """A fit's data (private ``x``; ``y`` public under beta-close), ``n_classes`` as given,
    and the caller's public key (None: the data-independent draws come from ``key``)."""

    x: Any
    y: Any
    n_classes: int | None
    public_key: jax.Array | None


def _fit(key: jax.Array, s: Settings, opts: RunOptions, inp: Inputs) -> DPNTKRegressionModel:
    """The mechanism ``s`` asks for: replace-one (ridge or kernel-mean) or beta-close."""
    budget = as_budget(s.epsilon, s.delta)
    _check_solver(s)
    if s.solver == "kernel-mean" and s.neighbouring != "replace-one":
        raise ValueError("solver='kernel-mean' is a replace-one mechanism: pass "
                         "neighbouring='replace-one'")  # fmt: skip
    if s.neighbouring == BETA_CLOSE:
        return _fit_beta_close(key, budget, s, opts, inp)
    _check_one_device(opts)
    fit_one = _fit_kernel_mean if s.solver == "kernel-mean" else _fit_replace_one
    return fit_one(key, budget, s, opts, inp)


def _fit_beta_close(
    key: jax.Array, budget: Budget | None, s: Settings, opts: RunOptions, inp: Inputs
) -> DPNTKRegressionModel:
    """Alg. 2: data-independent weights, the kernel matrix, then the two releases."""
    cfg, x_arr, y_mat, inferred, shares = _validate(s, opts, inp, budget)
    dt = jnp.float64 if cfg.dtype == "float64" else jnp.float32
    n, d = int(x_arr.shape[0]), int(np.prod(x_arr.shape[1:]))
    d_in = d + int(cfg.fit_intercept)
    with x64(dt == jnp.float64):
        k_w, k_alpha, k_x = jax.random.split(key, 3)
        if inp.public_key is not None:
            k_w = public_key_of(inp.public_key, key)
        # Data-independent weights first: the fixed-weights sensitivity bound needs them.
        weights = draw_weights(k_w, d_in, width=cfg.width, weight_std=cfg.weight_std, dtype=dt)
        plan = None if shares is None else _plan(cfg, shares, n, weights)
        warn_projected(x_arr, cfg.input_bound, cfg.fit_intercept)
        xp = input_map(
            jnp.asarray(np.asarray(x_arr).reshape(n, d), dtype=dt),
            cfg.input_bound,
            cfg.fit_intercept,
        )
        if plan is not None and cfg.eta_min is not None and cfg.eta_min > cfg.kernel_shift:
            _check_eta_min(xp, weights, cfg.eta_min, cfg.kernel_shift, cfg.chunk_size)
        kmat = kernel_matrix(xp, xp, weights, cfg.chunk_size, mesh=opts.mesh)
        y_j = jnp.asarray(y_mat, dtype=dt)
        if plan is not None:
            return _release(k_alpha, k_x, kmat, xp, y_j, weights, cfg, plan, n, d, dt, inferred)
        if cfg.kernel_shift > 0:
            kmat = add_diagonal(kmat, jnp.asarray(cfg.kernel_shift, dt))
        alpha = ridge_solve(kmat, y_j, jnp.asarray(cfg.reg, dt))
        _check_finite(alpha, dt)
        cfg = dataclasses.replace(cfg, k=None)
        return DPNTKRegressionModel(alpha, xp, weights, _non_private(), cfg)


def _noted(model: DPNTKRegressionModel, notes: tuple[str, ...]) -> DPNTKRegressionModel:
    return dataclasses.replace(model, report=with_notes(model.report, notes)) if notes else model


def _rows(x: Any) -> tuple[np.ndarray, int, int]:
    """``x`` (``(n, ...)``, finite) checked, with its row count and flattened width."""
    x_arr = check_array(x, "x", finite=True)
    if x_arr.ndim < 2 or int(np.prod(x_arr.shape[1:])) == 0:
        raise ValueError(f"x must have shape (n, d) (or (n, ...)), got {tuple(x_arr.shape)}")
    return x_arr, int(x_arr.shape[0]), int(np.prod(x_arr.shape[1:]))


def _fit_replace_one(
    key: jax.Array, budget: Budget | None, s: Settings, opts: RunOptions, inp: Inputs
) -> DPNTKRegressionModel:
    """Sufficient-statistics perturbation (`replace_one` module): validate, features, release, solve."""
    _refuse_beta_close_settings(s)
    x_arr, n, d = _rows(inp.x)
    y_mat, n_classes, target_ndim, inferred = _targets(inp.y, n, inp.n_classes)
    features = r1.DEFAULT_FEATURES if s.features is None else s.features
    features = check_int(features, "features")
    target_bound = check_target_bound(s.target_bound)
    factor = s.ridge_factor
    factor = (
        r1.DEFAULT_RIDGE_FACTOR if factor is None else check_nonnegative(factor, "ridge_factor")
    )
    cfg = _replace_one_config(s, opts, n_classes, target_ndim, features=features,
                              target_bound=target_bound)  # fmt: skip
    _check_float32(s)
    d_in = d + int(cfg.fit_intercept)
    k_w, k_s, k_noise = jax.random.split(key, 3)
    if inp.public_key is not None:
        k_w, k_s = jax.random.split(public_key_of(inp.public_key, key))
    weights = draw_weights(k_w, d_in, width=cfg.width, weight_std=cfg.weight_std)
    sketch = r1.draw_sketch(k_s, d_in, cfg.width, features, jnp.float32)
    warn_projected(x_arr, cfg.input_bound, cfg.fit_intercept)
    xp = input_map(jnp.asarray(np.asarray(x_arr, np.float32).reshape(n, d)), cfg.input_bound,
                   cfg.fit_intercept)  # fmt: skip
    stat, b = r1.sufficient_statistics(xp, jnp.asarray(y_mat, jnp.float32), weights, sketch,
                                       target_bound=target_bound, chunk_size=cfg.chunk_size)  # fmt: skip
    del xp, x_arr
    if budget is None:
        beta_w, report, ridge = r1.solve(stat, b, cfg.reg), _non_private(), cfg.reg
    else:
        s_t, b_t, record, std = r1.release_statistics(
            k_noise, stat, b, budget=budget, target_bound=target_bound, n=n
        )
        ridge = cfg.reg + factor * 2.0 * std * math.sqrt(features)
        beta_w = r1.solve(s_t, b_t, ridge)
        report = r1.replace_one_report(record, d=d_in, width=cfg.width, features=features,
                                       input_bound=cfg.input_bound,
                                       inferred_note=N_CLASSES_INFERRED_NOTE if inferred else None)  # fmt: skip
        cfg = dataclasses.replace(cfg, epsilon=report.epsilon, delta=report.delta)
    _check_finite(beta_w, jnp.float32)
    cfg = dataclasses.replace(cfg, ridge=float(ridge))
    empty = jnp.zeros((0, d_in), jnp.float32)
    return DPNTKRegressionModel(beta_w, empty, weights, report, cfg, sketch=sketch)


def _fit_kernel_mean(
    key: jax.Array, budget: Budget | None, s: Settings, opts: RunOptions, inp: Inputs
) -> DPNTKRegressionModel:
    """The large-ridge limit (`kernel_mean` module): validate, class moments, one release."""
    _check_kernel_mean_settings(s)
    if isinstance(key, jax.core.Tracer):  # under jax.vmap / jit of the key: no host sum
        raise ValueError("solver='kernel-mean' sums and noises its class moments in float64 on "
                         "the host: call fit once per key, not under a jax transformation")  # fmt: skip
    x_arr, n, d = _rows(inp.x)
    y_mat, n_classes, target_ndim, inferred = _targets(inp.y, n, inp.n_classes)
    if n_classes is None:
        raise ValueError("solver='kernel-mean' needs class labels (integer y or n_classes); "
                         "real targets may point in opposite directions and break its bound")  # fmt: skip
    cfg = _replace_one_config(s, opts, n_classes, target_ndim, solver="kernel-mean")
    d_in = d + int(cfg.fit_intercept)
    warn_projected(x_arr, cfg.input_bound, cfg.fit_intercept)
    xp = input_map(jnp.asarray(np.asarray(x_arr, np.float32).reshape(n, d)), cfg.input_bound,
                   cfg.fit_intercept)  # fmt: skip
    m = km.class_moments(xp, np.argmax(y_mat, axis=1), n_classes, input_bound=cfg.input_bound,
                         chunk_size=cfg.chunk_size)  # fmt: skip
    del xp, x_arr
    report: PrivacyReport = _non_private()
    released: Any = m
    if budget is not None:
        released, record = km.release_moments(key, m, budget=budget, n=n)
        report = km.kernel_mean_report(record, d=d_in, input_bound=cfg.input_bound,
                                       inferred_note=N_CLASSES_INFERRED_NOTE if inferred else None)  # fmt: skip
        cfg = dataclasses.replace(cfg, epsilon=report.epsilon, delta=report.delta)
    empty = jnp.zeros((0, d_in), jnp.float32)
    return DPNTKRegressionModel(jnp.asarray(released, jnp.float32), empty, empty, report, cfg)


def _check_kernel_mean_settings(s: Settings) -> None:
    """The kernel-mean limit takes no ridge, sketch, width or beta-close setting (each must
    stay at its default), one-hot targets (``target_bound`` 1) and float32."""
    limit_ignores = ("features", "ridge_factor", "width", "weight_std", "reg")
    refuse_unused(s, BETA_CLOSE_ONLY + limit_ignores, "solver='kernel-mean'")
    if s.target_bound != 1.0:
        raise ValueError("target_bound does not apply to solver='kernel-mean' (one-hot labels)")
    if s.dtype not in ("float32", np.float32, jnp.float32):
        raise ValueError("solver='kernel-mean' runs in float32")


#: Smallest ``reg`` of a replace-one fit: with ``ridge_factor=0`` it is the whole ridge of
#: the float32 solve, so ``1 / ridge <= 1e8`` keeps the solution finite (checked before noise).
REPLACE_ONE_MIN_REG = 1e-8


def _refuse_beta_close_settings(s: Settings) -> None:
    """A replace-one fit (or resume) takes none of the beta-close mechanism's settings."""
    refuse_unused(s, BETA_CLOSE_ONLY, "neighbouring='replace-one' (a beta-close parameter)")


def _replace_one_config(s: Settings, opts: RunOptions, n_classes: int | None, target_ndim: int,
                        **extra: Any) -> RegressionConfig:  # fmt: skip
    """The validated config of a replace-one fit (float32, no beta-close parameters)."""
    reg = check_positive(s.reg, "reg")
    if reg < REPLACE_ONE_MIN_REG:  # the float32 solve after the release would overflow
        raise ValueError(f"reg must be >= {REPLACE_ONE_MIN_REG:g} with neighbouring='replace-one', "
                         f"got {reg!r}")  # fmt: skip
    return RegressionConfig(
        width=check_int(s.width, "width"), reg=reg,
        beta=0.0, eta_min=None,
        input_bound=check_input_bound(s.input_bound, s.fit_intercept is True), split=(1.0, 0.0), k=None,
        weight_std=check_positive(s.weight_std, "weight_std"), kernel_shift=0.0,
        chunk_size=check_int(opts.chunk_size, "chunk_size"), dtype="float32",
        n_classes=n_classes, target_ndim=target_ndim, epsilon=None, delta=None,
        fit_intercept=check_bool(s.fit_intercept, "fit_intercept"),
        neighbouring="replace-one", **extra,
    )  # fmt: skip


def _validate(
    s: Settings, opts: RunOptions, inp: Inputs, budget: Budget | None
) -> tuple[RegressionConfig, Any, np.ndarray, bool, tuple[Budget, Budget] | None]:
    """All checks before any randomness; the config, inputs, target matrix, whether the
    labels were read for ``n_classes``, and the budget's (inputs, kernel) shares, split
    here once (None: non-private)."""
    name = np.dtype(s.dtype).name if not isinstance(s.dtype, str) else s.dtype
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {s.dtype!r}")
    private = budget is not None
    split = tuple(float(f) for f in s.split)
    if len(split) != 2:
        raise ValueError(f"split must be (kernel, inputs) fractions, got {s.split!r}")
    shares = None
    if budget is not None:
        for f in split:
            check_fraction(f, "split")
        if abs(sum(split) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must sum to 1, got {s.split!r}")
        inputs, kernel = budget.split(split[1], split[0])
        shares = (inputs, kernel)
        if kernel.epsilon >= 1.0 and not s.allow_unproven:
            raise ValueError(
                f"eps_alpha = epsilon * split[0] = {kernel.epsilon:.4g} >= 1: the "
                "Gaussian sampling mechanism's guarantee (Gu et al. Lemma D.1, Def. 5.2) is stated "
                "for eps_alpha in (0, 1) only. Lower epsilon or the kernel share of split, or pass "
                "allow_unproven=True to release anyway with a report marked unproven"
            )
    k = None if s.k is None else check_int(s.k, "k")
    x_arr = check_array(inp.x, "x", finite=True)
    if x_arr.ndim < 2:
        raise ValueError(
            f"x must have shape (n, d) (or (n, ...) flattened per example), got {tuple(x_arr.shape)}"
        )
    if int(np.prod(x_arr.shape[1:])) == 0:
        raise ValueError(f"x has no features (shape {tuple(x_arr.shape)})")
    kernel_shift = _kernel_shift(s, None if shares is None else shares[1], int(x_arr.shape[0]))
    _check_auto_shift(s, kernel_shift, budget, name)
    eta_min = s.eta_min
    if private and eta_min is None:
        if kernel_shift <= 0:
            raise ValueError(
                "eta_min is required for a private fit with kernel_shift=0: a PUBLIC lower bound "
                "on the smallest eigenvalue of the kernel matrix (the paper uses 7e-3), or pass "
                "kernel_shift=s > 0 (or 'auto', the default) to make eta_min=s hold for every dataset"
            )
        eta_min = kernel_shift
    if eta_min is not None:
        eta_min = check_positive(eta_min, "eta_min")
    if shares is not None and eta_min is not None:
        _check_explicit_shift(s, kernel_shift, eta_min, shares[1], int(x_arr.shape[0]), name)
    y_mat, n_classes, target_ndim, inferred = _targets(inp.y, int(x_arr.shape[0]), inp.n_classes)
    cfg = RegressionConfig(
        width=check_int(s.width, "width"),
        reg=check_positive(s.reg, "reg"),
        beta=check_positive(s.beta, "beta"),
        eta_min=eta_min,
        input_bound=check_input_bound(s.input_bound, s.fit_intercept is True),
        split=split,  # type: ignore[arg-type]
        k=k,
        weight_std=check_positive(s.weight_std, "weight_std"),
        kernel_shift=kernel_shift,
        chunk_size=check_int(opts.chunk_size, "chunk_size"),
        dtype=name,
        n_classes=n_classes,
        target_ndim=target_ndim,
        epsilon=None,
        delta=None,
        fit_intercept=check_bool(s.fit_intercept, "fit_intercept"),
    )
    return cfg, x_arr, y_mat, inferred, shares


def _kernel_shift(s: Settings, kernel: Budget | None, n: int) -> float:
    """The numeric kernel shift: as given, or ``"auto"`` resolved from public quantities
    (``kernel``: the kernel release's share of the budget; None: non-private)."""
    shift = s.kernel_shift
    if not (isinstance(shift, str) and shift == "auto"):
        if isinstance(shift, str):
            raise ValueError(f"kernel_shift must be a number >= 0 or 'auto', got {shift!r}")
        return check_nonnegative(shift, "kernel_shift")
    if kernel is None or s.eta_min is not None:  # an explicit eta_min is the user's bound
        return 0.0
    return shift_for_k(
        max(n, 1), AUTO_SHIFT_SAMPLES, epsilon_alpha=kernel.epsilon, delta_alpha=kernel.delta,
        beta=check_positive(s.beta, "beta"),
        weight_std=check_positive(s.weight_std, "weight_std"),
        input_bound=check_input_bound(s.input_bound, s.fit_intercept is True),
    )  # fmt: skip


def _check_auto_shift(s: Settings, shift: float, budget: Budget | None, dtype: str) -> None:
    """Refuse an epsilon whose ``kernel_shift="auto"`` the Gaussian sampling mechanism cannot
    carry in ``dtype`` (before any draw; every number in the message is public).

    The mechanism (Gu et al., Alg. 1) sums ``k`` outer products ``g g^T``,
    ``g ~ N(0, K + s I)``, before dividing by ``k``: the sum's diagonal is
    ``(s + K_ii) chi2_k``. The automatic shift is ``s = c / epsilon`` (`shift_for_k`,
    ``c`` public) with ``k <= AUTO_SHIFT_SAMPLES``; where ``4 k s`` nears the largest
    float, ``K_ii`` (of order ``sigma^2 B^4``) is far below ``s`` and ``chi2_k / k < 2``
    for such ``k`` (``P < e^-300``), so ``SHIFT_SUM_MARGIN k s <= max`` keeps the sum
    finite. Since ``s`` is proportional to ``1 / epsilon``, the smallest epsilon that
    meets it is ``epsilon s / limit``.
    """
    if budget is None or not (isinstance(s.kernel_shift, str) and shift > 0):
        return
    limit = float(np.finfo(dtype).max) / (SHIFT_SUM_MARGIN * AUTO_SHIFT_SAMPLES)
    if shift <= limit:
        return
    exact = budget.epsilon * shift / limit * (1.0 + 1e-12)
    if not (math.isfinite(exact) and exact > 0):  # the shift itself overflowed a float
        raise ValueError(
            f"epsilon={budget.epsilon:.3g} is too small for the Gaussian sampling mechanism: "
            "kernel_shift='auto' (proportional to 1/epsilon) overflows a float"
        )
    raise ValueError(
        f"epsilon={budget.epsilon:.3g} is too small for the Gaussian sampling mechanism in "
        f"{dtype}: kernel_shift='auto' needs s = {shift:.3g}, and the sum of its "
        f"k = {AUTO_SHIFT_SAMPLES} samples would overflow ({SHIFT_SUM_MARGIN:g} k s must stay "
        f"<= {float(np.finfo(dtype).max):.3g}). The smallest epsilon that works with these "
        f"n, delta, beta, weight_std, input_bound and split is {_three_digits(exact, math.ceil):.3g}"
        + (" (or pass dtype='float64')" if dtype == "float32" else "")
    )


def _three_digits(x: float, direction: Callable[[float], float]) -> float:
    """``x > 0`` rounded to 3 significant digits by ``direction`` (``math.ceil``: up, for a
    smallest value that works; ``math.floor``: down, for a largest)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 2)
    return direction(x / unit) * unit


def _check_explicit_shift(
    s: Settings, shift: float, eta_min: float, kernel: Budget, n: int, dtype: str
) -> None:
    """Refuse an explicit ``kernel_shift`` the Gaussian sampling mechanism cannot carry in
    ``dtype`` (before any draw; every number in the message is public).

    The bound of `_check_auto_shift`, ``SHIFT_SUM_MARGIN k s <= max`` (the k-sample sum's
    diagonal is ``(s + K_ii) chi2_k``, Gu et al., Alg. 1), with ``k`` the samples this fit
    would draw: the given ``k``, else the largest private k capped at ``2**31 - 1`` (`_plan`).
    The weights are not drawn yet, so eq. (1)'s k is taken with the paper's bound on M
    (`max_k` without weights); the fixed-weights bound `_plan` also applies can only lower
    it, and it is the cap whenever the sum can overflow in float32 (there ``k`` grows as
    ``eta_min^2``). Beyond the bound the sum overflows: an all-zero model, or, for ``2 s``
    past the largest float, a "not positive semi-definite" refusal inside the mechanism.
    """
    if isinstance(s.kernel_shift, str) or shift <= 0:
        return  # the automatic shift: `_check_auto_shift`
    top = float(np.finfo(dtype).max)
    k = 2**31 - 1 if s.k is None else check_int(s.k, "k")
    if SHIFT_SUM_MARGIN * k * shift <= top:
        return
    if s.k is None:  # the k eq. (1) allows (refused there, as in `_plan`, if none)
        k = min(k, max_k(n, epsilon_alpha=kernel.epsilon, delta_alpha=kernel.delta,
                         eta_min=eta_min, beta=check_positive(s.beta, "beta"),
                         weight_std=check_positive(s.weight_std, "weight_std"),
                         input_bound=check_input_bound(s.input_bound, s.fit_intercept is True)))  # fmt: skip
        if SHIFT_SUM_MARGIN * k * shift <= top:
            return
    largest = top / (SHIFT_SUM_MARGIN * k)
    raise ValueError(
        f"kernel_shift={shift:.3g} is too large for the Gaussian sampling mechanism in "
        f"{dtype}: the fit would draw k = {k} samples, and their sum would overflow "
        f"({SHIFT_SUM_MARGIN:g} k s must stay <= {top:.3g}). The largest kernel_shift that "
        f"works with this k is {_three_digits(largest, math.floor):.3g} (or pass a smaller k"
        + (", or dtype='float64')" if dtype == "float32" else ")")
    )


def _targets(y: Any, n: int, n_classes: int | None) -> tuple[np.ndarray, int | None, int, bool]:
    """One-hot ``(n, c)`` targets for labels, or real targets as ``(n, c)``."""
    arr = np.asarray(y)
    if arr.ndim == 0:
        raise ValueError("y must be a 1-D array of labels or an (n,) / (n, c) array of targets")
    inferred = False
    if n_classes is not None or (arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer)):
        if n_classes is None:  # a read of the labels: warned and noted (private under replace-one)
            n_classes, inferred = infer_n_classes(arr, None, minimum=2)
        n_classes = check_int(n_classes, "n_classes", minimum=1)
        labels = check_labels(arr, n_classes, "y", n_rows=n)
        return np.eye(n_classes, dtype=np.float64)[labels], n_classes, 2, inferred
    vals = np.asarray(check_array(arr, "y", ndim=(1, 2)), dtype=np.float64)
    if vals.shape[0] != n:
        raise ValueError(f"y has {vals.shape[0]} rows but x has {n} rows")
    return (vals[:, None] if vals.ndim == 1 else vals), None, vals.ndim, inferred


class _Plan(NamedTuple):
    """The two budgets, k and the sensitivity bounds of a private fit."""

    kernel: Budget
    inputs: Budget
    k: int
    k_allowed: int
    bounds: dict[str, float]


def _plan(
    cfg: RegressionConfig,
    shares: tuple[Budget, Budget],
    n: int,
    weights: jax.Array,
) -> _Plan:
    """Choose k for the kernel's share (Condition 5.3, eq. (1)); refuse k above the maximum.
    ``shares``: the (inputs, kernel) budgets `_validate` split."""
    inputs, kernel = shares
    assert cfg.eta_min is not None
    kw: dict[str, Any] = dict(
        eta_min=cfg.eta_min,
        beta=cfg.beta,
        weight_std=cfg.weight_std,
        input_bound=cfg.input_bound,
        weights=weights,
    )
    bounds = sensitivity_bound(n, **kw)
    k_allowed = max_k(n, epsilon_alpha=kernel.epsilon, delta_alpha=kernel.delta, **kw)
    k = cfg.k
    if k is None:  # capped where the sampler's int32 count ends (fewer samples: more noise)
        k = min(k_allowed, 2**31 - 1)
    elif k > k_allowed:
        raise ValueError(
            f"k={k} exceeds the largest private k={k_allowed} for n={n}, eps_alpha={kernel.epsilon:.4g}, "
            f"delta_alpha={kernel.delta:.3g}, eta_min={cfg.eta_min}, beta={cfg.beta} (eq. (1)); "
            f"use k <= {k_allowed}"
        )
    return _Plan(kernel, inputs, k, k_allowed, bounds)


def _release(
    k_alpha: jax.Array,
    k_x: jax.Array,
    kmat: jax.Array,
    xp: jax.Array,
    y_j: jax.Array,
    weights: jax.Array,
    cfg: RegressionConfig,
    plan: _Plan,
    n: int,
    d: int,
    dt: Any,
    inferred: bool,
) -> DPNTKRegressionModel:
    """Alg. 2 lines 4-6: K~ by Gaussian sampling, alpha by the ridge solve, X~ by TLap."""
    k_tilde, kernel_rec = gaussian_sampling_release(
        k_alpha,
        kmat,
        budget=plan.kernel,
        k=plan.k,
        shift=cfg.kernel_shift,
        released=f"kernel matrix K~ = (1/k) sum g g^T, g ~ N(0, K + {cfg.kernel_shift:g} I) "
        f"({n}, {n}); only alpha = (K~ + reg I)^-1 Y is kept",
        sensitivity=plan.bounds["used"],
        accountant="closed-form: M <= Delta(k) (Gu et al. Lemma D.1, Def. 5.1/5.2, eq. (1))",
        **_kernel_params(cfg, plan, n),
    )
    del kmat
    alpha = ridge_solve(jnp.asarray(k_tilde, dtype=dt), y_j, jnp.asarray(cfg.reg, dt))  # Sec. 6.2
    del k_tilde
    _check_finite(alpha, dt)
    sens_x = math.sqrt(d) * cfg.beta  # Lemma G.1: L1 sensitivity of X under beta-close
    x_tilde, input_rec = truncated_laplace_release(
        k_x,
        xp[:, :d],  # the intercept column is a public constant: kept exact
        budget=plan.inputs,
        sensitivity=sens_x,
        released=f"privatized training inputs X~ ({n}, {d}), used for test-time kernel rows K(x, X~)",
        accountant="closed-form (Gu et al. Lemma 3.2, G.1, G.2)",
        norm="L1 over one record: sqrt(d) * beta",
        beta=cfg.beta,
        d=d,
    )
    x_tilde = jnp.concatenate([jnp.asarray(x_tilde, dt), xp[:, d:]], axis=1)
    report = _private_report(cfg, plan, kernel_rec, input_rec, n, d, inferred)
    cfg = dataclasses.replace(cfg, k=plan.k, epsilon=report.epsilon, delta=report.delta)
    return DPNTKRegressionModel(alpha, x_tilde, weights, report, cfg)


def _kernel_params(cfg: RegressionConfig, plan: _Plan, n: int) -> dict[str, Any]:
    return dict(
        k_max=plan.k_allowed,
        m_bound_paper=plan.bounds["paper"],
        m_bound_fixed_weights=plan.bounds.get("fixed_weights", math.nan),
        eta_min=cfg.eta_min,
        beta=cfg.beta,
        n=n,
        width=cfg.width,
        weight_std=cfg.weight_std,
        input_bound=cfg.input_bound,
        kernel_shift=cfg.kernel_shift,
        reg=cfg.reg,
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
        xf = jnp.asarray(xp, jnp.float64)
        kmat = np.asarray(kernel_matrix(xf, xf, jnp.asarray(weights, jnp.float64), chunk_size))
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


def _non_private() -> PrivacyReport:
    return non_private_report(
        "epsilon=None: non-private quadratic-NTK ridge regression baseline (kernel and inputs "
        "used without noise)"
    )


def _private_report(
    cfg: RegressionConfig,
    plan: _Plan,
    kernel_rec: MechanismRecord,
    input_rec: MechanismRecord,
    n: int,
    d: int,
    inferred: bool,
) -> PrivacyReport:
    assert cfg.eta_min is not None
    eps_alpha = plan.kernel.epsilon
    notes = [
        LABELS_NOT_PROTECTED,
        f"Neighbouring relation beta-close with beta={cfg.beta:g} (Def. 4.1): the guarantee hides a "
        "move of one record's features by at most beta in L2, NOT its presence, its label, or a "
        "larger change.",
    ]
    if cfg.eta_min <= cfg.kernel_shift:
        notes.append(
            f"eta_min={cfg.eta_min:g} <= kernel_shift={cfg.kernel_shift:g}: the eigenvalue condition "
            "K + shift I >= eta_min I holds for every dataset (no assumption)."
        )
    else:
        notes.append(
            f"ASSUMPTION: lambda_min(K + {cfg.kernel_shift:g} I) >= eta_min={cfg.eta_min:g} for every "
            "dataset (and neighbour) in the domain. This dataset was checked (float64 Cholesky) and "
            "would have been refused otherwise; a neighbour outside the domain is not covered."
        )
    if eps_alpha >= 1.0:
        notes.append(
            f"UNPROVEN: eps_alpha={eps_alpha:.4g} >= 1 lies outside the range eps_alpha in (0, 1) "
            "of Lemma D.1 (Condition 5.3, Def. 5.2); released only because allow_unproven=True. The "
            "paper's Figure 1 uses such values, but the cited theorem states no guarantee for them."
        )
    notes.append(
        "The paper's M (eq. (1)) drops the constants of O(.) bounds and relies on a width "
        "m = Omega(n d B^2 / beta^2 log(1/delta_2)) (Condition 5.5); k is also capped by an exact "
        "bound for the drawn weights (m_bound_fixed_weights), the larger M being used."
    )
    if inferred:
        notes.append(N_CLASSES_INFERRED_NOTE)
    return PrivacyReport.from_mechanisms(
        [kernel_rec, input_rec],
        BETA_CLOSE,
        proven=eps_alpha < 1.0,
        data_independent=(
            f"random NTK weights w (m={cfg.width}, d={d}) ~ N(0, {cfg.weight_std:g}^2 I): drawn "
            "from the key, independent of the data",
            f"projection of every input onto the L2 ball of radius {cfg.input_bound:g}: a fixed map",
            f"n={n} and d={d}: equal for beta-close neighbours (public)",
            f"eta_min={cfg.eta_min:g}: a public value supplied by the caller, not read from the data",
        ),
        notes=tuple(notes),
    )


def _resume(path: Path | None, x: Any, y: Any, s: Settings) -> DPNTKRegressionModel:
    """Return the saved model without reading the data (its budget, relation, ``beta`` under
    beta-close, and solver must be the ones asked for; a report marked unproven is returned
    only with ``allow_unproven``)."""
    if path is None or not path.exists():
        raise ValueError(f"resume=True needs an existing checkpoint_path, got {path}")
    if x is not None or y is not None:
        raise ValueError(
            "resume=True returns the saved model and never reads data: pass x=None, y=None"
        )
    if s.neighbouring == REPLACE_ONE:  # as a fresh replace-one fit refuses them
        _refuse_beta_close_settings(s)
    if s.epsilon is not None and s.delta is None:
        raise ValueError("delta is required when epsilon is given")
    model = load(path)
    if model.report.private != (s.epsilon is not None) or (
        s.epsilon is not None
        and not math.isclose(float(s.epsilon), model.report.epsilon, rel_tol=1e-9)
    ):
        raise ValueError(
            f"the saved model was released at epsilon={model.report.epsilon:g}; got "
            f"epsilon={s.epsilon!r}. The budget of a release cannot change on resume."
        )
    if (
        s.delta is not None
        and model.report.private
        and not math.isclose(float(s.delta), model.report.delta, rel_tol=1e-9)
    ):
        raise ValueError("the saved model was released at another delta")
    saved = (model.config.neighbouring, model.config.solver)
    if saved != (s.neighbouring, s.solver):  # never hand back a weaker relation than asked for
        raise ValueError(
            f"the saved model was fitted with neighbouring={saved[0]!r}, solver={saved[1]!r}; "
            f"got neighbouring={s.neighbouring!r}, solver={s.solver!r}"
        )
    if s.neighbouring == BETA_CLOSE and not math.isclose(
        float(s.beta), float(model.config.beta), rel_tol=1e-9
    ):  # beta is what the relation hides: another beta is another guarantee
        raise ValueError(
            f"the saved model protects beta={model.config.beta:g}-close neighbours; got "
            f"beta={s.beta!r}"
        )
    if not model.report.proven and not s.allow_unproven:
        raise ValueError(
            "the saved model's report is marked unproven (eps_alpha >= 1, outside Lemma D.1); "
            "pass allow_unproven=True to accept it, as a fresh fit would require"
        )
    return model
