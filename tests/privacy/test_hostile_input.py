"""Hostile input across the public privacy API.

Claim checked by every case: bad input (NaN/Inf, empty arrays, wrong ranks,
labels outside [0, n_classes), a missing class where the method needs every
class, batch larger than n, eps <= 0 / inf / NaN, delta outside (0, 1), wrong
kinds) raises a clear ValueError/TypeError BEFORE any noise is drawn or any
mechanism runs. "Before noise" is enforced by replacing every jax.random
sampler and every privkernels.privacy mechanism with a sentinel that raises
``NoiseDrawn`` (a BaseException, so it cannot be swallowed): a function that
reaches a noise draw first fails the test instead of raising ValueError.

Mixed precision: float64 inputs are accepted and give the same release as
float32 inputs with the same key (checked per function below).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _privacy_helpers import NoiseDrawn, forbid_noise

from privkernels import dp_kip, dp_ntk, features, privacy
from privkernels import dp_ntk_regression as reg
from privkernels.generators import ConvCondGenerator

KEY = jax.random.key(0)
RNG = np.random.default_rng(0)
X_IMG = RNG.uniform(size=(8, 4, 4)).astype(np.float32)
X_TAB = RNG.normal(size=(8, 3)).astype(np.float32)
Y = (np.arange(8) % 2).astype(np.int32)


def _with_nan(a):
    b = np.array(a, copy=True)
    b.flat[3] = np.nan
    return b


def _with_inf(a):
    b = np.array(a, copy=True)
    b.flat[1] = np.inf
    return b


# Each case: (id, kwargs overrides); the builder fills in valid defaults.
DATA_CASES = [
    ("x-nan", {"x": "nan"}),
    ("x-inf", {"x": "inf"}),
    ("x-empty", {"x": "empty", "y": np.zeros((0,), np.int32)}),
    ("x-rank1", {"x": "rank1"}),
    ("x-object", {"x": "object"}),
    ("y-negative", {"y": np.array([0, 1, 0, 1, 0, 1, 0, -1], np.int32)}),
    ("y-too-large", {"y": np.array([0, 1, 0, 1, 0, 1, 0, 2], np.int32)}),
    ("y-float-nonint", {"y": np.full(8, 0.5)}),
    ("y-wrong-length", {"y": np.array([0, 1, 0], np.int32)}),
    ("y-rank2", {"y": np.zeros((8, 2), np.int32)}),
]
PRIVACY_CASES = [
    ("eps-zero", {"epsilon": 0.0}),
    ("eps-negative", {"epsilon": -1.0}),
    ("eps-inf", {"epsilon": math.inf}),
    ("eps-nan", {"epsilon": math.nan}),
    ("eps-string", {"epsilon": "1.0"}),
    ("delta-zero", {"delta": 0.0}),
    ("delta-one", {"delta": 1.0}),
    ("delta-negative", {"delta": -1e-5}),
    ("delta-nan", {"delta": math.nan}),
    ("key-int", {"key": 0}),
    ("key-none", {"key": None}),
]


def _resolve_x(spec, base):
    if isinstance(spec, np.ndarray):
        return spec
    return {
        "nan": _with_nan(base),
        "inf": _with_inf(base),
        "empty": base[:0],
        "rank1": base.reshape(-1)[:8],
        "object": np.array([object()] * base.shape[0], dtype=object),
    }[spec]


def _net():
    return features.fc_1l(8, out_features=2)


def run_dp_ntk_fit(**over):
    kw = dict(
        key=KEY,
        x=X_IMG,
        y=Y,
        epsilon=1.0,
        delta=1e-5,
        network=_net(),
        iterations=1,
        batch_size=4,
        n_classes=2,
        progress=False,
    )
    kw.update(over)
    kw["x"] = _resolve_x(kw["x"], X_IMG)
    key = kw.pop("key")
    x, y = kw.pop("x"), kw.pop("y")
    return dp_ntk.fit(key, x, y, **kw)


def run_dp_ntk_embedding(**over):
    kw = dict(key=KEY, x=X_TAB, y=Y, epsilon=1.0, delta=1e-5, network=_net(), n_classes=2)
    kw.update(over)
    kw["x"] = _resolve_x(kw["x"], X_TAB)
    key = kw.pop("key")
    x, y = kw.pop("x"), kw.pop("y")
    return dp_ntk.private_embedding(key, x, y, **kw)


def run_dp_ntk_proportions(**over):
    kw = dict(key=KEY, y=Y, epsilon=1.0, delta=1e-5, n_classes=2)
    kw.update(over)
    kw.pop("x", None)
    key = kw.pop("key")
    y = kw.pop("y")
    return dp_ntk.private_class_proportions(key, y, **kw)


def run_dp_kip_fit(**over):
    kw = dict(
        key=KEY,
        x=X_TAB,
        y=Y,
        kernel="fc_ntk",
        support_per_class=1,
        epsilon=1.0,
        delta=1e-5,
        batch_size=4,
        epochs=1,
        n_classes=2,
        progress=False,
    )
    kw.update(over)
    kw["x"] = _resolve_x(kw["x"], X_TAB)
    key = kw.pop("key")
    x, y = kw.pop("x"), kw.pop("y")
    return dp_kip.fit(key, x, y, **kw)


def run_regression_fit(**over):
    kw = dict(
        key=KEY,
        x=X_TAB,
        y=Y,
        epsilon=0.8,
        delta=1e-5,
        beta=1e-6,
        kernel_shift=0.5,
        width=8,
        n_classes=2,
        neighbouring="beta-close",  # Alg. 2's own parameters are checked here
    )
    kw.update(over)
    kw["x"] = _resolve_x(kw["x"], X_TAB)
    key = kw.pop("key")
    x, y = kw.pop("x"), kw.pop("y")
    return reg.fit(key, x, y, **kw)


METHODS = {
    "dp_ntk.fit": run_dp_ntk_fit,
    "dp_ntk.private_embedding": run_dp_ntk_embedding,
    "dp_ntk.private_class_proportions": run_dp_ntk_proportions,
    "dp_kip.fit": run_dp_kip_fit,
    "dp_ntk_regression.fit": run_regression_fit,
}

# cases that do not apply to a function (e.g. proportions take no x)
SKIP = {
    ("dp_ntk.private_class_proportions", "x-nan"),
    ("dp_ntk.private_class_proportions", "x-inf"),
    ("dp_ntk.private_class_proportions", "x-rank1"),
    ("dp_ntk.private_class_proportions", "x-object"),
    ("dp_ntk.private_class_proportions", "y-wrong-length"),
}


def _cases():
    for fname in METHODS:
        for cid, over in DATA_CASES + PRIVACY_CASES:
            if (fname, cid) in SKIP:
                continue
            yield pytest.param(fname, over, id=f"{fname}-{cid}")


@pytest.mark.parametrize("fname,over", list(_cases()))
def test_method_rejects_hostile_input_before_noise(fname, over, monkeypatch):
    """The method raises ValueError/TypeError naming the problem, and no sampler/mechanism ran."""
    forbid_noise(monkeypatch)
    with pytest.raises((ValueError, TypeError)):
        try:
            METHODS[fname](**over)
        except NoiseDrawn as err:  # pragma: no cover - the failure we are looking for
            pytest.fail(f"{fname} drew noise before rejecting {over}: {err}")


# --- method-specific hostile inputs ------------------------------------------------


@pytest.mark.parametrize(
    "fname,over",
    [
        pytest.param("dp_kip.fit", {"batch_size": 9}, id="dp_kip.fit-batch-larger-than-n"),
        pytest.param("dp_kip.fit", {"batch_size": 0}, id="dp_kip.fit-batch-zero"),
        pytest.param("dp_kip.fit", {"clip_norm": 0.0}, id="dp_kip.fit-clip-zero"),
        pytest.param("dp_kip.fit", {"clip_norm": math.inf}, id="dp_kip.fit-clip-inf"),
        pytest.param(
            "dp_kip.fit", {"x_test": X_TAB, "y_test": np.full(8, 5)}, id="dp_kip.fit-test-labels"
        ),
        pytest.param("dp_ntk.fit", {"batch_size": 0}, id="dp_ntk.fit-batch-zero"),
        pytest.param(
            "dp_ntk.fit",
            {"label_mode": "released", "split": (0.0, 1.0)},
            id="dp_ntk.fit-label-fraction-one",
        ),
        # the generator's initialisation is public randomness (samplers allowed below)
        pytest.param(
            "dp_ntk.fit",
            {"generator": ConvCondGenerator(n_classes=2, output_shape=(8, 8), hidden=(8,))},
            id="dp_ntk.fit-generator-shape-public-init",
        ),
        pytest.param("dp_ntk_regression.fit", {"beta": 0.0}, id="regression-beta-zero"),
        pytest.param("dp_ntk_regression.fit", {"k": 0}, id="regression-k-zero"),
        # k's maximum depends on the data-independent random weights, drawn first (public
        # randomness); the check must still precede every mechanism (samplers allowed below)
        pytest.param("dp_ntk_regression.fit", {"k": 10**9}, id="regression-k-too-large"),
        pytest.param("dp_ntk_regression.fit", {"kernel_shift": 0.0}, id="regression-no-eta-min"),
        pytest.param("dp_ntk_regression.fit", {"split": (1.0, 0.0)}, id="regression-split-one"),
        pytest.param("dp_ntk_regression.fit", {"delta": None}, id="regression-delta-none"),
        pytest.param("dp_ntk_regression.fit", {"dtype": "float16"}, id="regression-dtype-f16"),
    ],
)
def test_method_specific_hostile_input(fname, over, monkeypatch, request):
    """Method-specific invalid settings are refused before any noise (before any mechanism, and
    before any sampler except where data-independent randomness legitimately comes first)."""
    forbid_noise(monkeypatch, samplers="public-init" not in request.node.name
                 and "k-too-large" not in request.node.name)  # fmt: skip
    with pytest.raises((ValueError, TypeError)):
        try:
            METHODS[fname](**over)
        except NoiseDrawn as err:  # pragma: no cover
            pytest.fail(f"{fname} drew noise before rejecting {over}: {err}")


def test_dp_kip_missing_class_is_allowed():
    """DP-KIP does not need every class in the private data (support labels are fixed, data
    independent), so a missing class is accepted, not an error (decision recorded here)."""
    res = run_dp_kip_fit(y=np.zeros(8, np.int32), epochs=1, max_steps=1)
    assert res.report.private


def test_dp_ntk_empty_class_is_released_not_refused():
    """F10: refusing a dataset with an empty class while its neighbour (one more example of that
    class) releases is a data-dependent refusal. DP-NTK releases both: the empty class's column
    is pure noise, at the same (epsilon, delta) and with the same shapes."""
    y_empty = np.zeros(8, np.int32)
    emb, rep = run_dp_ntk_embedding(y=y_empty)
    emb_nb, rep_nb = run_dp_ntk_embedding(y=np.r_[1, y_empty[1:]].astype(np.int32))
    assert emb.shape == emb_nb.shape and np.all(np.isfinite(np.asarray(emb)))
    assert rep.epsilon == rep_nb.epsilon == 1.0
    res = run_dp_ntk_fit(y=y_empty)  # image data: another network input size, same class count
    assert res.report.private and res.noisy_embedding.shape[1] == emb.shape[1] == 2


@pytest.mark.parametrize("fname", ["dp_ntk.fit", "dp_kip.fit", "dp_ntk.private_embedding"])
def test_error_messages_carry_no_private_label_values(fname):
    """F10: an out-of-range label is refused without printing the labels' range (private)."""
    y = np.array([0, 1, 0, 1, 0, 1, 0, 7], np.int32)
    with pytest.raises(ValueError) as err:
        METHODS[fname](y=y)
    assert "7" not in str(err.value) and "[0, 2)" in str(err.value)


