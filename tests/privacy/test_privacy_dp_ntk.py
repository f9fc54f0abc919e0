"""Privacy verification of DP-NTK's releases (privkernels.dp_ntk).

Released quantities: the e-NTK mean embedding (replace-one, Frobenius
sensitivity 2/n, Prop. 3.1) and, with ``label_mode="released"``, the class
proportions (replace-one, L2 sensitivity sqrt(2)/n). For each: a property
test of the sensitivity, a distribution test of the noise, and an empirical
audit that passes for the real code and fails for deliberately broken variants.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import key_bytes, patch_privacy, spy_privacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from privkernels import audit, dp_ntk, features, privacy

N, D, C = 8, 3, 2
EPS, DELTA = 1.0, 1e-5
TRIALS = 20_000


@pytest.fixture(scope="module")
def net():
    network = features.fc_1l(16, out_features=C)
    params = features.init_params(jax.random.key(11), network, (D,))
    return network, params


def _data(seed: int, n: int = N):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, D)).astype(np.float32)  # the default generators' range [0, 1]
    y = np.arange(n, dtype=np.int32) % C
    return x, y


def _exact(net, x, y):
    network, params = net
    emb, rep = dp_ntk.private_embedding(
        jax.random.key(0), x, y, n_classes=C, epsilon=None, network=network, params=params
    )
    assert not rep.private
    return np.asarray(emb, np.float64)


def _worst_pair(net, seed=0, candidates=64):
    """Replace example 0 by the candidate (any label) that moves the embedding most."""
    x, y = _data(seed)
    base = _exact(net, x, y)
    rng = np.random.default_rng(seed + 100)
    best = None
    for _ in range(candidates // 8):
        for lab in range(C):
            xc = x.copy()
            yc = y.copy()
            xc[0] = rng.normal(size=D).astype(np.float32) * rng.uniform(0.1, 10)
            yc[0] = lab
            diff = np.linalg.norm(_exact(net, xc, yc) - base)
            if best is None or diff > best[0]:
                best = (diff, xc, yc)
    return (x, y), (best[1], best[2]), best[0]


# --------------------------------------------------------------------------- #
# Sensitivity (property tests)
# --------------------------------------------------------------------------- #


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**31 - 1),
    idx=st.integers(0, N - 1),
    new_label=st.integers(0, C - 1),
    scale=st.floats(1e-3, 1e3),
)
def test_embedding_replace_one_sensitivity_is_2_over_n(net, seed, idx, new_label, scale):
    """Replacing any one example moves the pre-noise embedding by <= 2/n in Frobenius norm."""
    x, y = _data(seed % 1000)
    rng = np.random.default_rng(seed)
    x2, y2 = x.copy(), y.copy()
    x2[idx] = (rng.normal(size=D) * scale).astype(np.float32)
    y2[idx] = new_label
    if np.bincount(y2, minlength=C).min() == 0:  # the method needs every class
        return
    diff = np.linalg.norm(_exact(net, x, y) - _exact(net, x2, y2))
    assert diff <= 2.0 / N * (1 + 1e-5)


def test_embedding_chunk_padding_does_not_leak_into_the_sum(net):
    """Chunked streaming (last chunk padded and masked) gives the same pre-noise embedding as one
    chunk, so padded rows contribute nothing (the 2/n bound holds for every chunk_size)."""
    network, params = net
    x, y = _data(7)
    ref = _exact(net, x, y)
    for chunk in (1, 3, 5):
        emb, _ = dp_ntk.private_embedding(
            jax.random.key(0),
            x,
            y,
            n_classes=C,
            epsilon=None,
            network=network,
            params=params,
            chunk_size=chunk,
        )
        np.testing.assert_allclose(np.asarray(emb, np.float64), ref, rtol=1e-5, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(
    labels=st.lists(st.integers(0, 3), min_size=4, max_size=40),
    pos=st.integers(0, 10**6),
    new_label=st.integers(0, 3),
)
def test_class_proportions_replace_one_sensitivity(labels, pos, new_label):
    """Replacing one label moves the pre-noise proportion vector by <= sqrt(2)/n in L2."""
    y = np.asarray(labels, np.int32)
    n = y.size
    y2 = y.copy()
    y2[pos % n] = new_label
    p1, r1 = dp_ntk.private_class_proportions(jax.random.key(0), y, n_classes=4, epsilon=None)
    p2, _ = dp_ntk.private_class_proportions(jax.random.key(0), y2, n_classes=4, epsilon=None)
    assert not r1.private
    assert np.linalg.norm(p1 - p2) <= math.sqrt(2) / n + 1e-12


def test_reports_state_the_sensitivities(net):
    """The reports record sensitivity 2/n (embedding), sqrt(2)/n (proportions), replace-one."""
    network, params = net
    x, y = _data(0)
    _, rep = dp_ntk.private_embedding(
        jax.random.key(1),
        x,
        y,
        n_classes=C,
        epsilon=EPS,
        delta=DELTA,
        network=network,
        params=params,
    )
    (m,) = rep.mechanisms
    assert rep.neighbouring == privacy.REPLACE_ONE
    assert m.sensitivity == pytest.approx(2.0 / N)
    assert m.param_dict["sigma"] == pytest.approx(privacy.gaussian_sigma(EPS, DELTA))
    _, rep2 = dp_ntk.private_class_proportions(
        jax.random.key(1), y, n_classes=C, epsilon=EPS, delta=DELTA
    )
    assert rep2.mechanisms[0].sensitivity == pytest.approx(math.sqrt(2) / N)


# --------------------------------------------------------------------------- #
# Noise distribution
# --------------------------------------------------------------------------- #


def test_embedding_noise_is_gaussian_with_stated_scale(net):
    """noisy - exact embedding ~ N(0, (sigma * 2/n)^2) entrywise (KS test, fixed keys)."""
    network, params = net
    x, y = _data(1)
    exact = _exact(net, x, y)
    sigma = privacy.gaussian_sigma(EPS, DELTA)
    std = sigma * 2.0 / N
    noise = []
    for i in range(12):
        noisy, _ = dp_ntk.private_embedding(
            jax.random.key(1000 + i),
            x,
            y,
            n_classes=C,
            epsilon=EPS,
            delta=DELTA,
            network=network,
            params=params,
        )
        noise.append(np.asarray(noisy, np.float64) - exact)
    z = np.concatenate([v.ravel() for v in noise]) / std
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert np.std(z) == pytest.approx(1.0, abs=0.05)


def test_class_proportions_call_gaussian_mechanism_with_stated_scale(monkeypatch):
    """private_class_proportions noises the proportions once with sensitivity sqrt(2)/n and
    the analytic-Gaussian sigma, and only post-processes the result."""
    calls = spy_privacy(monkeypatch, "gaussian_mechanism")
    y = np.array([0, 0, 1, 1, 1, 2], np.int32)
    out, rep = dp_ntk.private_class_proportions(
        jax.random.key(5), y, n_classes=3, epsilon=0.5, delta=1e-6
    )
    assert len(calls) == 1
    kw = calls[0].kwargs
    assert kw["sensitivity"] == pytest.approx(math.sqrt(2) / 6)
    assert kw["sigma"] == pytest.approx(privacy.gaussian_sigma(0.5, 1e-6))
    np.testing.assert_allclose(np.asarray(calls[0].args[1]), np.bincount(y) / 6, rtol=1e-6)
    raw = np.clip(np.asarray(calls[0].result, np.float64), 0, None)
    expect = raw / raw.sum() if raw.sum() > 0 else np.full(3, 1 / 3)
    np.testing.assert_allclose(out, expect, rtol=1e-6)
    assert out.sum() == pytest.approx(1.0)


# --------------------------------------------------------------------------- #
# Empirical audits (real code passes, broken variants are caught)
# --------------------------------------------------------------------------- #


def _scale_sensitivity(monkeypatch, scale):
    """Broken variant: every Gaussian release noised for ``scale`` times its sensitivity."""
    real_mech = privacy.gaussian_mechanism
    patch_privacy(
        monkeypatch,
        "gaussian_mechanism",
        lambda k, v, *, sensitivity, sigma: real_mech(
            k, v, sensitivity=sensitivity * scale, sigma=sigma
        ),
    )


def _embedding_audit(net, key, pair, sigma_scale=1.0, sens_scale=1.0, monkeypatch=None):
    network, params = net
    (x, y), (x2, y2) = pair
    u = _exact(net, x2, y2) - _exact(net, x, y)
    if monkeypatch is not None and (sigma_scale != 1.0 or sens_scale != 1.0):
        real_sigma = privacy.gaussian_sigma
        patch_privacy(monkeypatch, "gaussian_sigma", lambda e, d: real_sigma(e, d) * sigma_scale)
        _scale_sensitivity(monkeypatch, sens_scale)

    def mech(k, ds):
        xx, yy = ds
        emb, _ = dp_ntk.private_embedding(
            k, xx, yy, n_classes=C, epsilon=EPS, delta=DELTA, network=network, params=params
        )
        return jnp.vdot(emb.ravel(), jnp.asarray(u.ravel(), emb.dtype))

    return audit.audit_gaussian_release(
        key, mech, (x, y), (x2, y2), epsilon=EPS, delta=DELTA, trials=TRIALS, direction=np.ones(1)
    )


@pytest.fixture(scope="module")
def pair(net):
    d, dp, diff = _worst_pair(net)
    assert diff <= 2.0 / N * (1 + 1e-5)
    return d, dp


def test_embedding_audit_passes(net, pair):
    """Audit of private_embedding on a worst-case replace-one pair: lb <= claimed eps."""
    res = _embedding_audit(net, jax.random.key(20), pair)
    assert res.passed, res.summary()
    assert res.epsilon_lower_bound < EPS


def test_embedding_audit_catches_noise_divided_by_4(net, pair, monkeypatch):
    """Broken variant: sigma / 4 -> the same audit refutes eps=1."""
    res = _embedding_audit(net, jax.random.key(20), pair, sigma_scale=0.25, monkeypatch=monkeypatch)
    assert not res.passed, res.summary()


def test_embedding_audit_catches_wrong_sensitivity(net, pair, monkeypatch):
    """Broken variant: noise calibrated to sensitivity 2/n^2 (n times too small) is refuted."""
    res = _embedding_audit(
        net, jax.random.key(20), pair, sens_scale=1.0 / N, monkeypatch=monkeypatch
    )
    assert not res.passed, res.summary()
    assert res.epsilon_lower_bound > 2 * EPS


def _sums_audit(net, key, sens_scale=1.0, monkeypatch=None):
    """Audit the add-remove release (class sums, sensitivity 1) on D and D minus record 0."""
    network, params = net
    x, y = _data(0)
    x2, y2 = x[1:], y[1:]  # an add-remove neighbour: one record fewer
    u = _exact(net, x, y) * len(x) - _exact(net, x2, y2) * len(x2)
    assert 0.99 < np.linalg.norm(u) <= 1.0 + 1e-5  # one unit-norm column, less the margin
    if monkeypatch is not None and sens_scale != 1.0:
        _scale_sensitivity(monkeypatch, sens_scale)

    def mech(k, ds):
        xx, yy = ds
        sums, _ = dp_ntk.private_embedding(
            k, xx, yy, n_classes=C, epsilon=EPS, delta=DELTA, network=network, params=params,
            neighbouring="add-remove",
        )  # fmt: skip
        return jnp.vdot(sums.ravel(), jnp.asarray(u.ravel(), sums.dtype))

    return audit.audit_gaussian_release(
        key, mech, (x2, y2), (x, y), epsilon=EPS, delta=DELTA, trials=TRIALS, direction=np.ones(1)
    )


def test_add_remove_sums_of_many_identical_records_move_by_one(monkeypatch):
    """The float32 value released under add-remove moves by ~1 when a record is added.

    n = 64528 identical records of one class: a mean computed with weights fl(1/n)
    and multiplied back by n moved by 1.187 here (the rounding of every weight
    changes with n), so the release summed with unit weights instead. What is
    left is the rounding of a sum over records (docs/privacy.md), here ~1e-4.
    """
    from privkernels.dp_ntk import release

    seen = []
    real = release.gaussian_release
    monkeypatch.setattr(
        release,
        "gaussian_release",
        lambda k, v, **kw: (seen.append(np.asarray(v)), real(k, v, **kw))[1],
    )
    network = features.fc_1l(64, out_features=2)
    x0 = np.random.default_rng(0).uniform(0, 1, (1, 8)).astype(np.float32)
    for n in (64528, 64529):
        x, y = np.repeat(x0, n, 0), np.zeros(n, np.int32)
        dp_ntk.private_embedding(jax.random.key(0), x, y, n_classes=2, epsilon=1.0,
                                 network=network, neighbouring="add-remove")  # fmt: skip
    moved = np.linalg.norm(seen[1].astype(np.float64) - seen[0].astype(np.float64))
    assert 0.99 < moved <= 1.0 + 1e-3, moved


def test_add_remove_sums_audit_passes_and_the_mean_sensitivity_is_caught(net, monkeypatch):
    """The class sums under add-remove: passes at sensitivity 1; noise calibrated to the
    replace-one mean's 2/n instead (the mistake of reusing it for sums) is refuted."""
    ok = _sums_audit(net, jax.random.key(40))
    assert ok.passed, ok.summary()
    bad = _sums_audit(net, jax.random.key(40), sens_scale=2.0 / N, monkeypatch=monkeypatch)
    assert not bad.passed, bad.summary()


