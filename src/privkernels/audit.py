"""Empirical privacy auditing: high-confidence lower bounds on epsilon.

An (epsilon, delta)-DP mechanism ``M`` satisfies, for neighbouring datasets
``D ~ D'`` and *every* measurable set ``S``,

    P[M(D') in S] <= e^eps P[M(D) in S] + delta      (and with D, D' swapped).

Take a test that declares "D'" when a scalar statistic ``s(M(.))`` exceeds a
threshold ``t`` (``S = {s > t}``). Its false-positive rate is
``FPR = P[s(M(D)) > t]`` and its false-negative rate ``FNR = P[s(M(D')) <= t]``.
The inequality for ``S`` and for its complement gives

    1 - FNR <= e^eps FPR + delta   =>  eps >= log((1 - delta - FNR) / FPR)
    1 - FPR <= e^eps FNR + delta   =>  eps >= log((1 - delta - FPR) / FNR)

(Kairouz, Oh & Viswanath 2015; Jagielski, Ullman & Oprea 2020). Replacing
``FPR``/``FNR`` by one-sided Clopper-Pearson *upper* bounds, each at level
``1 - (1 - confidence)/2`` (union bound), only shrinks both right-hand sides,
so with probability ``>= confidence`` the returned value is a valid lower bound
on the true epsilon of the mechanism at that delta. A claimed epsilon below the
audited lower bound is refuted (at that confidence).

The confidence statement requires the threshold (and any data-driven choice of
statistic) to be fixed independently of the samples that are counted: either
a pre-registered ``threshold`` or ``threshold="auto"``, which picks it on the
first half of the samples and counts on the second half.

An audit can only *refute* a claim; a passing audit is evidence about the
specific neighbouring pair and statistic tried, not a proof of privacy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from privkernels import dp_kip, privacy
from privkernels._validation import (
    check_array,
    check_fraction,
    check_int,
    check_key,
    check_positive,
)

__all__ = [
    "AuditResult",
    "clopper_pearson",
    "epsilon_lower_bound",
    "audit_gaussian_release",
    "audit_dpsgd_step",
    "run_trials",
    "gaussian_audit_epsilon",
    "dp_kip_full_batch_step",
]


class AuditResult(NamedTuple):
    """Outcome of an empirical privacy audit.

    Attributes:
      epsilon_lower_bound: with probability ``>= confidence`` the true
        epsilon of the mechanism (at ``delta``, for this neighbouring pair) is
        at least this value. ``0.0`` when the test has no power.
      confidence: the confidence level of the bound.
      claimed_epsilon: the epsilon the mechanism claims (None if not given).
      trials: number of mechanism runs per dataset (both splits together).
      fpr, fnr: empirical error rates of the test on the counted samples.
      threshold: the threshold used (in the oriented statistic, see ``orientation``).
      passed: ``epsilon_lower_bound <= claimed_epsilon`` (True when no claim).
      delta: the delta the bound refers to.
      fpr_upper, fnr_upper: the Clopper-Pearson upper bounds used.
      n_counted: samples per dataset that were counted (after the selection split).
      orientation: +1 if the test declares D' when ``s > threshold``, -1 if
        when ``-s > threshold``.
    """

    epsilon_lower_bound: float
    confidence: float
    claimed_epsilon: float | None
    trials: int
    fpr: float
    fnr: float
    threshold: float
    passed: bool
    delta: float = 0.0
    fpr_upper: float = 1.0
    fnr_upper: float = 1.0
    n_counted: int = 0
    orientation: int = 1

    def summary(self) -> str:
        claim = "n/a" if self.claimed_epsilon is None else f"{self.claimed_epsilon:.4g}"
        verdict = "PASS" if self.passed else "FAIL (claim refuted)"
        return (
            f"audited eps >= {self.epsilon_lower_bound:.4g} with {100 * self.confidence:.3g}% "
            f"confidence (delta={self.delta:.3g}, claimed eps={claim}, {self.trials} trials/dataset, "
            f"FPR={self.fpr:.4g}, FNR={self.fnr:.4g}): {verdict}"
        )


# --------------------------------------------------------------------------- #
# Clopper-Pearson
# --------------------------------------------------------------------------- #


def clopper_pearson(k: Any, n: Any, alpha: float = 0.05) -> tuple[Any, Any]:
    """Exact two-sided ``1 - alpha`` Clopper-Pearson interval for a binomial rate.

    Args:
      k: number of successes, int or integer array, ``0 <= k <= n``.
      n: number of trials, int or integer array, ``n >= 1``.
      alpha: total miscoverage, in (0, 1); each tail gets ``alpha / 2``.

    Returns:
      ``(lo, hi)`` floats (or float arrays broadcast from ``k``, ``n``) with
      ``lo = 0`` when ``k = 0`` and ``hi = 1`` when ``k = n``.
    """
    from scipy.stats import beta  # heavy (seconds to import): loaded on first use

    alpha = check_fraction(alpha, "alpha")
    k_arr = np.asarray(k)
    n_arr = np.asarray(n)
    for arr, name in ((k_arr, "k"), (n_arr, "n")):
        if not (
            np.issubdtype(arr.dtype, np.integer)
            or (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)))
        ):
            raise TypeError(f"{name} must hold integer counts, got dtype {arr.dtype}")
    k_arr = k_arr.astype(np.float64)
    n_arr = n_arr.astype(np.float64)
    if np.any(n_arr < 1):
        raise ValueError(f"n must be >= 1, got {n!r}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError(f"k must lie in [0, n], got k={k!r}, n={n!r}")
    with np.errstate(all="ignore"):
        lo = np.where(k_arr > 0, beta.ppf(alpha / 2, np.maximum(k_arr, 1), n_arr - k_arr + 1), 0.0)
        hi = np.where(
            k_arr < n_arr, beta.ppf(1 - alpha / 2, k_arr + 1, np.maximum(n_arr - k_arr, 1)), 1.0
        )
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def _cp_upper(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """One-sided upper Clopper-Pearson bound: ``P[p <= hi] >= level``."""
    from scipy.stats import beta  # heavy (seconds to import): loaded on first use

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(k < n, beta.ppf(level, k + 1, np.maximum(n - k, 1)), 1.0)


def _eps_from_rates(fpr_hi: np.ndarray, fnr_hi: np.ndarray, delta: float) -> np.ndarray:
    """``max(0, log((1-delta-FNR)/FPR), log((1-delta-FPR)/FNR))`` elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(
            1 - delta - fnr_hi > 0,
            np.log(np.maximum(1 - delta - fnr_hi, 1e-300)) - np.log(fpr_hi),
            -np.inf,
        )
        b = np.where(
            1 - delta - fpr_hi > 0,
            np.log(np.maximum(1 - delta - fpr_hi, 1e-300)) - np.log(fnr_hi),
            -np.inf,
        )
    return np.maximum(0.0, np.maximum(a, b))