def test_complex_input_is_refused_before_noise(monkeypatch):
    """F11: complex arrays are not real data; they are refused before any noise is drawn."""
    forbid_noise(monkeypatch)
    for fname, run in METHODS.items():
        if fname == "dp_ntk.private_class_proportions":
            continue
        base = X_IMG if fname == "dp_ntk.fit" else X_TAB
        with pytest.raises(TypeError, match="real numeric"):
            run(x=base.astype(np.complex64))


# --- float32 / float64 consistency --------------------------------------------------


def test_float64_inputs_match_float32_dp_ntk():
    """private_embedding: float64 x gives the same release as float32 x (same key)."""
    a, _ = run_dp_ntk_embedding(x=X_TAB.astype(np.float32))
    b, _ = run_dp_ntk_embedding(x=X_TAB.astype(np.float64))
    assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_float64_inputs_match_float32_dp_kip():
    """dp_kip.fit: float64 x gives the same support set as float32 x (same key)."""
    a = run_dp_kip_fit(x=X_TAB.astype(np.float32), max_steps=1)
    b = run_dp_kip_fit(x=X_TAB.astype(np.float64), max_steps=1)
    assert a.support_x.dtype == b.support_x.dtype
    np.testing.assert_allclose(a.support_x, b.support_x, rtol=1e-5, atol=1e-6)