def _proportions_audit(key, sens_scale=1.0, monkeypatch=None):
    """Audit the proportions release on the worst replace-one pair (two counts move).

    private_class_proportions post-processes in NumPy (not traceable under vmap),
    so the audit records the exact (sensitivity, sigma) it passes to
    gaussian_mechanism and replays that release with the same post-processing
    (clip at 0, renormalise), vectorized. That the real function is exactly this
    post-processing of one gaussian_mechanism call is checked by
    test_class_proportions_call_gaussian_mechanism_with_stated_scale.
    """
    y = jnp.asarray([0] * 5 + [1] * 5, jnp.int32)
    y2 = jnp.asarray([0] * 4 + [1] * 6, jnp.int32)
    recorded = {}
    real_mech = privacy.gaussian_mechanism

    def capture(k, v, *, sensitivity, sigma):
        recorded["sensitivity"], recorded["sigma"] = sensitivity, sigma
        return real_mech(k, v, sensitivity=sensitivity, sigma=sigma)

    with pytest.MonkeyPatch.context() as mp:
        patch_privacy(mp, "gaussian_mechanism", capture)
        dp_ntk.private_class_proportions(
            jax.random.key(0), np.asarray(y), n_classes=2, epsilon=EPS, delta=DELTA
        )
    assert recorded["sensitivity"] == pytest.approx(math.sqrt(2) / 10)
    sens = recorded["sensitivity"] * sens_scale  # broken variant: noise for a smaller sensitivity

    def release(k, labels):
        props = jnp.bincount(labels, length=2).astype(jnp.float32) / labels.shape[0]
        noisy = real_mech(k, props, sensitivity=sens, sigma=recorded["sigma"])
        clipped = jnp.clip(noisy, 0.0, None)
        total = clipped.sum()
        p = jnp.where(total > 0, clipped / jnp.where(total > 0, total, 1.0), 0.5)
        return p[1] - p[0]

    return audit.audit_gaussian_release(
        key, release, y, y2, epsilon=EPS, delta=DELTA, trials=TRIALS, direction=np.ones(1)
    )


