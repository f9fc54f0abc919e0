"""The benchmark CLI refuses ``--set`` keys a table does not read (before running anything)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import cpu_info, machine_info
from benchmarks.registry import load_all


@pytest.mark.parametrize("name", sorted(load_all()))
def test_every_table_refuses_unknown_options(name):
    table = load_all()[name]
    with pytest.raises(SystemExit, match="unknown --set option"):
        table.check_options({"definitely_not_an_option": "1"})
    table.check_options({k: "1" for k in table.options})  # its own keys are accepted


def test_perf_gpu_refuses_without_a_gpu(tmp_path):
    """``perf --device gpu`` names the reason and writes nothing when JAX sees no GPU."""
    import jax

    from benchmarks.perf import run_perf

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is visible: the refusal path cannot be exercised here")
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        run_perf(quick=True, out=tmp_path, data_dir=None, device="gpu")
    assert list(tmp_path.iterdir()) == []


def test_run_defaults_to_results_and_missing_data_is_one_line(tmp_path, monkeypatch, capsys):
    """Default ``--out`` is ./results (never the committed tables); missing data: exit 2, no traceback."""
    from benchmarks.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRIVKERNELS_DATA", raising=False)
    rc = main(["run", "dp-ntk-table4", "--data-dir", str(tmp_path / "empty"),
               "--set", "datasets=adult"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("missing data:") and "adult" in err
    assert "Traceback" not in err and not (tmp_path / "results").exists()


def test_package_cli_never_imports_the_benchmarks():
    """The installed package does not reach the (uninstalled) benchmarks folder: its CLI
    has no ``bench`` subcommand (argparse refuses it, exit 2) and loads no ``benchmarks``
    module, even run from the checkout's root where ``benchmarks`` is importable."""
    code = (
        "import sys\n"
        "from privkernels.cli import main\n"
        "try:\n"
        "    rc = main(['bench', 'list'])\n"
        "except SystemExit as e:\n"
        "    rc = e.code\n"
        "assert rc == 2, f'bench was accepted: {rc}'\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'benchmarks']\n"
    )
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_table3_convnet_augment_option(tmp_path):
    """``--set convnet_augment=shift/rotate/scale`` parses to an `Augment`; bad specs refuse."""
    from benchmarks.dp_kip_tables import _convnet_augment
    from benchmarks.registry import RunContext
    from privkernels.evaluation import Augment

    def ctx(options):
        return RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)

    assert _convnet_augment(ctx({})) is None
    assert _convnet_augment(ctx({"convnet_augment": "none"})) is None
    assert _convnet_augment(ctx({"convnet_augment": "2/15/0.1"})) == Augment(2.0, 15.0, 0.1)
    assert _convnet_augment(ctx({"convnet_augment": "0/0/0/0.5"})) == Augment(flip=0.5)
    for bad in ("2/15", "2/-1/0.1", "a/b/c", "0/0/0/1.5", "0/0/0/0.5/1"):
        with pytest.raises(ValueError):
            _convnet_augment(ctx({"convnet_augment": bad}))


def test_dp_ntk_start_follows_the_preprocessing(tmp_path):
    """``--set init=dp_ntk``: the public range [-1, 1] for ``2x-1`` inputs, each image's
    own min and max for per-image standardised ones (the FC-NTK's default)."""
    from benchmarks.dp_kip_tables import _hp, _init
    from benchmarks.registry import RunContext
    from privkernels.dp_kip import DPNTKInit

    def hp(kernel, **options):
        options = {"init": "dp_ntk", **options}
        ctx = RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)
        return _hp(ctx, "mnist", kernel, 1.0, 10)

    fc = hp("fc_ntk", init_fraction="0.2")
    assert fc["preprocess"] == "std" and fc["relation"] == "replace-one"
    assert _init(fc) == DPNTKInit(budget_fraction=0.2, data_range="standardized")
    scat = _init(hp("scatternet"))
    assert scat == DPNTKInit(budget_fraction=0.1, data_range=(-1.0, 1.0))
    assert "init_centered" not in hp("scatternet")  # the key of earlier rows is unchanged
    assert _init(hp("scatternet", init_centered="1")).centered
    assert not _init(hp("scatternet", init_centered="0")).centered
    with pytest.raises(ValueError, match="init_centered"):
        hp("scatternet", init_centered="yes")
    assert _init({"preprocess": "std"}) == "gaussian"
    for stray in ("init_fraction", "init_centered"):  # ignored without init=dp_ntk: refused
        with pytest.raises(ValueError, match=stray):
            hp("scatternet", init="gaussian", **{stray: "1"})