def test_float64_inputs_match_float32_regression():
    """dp_ntk_regression.fit: float64 x with dtype='float32' equals float32 x; dtype='float64' works."""
    a = run_regression_fit(x=X_TAB.astype(np.float32))
    b = run_regression_fit(x=X_TAB.astype(np.float64))
    assert a.x_tilde.dtype == b.x_tilde.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a.x_tilde), np.asarray(b.x_tilde), rtol=1e-5, atol=1e-6)
    c = run_regression_fit(x=X_TAB.astype(np.float32), dtype="float64")
    assert c.x_tilde.dtype == jnp.float64
    assert np.all(np.isfinite(np.asarray(c.alpha)))


# --- privacy core ---------------------------------------------------------------------

_V = jnp.ones((3,), jnp.float32)
_G = {"a": jnp.ones((4, 2), jnp.float32)}
_M = jnp.ones((4,), bool)
_K = jnp.eye(3, dtype=jnp.float32)

CORE_CASES = [
    # gaussian_mechanism
    (
        "gaussian_mechanism-value-nan",
        lambda: privacy.gaussian_mechanism(
            KEY, jnp.asarray([1.0, jnp.nan]), sensitivity=1.0, sigma=1.0
        ),
    ),
    (
        "gaussian_mechanism-value-inf",
        lambda: privacy.gaussian_mechanism(KEY, np.asarray([np.inf]), sensitivity=1.0, sigma=1.0),
    ),
    (
        "gaussian_mechanism-value-empty",
        lambda: privacy.gaussian_mechanism(KEY, np.zeros((0,)), sensitivity=1.0, sigma=1.0),
    ),
    (
        "gaussian_mechanism-value-object",
        lambda: privacy.gaussian_mechanism(KEY, np.array([object()]), sensitivity=1.0, sigma=1.0),
    ),
    (
        "gaussian_mechanism-sens-zero",
        lambda: privacy.gaussian_mechanism(KEY, _V, sensitivity=0.0, sigma=1.0),
    ),
    (
        "gaussian_mechanism-sens-negative",
        lambda: privacy.gaussian_mechanism(KEY, _V, sensitivity=-1.0, sigma=1.0),
    ),
    (
        "gaussian_mechanism-sens-inf",
        lambda: privacy.gaussian_mechanism(KEY, _V, sensitivity=math.inf, sigma=1.0),
    ),
    (
        "gaussian_mechanism-sigma-zero",
        lambda: privacy.gaussian_mechanism(KEY, _V, sensitivity=1.0, sigma=0.0),
    ),
    (
        "gaussian_mechanism-sigma-nan",
        lambda: privacy.gaussian_mechanism(KEY, _V, sensitivity=1.0, sigma=math.nan),
    ),
    (
        "gaussian_mechanism-key-int",
        lambda: privacy.gaussian_mechanism(0, _V, sensitivity=1.0, sigma=1.0),
    ),
    # truncated Laplace
    (
        "truncated_laplace-eps-zero",
        lambda: privacy.truncated_laplace(KEY, (3,), sensitivity=1.0, epsilon=0.0, delta=1e-5),
    ),
    (
        "truncated_laplace-eps-inf",
        lambda: privacy.truncated_laplace(KEY, (3,), sensitivity=1.0, epsilon=math.inf, delta=1e-5),
    ),
    (
        "truncated_laplace-delta-zero",
        lambda: privacy.truncated_laplace(KEY, (3,), sensitivity=1.0, epsilon=1.0, delta=0.0),
    ),
    (
        "truncated_laplace-delta-one",
        lambda: privacy.truncated_laplace(KEY, (3,), sensitivity=1.0, epsilon=1.0, delta=1.0),
    ),
    (
        "truncated_laplace-sens-zero",
        lambda: privacy.truncated_laplace(KEY, (3,), sensitivity=0.0, epsilon=1.0, delta=1e-5),
    ),
    (
        "truncated_laplace-shape-negative",
        lambda: privacy.truncated_laplace(KEY, (-1,), sensitivity=1.0, epsilon=1.0, delta=1e-5),
    ),
    (
        "truncated_laplace-dtype-int",
        lambda: privacy.truncated_laplace(
            KEY, (3,), sensitivity=1.0, epsilon=1.0, delta=1e-5, dtype=jnp.int32
        ),
    ),
    (
        "truncated_laplace_bound-delta-negative",
        lambda: privacy.truncated_laplace_bound(1.0, 1.0, -0.1),
    ),
    # Gaussian sampling mechanism
    (
        "gaussian_sampling-not-square",
        lambda: privacy.gaussian_sampling_mechanism(
            KEY, jnp.ones((2, 3)), 4, epsilon=0.5, delta=1e-5
        ),
    ),
    (
        "gaussian_sampling-rank1",
        lambda: privacy.gaussian_sampling_mechanism(
            KEY, jnp.ones((3,)), 4, epsilon=0.5, delta=1e-5
        ),
    ),
    (
        "gaussian_sampling-nan",
        lambda: privacy.gaussian_sampling_mechanism(
            KEY, _K.at[0, 0].set(jnp.nan), 4, epsilon=0.5, delta=1e-5
        ),
    ),
    (
        "gaussian_sampling-asymmetric",
        lambda: privacy.gaussian_sampling_mechanism(
            KEY, _K.at[0, 1].set(5.0), 4, epsilon=0.5, delta=1e-5
        ),
    ),
    (
        "gaussian_sampling-k-zero",
        lambda: privacy.gaussian_sampling_mechanism(KEY, _K, 0, epsilon=0.5, delta=1e-5),
    ),
    (
        "gaussian_sampling-k-float",
        lambda: privacy.gaussian_sampling_mechanism(KEY, _K, 2.5, epsilon=0.5, delta=1e-5),
    ),
    (
        "gaussian_sampling-empty",
        lambda: privacy.gaussian_sampling_mechanism(
            KEY, jnp.zeros((0, 0)), 4, epsilon=0.5, delta=1e-5
        ),
    ),
    # clipping / noisy sum
    ("clip_per_example-clip-zero", lambda: privacy.clip_per_example(_G, 0.0)),
    ("clip_per_example-clip-inf", lambda: privacy.clip_per_example(_G, math.inf)),
    ("clip_per_example-clip-nan", lambda: privacy.clip_per_example(_G, math.nan)),
    (
        "clip_per_example-ragged",
        lambda: privacy.clip_per_example({"a": jnp.ones((4, 2)), "b": jnp.ones((3, 2))}, 1.0),
    ),
    ("clip_per_example-scalar-leaf", lambda: privacy.clip_per_example({"a": jnp.ones(())}, 1.0)),
    (
        "noisy_clipped_sum-mask-shape",
        lambda: privacy.noisy_clipped_sum(
            KEY, _G, jnp.ones((3,), bool), clip_norm=1.0, noise_multiplier=1.0
        ),
    ),
    (
        "noisy_clipped_sum-sigma-zero",
        lambda: privacy.noisy_clipped_sum(KEY, _G, _M, clip_norm=1.0, noise_multiplier=0.0),
    ),
    (
        "noisy_clipped_sum-sigma-inf",
        lambda: privacy.noisy_clipped_sum(KEY, _G, _M, clip_norm=1.0, noise_multiplier=math.inf),
    ),
    (
        "noisy_clipped_sum-clip-negative",
        lambda: privacy.noisy_clipped_sum(KEY, _G, _M, clip_norm=-1.0, noise_multiplier=1.0),
    ),
    (
        "noisy_clipped_sum-key-none",
        lambda: privacy.noisy_clipped_sum(None, _G, _M, clip_norm=1.0, noise_multiplier=1.0),
    ),
    # sampling
    ("poisson_batch-n-zero", lambda: privacy.poisson_batch(KEY, 0, 0.5)),
    ("poisson_batch-rate-zero", lambda: privacy.poisson_batch(KEY, 10, 0.0)),
    ("poisson_batch-rate-above-one", lambda: privacy.poisson_batch(KEY, 10, 1.5)),
    ("poisson_batch-rate-nan", lambda: privacy.poisson_batch(KEY, 10, math.nan)),
    ("poisson_batch-pad-zero", lambda: privacy.poisson_batch(KEY, 10, 0.5, pad_to=0)),
    ("poisson_batch-n-float", lambda: privacy.poisson_batch(KEY, 10.0, 0.5)),
    # accounting
    ("gaussian_sigma-eps-zero", lambda: privacy.gaussian_sigma(0.0, 1e-5)),
    ("gaussian_sigma-eps-inf", lambda: privacy.gaussian_sigma(math.inf, 1e-5)),
    ("gaussian_sigma-delta-one", lambda: privacy.gaussian_sigma(1.0, 1.0)),
    (
        "dpsgd_noise_multiplier-rate-zero",
        lambda: privacy.dpsgd_noise_multiplier(1.0, 1e-5, sampling_rate=0.0, steps=10),
    ),
    (
        "dpsgd_noise_multiplier-steps-zero",
        lambda: privacy.dpsgd_noise_multiplier(1.0, 1e-5, sampling_rate=0.1, steps=0),
    ),
    (
        "dpsgd_noise_multiplier-accountant",
        lambda: privacy.dpsgd_noise_multiplier(
            1.0, 1e-5, sampling_rate=0.1, steps=1, accountant="moments"
        ),
    ),
    (
        "dpsgd_epsilon-sigma-zero",
        lambda: privacy.dpsgd_epsilon(0.0, 1e-5, sampling_rate=0.1, steps=10),
    ),
    (
        "dpsgd_epsilon-delta-negative",
        lambda: privacy.dpsgd_epsilon(1.0, -1e-5, sampling_rate=0.1, steps=10),
    ),
]


