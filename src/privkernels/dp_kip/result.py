"""The DP-KIP release: the distilled support set, its report, save/load and KRR prediction.

Everything here is post-processing of the released support set: predicting,
saving and loading cost no privacy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from privkernels import checkpoint
from privkernels._batching import map_row_chunks
from privkernels._validation import check_array, check_int, check_labels
from privkernels.dp_kip.dp_ntk_init import NTK_SPLIT
from privkernels.dp_kip.init import support_labels
from privkernels.dp_kip.kernels import KernelSpec, make_kernel
from privkernels.dp_kip.krr import make_predictor
from privkernels.dp_kip.train import DPKIPConfig
from privkernels.dp_ntk.release import release_records_match
from privkernels.privacy.accounting import dpsgd_epsilon
from privkernels.privacy.budget import Budget
from privkernels.privacy.report import PrivacyReport

__all__ = ["DPKIPResult", "load", "predict", "predict_labels", "accuracy", "FORMAT"]

#: File format name and version of `DPKIPResult.save`.
FORMAT = "privkernels.dp_kip.result/1"


#: History entries `DPKIPResult.save` leaves out of the file: running times depend on
#: private quantities (under add-remove, the private n through the Poisson sampling of n
#: rows) and no mechanism covers them, so the release file does not carry them.
UNSAVED_HISTORY = ("seconds",)


def saved_history(history: Mapping[str, Any]) -> dict[str, Any]:
    """``history`` as files hold it (a release or a checkpoint): without `UNSAVED_HISTORY`."""
    return {k: v for k, v in history.items() if k not in UNSAVED_HISTORY}


def restored_history(saved: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A checkpoint's history, with NaN ``seconds`` for the epochs run before the resume."""
    history = {k: list(v) for k, v in saved.items()}
    history["seconds"] = [math.nan] * len(history.get("step", []))
    return history