def test_chunk_size_option_reaches_fit_only_when_set(tmp_path, monkeypatch):
    """``--set chunk_size=N`` is passed to `dp_kip.fit`; without it fit keeps its default,
    and the row's hyper-parameters (the table's key) gain no column."""
    import numpy as np

    from benchmarks.dp_kip_tables import _fit, _hp
    from benchmarks.registry import RunContext
    from privkernels import dp_kip

    seen: list[dict] = []
    monkeypatch.setattr(dp_kip, "fit", lambda key, x, y, **kw: seen.append(kw))
    x, y = np.zeros((20, 28, 28), np.float32), np.arange(20) % 10
    for options, want in (({}, None), ({"chunk_size": "512"}, 512)):
        ctx = RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)
        hp = _hp(ctx, "mnist", "scatternet", 1.0, 10)
        assert hp.get("chunk_size") == want
        _fit(None, x, y, None, None, 10, "scatternet", 1.0, 10, hp)
        assert seen[-1].get("chunk_size") == want
    with pytest.raises(ValueError):
        _hp(RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path,
                       options={"chunk_size": "lots"}), "mnist", "scatternet", 1.0, 10)  # fmt: skip


def test_lr_schedule_option_decays_adam_over_the_planned_steps(tmp_path, monkeypatch):
    """``--set lr_schedule=cosine`` hands fit an Adam whose step size falls from ``lr`` to 0
    over the run's planned steps; without it fit gets its default optimizer (no new key)."""
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.dp_kip_tables import _fit, _hp
    from benchmarks.registry import RunContext
    from privkernels import dp_kip

    seen: list[dict] = []
    monkeypatch.setattr(dp_kip, "fit", lambda key, x, y, **kw: seen.append(kw))
    x, y = np.zeros((40, 28, 28), np.float32), np.arange(40) % 10

    def run(**options: str) -> dict:
        ctx = RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)
        hp = _hp(ctx, "mnist", "scatternet", 1.0, 10)
        _fit(None, x, y, None, None, 10, "scatternet", 1.0, 10, hp)
        return hp

    assert "lr_schedule" not in run() and seen[-1]["optimizer"] is None
    run(lr_schedule="cosine", lr="0.05", epochs="3", batch_size="20")  # 3 x 2 = 6 steps
    opt, p = seen[-1]["optimizer"], {"x": jnp.zeros(3)}
    state, sizes = opt.init(p), []
    for _ in range(7):
        u, state = opt.update({"x": jnp.ones(3)}, state, p)
        sizes.append(float(jnp.abs(u["x"][0])))
    assert sizes[0] == pytest.approx(0.05, rel=1e-3)
    assert all(a > b for a, b in zip(sizes[:6], sizes[1:6], strict=False))
    assert sizes[6] == 0.0  # past the planned steps the step size stays 0
    with pytest.raises(SystemExit):
        run(lr_schedule="linear")


def test_run_writes_each_table_and_frees_its_compiled_programs(tmp_path, monkeypatch, capsys):
    """A run of several tables writes each one's JSON and Markdown, and clears JAX's
    caches after each (long runs otherwise exhaust vm.max_map_count)."""
    import jax
    import jax.numpy as jnp

    import benchmarks.__main__ as cli
    from benchmarks.registry import Table

    @jax.jit
    def f(x):
        return x * 2.0

    def table(ctx):
        return [{"dataset": "toy", "epsilon": 1.0, "metric": "m",
                 "value": float(f(jnp.ones(3))[0]), "paper_value": None, "seconds": 0.0}]  # fmt: skip

    stub = {n: Table(n, "stub", table, __name__) for n in ("t-a", "t-b")}
    monkeypatch.setattr(cli, "load_all", lambda: stub)
    cleared = []
    real_clear = jax.clear_caches
    monkeypatch.setattr(jax, "clear_caches", lambda: (cleared.append(1), real_clear()))
    assert cli.main(["run", "t-a", "t-b", "--out", str(tmp_path)]) == 0
    assert len(cleared) == 2
    for n in ("t-a", "t-b"):
        assert (tmp_path / f"{n}-quick.json").exists() and (tmp_path / f"{n}-quick.md").exists()
    assert "| toy |" in capsys.readouterr().out


