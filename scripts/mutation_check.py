"""Mutation evidence for the privacy test suite: plant known bugs, show the tests fail.

Each `Mutation` is one deliberately broken variant of privkernels (a
literal source replacement). For each, the script copies ``src/`` and
``tests/`` into a scratch directory, applies the replacement there (the
working tree is never touched), and runs the project's default test command
(``python -m pytest``, the README's, with ``-x`` to stop at the first failure)
against the mutated copy. A mutation is *caught* when that run fails.

The first nine mutations are the planted bugs of the privacy-at-the-seams review,
the next eight those of "private by default" (N1-N6 and the tuning plan), the last
one that of the one DP-SGD noise transform (issue 51); the default run must catch
all of them. Usage (each mutant runs the suite with -x;
``--select`` restricts it to some test paths)::

    python scripts/mutation_check.py [--out benchmarks/results/mutation-check.md] [--only NAME]
        [--select tests/privacy]

A mutation whose text no longer occurs in the source is reported as STALE (the
code moved): update the mutation, never drop it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    why: str


MUTATIONS = (
    Mutation(
        "dp-ntk-noise-halved",
        "src/privkernels/dp_ntk/release.py",
        'sens, extra, what = 2.0 / n, {"n": n}, RELEASED_MEAN',
        'sens, extra, what = 1.0 / n, {"n": n}, RELEASED_MEAN',
        "DP-NTK embedding released with half the calibrated noise (sensitivity 1/n for 2/n)",
    ),
    Mutation(
        "dp-kip-noise-key-constant",
        "src/privkernels/dp_kip/train.py",
        "gsum, _ = noise.update(gsum, DPSGDNoiseState(key))",
        "gsum, _ = noise.update(gsum, DPSGDNoiseState(jax.random.key(0)))",
        "DP-KIP noise key constant within a step (independent of the step and user key)",
    ),
    Mutation(
        "entk-embedding-1-over-n-dropped",
        "src/privkernels/features/entk.py",
        "w = jnp.full((n,), 1.0 / n, jnp.float32)",
        "w = jnp.full((n,), 1.0, jnp.float32)",
        "mean embedding without its 1/n: sensitivity 2 released with noise for 2/n",
    ),
    Mutation(
        "tlap-sensitivity-beta",
        "src/privkernels/dp_ntk_regression/fitting.py",
        "sens_x = math.sqrt(d) * cfg.beta",
        "sens_x = cfg.beta",
        "truncated Laplace on X with L1 sensitivity beta instead of sqrt(d) beta",
    ),
    Mutation(
        "gram-norm-without-cross-term",
        "src/privkernels/dp_kip/clipped_sums.py",
        "sq = quad + 2.0 * cross + bb * sq_t",
        "sq = quad + bb * sq_t",
        "Gram-form per-example norm missing its cross term (wrong clip factors)",
    ),
    Mutation(
        "dp-kip-one-key-every-step",
        "src/privkernels/dp_kip/train.py",
        "both = jax.vmap(lambda s: jax.random.split(jax.random.fold_in(base, s)))(steps)",
        "both = jax.vmap(lambda s: jax.random.split(base))(steps)",
        "every DP-KIP step uses the same key (same batch, same noise)",
    ),
    Mutation(
        "dp-kip-sampler-at-2q",
        "src/privkernels/dp_kip/train.py",
        "            config.sampling_rate,\n            min_pad=min_pad,",
        "            min(1.0, 2 * config.sampling_rate),\n            min_pad=min_pad,",
        "Poisson sampler at rate 2q while the accountant uses q",
    ),
    Mutation(
        "replace-one-sensitivity-understated",
        "src/privkernels/dp_ntk_regression/replace_one.py",
        "return math.sqrt(2.0 + 4.0 * float(target_bound) ** 2)",
        "return math.sqrt(2.0 + float(target_bound) ** 2)",
        "replace-one statistics released with sensitivity sqrt(2 + B^2) instead of sqrt(2 + 4 B^2)",
    ),
    Mutation(
        "replace-one-features-unclipped",
        "src/privkernels/dp_ntk_regression/replace_one.py",
        "clipped, _ = clip_per_example(_sketch_rows(x, w, a, b), 1.0)",
        "clipped = _sketch_rows(x, w, a, b)",
        "replace-one feature rows not clipped to norm 1 (the sensitivity bound no longer holds)",
    ),
    # the seams of "private by default, end to end" (N1-N6, tuning)
    Mutation(
        "n1-seeded-key-unwarned",
        "src/privkernels/privacy/keys.py",
        "    if not looks_seeded(key):\n        return key, ()",
        "    if True:\n        return key, ()",
        "N1: a key made from a small int draws noise with no warning and no report note",
    ),
    Mutation(
        "n2-dp-kip-batches-unbound",
        "src/privkernels/dp_kip/train.py",
        "    base = k_train if digest is None else fold_digest(k_train, (digest[0], digest[1]))",
        "    base = k_train",
        "N2: DP-KIP Poisson batches ignore the plan: one key at two budgets reuses the batches",
    ),
    Mutation(
        "n3-gsm-key-without-budget",
        "src/privkernels/privacy/mechanisms.py",
        'key, "gaussian_sampling", epsilon=eps, delta=dlt, shift=shift, k=k,',
        'key, "gaussian_sampling", k=k,',
        "N3: Gaussian sampling key bound to (k, n) only: two budgets or shifts share Z",
    ),
    Mutation(
        "n4-records-not-rederived",
        "src/privkernels/privacy/report.py",
        "        check_record(m, report.neighbouring)",
        "        pass",
        "N4: a loaded report's records are not re-derived (an edited sigma or q loads)",
    ),
    Mutation(
        "n4-totals-unchecked",
        "src/privkernels/privacy/report.py",
        "        if abs(total - parts) > 1e-9 * max(abs(total), abs(parts), 1e-300):",
        "        if False:",
        "N4: a loaded report's total is not checked against its records (a smaller total loads)",
    ),
    Mutation(
        "n5-clip-in-leaf-dtype",
        "src/privkernels/privacy/clipping.py",
        "return jnp.where(ok, leaf.astype(jnp.float32) * s, jnp.zeros((), jnp.float32))",
        "return jnp.where(ok, leaf * s.astype(leaf.dtype), jnp.zeros((), leaf.dtype))",
        "N5: the clip factor rounded to a bfloat16/float16 leaf's dtype (norms above C)",
    ),
    Mutation(
        "n6-regression-default-beta-close",
        "src/privkernels/dp_ntk_regression/fitting.py",
        'neighbouring: Literal["replace-one", "beta-close"] = "replace-one",',
        'neighbouring: Literal["replace-one", "beta-close"] = "beta-close",',
        "N6: DP NTK regression defaults to the beta-close relation again",
    ),
    Mutation(
        "tuning-events-unchecked",
        "src/privkernels/tuning.py",
        "    if not same_events(events_of_report(report), planned):",
        "    if False:",
        "a search's fit may release other events than the plan accounted",
    ),
    # the one DP-SGD noise transform (issue 51)
    Mutation(
        "dpsgd-noise-key-without-digest",
        "src/privkernels/privacy/dpsgd.py",
        "noisy = _add_noise(fold_digest(state.key, (digest[0], digest[1])), updates, noise_std)",
        "noisy = _add_noise(state.key, updates, noise_std)",
        "DP-SGD noise key not bound to the plan: one key at two budgets draws the same noise",
    ),
)


def _scratch_copy(dest: Path) -> None:
    """Copy every tracked or untracked-but-not-ignored file (the tests read docs, scripts...)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for rel in listed:
        src = ROOT / rel
        if not src.is_file():
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def run_one(mut: Mutation, timeout: int, select: tuple[str, ...] = ()) -> dict[str, object]:
    """Apply ``mut`` in a scratch copy and run the default tests there (or ``select``: test
    paths, still under the default options and markers)."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mut.name}-") as tmp:
        dest = Path(tmp)
        _scratch_copy(dest)
        target = dest / mut.path
        text = target.read_text()
        if text.count(mut.old) != 1:
            return {"name": mut.name, "verdict": "STALE", "first_failure": "", "seconds": 0.0}
        target.write_text(text.replace(mut.old, mut.new))
        env = {**os.environ, "PYTHONPATH": str(dest / "src")}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *select]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout
            )
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            out, code = "", -1
        seconds = time.perf_counter() - t0
        loaded = str(dest / "src") in out or code != 4
        first = next((ln for ln in out.splitlines() if ln.startswith("FAILED")), "")
        if code == -1:
            verdict = "TIMEOUT"
        elif code == 0:
            verdict = "MISSED"
        elif first or "ERROR" in out:
            verdict = "CAUGHT"
        else:
            verdict = f"ERROR (exit {code})"
        return {
            "name": mut.name,
            "verdict": verdict if loaded else "ERROR (mutant not imported)",
            "first_failure": first.removeprefix("FAILED ").split(" - ")[0],
            "seconds": round(seconds, 1),
        }


def _check_import_path() -> None:
    """The mutated copy must shadow the installed package (PYTHONPATH precedes site-packages)."""
    with tempfile.TemporaryDirectory() as tmp:
        _scratch_copy(Path(tmp))
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        got = subprocess.run(
            [sys.executable, "-c", "import privkernels; print(privkernels.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not got.startswith(tmp):
            raise SystemExit(f"the scratch copy does not shadow the installed package: {got}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the Markdown table here too")
    parser.add_argument("--only", action="append", default=[], help="run only these mutations")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per mutant run")
    parser.add_argument(
        "--select", action="append", default=[],
        help="run only these test paths per mutant (default: the whole default test run)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    _check_import_path()
    muts = [m for m in MUTATIONS if not args.only or m.name in args.only]
    rows = []
    for mut in muts:
        row = run_one(mut, args.timeout, tuple(args.select))
        print(f"{row['name']}: {row['verdict']} ({row['seconds']} s) {row['first_failure']}")
        rows.append({**row, "why": mut.why})
    caught = sum(r["verdict"] == "CAUGHT" for r in rows)
    lines = [
        "# mutation check: planted privacy bugs vs the default test run",
        "",
        f"Measured {time.strftime('%Y-%m-%dT%H:%M:%S%z')} on {platform.machine()} "
        f"({os.cpu_count()} cores), `python -m pytest -x {' '.join(args.select)}`".rstrip()
        + " per mutant.",
        "",
        f"**{caught}/{len(rows)} caught.**",
        "",
        "| mutation | planted bug | verdict | first failing test | seconds |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['why']} | {r['verdict']} | `{r['first_failure']}` | {r['seconds']} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
