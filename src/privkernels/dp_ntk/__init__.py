"""DP-NTK: private data generation by matching e-NTK mean embeddings.

Yang, Adamczewski, Li, Sutherland & Park, "Differentially Private Neural
Tangent Kernels for Privacy-Preserving Data Generation" (Algorithm 1, Sec. 3).

The method touches the private data exactly once:

1. `private_embedding` releases the class-conditional mean embedding
   ``mu_P = (1/n) sum_i phi(x_i) onehot(y_i)^T`` (eq. 4, shape ``(p, C)``) of
   normalised e-NTK features ``phi(x) = grad_theta f(x) / ||grad_theta f(x)||``
   of a randomly initialised network. Under replace-one neighbours its
   Frobenius sensitivity is ``2/n`` (Prop. 3.1) and the Gaussian mechanism with
   the analytic-Gaussian noise multiplier (`privkernels.privacy.gaussian_sigma`)
   privatises it.
2. Optionally (class-imbalanced data, ``label_mode="released"``)
   `private_class_proportions` releases the class proportions with
   their own Gaussian noise and its own share of the budget.
3. `fit` trains a generator with Adam to minimise
   ``||mu~_P - mu_Q||_F^2`` (eq. 6), where ``mu_Q`` is the e-NTK mean
   embedding of a fresh batch of generated samples (gradients flow through the
   feature map). This is post-processing: no further privacy cost, however
   many iterations, checkpoints or resumes.

Privacy conventions (also recorded in each `PrivacyReport`):

* By default (``neighbouring="replace-one"``, the paper's relation)
  neighbouring datasets differ by *replacing* one example, so the dataset
  size ``n`` is the same for both and is treated as public. It is used
  unnoised in the ``2/n`` and ``sqrt(2)/n`` sensitivities.
* ``neighbouring="add-remove"`` (the relation of opacus and of DP-KIP's
  paper accounting): ``n`` is private. `private_embedding` then releases the
  class *sums* ``n mu_P`` (sensitivity 1: one unit-norm column more or less)
  and `private_class_counts` a noisy ``n`` (the total, or the class counts in
  ``"released"`` mode, sensitivity 1) with the share ``split[1]``;
  `normalise_sums` divides the one by the other (post-processing); the divisor
  (`noisy_total`) is kept as ``DPNTKResult.noisy_total``.
* The e-NTK network parameters, the generator initialisation and every latent
  code come from keys split off the user's key and never depend on the data.
* ``epsilon=None`` is a non-private baseline and the report says so.

Class proportions (``label_mode="released"``, the tabular setting). The
paper borrows DP-MERF's class-weighted embedding, whose reference code reads
the raw class counts without noise. Here the count vector is released with
the Gaussian mechanism: replacing one example changes two counts by one, so
the L2 sensitivity is ``sqrt(2)`` on counts and ``sqrt(2)/n`` on proportions.
It gets the share ``split[1]`` of both epsilon and delta (``Budget.split``), and
the report composes the two releases (basic composition). Post-processing:
clip at 0 and renormalise to sum 1; if every entry is clipped, use uniform.
The noisy proportions ``p~`` are then used

* to weight the released embedding: column ``c`` is divided by
  ``max(p~_c, min_proportion)``, which turns ``p_c * mean_c + noise`` into an
  estimate of the class-conditional mean embedding ``mean_c``.
* on the generator side: each training batch holds (near-)equal numbers of
  every class, and column ``c`` of its embedding is rescaled by
  ``batch_size / count_c``, so it is the class-conditional mean too. The loss
  compares class-conditional means.
* to draw the labels of synthetic samples in `sample`.

With ``label_mode="uniform"`` (balanced image data, the paper's MNIST setup)
the unweighted embedding (4) is matched by a generator whose labels are drawn
uniformly (Sec. 3), and `sample` draws labels uniformly.

Modules: `release` (the only reads of private data),
`settings` (the typed `Settings` and the run's `Plan`: budget shares, releases, keys),
`train` (generator state + step + scan),
`fitting` (`fit`, resume),
`result` (`DPNTKResult`, save/`load`, `sample`),
`calibrate` (`sample_calibrated`: rows drawn from generated pools reweighted towards the
released marginal code of a table network; post-processing).
"""

from __future__ import annotations

from privkernels.dp_ntk.fitting import MARGINAL_WEIGHT, default_generator, default_network, fit
from privkernels.dp_ntk.release import (
    noisy_total,
    normalise_sums,
    private_class_counts,
    private_class_proportions,
    private_embedding,
)
from privkernels.dp_ntk.result import DPNTKResult, load, sample
from privkernels.dp_ntk.train import DPNTKConfig, TrainState, run_steps, train_step

__all__ = [
    "MARGINAL_WEIGHT",
    "DPNTKConfig",
    "DPNTKResult",
    "TrainState",
    "default_generator",
    "default_network",
    "fit",
    "load",
    "normalise_sums",
    "noisy_total",
    "private_class_counts",
    "private_class_proportions",
    "private_embedding",
    "run_steps",
    "sample",
    "train_step",
]
