"""The settings of a DP-KIP run as the user gives them, and their validation.

`Settings` is the typed, frozen form of the keywords `privkernels.dp_kip.fit` and
`privkernels.dp_kip.configure` take (the run options apart: `privkernels.options`).
`resolve` validates them against the public shapes and fills the kernel's defaults,
before any data is read or any randomness drawn; `configure` turns the result into the
run's config and DP-SGD plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from privkernels._validation import check_int, check_nonnegative, check_positive
from privkernels.dp_kip.kernels import KERNELS
from privkernels.privacy.accounting import DPSGD_RELATIONS, check_relation, check_sampling_rate
from privkernels.privacy.report import check_neighbouring

__all__ = ["Settings", "Resolved", "resolve", "KERNEL_DEFAULTS", "DEFAULT_BATCH_SIZE"]

#: Per-kernel defaults of ``learning_rate``, ``clip_norm`` and ``relative_reg``.
#: fc_ntk: chosen on a validation split of the MNIST/FashionMNIST TRAINING sets
#: at eps=1 with per-image standardised inputs (``git show b99f0d9:scripts/dp_kip_fcntk_sweep.py``);
#: scatternet: the paper's Appendix D learning rate and ridge for MNIST, with the
#: clip norm of the quick benchmark profile (inputs ``2 x - 1``); entk: the quick
#: profile's values. See ``docs/benchmarks.md``.
KERNEL_DEFAULTS: dict[str, dict[str, float]] = {
    "fc_ntk": {"learning_rate": 3e-2, "clip_norm": 1e-1, "relative_reg": 1e-6},
    "scatternet": {"learning_rate": 1e-1, "clip_norm": 1e-3, "relative_reg": 1e-3},
    "entk": {"learning_rate": 1e-2, "clip_norm": 1e-2, "relative_reg": 1e-6},
}

#: ``batch_size=None``: ``min(DEFAULT_BATCH_SIZE, n)`` (the paper's most common batch size).
DEFAULT_BATCH_SIZE = 500


@dataclasses.dataclass(frozen=True)
class Settings:
    """A DP-KIP run's settings (Vinaroz & Park, Alg. 1), as given.

    Attributes:
      epsilon, delta: target budget; ``epsilon=None``: the non-private KIP baseline.
      kernel: ``"scatternet"``, ``"fc_ntk"`` or ``"entk"``; options in ``kernel_options``
        (fc_ntk ``depth/W_std/b_std/sphere_lift``; scatternet ``J/L/group_norm``; entk ``normalize``).
      support_per_class: distilled points per class (``m = spc * c``).
      batch_size: expected Poisson batch size, the public normaliser of the noisy sum;
        None: ``min(500, n)`` (replace-one; add-remove needs it given).
      epochs: ``steps = epochs * round(1 / q)`` (`privkernels.dp_kip.planned_steps`).
      learning_rate: Adam step size (unless ``optimizer`` is given).
      relative_reg, jitter: ridge ``lambda = (relative_reg + jitter) tr(K_ss) / m`` (eq. 3).
      clip_norm: per-example L2 bound ``C``. ``learning_rate``, ``relative_reg``,
        ``clip_norm``: None takes the kernel's entry of `KERNEL_DEFAULTS`.
      clip_space: ``"input"`` (paper), ``"feature"`` (linear-feature kernels: clip
        w.r.t. the support features, noise there, one VJP to pixels; the same
        (epsilon, delta) guarantee for the same neighbours) or ``"auto"``
        (``"feature"`` for scatternet and entk, orders of magnitude faster;
        ``"input"`` for fc_ntk and for ``learn_labels`` without privacy).
      init: ``"gaussian"``, ``"lowpass"``, a callable ``init(key, m, input_shape)``
        that reads no private data, or ``"dp_ntk"`` / `DPNTKInit`: the support
        starts as DP-NTK samples released with ``budget_fraction`` of (epsilon,
        delta) (`privkernels.privacy.Budget.split`; DP-SGD is calibrated to the
        rest; DP-NTK is released under ``neighbouring`` too, and under
        add-remove it releases class sums and noisy counts, never n; the
        report composes both).
      neighbouring: ``"replace-one"`` (n public, q = batch_size / n) or
        ``"add-remove"`` (pass the public ``sampling_rate``; n is never released).
      sampling_rate: the public Poisson rate (add-remove only).
      accountant: ``"pld"`` or ``"rdp"`` (add-remove only).
      corrupt_fraction: fraction of support pixels frozen at their initial value (Table 4).
      kernel_options: the kernel's options (see ``kernel``).
      learn_labels: learn the support labels too. Under privacy only with
        ``clip_space="feature"``: each target's gradient w.r.t. the support features
        and labels is clipped as one vector and both are noised, so the cost is that
        of fixed labels (the paper fixes them, Sec. 4); without privacy, input space.
      optimizer: an optax ``GradientTransformation`` (default ``adam(learning_rate)``).
      grad_method: ``"auto"`` (fastest exact clipped sum), ``"adjoint"`` or ``"vmap"``.
    """

    epsilon: float | None
    delta: float = 1e-5
    kernel: str = "scatternet"
    support_per_class: int = 10
    batch_size: int | None = None
    epochs: int = 10
    learning_rate: float | None = None
    relative_reg: float | None = None
    jitter: float = 0.0
    clip_norm: float | None = None
    clip_space: str = "auto"
    init: Any = "gaussian"
    neighbouring: str = "replace-one"
    sampling_rate: float | None = None
    accountant: str = "pld"
    corrupt_fraction: float = 0.0
    kernel_options: Mapping[str, Any] | None = None
    learn_labels: bool = False
    optimizer: Any = None
    grad_method: str = "auto"


class Resolved(NamedTuple):
    """`Settings` validated against ``n``: defaults filled, the Poisson rate and clip space."""

    settings: Settings
    sampling_rate: float
    clip_space: str


def resolve(s: Settings, n: int, private: bool) -> Resolved:
    """Validate the numeric settings and fill the kernel's defaults (nothing is drawn)."""
    if s.kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {s.kernel!r}")
    if s.batch_size is None and s.neighbouring == "add-remove":
        raise ValueError("neighbouring='add-remove' needs an explicit (public) batch_size")
    batch = check_int(min(DEFAULT_BATCH_SIZE, n) if s.batch_size is None else s.batch_size,
                      "batch_size", minimum=1)  # fmt: skip
    given = {k: getattr(s, k) for k in KERNEL_DEFAULTS[s.kernel]}
    filled = {k: KERNEL_DEFAULTS[s.kernel][k] if v is None else v for k, v in given.items()}
    relative_reg = check_nonnegative(filled["relative_reg"], "relative_reg")
    jitter = check_nonnegative(s.jitter, "jitter")
    if relative_reg + jitter <= 0:
        raise ValueError("relative_reg + jitter must be > 0 for a well-posed ridge solve")
    learning_rate = check_positive(filled["learning_rate"], "learning_rate")
    cf = check_nonnegative(s.corrupt_fraction, "corrupt_fraction")
    if not cf < 1.0:
        raise ValueError(f"corrupt_fraction must lie in [0, 1), got {cf!r}")
    if s.accountant not in ("pld", "rdp"):
        raise ValueError(f"accountant must be 'pld' or 'rdp', got {s.accountant!r}")
    clip_norm = filled["clip_norm"]
    if private:  # the relation, and that the accountant supports it
        clip_norm = check_positive(clip_norm, "clip_norm")
        check_relation(s.neighbouring, s.accountant)
    else:
        check_neighbouring(s.neighbouring, DPSGD_RELATIONS)
    filled_s = dataclasses.replace(
        s, batch_size=batch, relative_reg=relative_reg, jitter=jitter, corrupt_fraction=cf,
        learning_rate=learning_rate, clip_norm=clip_norm,
    )  # fmt: skip
    return Resolved(filled_s, _sampling_rate(s, batch, n), _clip_space(s, private))


