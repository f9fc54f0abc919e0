"""DP-KIP: differentially private kernel inducing points (Vinaroz & Park).

Dataset distillation by kernel ridge regression (KRR): a small *support* set
``(X_s, Y_s)`` with ``m = support_per_class * n_classes`` points is learned so
that KRR trained on it predicts the labels of the large *target* (private)
dataset well (paper eq. 3). DP-KIP (Algorithm 1) optimises ``X_s`` with
DP-SGD: Poisson batches of targets, per-target-example gradients of the KRR
loss w.r.t. the support, clipped to ``C``, summed, Gaussian noise, an optax step.

Modules, one concept each:

* `kernels` -- ScatterNet, FC-NTK and e-NTK kernels;
* `krr` -- the KRR solve, predictions and the loss;
* `grads` -- per-example gradients (adjoint, vmap);
* `clipped_sums` -- the clipped-sum strategies
  (Gram form, feature space, explicit), chosen once per run;
* `init` -- data-independent support initialisations;
* `dp_ntk_init` -- the private DP-NTK start (``init="dp_ntk"``, a share of the budget);
* `smoothing` -- blurring support images and their updates (post-processing);
* `train` -- config, state and the pure ``train_step``;
* `fitting` -- `fit` and `configure`;
* `result` -- the release, ``save``/`load`, `predict`;
* `estimator_defaults` -- the defaults `privkernels.sklearn.DPKIPClassifier` fills in
  (functions of public numbers) and its `SmallDataWarning`.

Privacy: the Poisson-subsampled Gaussian mechanism composed over
``epochs * round(1 / q)`` steps (`planned_steps`), calibrated and accounted by the privacy core
(`privkernels.privacy.dpsgd_plan`, PLD by default) under
``neighbouring="replace-one"`` (default; n public) or ``"add-remove"`` (a
public sampling rate; n never used in the release). With ``init="dp_ntk"``
a DP-NTK release with a stated share of the budget supplies the starting
support, under the same relation; the report composes the two releases.
"""

from __future__ import annotations

from privkernels.dp_kip.clipped_sums import STRATEGIES
from privkernels.dp_kip.dp_ntk_init import DPNTKInit
from privkernels.dp_kip.estimator_defaults import (
    RARE_VALIDATED_N,
    VALIDATED_N,
    WARN_N,
    EstimatorDefaults,
    SmallDataWarning,
    estimator_defaults,
)
from privkernels.dp_kip.fitting import configure, fit, planned_steps
from privkernels.dp_kip.grads import per_example_grads
from privkernels.dp_kip.init import (
    INITS,
    corruption_mask,
    init_support,
    lowpass_support,
    support_labels,
)
from privkernels.dp_kip.kernels import KERNELS, KernelSpec, make_kernel
from privkernels.dp_kip.krr import FALLBACK_JITTER, encode_labels, krr_loss
from privkernels.dp_kip.result import DPKIPResult, accuracy, load, predict, predict_labels
from privkernels.dp_kip.smoothing import smooth_images, smooth_updates
from privkernels.dp_kip.train import (
    Batch,
    DPKIPConfig,
    State,
    StepInfo,
    Trainer,
    initial_state,
    make_trainer,
)

__all__ = [
    "KERNELS",
    "STRATEGIES",
    "INITS",
    "FALLBACK_JITTER",
    "RARE_VALIDATED_N",
    "VALIDATED_N",
    "WARN_N",
    "EstimatorDefaults",
    "SmallDataWarning",
    "estimator_defaults",
    "Batch",
    "DPKIPConfig",
    "DPNTKInit",
    "DPKIPResult",
    "KernelSpec",
    "State",
    "StepInfo",
    "Trainer",
    "accuracy",
    "configure",
    "initial_state",
    "corruption_mask",
    "encode_labels",
    "fit",
    "init_support",
    "lowpass_support",
    "krr_loss",
    "load",
    "make_kernel",
    "make_trainer",
    "per_example_grads",
    "planned_steps",
    "predict",
    "predict_labels",
    "smooth_images",
    "smooth_updates",
    "support_labels",
]
