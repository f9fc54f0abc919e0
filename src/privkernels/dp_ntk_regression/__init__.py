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
4. ``epsilon = eps_alpha + eps_X``, ``delta = delta_alpha + delta_X`` (Lemma I.1): the
   budget is divided by ``split = (kernel, inputs)`` (`privkernels.privacy.Budget.split`).

Neighbouring relation (Def. 4.1): ``beta``-close datasets. They have the same n
and the same labels; one record's *feature vector* moves by at most ``beta`` in
L2 norm. **Labels are not protected at all** (they enter ``alpha`` without noise)
and neither is membership: the guarantee hides tiny feature perturbations only.

Choice of k (Condition 5.3, Def. 5.1/5.2, Sec. 6.2 eq. (1)): the mechanism is
private when ``M <= Delta(k) = min(eps / sqrt(8 k log(1/delta)), eps / (8 log(1/delta)))``
where M bounds how much one neighbour can move the kernel relative to its
smallest eigenvalue. The paper takes ``M = n sigma^2 B^4 beta / eta_min``, which
turns ``M <= eps/sqrt(8 k log(1/delta))`` into eq. (1)
``k <= eps^2 eta_min^2 / (8 log(1/delta) n^2 sigma^4 B^8 beta^2)``. See `max_k`
for the details (real n, the second branch of Delta, and the exact fixed-weights
bound we also enforce).

Multi-class (Sec. 6.1): one-hot ``Y (n, c)``, ``alpha (n, c)``, argmax of the scores.

``neighbouring="replace-one"`` swaps steps 2-3 for sufficient-statistics
perturbation on sketched NTK features (`replace_one`): standard (epsilon, delta)-DP
for replacing one whole record, label included. With ``solver="kernel-mean"``
(`kernel_mean`) it releases only the class second moments instead: the
large-ridge limit at infinite width, for classes with few records.

Modules: `kernel` (the quadratic NTK),
`replace_one` (the replace-one mechanism),
`kernel_mean` (its large-ridge limit),
`sensitivity` (M and k),
`fitting` (`fit`, `check_replace_one_settings`),
`model` (the model, save/`load`, `predict`).
"""

from __future__ import annotations

from privkernels.dp_ntk_regression.fitting import (
    LABELS_NOT_PROTECTED,
    check_replace_one_settings,
    fit,
)
from privkernels.dp_ntk_regression.kernel import (
    draw_weights,
    input_map,
    project_to_ball,
    smallest_eigenvalue,
)
from privkernels.dp_ntk_regression.model import (
    DPNTKRegressionModel,
    RegressionConfig,
    load,
    predict,
    predict_labels,
)
from privkernels.dp_ntk_regression.sensitivity import max_k, sensitivity_bound

__all__ = [
    "DPNTKRegressionModel",
    "RegressionConfig",
    "LABELS_NOT_PROTECTED",
    "check_replace_one_settings",
    "draw_weights",
    "fit",
    "load",
    "max_k",
    "predict",
    "predict_labels",
    "project_to_ball",
    "input_map",
    "sensitivity_bound",
    "smallest_eigenvalue",
]