def _counts(s_d: np.ndarray, s_dp: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False positives ``#(s_d > t)`` and false negatives ``#(s_dp <= t)`` per threshold."""
    sd = np.sort(s_d)
    sdp = np.sort(s_dp)
    fp = sd.size - np.searchsorted(sd, t, side="right")
    fn = np.searchsorted(sdp, t, side="right")
    return fp, fn


def _bound_at(s_d: np.ndarray, s_dp: np.ndarray, t: Any, delta: float, level: float):
    t = np.atleast_1d(np.asarray(t, dtype=np.float64))
    fp, fn = _counts(s_d, s_dp, t)
    fpr_hi = _cp_upper(fp, s_d.size, level)
    fnr_hi = _cp_upper(fn, s_dp.size, level)
    return _eps_from_rates(fpr_hi, fnr_hi, delta), fp, fn, fpr_hi, fnr_hi


def _select_threshold(
    s_d: np.ndarray, s_dp: np.ndarray, delta: float, level: float, max_candidates: int = 2048
) -> tuple[float, int]:
    """Best (threshold, orientation) on the selection split (maximises the CP bound there)."""
    best = (-1.0, 0.0, 1)
    for orient in (1, -1):
        a, b = orient * s_d, orient * s_dp
        pooled = np.concatenate([a, b])
        qs = np.linspace(0.0, 1.0, min(max_candidates, pooled.size))
        cand = np.unique(np.quantile(pooled, qs))
        lb, *_ = _bound_at(a, b, cand, delta, level)
        i = int(np.argmax(lb))
        if lb[i] > best[0]:
            best = (float(lb[i]), float(cand[i]), orient)
    return best[1], best[2]


def _check_confidence(confidence: Any) -> float:
    return check_fraction(confidence, "confidence")


def _check_delta0(delta: Any) -> float:
    if isinstance(delta, (bool, str)) or delta is None:
        raise TypeError(f"delta must be a real number, got {type(delta).__name__}")
    d = float(delta)
    if not (0.0 <= d < 1.0):
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    return d


def _check_claim(claimed: Any) -> float | None:
    if claimed is None:
        return None
    return check_positive(claimed, "claimed_epsilon")


def _statistic(x: Any, name: str) -> np.ndarray:
    arr = check_array(x, name, ndim=1, min_rows=2)
    if not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be numeric")
    return np.asarray(arr, dtype=np.float64)


def epsilon_lower_bound(
    outputs_d: Any,
    outputs_dprime: Any,
    *,
    delta: float,
    threshold: float | str | None = "auto",
    confidence: float = 0.95,
    claimed_epsilon: float | None = None,
) -> AuditResult:
    """High-confidence lower bound on epsilon from scalar statistics of M(D), M(D').

    Args:
      outputs_d: ``(n1,)`` statistic ``s(M(D))`` over independent runs.
      outputs_dprime: ``(n2,)`` statistic ``s(M(D'))`` over independent runs.
      delta: the delta at which epsilon is bounded, in [0, 1).
      threshold: a float fixed before seeing the samples (all samples are
        counted, test ``s > threshold`` declares D'), or ``"auto"``/``None``:
        threshold and orientation are chosen on the first half of each sample
        set and the errors are counted on the second half only.
      confidence: probability that the returned bound is valid.
      claimed_epsilon: optional claim to compare against (sets ``passed``).

    Returns:
      `AuditResult`. The bound is
      ``max(0, log((1-delta-FNR_hi)/FPR_hi), log((1-delta-FPR_hi)/FNR_hi))``
      with one-sided Clopper-Pearson upper bounds at level ``1-(1-confidence)/2``
      each; zero counts are handled by the exact bound ``1-(a)^(1/n)``.
    """
    s_d = _statistic(outputs_d, "outputs_d")
    s_dp = _statistic(outputs_dprime, "outputs_dprime")
    delta = _check_delta0(delta)
    confidence = _check_confidence(confidence)
    claimed = _check_claim(claimed_epsilon)
    level = 1.0 - (1.0 - confidence) / 2.0
    trials = int(max(s_d.size, s_dp.size))

    if threshold is None or (isinstance(threshold, str) and threshold == "auto"):
        h1, h2 = s_d.size // 2, s_dp.size // 2
        t, orient = _select_threshold(s_d[:h1], s_dp[:h2], delta, level)
        ev_d, ev_dp = orient * s_d[h1:], orient * s_dp[h2:]
    elif isinstance(threshold, str):
        raise ValueError(f"threshold must be a number, 'auto' or None, got {threshold!r}")
    else:
        t = float(
            check_array(np.asarray(threshold, dtype=np.float64), "threshold", ndim=0, min_rows=0)
        )
        orient = 1
        ev_d, ev_dp = s_d, s_dp

    lb, fp, fn, fpr_hi, fnr_hi = _bound_at(ev_d, ev_dp, t, delta, level)
    lb_f = float(lb[0])
    return AuditResult(
        epsilon_lower_bound=lb_f,
        confidence=confidence,
        claimed_epsilon=claimed,
        trials=trials,
        fpr=float(fp[0]) / ev_d.size,
        fnr=float(fn[0]) / ev_dp.size,
        threshold=float(t),
        passed=True if claimed is None else bool(lb_f <= claimed),
        delta=delta,
        fpr_upper=float(fpr_hi[0]),
        fnr_upper=float(fnr_hi[0]),
        n_counted=int(min(ev_d.size, ev_dp.size)),
        orientation=int(orient),
    )


# --------------------------------------------------------------------------- #
# Running mechanisms
# --------------------------------------------------------------------------- #


def _flatten_outputs(out: Any, n: int) -> np.ndarray:
    leaves = jax.tree_util.tree_leaves(out)
    if not leaves:
        raise ValueError("mechanism_fn returned no arrays")
    flat = [np.asarray(leaf, dtype=np.float64).reshape(n, -1) for leaf in leaves]
    return np.concatenate(flat, axis=1)


def run_trials(
    key: jax.Array,
    mechanism_fn: Callable[[Any, Any], Any],
    dataset: Any,
    trials: int,
    *,
    batch_size: int | None = None,
    vectorize: bool = True,
) -> np.ndarray:
    """Run ``mechanism_fn(k, dataset)`` for ``trials`` independent subkeys of ``key``.

    Vectorized with ``jax.vmap`` over the keys in chunks of ``batch_size``
    (default: one chunk of up to 32768 runs; every new chunk shape costs one
    compilation, so pass a smaller value only when an output or the noise of
    one run is large). Computations that do not depend on the key run once
    per chunk.

    Returns:
      ``(trials, m)`` float64 array: every output pytree flattened.
    """
    key = check_key(key)
    trials = check_int(trials, "trials", minimum=1)
    keys = jax.random.split(key, trials)
    if not vectorize:
        outs = [
            _flatten_outputs(jax.tree_util.tree_map(lambda a: a[None], mechanism_fn(k, dataset)), 1)
            for k in keys
        ]
        return np.concatenate(outs, axis=0)
    bs = min(trials, 32768) if batch_size is None else check_int(batch_size, "batch_size")
    fn = jax.vmap(lambda k: mechanism_fn(k, dataset))
    chunks = []
    for start in range(0, trials, bs):
        kk = keys[start : start + bs]
        chunks.append(_flatten_outputs(fn(kk), kk.shape[0]))
    return np.concatenate(chunks, axis=0)


def audit_gaussian_release(
    key: jax.Array,
    mechanism_fn: Callable[[Any, Any], Any],
    d: Any,
    d_prime: Any,
    *,
    epsilon: float | None,
    delta: float,
    trials: int = 20_000,
    confidence: float = 0.95,
    direction: Any = "auto",
    threshold: float | str | None = "auto",
    batch_size: int | None = None,
    vectorize: bool = True,
) -> AuditResult:
    """Audit a (Gaussian-noise) release on a neighbouring pair ``d``, ``d_prime``.

    Runs ``mechanism_fn(key_i, d)`` and ``mechanism_fn(key_j, d_prime)``
    ``trials`` times each with independent subkeys, flattens each output to a
    vector and projects it on ``direction``: for isotropic Gaussian noise
    ``N(mu, s^2 I)`` vs ``N(mu', s^2 I)`` the projection on ``mu' - mu`` is the
    likelihood-ratio statistic, so this is the most powerful test.

    Args:
      key: jax PRNG key.
      mechanism_fn: ``(key, dataset) -> pytree of arrays``; must be a jax-traceable
        function of the key for ``vectorize=True`` (the dataset is closed over).
      d, d_prime: the neighbouring datasets (any objects ``mechanism_fn`` accepts).
      epsilon: the claimed epsilon (None: just report the bound).
      delta: the delta of the claim.
      trials: runs per dataset.
      confidence: confidence of the lower bound.
      direction: ``"auto"``: the difference of the sample means on the first
        half of the runs (then the threshold is also selected on that half and
        only the second half is counted). Or a fixed array of the flattened
        output size (e.g. the known noise-free difference, which an auditor who
        knows ``d`` and ``d_prime`` may use).
      threshold: passed to `epsilon_lower_bound` (``"auto"`` recommended).
      batch_size: runs per vmapped chunk (bounds memory; see `run_trials`).
      vectorize: use ``jax.vmap`` over keys (else a Python loop).

    Returns:
      `AuditResult` comparing the lower bound with ``epsilon``.
    """
    key = check_key(key)
    trials = check_int(trials, "trials", minimum=20)
    delta = _check_delta0(delta)
    confidence = _check_confidence(confidence)
    claimed = None if epsilon is None else check_positive(epsilon, "epsilon")
    k_d, k_dp = jax.random.split(key)
    out_d = run_trials(k_d, mechanism_fn, d, trials, batch_size=batch_size, vectorize=vectorize)
    out_dp = run_trials(
        k_dp, mechanism_fn, d_prime, trials, batch_size=batch_size, vectorize=vectorize
    )
    if out_d.shape[1] != out_dp.shape[1]:
        raise ValueError(
            f"mechanism outputs differ in size on d ({out_d.shape[1]}) and d_prime ({out_dp.shape[1]})"
        )
    if isinstance(direction, str):
        if direction != "auto":
            raise ValueError(f"direction must be 'auto' or an array, got {direction!r}")
        if not (threshold is None or threshold == "auto"):
            raise ValueError(
                "direction='auto' needs threshold='auto' (both chosen on the first half)"
            )
        h = trials // 2
        u = out_dp[:h].mean(axis=0) - out_d[:h].mean(axis=0)
    else:
        u = np.asarray(check_array(direction, "direction", min_rows=1), dtype=np.float64).reshape(
            -1
        )
        if u.size != out_d.shape[1]:
            raise ValueError(
                f"direction has {u.size} entries, mechanism output has {out_d.shape[1]}"
            )
    norm = np.linalg.norm(u)
    u = u / norm if norm > 0 else u
    return epsilon_lower_bound(
        out_d @ u,
        out_dp @ u,
        delta=delta,
        threshold=threshold,
        confidence=confidence,
        claimed_epsilon=claimed,
    )


def audit_dpsgd_step(
    key: jax.Array,
    *,
    clip_norm: float,
    noise_multiplier: float,
    delta: float,
    epsilon: float | None = None,
    n_examples: int = 16,
    dim: int = 8,
    canary_scale: float = 1e3,
    trials: int = 20_000,
    confidence: float = 0.95,
    clip_fn: Callable[..., Any] | None = None,
    noisy_sum_fn: Callable[..., Any] | None = None,
    batch_size: int | None = None,
) -> AuditResult:
    """Audit one noisy clipped-sum DP-SGD step with a canary gradient (add/remove).

    ``D`` holds ``n_examples`` public random per-example gradients (a pytree
    with two leaves, shapes ``(n+1, dim)`` and ``(n+1, 2, dim)``) plus one
    padded slot masked out; ``D'`` additionally *includes* the slot, whose
    gradient is the canary ``canary_scale * e_0`` in the first leaf (a
    worst-case example: it is clipped to exactly ``clip_norm`` in a fixed
    direction). The masked canary is present (with mask 0) under ``D`` too, so
    a mask that is ignored is caught. The released quantity is
    ``noisy_sum_fn(k, clip_fn(grads, clip_norm)[0], mask, clip_norm=...,
    noise_multiplier=...)``, the statistic its first coordinate.

    Args:
      key: jax PRNG key (the public gradients are drawn from a split of it).
      clip_norm, noise_multiplier: the step's parameters.
      delta: delta of the claim.
      epsilon: claimed epsilon; default ``privacy.gaussian_epsilon(noise_multiplier,
        delta)`` (one Gaussian release with L2 sensitivity ``clip_norm`` and
        noise std ``noise_multiplier * clip_norm``: no subsampling amplification).
      clip_fn, noisy_sum_fn: implementations under test (default
        ``privacy.clip_per_example`` and ``privacy.noisy_clipped_sum``, whose noise is
        the DP-SGD transform `privkernels.privacy.dpsgd.dpsgd_noise` that DP-KIP's
        step applies too); pass deliberately broken ones to check that the audit
        catches them.

    Returns:
      `AuditResult`.
    """
    key = check_key(key)
    clip_norm = check_positive(clip_norm, "clip_norm")
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    delta_f = _check_delta0(delta)
    n_examples = check_int(n_examples, "n_examples")
    dim = check_int(dim, "dim")
    canary_scale = check_positive(canary_scale, "canary_scale")
    if epsilon is None:
        epsilon = float(privacy.gaussian_epsilon(noise_multiplier, delta_f))
    clip_fn = privacy.clip_per_example if clip_fn is None else clip_fn
    noisy_sum_fn = privacy.noisy_clipped_sum if noisy_sum_fn is None else noisy_sum_fn

    k_data, k_audit = jax.random.split(key)
    ka, kb = jax.random.split(k_data)
    m = n_examples + 1
    grads = {
        "a": jax.random.normal(ka, (m, dim), jnp.float32),
        "b": jax.random.normal(kb, (m, 2, dim), jnp.float32),
    }
    canary_a = jnp.zeros((dim,), jnp.float32).at[0].set(canary_scale)
    grads = {
        "a": grads["a"].at[n_examples].set(canary_a),
        "b": grads["b"].at[n_examples].set(0.0),
    }
    mask_d = jnp.arange(m) < n_examples
    mask_dp = jnp.ones((m,), bool)

    def mech(k: Any, mask: Any) -> Any:
        clipped, _ = clip_fn(grads, clip_norm)
        out = noisy_sum_fn(k, clipped, mask, clip_norm=clip_norm, noise_multiplier=noise_multiplier)
        return out["a"][0]

    return audit_gaussian_release(
        k_audit,
        mech,
        mask_d,
        mask_dp,
        epsilon=epsilon,
        delta=delta_f,
        trials=trials,
        confidence=confidence,
        direction=np.ones(1),
        batch_size=batch_size,
    )


def gaussian_audit_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon(delta) of two unit-variance Gaussians at distance ``mu``.

    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``
    (Balle & Wang 2018), solved for eps; a reference for what a perfect audit
    of a Gaussian release with noise std ``sensitivity / mu`` could reach.
    """
    from scipy.optimize import brentq  # heavy (seconds to import): loaded on first use
    from scipy.stats import norm  # heavy (seconds to import): loaded on first use

    mu = check_positive(mu, "mu")
    delta = check_fraction(delta, "delta")

    def f(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return float(brentq(f, 0.0, hi))


def dp_kip_full_batch_step(
    kernel: str,
    x_support: Any,
    n_classes: int,
    batch_size: int,
    *,
    clip_norm: float,
    noise_multiplier: float,
    relative_reg: float,
    optimizer: Any,
    grad_method: str = "auto",
    corrupted: Any = None,
    chunk_size: int = 8,
    delta: float = 1e-5,
) -> tuple[Any, Any, int]:
    """The real DP-KIP step on a full batch (q = 1), with an explicit noise multiplier.

    For audits and tests of the released quantity: one step of
    `privkernels.dp_kip.make_trainer`'s ``train_step`` over a full batch
    of ``batch_size`` examples (add-remove, public rate 1), where one step is a
    plain Gaussian release with L2 sensitivity ``clip_norm``.
    ``noise_multiplier`` replaces the calibrated one (so broken variants can be
    audited too).

    Args:
      kernel: DP-KIP kernel name; x_support: ``(m, *input_shape)`` starting support
        (``m = support_per_class * n_classes``, class-major as ``support_labels``).
      n_classes: label count. batch_size: rows of the full batch, also the
        normaliser the noisy sum is divided by.
      optimizer: e.g. ``optax.sgd(1.0)`` so the update is an affine image of the sum.
      corrupted: optional frozen-pixel mask like ``x_support``.
      chunk_size: rows per chunk; the batch is padded to a multiple of it.

    Returns:
      ``(train_step, state, pad)``: call ``train_step(state, Batch(x, y, mask), key)``
      with rows padded to ``pad``.
    """
    xs = jnp.asarray(x_support, jnp.float32)
    spc = xs.shape[0] // n_classes
    cfg, plan, opt = dp_kip.configure(
        n=batch_size,
        input_shape=tuple(xs.shape[1:]),
        n_classes=n_classes,
        epsilon=1.0,
        delta=delta,
        kernel=kernel,
        support_per_class=spc,
        batch_size=batch_size,
        epochs=1,
        relative_reg=relative_reg,
        clip_norm=clip_norm,
        neighbouring="add-remove",
        sampling_rate=1.0,
        # only decides the clipped-sum strategy here (frozen pixels need explicit gradients)
        corrupt_fraction=0.5 if corrupted is not None and bool(np.any(corrupted)) else 0.0,
        optimizer=optimizer,
        chunk_size=chunk_size,
        grad_method=grad_method,
    )
    cfg = dataclasses.replace(cfg, chunk_size=chunk_size)
    assert plan is not None  # epsilon was given
    plan = plan._replace(noise_multiplier=float(noise_multiplier))
    spec = dp_kip.make_kernel(kernel, tuple(xs.shape[1:]), n_classes)
    mask = np.zeros(xs.shape, bool) if corrupted is None else np.asarray(corrupted, bool)
    state = dp_kip.initial_state(cfg, {"x": xs}, opt, mask)
    pad = -(-batch_size // chunk_size) * chunk_size
    trainer = dp_kip.make_trainer(cfg, spec, plan, opt, n=batch_size, min_pad=pad, cacheable=False)
    return trainer.train_step, state, pad