@dataclasses.dataclass(frozen=True)
class DPKIPResult:
    """Output of `privkernels.dp_kip.fit`.

    Attributes:
      support_x: ``(m, *input_shape)`` float32 distilled inputs (the DP release).
      support_y: ``(m,)`` int32 class of each support point (data independent).
      support_targets: ``(m, c)`` float32 KRR targets (centred one-hot, or the
        labels learned with ``learn_labels``: part of the DP release when private).
      report: the `PrivacyReport`.
      config: the typed `DPKIPConfig` of the run.
      history: per-epoch lists (``epoch``, ``step``, ``seconds``; ``test_accuracy``,
        ``test_loss`` with a public test set; ``train_loss``, ``clip_fraction``,
        ``batch_sizes`` with ``diagnostics=True``, which are NOT private). The wall-clock
        ``seconds`` stay in memory: `save` leaves them out (`UNSAVED_HISTORY`).
      corrupted: ``(m, *input_shape)`` bool mask of frozen (noise) pixels.
      kernel_params: data-independent kernel parameters (e-NTK LeNet) or None.
      steps_done: DP-SGD steps taken (what the report accounts).
    """

    support_x: np.ndarray
    support_y: np.ndarray
    support_targets: np.ndarray
    report: PrivacyReport
    config: DPKIPConfig
    history: dict[str, list[Any]]
    corrupted: np.ndarray
    kernel_params: Any = None
    steps_done: int = 0

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the release (arrays, config, report, history) to an ``.npz`` (no pickle)."""
        arrays = {
            "support_x": self.support_x,
            "support_y": self.support_y,
            "support_targets": self.support_targets,
            "corrupted": self.corrupted,
        }
        if self.kernel_params is not None:
            arrays.update(checkpoint.flatten_tree("kernel_params", self.kernel_params))
        meta = {
            "format": FORMAT,
            "config": self.config.to_dict(),
            "report": self.report.to_dict(),
            "history": saved_history(self.history),
            "steps_done": self.steps_done,
        }
        return checkpoint.save(path, arrays, meta)


def load(path: str | os.PathLike[str]) -> DPKIPResult:
    """Read a `DPKIPResult` written by `DPKIPResult.save`.

    The stored report is checked against the stored config (same budget and
    steps), so a file whose report was edited apart from its release is refused.
    """
    arrays, meta = checkpoint.load(path, format=FORMAT)
    with checkpoint.reading("contents"):  # a crafted type or number: a ValueError, no traceback
        config = DPKIPConfig.from_dict(meta["config"])
        report = PrivacyReport.from_dict(meta["report"])
        _check_report(report, config, int(meta["steps_done"]))
        _check_run(config, int(meta["steps_done"]), meta.get("history") or {})
        _check_support(arrays, config)
    kp = None
    if any(k.startswith("kernel_params/") for k in arrays):
        kp = checkpoint.dict_tree(arrays, "kernel_params")
    return DPKIPResult(
        support_x=arrays["support_x"],
        support_y=arrays["support_y"],
        support_targets=arrays["support_targets"],
        report=report,
        config=config,
        history=meta["history"],
        corrupted=arrays["corrupted"],
        kernel_params=kp,
        steps_done=int(meta["steps_done"]),
    )


def _check_support(arrays: Mapping[str, np.ndarray], config: DPKIPConfig) -> None:
    """Refuse (``ValueError``) a support set a fit with ``config`` does not write: inputs
    ``(m, *input_shape)`` and targets ``(m, c)`` finite floats, labels the class-balanced
    ``support_labels(c, spc)`` (an edit would relabel or break every prediction)."""
    m, c = config.n_support, config.n_classes
    xs, ts, ys = (np.asarray(arrays[k]) for k in ("support_x", "support_targets", "support_y"))
    if xs.shape != (m, *config.input_shape) or ts.shape != (m, c):
        raise ValueError("the file's support set does not have its config's shape")
    for a in (xs, ts):
        if a.dtype.kind != "f" or not np.all(np.isfinite(a)):
            raise ValueError("the file's support set holds non-finite or non-float values")
    if not np.array_equal(ys, support_labels(c, config.support_per_class)):
        raise ValueError("the file's support labels are not the class-balanced ones a fit writes")


def _check_report(report: PrivacyReport, config: DPKIPConfig, steps_done: int) -> None:
    if report.private != config.private:
        raise ValueError("saved report and config disagree on whether the run was private")
    if not report.private:
        return
    n_ntk = _n_dp_ntk_records(config)
    if len(report.mechanisms) != n_ntk + 1:  # (the DP-NTK start's releases,) DP-SGD
        raise ValueError(f"saved report must hold {n_ntk + 1} release(s) for init={config.init!r}")
    if n_ntk:
        _check_dp_ntk_records(report.mechanisms[:n_ntk], config)
    sgd = report.mechanisms[-1]
    mech = sgd.param_dict
    if (
        report.neighbouring != config.neighbouring
        or int(mech.get("steps", -1)) != steps_done
        or not math.isclose(float(mech.get("sampling_rate", -1.0)), config.sampling_rate)
        or not math.isclose(float(sgd.sensitivity or -1.0), float(config.clip_norm or 0))
        or not math.isclose(sgd.delta, float(config.delta or 0), rel_tol=1e-9)
        or abs(float(mech.get("noise_multiplier", -1.0)) - float(config.noise_multiplier or 0))
        > 1e-12 * max(1.0, float(config.noise_multiplier or 0))
    ):
        raise ValueError("saved report does not match the saved run (relation, steps or sigma)")

    spent = dpsgd_epsilon(
        float(config.noise_multiplier or 0),
        float(config.delta or 0),
        sampling_rate=config.sampling_rate,
        steps=steps_done,
        accountant=config.accountant or "pld",  # type: ignore[arg-type]
        neighbouring=config.neighbouring or "replace-one",  # type: ignore[arg-type]
    )
    if abs(spent - sgd.epsilon) > 1e-6 * max(1.0, spent):
        raise ValueError(
            f"saved report claims epsilon={sgd.epsilon:.6g} for DP-SGD, the saved run spent "
            f"{spent:.6g}"
        )


def _check_run(config: DPKIPConfig, steps_done: int, history: Mapping[str, Any]) -> None:
    """What the saved run itself says of its accounting (a private run): under replace-one
    n is public and q is ``batch_size / n``, under add-remove no n is stored; the plan is
    ``epochs * max(1, round(1/q))`` steps; the steps done are the history's last step."""
    if not config.private:
        return
    if config.neighbouring == "replace-one":
        if (
            not isinstance(config.n, int)
            or config.n < 1
            or not math.isclose(config.sampling_rate, config.batch_size / config.n, rel_tol=1e-12)
        ):
            raise ValueError("saved config's sampling rate is not batch_size / n (replace-one)")
    elif config.n is not None:
        raise ValueError("saved add-remove config stores an n")
    per_epoch = max(1, round(1.0 / config.sampling_rate))
    if config.steps_per_epoch != per_epoch or config.planned_steps != config.epochs * per_epoch:
        raise ValueError("saved config's steps are not the plan its sampling rate gives")
    steps = history.get("step")
    if not isinstance(steps, list) or not steps or int(steps[-1]) != steps_done:
        raise ValueError("saved steps_done is not the history's last step")
    if not 1 <= steps_done <= config.planned_steps:
        raise ValueError("saved steps_done lies outside the planned steps")


