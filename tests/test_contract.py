"""One method contract, checked the same way for DP-NTK, DP-KIP and DP NTK regression.

* ``fit(key, x, y, *, epsilon, delta=1e-5, n_classes=None, mesh=None,
  checkpoint_path=None, resume=False, progress=True, ...)``;
* ``n_classes=None`` reads the labels only with a ``PrivacyLeakWarning`` and a
  report note (one helper for all three);
* results are frozen dataclasses with ``.report``, a typed ``.config`` and
  ``.save(path)``; the module's ``load(path)`` gives back an equal release;
* ``predict`` (where there is one) returns NumPy;
* ``resume=True`` continues (or returns) from the checkpoint without reading data;
* no method module draws privacy noise or builds a mechanism record itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

from privkernels import PrivacyLeakWarning, PrivacyReport, dp_kip, dp_ntk, features
from privkernels import dp_ntk_regression as reg
from privkernels.contract import SHARED_KEYWORDS, MethodFit, Release
from privkernels.options import RunOptions
from privkernels.privacy.warnings import SeededKeyWarning

SHARED = SHARED_KEYWORDS
MODULES = {"dp_ntk": dp_ntk, "dp_kip": dp_kip, "dp_ntk_regression": reg}


def _data():
    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(size=(48, 6))).astype(np.float32)  # in [0, 1]: a generator's range
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, (np.arange(48) % 3).astype(np.int32)


def _kwargs(name):
    return {
        "dp_ntk": dict(network=features.fc_1l(8, out_features=3), iterations=2, batch_size=12),
        "dp_kip": dict(kernel="fc_ntk", support_per_class=1, batch_size=12, epochs=1),
        "dp_ntk_regression": dict(width=8),
    }[name]


def _fit(name, **over):
    x, y = _data()
    kw = {"epsilon": 0.8, "n_classes": 3, "progress": False, **_kwargs(name), **over}
    return MODULES[name].fit(jax.random.key(0), x, y, **kw)


@pytest.mark.parametrize("name", list(MODULES))
def test_fit_signature_is_shared(name):
    params = inspect.signature(MODULES[name].fit).parameters
    assert list(params)[:3] == ["key", "x", "y"]
    assert params["epsilon"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["epsilon"].default is inspect.Parameter.empty
    for arg, default in SHARED.items():
        assert params[arg].kind is inspect.Parameter.KEYWORD_ONLY, arg
        assert params[arg].default == default, (arg, params[arg].default)


def test_shared_keywords_are_the_protocols():
    """`SHARED_KEYWORDS` is `MethodFit`'s keyword-only part with defaults; ``epsilon`` is
    required, and the contract's defaults are standard DP with fresh public keys."""
    params = inspect.signature(MethodFit.__call__).parameters
    assert params["epsilon"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["epsilon"].default is inspect.Parameter.empty
    assert "epsilon" not in SHARED_KEYWORDS
    assert SHARED_KEYWORDS["neighbouring"] == "replace-one"
    assert SHARED_KEYWORDS["public_key"] is None and SHARED_KEYWORDS["delta"] == 1e-5
    assert list(params)[1:4] == ["key", "x", "y"]


#: keywords of a fit that are neither its settings nor the shared run and budget keywords:
#: DP-KIP's public test set and its un-noised diagnostics (what a run reports, not releases)
REPORTING = {"dp_kip": {"x_test", "y_test", "eval_every", "diagnostics", "max_steps"}}


@pytest.mark.parametrize("name", list(MODULES))
def test_every_fit_states_its_settings_as_one_frozen_typed_value(name):
    """Each method's keywords (but the data, the keys, the budget's accountant, the run
    options and the reporting extras) are the fields of one frozen `Settings` in its
    ``settings`` module, the typed value its fit is planned from."""
    settings = importlib.import_module(f"privkernels.{name}.settings").Settings
    assert dataclasses.is_dataclass(settings) and settings.__dataclass_params__.frozen
    fields = {f.name for f in dataclasses.fields(settings)}
    params = inspect.signature(MODULES[name].fit).parameters
    keywords = {k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    shared = {"epsilon", "delta", "n_classes", "public_key", "budget_accountant"}
    shared |= set(RunOptions._fields)
    assert keywords - fields - shared - REPORTING.get(name, set()) == set()
    assert "neighbouring" in fields


@pytest.mark.parametrize("name", list(MODULES))
def test_every_result_is_a_release(name):
    assert isinstance(_fit(name), Release)


@pytest.mark.parametrize("name", list(MODULES))
def test_every_fit_names_its_relation_and_its_report_keeps_it(name):
    """``neighbouring=`` is a keyword of every fit; the default is standard DP of whole
    records (replace-one), and the report states the relation that was asked for."""
    params = inspect.signature(MODULES[name].fit).parameters
    assert params["neighbouring"].kind is inspect.Parameter.KEYWORD_ONLY
    default = params["neighbouring"].default
    assert default == "replace-one"
    assert _fit(name).report.neighbouring == default
    if name == "dp_ntk":  # the relation a method adds beside its paper's
        assert _fit(name, neighbouring="add-remove").report.neighbouring == "add-remove"
    if name == "dp_ntk_regression":  # the paper's relation, by name only
        with pytest.warns(PrivacyLeakWarning, match="beta-close"):
            rep = _fit(name, neighbouring="beta-close", kernel_shift=1.0).report
        assert rep.neighbouring == "beta-close"


@pytest.mark.parametrize("name", list(MODULES))
def test_an_unknown_relation_is_refused_by_the_one_core_check(name):
    """Every fit refuses a relation it does not offer with the privacy core's message, and
    no method module writes a relation check of its own."""
    with pytest.raises(ValueError, match=r"neighbouring must be one of \("):
        _fit(name, neighbouring="add-one")
    with warnings.catch_warnings():  # refused before the labels are read (no n_classes warning)
        warnings.simplefilter("error", PrivacyLeakWarning)
        warnings.simplefilter("ignore", SeededKeyWarning)  # the tests' int keys
        with pytest.raises(ValueError, match=r"neighbouring must be one of \("):
            _fit(name, neighbouring="add-one", n_classes=None)
    root = Path(dp_kip.__file__).resolve().parents[1]
    for pkg in ("dp_kip", "dp_ntk", "dp_ntk_regression"):
        for path in sorted((root / pkg).glob("*.py")):
            assert "neighbouring must be" not in path.read_text(), path


@pytest.mark.parametrize("name", list(MODULES))
def test_a_resume_refuses_an_unsupported_relation_with_the_core_message(name, tmp_path):
    """Resuming is no way around the relation check: the same message as a fresh fit."""
    ck = tmp_path / "run.npz"
    _fit(name, checkpoint_path=ck)
    x, y = (None, None) if name != "dp_kip" else _data()  # dp_kip continues on the data
    kw = {"epsilon": 0.8, "n_classes": 3, "progress": False, **_kwargs(name)}
    with pytest.raises(ValueError, match=r"neighbouring must be one of \("):
        MODULES[name].fit(jax.random.key(0), x, y, checkpoint_path=ck, resume=True,
                          neighbouring="add-one", **kw)  # fmt: skip


@pytest.mark.parametrize("name", list(MODULES))
def test_n_classes_none_warns_and_notes(name):
    with pytest.warns(PrivacyLeakWarning, match="n_classes"):
        res = _fit(name, n_classes=None)
    assert any("n_classes was inferred" in note for note in res.report.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        warnings.simplefilter("ignore", SeededKeyWarning)  # the tests' int keys
        res = _fit(name)
    assert not any("n_classes was inferred" in note for note in res.report.notes)


@pytest.mark.parametrize("name", list(MODULES))
def test_result_is_frozen_typed_and_round_trips(name, tmp_path):
    res = _fit(name)
    assert dataclasses.is_dataclass(res) and isinstance(res.report, PrivacyReport)
    assert dataclasses.is_dataclass(res.config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.report = None  # type: ignore[misc]
    path = res.save(tmp_path / f"{name}.npz")
    back = MODULES[name].load(path)
    assert back.report == res.report and back.config == res.config
    x, _ = _data()
    if name == "dp_ntk":
        a, _ = dp_ntk.sample(jax.random.key(1), res, 5)
        b, _ = dp_ntk.sample(jax.random.key(1), back, 5)
    else:
        a, b = MODULES[name].predict(res, x), MODULES[name].predict(back, x)
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("name", list(MODULES))
def test_load_refuses_a_report_edited_apart_from_its_release(name, tmp_path):
    import json

    res = _fit(name)
    path = res.save(tmp_path / "r.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["__meta__"]))
    meta["report"]["epsilon"] = 0.01
    meta["report"]["mechanisms"][0]["epsilon"] = 0.01
    arrays["__meta__"] = np.asarray(json.dumps(meta))
    np.savez(path, **arrays)
    with pytest.raises(ValueError):
        MODULES[name].load(path)


@pytest.mark.parametrize("name", list(MODULES))
def test_checkpoint_and_resume(name, tmp_path):
    """A checkpoint is never silently overwritten; resume=True continues it. DP-NTK and the
    regression resume from the file alone (x = y = None: no data is read); DP-KIP's
    remaining steps need the data, and a finished run resumes to the same release."""
    ck = tmp_path / "ck.npz"
    first = _fit(name, checkpoint_path=ck)
    assert ck.exists()
    with pytest.raises(ValueError):
        _fit(name, checkpoint_path=ck)
    if name == "dp_kip":
        again = _fit(name, checkpoint_path=ck, resume=True)
        np.testing.assert_array_equal(again.support_x, first.support_x)
    else:
        extra = {"network": _kwargs(name)["network"]} if name == "dp_ntk" else {}
        again = MODULES[name].fit(
            None, None, None, epsilon=0.8, checkpoint_path=ck, resume=True, progress=False, **extra
        )
    assert again.report == first.report


NOISE_AND_RECORDS = re.compile(
    r"MechanismRecord\.make\(|MechanismRecord\(|\b(gaussian|dpsgd|truncated_laplace|"
    r"gaussian_sampling)_record\(|\bgaussian_mechanism\(|\btruncated_laplace\(|"
    r"\bgaussian_sampling_mechanism\(|\bnoisy_clipped_sum\(|\bgaussian_sigma\(|"
    r"\bdpsgd_noise_multiplier\(|jax\.random\.(normal|laplace|uniform|gamma|bits)\("
)
#: data-independent randomness a method may draw itself (file -> allowed lines' content)
#: Data-independent random parameters (support starts, sketch matrices): drawn from the
#: key and the public shapes only, never noise added to a private value.
ALLOWED = {
    "dp_kip/init.py": (
        "jax.random.normal(key, (n_support, *input_shape)",
        "jax.random.normal(key, coarse, dtype=jnp.float32)",
    ),
    "tuning.py": ("jax.random.uniform(jax.random.fold_in(public_key, i))",),  # the split's coins
    "dp_ntk_regression/replace_one.py": (
        "jax.random.normal(ka, (features, d), dtype=dtype)",
        "jax.random.normal(kb, (features, width), dtype=dtype)",
    ),
}


def test_no_method_module_draws_noise_or_builds_records():
    """Only the privacy core turns a budget into noise and a record."""
    root = Path(dp_kip.__file__).resolve().parents[1]
    offenders = []
    pkgs = ("dp_kip", "dp_ntk", "dp_ntk_regression")
    paths = [p for pkg in pkgs for p in (root / pkg).glob("*.py")]
    paths += [root / "tuning.py", root / "search.py"]  # a search's scores go through the core
    for path in sorted(paths):
        rel = str(path.relative_to(root))
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if NOISE_AND_RECORDS.search(line) and not any(a in line for a in ALLOWED.get(rel, ())):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


#: every ``jax.random.normal(`` in the package: privacy noise only in the privacy core
#: (DP-SGD noise only in the transform), the rest data-independent draws from public shapes
NORMAL_DRAWS = {
    "privacy/dpsgd.py": 1,  # `dpsgd_noise`: the one DP-SGD noise draw
    "privacy/mechanisms.py": 3,  # the Gaussian mechanism, Gaussian sampling
    "audit.py": 2,  # the audit's public synthetic gradients
    "dp_kip/init.py": 2,  # support starts
    "dp_ntk_regression/replace_one.py": 2,  # sketch matrices
    "features/quadratic_ntk.py": 1,  # random features
    "generators.py": 1,  # sampling codes of a fitted generator (post-processing)
}


def test_dpsgd_noise_is_drawn_in_one_place():
    """``jax.random.normal`` occurs only where `NORMAL_DRAWS` says; every DP-SGD step
    (DP-KIP's, the clipped-sum path of the audit, `DPSGDPlan.add_noise`) calls the
    transform, and nothing else in the package draws after clipping."""
    src = Path(dp_kip.__file__).resolve().parents[1]
    found: dict[str, int] = {}
    for path in sorted(src.rglob("*.py")):
        rel = str(path.relative_to(src))
        count = len(re.findall(r"jax\.random\.normal\(", path.read_text()))
        if count:
            found[rel] = count
    assert found == NORMAL_DRAWS
    callers = {
        "dp_kip/train.py": r"dpsgd_noise\(hyper\.noise_std, hyper\.digest\)",
        "privacy/dpsgd.py": (
            r"return self\.noise\(\)\.update\(summed, DPSGDNoiseState\(key\)\)"
            r"[\s\S]*dpsgd_noise\(std, digest\)\.update\("
        ),
    }
    for rel, pattern in callers.items():
        assert re.search(pattern, (src / rel).read_text()), rel