@pytest.mark.parametrize("fn", [pytest.param(f, id=i) for i, f in CORE_CASES])
def test_privacy_core_rejects_hostile_input_before_noise(fn, monkeypatch):
    """Privacy-core functions raise ValueError/TypeError before any jax.random sampler runs."""
    forbid_noise(monkeypatch, mechanisms=False)
    with pytest.raises((ValueError, TypeError)):
        try:
            fn()
        except NoiseDrawn as err:  # pragma: no cover
            pytest.fail(f"noise drawn before the input was rejected: {err}")


def test_gaussian_sampling_rejects_non_psd_matrix(monkeypatch):
    """A clearly indefinite K (eigenvalue -1) is not a covariance: it is refused before any
    noise, for both sampling branches (k <= n and k > n)."""
    forbid_noise(monkeypatch, mechanisms=False)
    for kmat in (-jnp.eye(3), jnp.asarray([[1.0, 2.0], [2.0, 1.0]])):  # eigenvalues -1 (and 3)
        for k in (2, 4):
            with pytest.raises(ValueError, match="positive semi-definite"):
                privacy.gaussian_sampling_mechanism(KEY, kmat, k, epsilon=0.5, delta=1e-5)


def test_gaussian_mechanism_float64_input_consistent():
    """float64 input (x64 disabled) is released as float32 and equals the float32 release."""
    v64 = np.linspace(0, 1, 7)
    a = privacy.gaussian_mechanism(KEY, v64.astype(np.float32), sensitivity=1.0, sigma=1.0)
    b = privacy.gaussian_mechanism(KEY, v64, sensitivity=1.0, sigma=1.0)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    with jax.enable_x64(True):
        c = privacy.gaussian_mechanism(
            KEY, jnp.asarray(v64, jnp.float64), sensitivity=1.0, sigma=1.0
        )
        assert c.dtype == jnp.float64


