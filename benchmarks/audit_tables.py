"""``python -m benchmarks run audit``: claimed epsilon vs empirically audited lower bound.

For every released quantity of the three methods (and the privacy-core
mechanisms behind them) the mechanism is run many times on a worst-case
neighbouring pair; a likelihood-ratio statistic (projection on the difference
of the noise-free outputs) gives a Clopper-Pearson lower bound on epsilon
(`privkernels.audit`). Each row is a mechanism variant: the real one must
have ``audited_lb <= claimed_epsilon`` (PASS) and the deliberately broken ones
must be refuted (``audited_lb > claimed_epsilon``, "caught"), otherwise the
audit would prove nothing.

Options (``--set key=value``): ``trials`` (per dataset; quick 20000, paper
100000), ``confidence`` (0.95).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.registry import RunContext, register

EPS, DELTA = 1.0, 1e-5


def _row(
    mechanism: str,
    variant: str,
    relation: str,
    res: Any,
    seconds: float,
    expect_pass: bool,
    ideal: float | None = None,
) -> dict[str, Any]:
    caught = not res.passed
    ok = (res.passed and expect_pass) or (caught and not expect_pass)
    return {
        "dataset": "synthetic worst-case pair",
        "mechanism": mechanism,
        "variant": variant,
        "relation": relation,
        "epsilon": res.claimed_epsilon,
        "delta": res.delta,
        "metric": "audited epsilon lower bound",
        "value": res.epsilon_lower_bound,
        "paper_value": None,
        "ideal_epsilon_of_pair": ideal,
        "trials": res.trials,
        "confidence": res.confidence,
        "verdict": "PASS" if res.passed else "CAUGHT (claim refuted)",
        "as_expected": ok,
        "seconds": seconds,
    }


def _timed(fn: Callable[..., Any]) -> tuple[Any, float]:
    """``fn()`` and its wall-clock seconds (``fn``'s parameters, if any, have defaults)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _audit(
    seed: int,
    mech: Callable[[Any, Any], Any],
    d: Any,
    dp: Any,
    direction: Any,
    trials: int,
    conf: float,
    epsilon: float = EPS,
    delta: float = DELTA,
) -> tuple[Any, float]:
    """Time `audit.audit_gaussian_release` of ``mech`` on ``(d, dp)`` with key ``seed``."""
    import jax

    from privkernels import audit

    return _timed(
        lambda: audit.audit_gaussian_release(
            jax.random.key(seed),
            mech,
            d,
            dp,
            epsilon=epsilon,
            delta=delta,
            trials=trials,
            confidence=conf,
            direction=direction,
        )  # fmt: skip
    )


# --------------------------------------------------------------------------- scenarios