def test_class_proportions_audit_passes_and_broken_is_caught():
    """Audit of the proportions release (its own sensitivity and sigma, replayed vectorized with
    the same post-processing): passes; with noise for sensitivity sqrt(2)/n^2 it is refuted."""
    ok = _proportions_audit(jax.random.key(30))
    assert ok.passed, ok.summary()
    bad = _proportions_audit(jax.random.key(30), sens_scale=0.1)
    assert not bad.passed, bad.summary()


# --------------------------------------------------------------------------- #
# Key discipline inside fit
# --------------------------------------------------------------------------- #


def test_fit_releases_use_fresh_split_keys(net, monkeypatch):
    """In fit(label_mode='released') the two Gaussian releases use two distinct keys, neither is
    the user's key, and the realised embedding noise is not the noise the user's key would give."""
    network, params = net
    calls = spy_privacy(monkeypatch, "gaussian_mechanism")
    x, y = _data(2)
    user_key = jax.random.key(77)
    res = dp_ntk.fit(
        user_key,
        x,
        y,
        epsilon=EPS,
        delta=DELTA,
        network=network,
        ntk_params=params,
        iterations=1,
        batch_size=8,
        n_classes=C,
        label_mode="released",
        progress=False,
    )
    assert len(calls) == 2
    keys = [key_bytes(c.args[0]) for c in calls]
    assert len(set(keys)) == 2
    assert key_bytes(user_key) not in keys
    exact = _exact(net, x, y)
    realised = np.asarray(res.noisy_embedding, np.float64) - exact
    emb_call = calls[0]
    std = emb_call.kwargs["sigma"] * emb_call.kwargs["sensitivity"]
    naive = std * np.asarray(jax.random.normal(user_key, exact.shape), np.float64)
    assert not np.allclose(realised, naive, atol=1e-3 * std)
    # the two standard-normal vectors behind the releases are uncorrelated
    z_emb = realised.ravel() / std
    z_user = naive.ravel() / std
    assert abs(np.corrcoef(z_emb, z_user)[0, 1]) < 0.35
    assert res.report.epsilon == pytest.approx(EPS)
    assert res.report.delta == pytest.approx(DELTA)


