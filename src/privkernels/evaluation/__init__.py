"""Evaluation of released data (post-processing: no privacy cost).

* `classifiers` -- the scikit-learn classifiers of
  the DP-NTK / DP-KIP tables (train on synthetic or distilled data, test on real).
* `convnet` -- the ConvNet of DP-KIP Table 3,
  trained on a distilled support set.
* `teacher` -- the same ConvNet taught by the release's kernel model on
  mixtures of the support set.
"""

from __future__ import annotations

from privkernels.evaluation.classifiers import (
    IMAGE_CLASSIFIERS,
    TABULAR_CLASSIFIERS,
    evaluate_images,
    evaluate_tabular,
    make_classifier,
    subsample,
)
from privkernels.evaluation.convnet import (
    Augment,
    ConvNet,
    augment_images,
    check_augment,
    convnet_accuracy,
    train_convnet,
)
from privkernels.evaluation.teacher import (
    krr_teacher,
    mixup_pool,
    soft_targets,
    train_convnet_from_teacher,
)

__all__ = [
    "IMAGE_CLASSIFIERS",
    "TABULAR_CLASSIFIERS",
    "ConvNet",
    "convnet_accuracy",
    "evaluate_images",
    "evaluate_tabular",
    "make_classifier",
    "subsample",
    "train_convnet",
    "Augment",
    "augment_images",
    "check_augment",
    "krr_teacher",
    "mixup_pool",
    "soft_targets",
    "train_convnet_from_teacher",
]