def test_table3_convnet_teacher_option(tmp_path):
    """``--set convnet_teacher=temperature/pool`` parses; bad specs refuse."""
    from benchmarks.dp_kip_tables import _convnet_teacher
    from benchmarks.registry import RunContext

    def ctx(options):
        return RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=options)

    assert _convnet_teacher(ctx({})) is None
    assert _convnet_teacher(ctx({"convnet_teacher": "none"})) is None
    assert _convnet_teacher(ctx({"convnet_teacher": "0.1/20000"})) == (0.1, 20000)
    for bad in (
        "0.1",
        "0/100",
        "-1/100",
        "0.1/-5",
        "a/b",
        "0.1/100/3",
        "0.1/2.5",
        "inf/100",
        "nan/1",
    ):
        with pytest.raises(ValueError, match="convnet_teacher"):
            _convnet_teacher(ctx({"convnet_teacher": bad}))


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_table3_teacher_sees_only_the_release(tmp_path, monkeypatch):
    """Table 3 with ``convnet_teacher``: the ConvNet is taught on the release's support
    set by the release's KRR; the training and test data never reach it."""
    import jax

    from benchmarks import dp_kip_tables as t
    from benchmarks.registry import RunContext
    from privkernels import dp_kip, evaluation

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 8, 8)).astype(np.float32), np.arange(60) % 3
    xte, yte = rng.normal(size=(9, 8, 8)).astype(np.float32), np.arange(9) % 3
    res = dp_kip.fit(jax.random.key(0), x, y, kernel="fc_ntk", support_per_class=2,
                     n_classes=3, epsilon=None, epochs=1, batch_size=20, progress=False)  # fmt: skip
    monkeypatch.setattr(t, "_images", lambda *a, **k: (x, y, xte, yte, 3))
    monkeypatch.setattr(t, "_fit", lambda *a, **k: res)
    seen = {}

    def fake_teach(key, xs, teacher, c, **kw):
        seen.update(xs=np.asarray(xs), scores=teacher(xs), kw=kw)
        return evaluation.train_convnet(key, xs, res.support_y, c, steps=1, width=4)

    monkeypatch.setattr(evaluation, "train_convnet_from_teacher", fake_teach)
    opts = {
        "kernels": "fc_ntk",
        "epsilons": "10",
        "convnet_teacher": "0.5/40",
        "convnet_steps": "1",
    }
    ctx = RunContext(profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options=opts)
    (row,) = t.table3(ctx)
    np.testing.assert_array_equal(seen["xs"], res.support_x)
    np.testing.assert_array_equal(seen["scores"], dp_kip.predict(res, res.support_x))
    assert seen["kw"]["temperature"] == 0.5 and seen["kw"]["pool_size"] == 40
    assert row["convnet_teacher"] == "0.5/40"


@pytest.mark.slow  # end to end (CI runs -m slow)
def test_table3_release_dir_saves_then_loads_the_same_release(tmp_path, monkeypatch):
    """``--set release_dir=DIR``: the first run fits and saves each cell's release; a
    later run of the same cell loads it (no fit), bit for bit, and scores it
    identically; other hyper-parameters, images or labels, or another secret, are
    fitted again; a file holding another cell's release is refused."""
    import jax

    from benchmarks import dp_kip_tables as t
    from benchmarks.registry import RunContext
    from privkernels import dp_kip

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 8, 8)).astype(np.float32), np.arange(60) % 3
    xte, yte = rng.normal(size=(9, 8, 8)).astype(np.float32), np.arange(9) % 3
    data = {"x": x, "y": y}
    monkeypatch.setattr(t, "_images", lambda *a, **k: (data["x"], data["y"], xte, yte, 3))
    fits, fitted = [], []

    def small_fit(key, x, y, xte, yte, c, kern, eps, spc, hp):  # `_fit`'s cell, made small
        fits.append(np.asarray(jax.random.key_data(key)))
        fitted.append(dp_kip.fit(
            key, x, y, kernel=kern, support_per_class=spc, n_classes=c, epsilon=eps,
            delta=t.DELTA, epochs=int(hp["epochs"]), learning_rate=hp["lr"],
            clip_norm=hp["clip"], batch_size=20, progress=False,
        ))  # fmt: skip
        return fitted[-1]

    monkeypatch.setattr(t, "_fit", small_fit)
    opts = {"kernels": "fc_ntk", "epsilons": "10", "convnet_steps": "1", "spc": "2", "epochs": "1"}

    def run(**extra):
        ctx = RunContext(
            profile="quick", seeds=(0,), data_dir=None, out=tmp_path, options={**opts, **extra}
        )
        (row,) = t.table3(ctx)
        return row

    folder = tmp_path / "releases"
    plain = run()
    assert "release" not in plain and len(fits) == 1 and not folder.exists()
    first = run(release_dir=str(folder))
    assert first["release"] == "fitted" and len(fits) == 2
    (saved,) = folder.glob("*.npz")
    assert saved.name.startswith("t3-mnist-fc_ntk-eps10.0-spc2-seed0-")
    assert len((folder / ".secret").read_bytes()) == 32
    assert (folder / ".secret").stat().st_mode & 0o777 == 0o600
    again = run(release_dir=str(folder))
    assert again["release"] == "loaded" and len(fits) == 2
    for k in ("value", "krr_test_acc", "eps_spent", "steps"):
        assert again[k] == first[k] == plain[k], k
    np.testing.assert_array_equal(fits[0], fits[1])
    back = dp_kip.load(saved)
    np.testing.assert_array_equal(back.support_x, np.asarray(fitted[1].support_x))
    np.testing.assert_array_equal(back.support_targets, np.asarray(fitted[1].support_targets))
    assert run(release_dir=str(folder), lr="0.05")["release"] == "fitted" and len(fits) == 3
    (lr_cell,) = set(folder.glob("*.npz")) - {saved}
    data["x"] = x + 1e-3  # other images, same settings: not the saved release
    assert run(release_dir=str(folder))["release"] == "fitted" and len(fits) == 4
    data["x"], data["y"] = x, y[::-1].copy()  # other labels only
    assert run(release_dir=str(folder))["release"] == "fitted" and len(fits) == 5
    data["y"] = y
    lr_cell.write_bytes(saved.read_bytes())  # the lr 0.05 name now holds the default release
    with pytest.raises(ValueError, match="not the cell's"):
        run(release_dir=str(folder), lr="0.05")
    (folder / ".secret").write_bytes(b"\1" * 32)  # another secret, other names: refit
    assert run(release_dir=str(folder))["release"] == "fitted" and len(fits) == 6