def _n_dp_ntk_records(config: DPKIPConfig) -> int:
    """Releases of a DP-NTK start: the mean embedding (replace-one), or the class sums
    and the class counts (add-remove); none without one."""
    if not config.init.startswith("dp_ntk"):
        return 0
    return 2 if config.neighbouring == "add-remove" else 1


def _check_dp_ntk_records(records: Any, config: DPKIPConfig) -> None:
    """The DP-NTK start's records, each checked against what the run releases: the records
    of `privkernels.dp_ntk.release.release_records_match` for ``label_mode="uniform"``
    (replace-one: the mean embedding at ``2/config.n``; add-remove: the class sums and the
    dataset size n, `dp_ntk_init.NTK_SPLIT` of the share), with the share
    ``budget_fraction`` of the total."""
    match = re.match(r"dp_ntk\(fraction=([0-9.eE+-]+)", config.init)
    add_remove = config.neighbouring == "add-remove"
    ok = match is not None and (add_remove or config.n is not None)
    if ok and match is not None:
        f = float(match.group(1))
        total = Budget(
            float(config.epsilon or 0) + sum(r.epsilon for r in records),
            float(config.delta or 0) + sum(r.delta for r in records),
        )
        ok = release_records_match(
            records, str(config.neighbouring), budget=total.split(1.0 - f, f)[1],
            split=NTK_SPLIT, label_mode="uniform", n=None if add_remove else config.n,
        )  # fmt: skip
    if not ok:
        raise ValueError("saved report's DP-NTK start does not match the saved run")


def spec_of(result: DPKIPResult) -> KernelSpec:
    """The kernel of a result (e-NTK parameters restored from the result)."""
    cfg = result.config
    return make_kernel(
        cfg.kernel,
        tuple(cfg.input_shape),
        int(cfg.n_classes),
        options=cfg.kernel_options,
        params=result.kernel_params,
    )


#: Compiled predictors of data-independent kernels (fc_ntk, scatternet), keyed by
#: every static setting; a bounded pure cache that never holds data.
_PREDICTORS: OrderedDict[tuple[Any, ...], Callable[..., Any]] = OrderedDict()


def predictor(spec: KernelSpec, config: DPKIPConfig) -> Callable[..., Any]:
    """Jitted ``(x_s, y_s, x_batch) -> (b, c)``, shared across results with equal settings."""
    if config.kernel == "entk":
        return make_predictor(spec, config.ridge)
    key = (
        config.kernel,
        json.dumps(spec.options, sort_keys=True),
        config.input_shape,
        config.ridge,
    )
    fn = _PREDICTORS.get(key)
    if fn is None:
        fn = make_predictor(spec, config.ridge)
        _PREDICTORS[key] = fn
        while len(_PREDICTORS) > 16:
            _PREDICTORS.popitem(last=False)
    return fn


def predict(result: DPKIPResult, x: Any, *, chunk_size: int = 1000) -> np.ndarray:
    """KRR predictions ``(n, c)`` float32 for ``x`` ``(n, *input_shape)`` from the support set.

    Post-processing of the DP release (no extra privacy cost).
    """
    x = check_array(x, "x")
    shape = tuple(result.config.input_shape)
    if tuple(x.shape[1:]) != shape:
        raise ValueError(
            f"x must have shape (n, {', '.join(map(str, shape))}), got {tuple(x.shape)}"
        )
    chunk_size = check_int(chunk_size, "chunk_size")
    run = predictor(spec_of(result), result.config)
    xs, ys = jnp.asarray(result.support_x), jnp.asarray(result.support_targets)
    return map_row_chunks(lambda xb: run(xs, ys, xb), jnp.asarray(x, jnp.float32), chunk_size)


def predict_labels(result: DPKIPResult, x: Any, *, chunk_size: int = 1000) -> np.ndarray:
    """Argmax of `predict`: ``(n,)`` int32 class labels."""
    return np.argmax(predict(result, x, chunk_size=chunk_size), axis=-1).astype(np.int32)


def accuracy(result: DPKIPResult, x: Any, y: Any, *, chunk_size: int = 1000) -> float:
    """KRR test accuracy of the support set on ``(x, y)``."""
    y = check_labels(y, int(result.config.n_classes), "y", n_rows=np.shape(x)[0])
    return float(np.mean(predict_labels(result, x, chunk_size=chunk_size) == y))