def test_private_embedding_noise_not_reproducible_from_user_key(net):
    """The user key is split before the noise draw: N(0, std^2) drawn with the user key itself
    (or with either half of its split) does not reproduce the released noise... except for the
    noise half, which is exactly what the implementation documents (k_params, k_noise)."""
    network, params = net
    x, y = _data(3)
    key = jax.random.key(123)
    noisy, rep = dp_ntk.private_embedding(
        key, x, y, n_classes=C, epsilon=EPS, delta=DELTA, network=network, params=params
    )
    exact = _exact(net, x, y)
    std = rep.mechanisms[0].param_dict["noise_std"]
    realised = (np.asarray(noisy, np.float64) - exact) / std
    direct = np.asarray(jax.random.normal(key, exact.shape, jnp.float32), np.float64)
    assert np.max(np.abs(realised - direct)) > 1.0
    assert abs(np.corrcoef(realised.ravel(), direct.ravel())[0, 1]) < 0.3


# --------------------------------------------------------------------------- #
# Checkpoint / resume never re-spends or resets the budget
# --------------------------------------------------------------------------- #


def test_resume_keeps_budget_and_releases_nothing(net, tmp_path, monkeypatch):
    """Interrupt after 2 iterations, resume to 4: no new release, same report; resuming through
    fit(resume=True) with a DIFFERENT epsilon, or with data, is refused."""
    network, params = net
    x, y = _data(4)
    ck = tmp_path / "ck.npz"
    first = dp_ntk.fit(
        jax.random.key(9),
        x,
        y,
        epsilon=EPS,
        delta=DELTA,
        network=network,
        ntk_params=params,
        iterations=2,
        batch_size=8,
        n_classes=C,
        checkpoint_path=ck,
        checkpoint_every=1,
        progress=False,
    )
    assert ck.exists()
    calls = spy_privacy(monkeypatch, "gaussian_mechanism")
    resume = dict(network=network, checkpoint_path=ck, resume=True, progress=False)
    resumed = dp_ntk.fit(None, None, None, epsilon=EPS, delta=DELTA, iterations=4, **resume)
    assert calls == []  # nothing new released
    assert resumed.iteration == 4
    assert resumed.report == first.report
    np.testing.assert_array_equal(
        np.asarray(resumed.noisy_embedding), np.asarray(first.noisy_embedding)
    )
    # adversarial: asking for a different budget on resume, or passing data, is refused
    with pytest.raises(ValueError, match="cannot change on resume"):
        dp_ntk.fit(jax.random.key(10), None, None, epsilon=50.0, delta=0.5, iterations=5, **resume)
    with pytest.raises(ValueError, match="never reads data"):
        dp_ntk.fit(jax.random.key(10), x, y, epsilon=EPS, delta=DELTA, iterations=5, **resume)
    assert calls == []
    # the original budget resumes fine through fit and keeps the original report
    again = dp_ntk.fit(
        jax.random.key(10), None, None, epsilon=EPS, delta=DELTA, iterations=5, **resume
    )
    assert calls == []
    assert again.report == first.report
    assert again.iteration == 5
