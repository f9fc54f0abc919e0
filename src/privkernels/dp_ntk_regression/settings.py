"""The settings of a DP NTK regression fit as the user gives them (Gu et al., Alg. 2).

`Settings` is the typed, frozen form of the keywords `privkernels.dp_ntk_regression.fit`
takes besides the data, the keys and the run options (`privkernels.options`). The fit
validates them into a `privkernels.dp_ntk_regression.model.RegressionConfig` before any
randomness is drawn; `refuse_unused` refuses a setting the chosen mechanism ignores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Settings", "BETA_CLOSE_ONLY", "refuse_unused"]

#: Settings of the beta-close mechanism that a replace-one fit has no use for.
BETA_CLOSE_ONLY = ("k", "eta_min", "beta", "split", "kernel_shift", "allow_unproven")


@dataclasses.dataclass(frozen=True)
class Settings:
    """A regression fit's settings, as given (Gu et al., Alg. 2; replace-one: noisy
    sufficient statistics).

    Attributes:
      epsilon, delta: total budget; ``epsilon=None`` fits the non-private baseline
        (same kernel, ``alpha = (K + (kernel_shift + reg) I)^{-1} Y``, raw inputs).
      width: number of neurons m. reg: ridge lambda added after the mechanism (absolute;
        the default 0.1 was chosen with ``kernel_shift="auto"`` and ``fit_intercept=True``
        on validation splits, ``benchmarks/results/dp-ntk-regression-defaults.md``).
      beta: neighbouring radius of Def. 4.1 (what the guarantee hides).
      eta_min: PUBLIC lower bound on the smallest eigenvalue of ``K + kernel_shift I``;
        defaults to ``kernel_shift`` when that is > 0 (then it holds by construction).
        When ``eta_min > kernel_shift`` it is checked in float64 and a dataset that
        violates it is refused before any noise (no value from the data in the message).
      split: ``(kernel, inputs)`` budget fractions (``eps_alpha = epsilon * split[0]``).
      k: number of Gaussian samples; default the largest allowed (`max_k`).
      weight_std: sigma of the NTK weights (paper: 1).
      kernel_shift: ``s >= 0``; the mechanism privatizes ``K + s I`` instead of K
        (then ``eta_min = s`` holds for every dataset). ``"auto"`` (default): the
        ``s`` at which eq. (1) allows ``AUTO_SHIFT_SAMPLES`` samples, computed from
        the public ``n``, the kernel budget, ``beta``, ``weight_std`` and
        ``input_bound`` (`shift_for_k`); 0 for the non-private fit.
      fit_intercept: append a constant (bias) coordinate to every input
        (`input_map`; no privacy cost).
        Without it the quadratic NTK has no bias term (the paper's setting).
      neighbouring: ``"replace-one"`` (default: standard (epsilon, delta)-DP for replacing
        a whole record, label included: sufficient-statistics perturbation on sketched NTK
        features, `privkernels.dp_ntk_regression.replace_one`; ``beta``, ``eta_min``,
        ``split``, ``k``, ``kernel_shift`` do not apply) or ``"beta-close"`` (the paper's
        Alg. 2, asked for explicitly: a feature move of at most ``beta``, labels public; NOT
        standard DP, so it raises a `PrivacyLeakWarning` and its report says so first).
      features, target_bound, ridge_factor: replace-one only: sketch size ``D``
        (default 1024), public bound on each target row's L2 norm (one-hot labels: 1),
        ridge ``reg + ridge_factor * 2 sigma_noise sqrt(D)`` (default 0.125).
      solver: ``"ridge"`` (default: the ridge solve of the chosen mechanism) or, with
        ``neighbouring="replace-one"`` and class labels only, ``"kernel-mean"``: the
        large-ridge limit of the infinite-width quadratic NTK, which releases only the
        class second moments ``sum_{y_i=c} x_i x_i^T`` (sensitivity sqrt(2),
        `privkernels.dp_ntk_regression.kernel_mean`; memory ``c (d+1)^2`` floats).
        It wins where classes have few records (digits); ridge wins on MNIST
        (`benchmarks/results/dp-ntk-regression-replace-one-solver.md`).
      dtype: ``"float32"`` (default) or ``"float64"`` (local ``jax.enable_x64``).
      allow_unproven: ``eps_alpha >= 1`` lies outside Lemma D.1; refused unless True,
        and the report is then marked ``proven=False``.
    """

    epsilon: float | None
    delta: float = 1e-5
    width: int = 256
    reg: float = 0.1
    beta: float = 1e-6
    eta_min: float | None = None
    input_bound: float = 1.0
    split: tuple[float, float] = (0.5, 0.5)
    k: int | None = None
    weight_std: float = 1.0
    kernel_shift: Any = "auto"
    fit_intercept: bool = True
    neighbouring: str = "replace-one"
    features: int | None = None
    target_bound: float = 1.0
    ridge_factor: float | None = None
    solver: str = "ridge"
    dtype: Any = "float32"
    allow_unproven: bool = False


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}


def refuse_unused(s: Settings, names: tuple[str, ...], what: str) -> None:
    """Refuse (before any noise) a non-default value of a setting that ``what`` ignores."""
    for name in names:
        value, default = getattr(s, name), _DEFAULTS[name]
        try:
            same = tuple(value) == default if isinstance(default, tuple) else bool(value == default)
        except (TypeError, ValueError):  # not a sequence, or an array: not the default
            same = False
        if not same:
            raise ValueError(f"{name} does not apply to {what}: leave it at {default!r}")