def test_validation_split_is_public_disjoint_and_complete():
    from benchmarks.common import validation_split

    fit, val = validation_split(1000, n_val=200)
    assert fit.shape == (800,) and val.shape == (200,)
    assert np.array_equal(np.sort(np.concatenate([fit, val])), np.arange(1000))
    assert np.all(np.diff(fit) > 0) and np.all(np.diff(val) > 0)
    again = validation_split(1000, n_val=200)
    assert np.array_equal(again[1], val)  # a public seed: the same split every call
    assert not np.array_equal(validation_split(1000, n_val=200, seed=1)[1], val)
    with pytest.raises(ValueError, match="n_val"):
        validation_split(100, n_val=100)


def test_machine_block_names_the_cpu_and_its_isa_flags(tmp_path):
    """Results files name the CPU model and the XLA-relevant flags of its first processor,
    so a rerun that differs in the low bits can be traced to another CPU."""
    fake = tmp_path / "cpuinfo"
    first = "vendor_id\t: Acme\nmodel name\t: Some CPU\ncpu family\t: 25\nmodel\t\t: 17\n"
    fake.write_text(
        first + "flags\t\t: fpu avx2 fma sse\n\nmodel name\t: Other\nflags\t\t: avx512f\n"
    )
    got = cpu_info(str(fake))
    assert got["cpu"] == "Acme Some CPU (cpu family 25, model 17)" and got["isa"] == ["avx2", "fma"]
    fake.write_text(first + "flags\t\t: fpu avx2 fma sse3\n")  # a flag outside ISA_FLAGS
    assert cpu_info(str(fake))["isa"] == got["isa"]
    assert cpu_info(str(fake))["flags_sha256"] != got["flags_sha256"]
    fake.write_text(
        "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\nFeatures\t: fp asimd\n"
    )
    assert cpu_info(str(fake))["cpu"] == "0x41 0xd0c" and cpu_info(str(fake))["isa"] == []
    fake.write_bytes(b"model name\t: caf\xe9\n")  # not UTF-8: still a name, not an error
    assert cpu_info(str(fake))["cpu"].startswith("caf")
    for empty in ("", "processor\t: 0\n"):
        fake.write_text(empty)
        assert cpu_info(str(fake)) == {}
    assert cpu_info(str(tmp_path / "absent")) == {} and cpu_info(str(tmp_path)) == {}
    info = machine_info()
    assert set(cpu_info()) <= set(info) and info["cpu_count"] == os.cpu_count()


def test_perf_times_the_ways_of_a_ratio_in_turn():
    """`time_interleaved`: a first call of each way, then rounds that call every way once,
    in order (so a baseline and its fast path see the same load); `ratio_spread` pairs the
    rounds. Counts and order only: no timing is asserted."""
    from benchmarks.perf_timing import ratio_spread, time_interleaved, timing

    calls: list[str] = []
    timed = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 5)
    assert calls == ["a", "b"] * 6
    assert set(timed) == {"a", "b"}
    for t in timed.values():
        assert len(t["runs"]) == 5
        assert set(timing(t)) == {"first_s", "median_s", "min_s", "cpu_s", "compile_s"}
    assert ratio_spread(timed["a"], timed["b"]).startswith("interleaved")