def _gaussian_mechanism(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax.numpy as jnp

    from privkernels import audit, privacy

    sigma = privacy.gaussian_sigma(EPS, DELTA)
    d, dp = jnp.zeros(4), jnp.asarray([0.0, 0.6, 0.8, 0.0])
    rows = []
    for variant, scale, expect in (("real", 1.0, True), ("broken: sigma / 4", 0.25, False)):

        def mech(k, v, s=scale):
            return privacy.gaussian_mechanism(k, v, sensitivity=1.0, sigma=sigma * s)

        res, sec = _audit(1, mech, d, dp, np.asarray(dp), trials, conf)
        ideal = audit.gaussian_audit_epsilon(1.0 / (sigma * scale), DELTA)
        rows.append(
            _row("privacy.gaussian_mechanism", variant, "L2 sensitivity 1", res, sec, expect, ideal)
        )
    return rows


def _dpsgd_step(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax

    from privkernels import audit, privacy

    sigma = privacy.gaussian_sigma(EPS, DELTA)
    real_sum = privacy.noisy_clipped_sum
    variants: tuple[tuple[str, dict[str, Any], bool], ...] = (
        ("real", {}, True),
        (
            "broken: sigma / 4",
            {
                "noisy_sum_fn": lambda k, c, m, *, clip_norm, noise_multiplier: real_sum(
                    k, c, m, clip_norm=clip_norm, noise_multiplier=noise_multiplier / 4
                )
            },
            False,
        ),
        ("broken: no clipping", {"clip_fn": lambda g, c: (g, None)}, False),
    )
    rows = []
    for variant, kw, expect in variants:
        res, sec = _timed(
            lambda kw=kw: audit.audit_dpsgd_step(
                jax.random.key(2),
                clip_norm=0.5,
                noise_multiplier=sigma,
                delta=DELTA,
                trials=trials,
                confidence=conf,
                **kw,
            )
        )
        ideal = (
            audit.gaussian_audit_epsilon(1 / sigma / (0.25 if "4" in variant else 1.0), DELTA)
            if "clipping" not in variant
            else None
        )
        rows.append(
            _row(
                "privacy.clip_per_example + noisy_clipped_sum (1 step, q=1)",
                variant,
                "add/remove (canary)",
                res,
                sec,
                expect,
                ideal,
            )
        )
    return rows


def _dp_kip_step(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp
    import optax

    from privkernels import audit, dp_kip, privacy

    ridge, clip, n_base, d = 1e-3, 0.5, 6, 4
    rng = np.random.default_rng(0)
    spec = dp_kip.make_kernel("fc_ntk", (d,), 2)
    x_s0 = dp_kip.init_support(jax.random.key(1), 2, (d,))
    y_s0 = dp_kip.encode_labels(jnp.asarray(dp_kip.support_labels(2, 1)), 2)
    x = jnp.asarray(rng.normal(size=(n_base + 1, d)), jnp.float32)
    y_enc = dp_kip.encode_labels(jnp.asarray(np.arange(n_base + 1) % 2), 2)
    pred = dp_kip.krr.krr_predict_repr(spec.kind, spec.kernel_fn, x_s0, y_s0, x[-1:], ridge)[0]
    y_d = y_enc.at[-1].set(pred)  # zero residual: contributes nothing (= removed)
    y_dp = y_enc.at[-1].set(pred + 50.0 * jnp.asarray([1.0, -1.0]))  # canary, clipped to C
    opt = optax.sgd(1.0)

    def ref(yy):
        g = dp_kip.per_example_grads(spec, x_s0, y_s0, x, yy, reg=ridge)
        c, _ = privacy.clip_per_example({"x": g}, clip)
        return np.asarray(jnp.sum(c["x"], 0), np.float64).ravel()

    u = ref(y_dp) - ref(y_d)
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    claimed = privacy.dpsgd_epsilon(sigma, DELTA, sampling_rate=1.0, steps=1)
    rows = []
    n = n_base + 1
    for variant, scale, expect in (("real", 1.0, True), ("broken: sigma / 4", 0.25, False)):
        step, state, pad = audit.dp_kip_full_batch_step(
            "fc_ntk",
            x_s0,
            2,
            n,
            clip_norm=clip,
            noise_multiplier=sigma * scale,
            relative_reg=ridge,
            optimizer=opt,
        )
        xp = jnp.concatenate([x, jnp.zeros((pad - n, d), x.dtype)])
        mask = (jnp.arange(pad) < n).astype(jnp.float32)

        def mech(k, yy, step=step, state=state, xp=xp, mask=mask, pad=pad):
            yp = jnp.concatenate([yy, jnp.zeros((pad - n, 2), yy.dtype)])
            new, _ = step(state, dp_kip.Batch(xp, yp, mask), k)
            return (state.params["x"] - new.params["x"]) * n

        res, sec = _audit(3, mech, y_d, y_dp, u, trials, conf, epsilon=claimed)
        ideal = audit.gaussian_audit_epsilon(
            float(np.linalg.norm(u)) / (clip * sigma * scale), DELTA
        )
        rows.append(
            _row(
                "dp_kip step (real jitted step, q=1, fc_ntk)",
                variant,
                "add/remove (canary)",
                res,
                sec,
                expect,
                ideal,
            )
        )
    return rows


def _dp_ntk(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp

    from privkernels import audit, dp_ntk, features, privacy

    n, dim, c = 8, 3, 2
    net = features.fc_1l(16, out_features=c)
    params = features.init_params(jax.random.key(11), net, (dim,))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    y = (np.arange(n) % c).astype(np.int32)

    def exact(xx, yy):
        e, _ = dp_ntk.private_embedding(
            jax.random.key(0), xx, yy, n_classes=c, epsilon=None, network=net, params=params
        )
        return np.asarray(e, np.float64)

    base = exact(x, y)
    best: tuple[float, Any, Any] = (-1.0, None, None)
    for _ in range(16):  # adversary: the replacement that moves the embedding most
        for lab in range(c):
            x2, y2 = x.copy(), y.copy()
            x2[0] = (rng.normal(size=dim) * rng.uniform(0.1, 10)).astype(np.float32)
            y2[0] = lab
            diff = float(np.linalg.norm(exact(x2, y2) - base))
            if diff > best[0]:
                best = (diff, x2, y2)
    diff, x2, y2 = best
    u = (exact(x2, y2) - base).ravel()
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    real_mech = privacy.gaussian_mechanism
    rows = []
    variants = (
        ("real", 1.0, 1.0, True),
        ("broken: sigma / 4", 0.25, 1.0, False),
        ("broken: sensitivity 2/n^2 instead of 2/n", 1.0, 1.0 / n, False),
    )

    def unmodified(k, ds):  # the public function as it is
        xx, yy = ds
        emb, _ = dp_ntk.private_embedding(
            k, xx, yy, n_classes=c, epsilon=EPS, delta=DELTA, network=net, params=params
        )
        return jnp.vdot(emb.ravel(), jnp.asarray(u, emb.dtype))

    for variant, sig_s, sens_s, expect in variants:

        def broken(k, ds, sig_s=sig_s, sens_s=sens_s):
            xx, yy = ds
            emb, _ = dp_ntk.private_embedding(
                k, xx, yy, n_classes=c, epsilon=None, network=net, params=params
            )
            noisy = real_mech(k, emb, sensitivity=2.0 / n * sens_s, sigma=sigma * sig_s)
            return jnp.vdot(noisy.ravel(), jnp.asarray(u, noisy.dtype))

        release = unmodified if variant == "real" else broken
        res, sec = _audit(4, release, (x, y), (x2, y2), np.ones(1), trials, conf)
        ideal = audit.gaussian_audit_epsilon(diff / (2.0 / n * sens_s * sigma * sig_s), DELTA)
        rows.append(
            _row(
                "dp_ntk.private_embedding (e-NTK mean embedding)",
                variant,
                f"replace-one (pair distance {diff * n / 2:.3f} x 2/n)",
                res,
                sec,
                expect,
                ideal,
            )
        )
    # class proportions: worst pair moves two counts; replayed with the same post-processing
    yl = jnp.asarray([0] * 5 + [1] * 5)
    yl2 = jnp.asarray([0] * 4 + [1] * 6)
    for variant, sens_s, expect in (
        ("real parameters", 1.0, True),
        ("broken: sensitivity / 10", 0.1, False),
    ):

        def props(k, labels, sens_s=sens_s):
            p = jnp.bincount(labels, length=2).astype(jnp.float32) / labels.shape[0]
            noisy = jnp.clip(
                real_mech(k, p, sensitivity=math.sqrt(2) / 10 * sens_s, sigma=sigma), 0.0, None
            )
            tot = noisy.sum()
            q = jnp.where(tot > 0, noisy / jnp.where(tot > 0, tot, 1.0), 0.5)
            return q[1] - q[0]

        res, sec = _audit(5, props, yl, yl2, np.ones(1), trials, conf)
        ideal = audit.gaussian_audit_epsilon(1.0 / (sigma * sens_s), DELTA)
        rows.append(
            _row(
                "dp_ntk class proportions (Gaussian + clip/renormalise)",
                variant,
                "replace-one (two counts move)",
                res,
                sec,
                expect,
                ideal,
            )
        )
    return rows


def _tlap(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax.numpy as jnp

    from privkernels import privacy

    sens = 0.3
    rows = []
    for variant, scale, expect in (
        ("real", 1.0, True),
        ("broken: L2 instead of L1 sensitivity (d=16: scale / 4)", 0.25, False),
    ):

        def mech(k, v, scale=scale):
            return v + privacy.truncated_laplace(
                k, v.shape, sensitivity=sens * scale, epsilon=EPS, delta=DELTA
            )

        res, sec = _audit(
            6, mech, jnp.zeros(1), jnp.full((1,), sens), np.ones(1), max(trials, 50_000), conf
        )
        rows.append(
            _row(
                "privacy.truncated_laplace (DP NTK regression X~)",
                variant,
                "L1 distance = sensitivity",
                res,
                sec,
                expect,
                EPS / scale,
            )
        )
    return rows


def _gaussian_sampling(trials: int, conf: float) -> list[dict[str, Any]]:
    import jax.numpy as jnp

    from privkernels import privacy

    eps, delta, k0 = 0.9, 1e-2, 36
    lg = math.log(1 / delta)
    m0 = min(eps / math.sqrt(8 * k0 * lg), eps / (8 * lg))
    impls = [("privacy.gaussian_sampling_mechanism", privacy.gaussian_sampling_mechanism)]
    rows = []
    for name, fn in impls:
        for variant, k, m_scale, expect in (
            ("real (k = allowed, M = Delta(k))", k0, 1.0, True),
            ("broken: true M = 40 x bound", k0, 40.0, False),
            ("broken: k = 600 x allowed", 600 * k0, 1.0, False),
        ):
            m = m0 * m_scale
            s1 = jnp.eye(2, dtype=jnp.float32)
            s2 = jnp.diag(jnp.asarray([1 / (1 + m), 1.0], jnp.float32))

            def mech(kk, sig, fn=fn, k=k):
                return fn(kk, sig, k)

            res, sec = _audit(
                7, mech, s1, s2, np.asarray([1.0, 0, 0, 0]), trials, conf, epsilon=eps, delta=delta
            )
            rows.append(
                _row(
                    f"{name} (DP NTK regression K~)",
                    variant,
                    "commuting pair, one eigenvalue x (1+M)",
                    res,
                    sec,
                    expect,
                    None,
                )
            )
    return rows


def _kernel_mean(trials: int, conf: float) -> list[dict[str, Any]]:
    """Input map -> class moments -> release (replace-one kernel-mean) on its worst pair."""
    import jax.numpy as jnp

    from privkernels import audit, privacy
    from privkernels.dp_ntk_regression import kernel_mean as km
    from privkernels.dp_ntk_regression.kernel import input_map
    from privkernels.privacy.budget import as_budget

    # (5 e1, class 0) replaced by (-3 e2, class 0): after the ball map M_0 moves by
    # e2 e2^T - e1 e1^T, norm sqrt(2) = the sensitivity (orthogonal rows, one class).
    d = (np.array([[5.0, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    dp = (np.array([[0.0, -3.0], [0.0, 1.0]]), np.array([0, 1]))
    diff = np.zeros((2, 2, 2))
    diff[0, 0, 0], diff[0, 1, 1] = -1.0, 1.0
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    rows = []
    for variant, scale, expect in (("real", 1.0, True), ("broken: sensitivity / 4", 0.25, False)):

        def mech(k, data, scale=scale):
            xp = input_map(jnp.asarray(data[0], jnp.float32), 1.0, False)
            m = km.class_moments(xp, data[1], 2, input_bound=1.0, chunk_size=2)
            if scale == 1.0:  # the shipped release
                return km.release_moments(k, m, budget=as_budget(EPS, DELTA), n=2)[0]
            noisy = privacy.gaussian_mechanism(
                k, m, sensitivity=km.SENSITIVITY * scale, sigma=sigma
            )
            return 0.5 * (noisy + jnp.swapaxes(noisy, 1, 2))

        res, sec = _audit(8, mech, d, dp, diff.reshape(-1), trials, conf)
        ideal = audit.gaussian_audit_epsilon(1.0 / (sigma * scale), DELTA)
        rows.append(
            _row(
                "dp_ntk_regression kernel-mean class moments (replace-one)",
                variant,
                "replace-one (orthogonal rows, same class: distance sqrt(2))",
                res,
                sec,
                expect,
                ideal,
            )
        )
    return rows


def _ssp(trials: int, conf: float) -> list[dict[str, Any]]:
    """Sketch -> clip -> (Psi^T Psi, Psi^T Y) -> release (replace-one ridge) on a bad pair."""
    import jax.numpy as jnp

    from privkernels import audit, privacy
    from privkernels.dp_ntk_regression import replace_one as r1
    from privkernels.privacy.budget import as_budget

    # A hand-set sketch (d=2, m=1, D=2) maps x to (x1, x2) (x1 + x2) / sqrt(2): the rows
    # (5, 0) and (0, -3) clip to e1 and e2, orthogonal, and the labels differ, so the
    # released vector moves by 2 (the bound sqrt(6) is not tight for the upper triangle).
    w, sketch = jnp.ones((1, 2)), (jnp.eye(2), jnp.ones((2, 1)))
    d = (np.array([[5.0, 0.0], [0.0, 1.0]]), np.eye(2)[[0, 1]])
    dp = (np.array([[0.0, -3.0], [0.0, 1.0]]), np.eye(2)[[1, 1]])
    iu = np.triu_indices(2)

    def stats(data: Any, clip: bool = True) -> tuple[Any, Any]:
        x, y = jnp.asarray(data[0], jnp.float32), jnp.asarray(data[1], jnp.float32)
        if clip:  # the shipped path
            return r1.sufficient_statistics(x, y, w, sketch, target_bound=1.0, chunk_size=2)
        h = r1._sketch_rows(x, w, *sketch)
        return h.T @ h, h.T @ y

    def vec(s: Any, b: Any) -> Any:
        return jnp.concatenate([s[iu], b.reshape(-1)])

    def diff(clip: bool) -> np.ndarray:  # the noise-free difference: the auditor's direction
        return np.asarray(vec(*stats(dp, clip)) - vec(*stats(d, clip)), np.float64)

    sigma, sens = privacy.gaussian_sigma(EPS, DELTA), r1.ssp_sensitivity(1.0)
    rows = []
    for variant, scale, clip, expect in (
        ("real", 1.0, True, True),
        ("broken: feature rows not clipped", 1.0, False, False),
        ("broken: sensitivity / 4", 0.25, True, False),
    ):

        def mech(k, data, scale=scale, clip=clip):
            s, b = stats(data, clip)
            if scale == 1.0:  # the shipped release
                return vec(*r1.release_statistics(k, s, b, budget=as_budget(EPS, DELTA),
                                                  target_bound=1.0, n=2)[:2])  # fmt: skip
            return privacy.gaussian_mechanism(k, vec(s, b), sensitivity=sens * scale, sigma=sigma)

        direction = diff(clip)
        res, sec = _audit(9, mech, d, dp, direction, trials, conf)
        mu = float(np.linalg.norm(direction)) / (sigma * sens * scale)  # unclipped: huge
        rows.append(
            _row(
                "dp_ntk_regression sufficient statistics (replace-one ridge)",
                variant,
                "replace-one (orthogonal clipped rows, other label: distance 2 - clip margin)",
                res,
                sec,
                expect,
                audit.gaussian_audit_epsilon(mu, DELTA) if clip else None,
            )
        )
    return rows


SCENARIOS = (
    _gaussian_mechanism, _dpsgd_step, _dp_kip_step, _dp_ntk, _tlap, _gaussian_sampling,
    _kernel_mean, _ssp,
)  # fmt: skip


@register(
    "audit",
    "claimed epsilon vs audited lower bound per mechanism (+ broken variants)",
    ("trials", "confidence"),
)
def run(ctx: RunContext) -> list[dict[str, Any]]:
    trials = int(ctx.options.get("trials", 20_000 if ctx.profile == "quick" else 100_000))
    conf = float(ctx.options.get("confidence", 0.95))
    rows: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        rows.extend(scenario(trials, conf))
    return rows