def _sampling_rate(s: Settings, batch_size: int, n: int) -> float:
    """Poisson rate ``q``: the public ``sampling_rate`` (add-remove) or ``batch_size / n``."""
    if s.neighbouring == "add-remove":
        if s.sampling_rate is None:
            raise ValueError(
                "neighbouring='add-remove' needs a public sampling_rate (add-remove neighbours "
                "differ in size, so q = batch_size / n would read the private n)"
            )
        return check_sampling_rate(s.sampling_rate)
    if s.sampling_rate is not None:
        raise ValueError(
            "sampling_rate is only for neighbouring='add-remove'; under replace-one "
            "q = batch_size / n (n is public for replace-one neighbours)"
        )
    if batch_size > n:
        raise ValueError(f"batch_size must be <= n = {n}, got {batch_size}")
    return batch_size / n


def _clip_space(s: Settings, private: bool) -> str:
    """``"input"`` or ``"feature"``: ``clip_space`` checked, ``"auto"`` decided."""
    space = s.clip_space
    if space not in ("auto", "input", "feature"):
        raise ValueError(f"clip_space must be 'auto', 'input' or 'feature', got {space!r}")
    if space == "auto":  # pixel-space clipping of a feature kernel: m VJPs per target
        feature_kernel = s.kernel in ("entk", "scatternet")
        space = "feature" if feature_kernel and (private or not s.learn_labels) else "input"
    if s.learn_labels and (space == "feature") != private:
        raise ValueError(
            "learn_labels needs clip_space='feature' (scatternet or entk) under privacy, where "
            "the labels' gradients are clipped with the features', and clip_space='input' "
            f"without it; got clip_space={space!r} with epsilon "
            f"{'set' if private else 'None'}"
        )
    return space