@pytest.mark.parametrize("fname", ["dp_ntk.fit", "dp_kip.fit", "dp_ntk_regression.fit"])
@pytest.mark.parametrize("where", ["under-a-file", "a-directory"])
def test_unwritable_checkpoint_path_is_refused_before_noise(fname, where, tmp_path, monkeypatch):
    """A checkpoint path the fit could not write fails before any noise, not at the first
    save after a release (a folder under a regular file fails for root too)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "run.npz" if where == "under-a-file" else tmp_path
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="checkpoint path"):
        try:
            METHODS[fname](checkpoint_path=path)
        except NoiseDrawn as err:  # pragma: no cover
            pytest.fail(f"{fname} drew noise before refusing {path}: {err}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing written


@pytest.mark.parametrize("fname", ["dp_ntk.fit", "dp_kip.fit", "dp_ntk_regression.fit"])
def test_an_existing_checkpoint_is_not_overwritten_by_a_fresh_fit(fname, tmp_path, monkeypatch):
    """A fresh fit (``resume=False``) refuses a path that holds a file, before any noise,
    and names ``resume=True`` (`checkpoint.check_new`); the file is left as it was."""
    path = tmp_path / "run.npz"
    path.write_bytes(b"an earlier run")
    forbid_noise(monkeypatch)
    with pytest.raises(ValueError, match="exists; pass resume=True to "):
        METHODS[fname](checkpoint_path=path)
    assert path.read_bytes() == b"an earlier run" and list(tmp_path.iterdir()) == [path]


def test_check_writable_leaves_no_probe_behind(tmp_path):
    """The probe writes where `save` would (creating the missing folders) and removes its
    file and those folders: a fit refused afterwards for bad input leaves nothing behind."""
    from privkernels import checkpoint, dp_kip

    path = checkpoint.check_writable(tmp_path / "new" / "deeper" / "run.npz")
    assert path == tmp_path / "new" / "deeper" / "run.npz" and list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="epsilon"):
        dp_kip.fit(KEY, np.zeros((20, 4), np.float32), np.zeros(20, np.int32), epsilon=-1.0,
                   n_classes=2, checkpoint_path=path)  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    checkpoint.save(path, {"a": np.zeros(2)}, {})  # save creates them when it writes
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.npz"]
