#!/usr/bin/env bash
# The device check in one call: the paper cells, and when asked the default tests and the
# GPU perf sections (PARTS=cells,tests,perf; default: cells).
#
# Written for a lent GPU machine with no package registry (JAX with CUDA, flax, optax,
# scipy, scikit-learn, pytest, pytest-xdist and pytest-timeout already there). Prepare,
# on a machine with pip, in the repository root (both folders are git-ignored):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
#     -d .whl kymatio==0.3.0 dp-accounting==0.6.0 dm-tree appdirs configparser \
#     pytest-instafail pytest-timeout
#   mkdir -p .gpudata/data && cp -r "$PRIVKERNELS_DATA"/{mnist,tabular} .gpudata/data/
#
# carry both (carry=[".whl", ".gpudata"]; with the tree they fit the 64 MiB a call takes,
# Fashion-MNIST does not) and run `BENCHMARKS_GIT_COMMIT=<sha> bash scripts/gpu_check.sh`
# there with OUT set to a folder that comes back. Bounds (seconds): CELLS_S, CELL_S (one
# cell), TESTS_S, PERF_S. CELLS names the cells, CELL_SETS adds options (`--set cell.key=v`,
# `--compilation-cache DIR`: run twice for warm times), TESTS test files, SECTIONS perf sections.
#
# Lessons (H200 2026-11-26, H100 2026-11-27, H200 2026-11-29): starting a machine takes
# about 40 s to minutes of the 15; the default suite takes about 350 s with 14 workers
# (instafail prints failures as they happen, since a suite stopped at its limit prints no
# summary; xdist workers are killed before timing anything); the quick perf sections are
# mostly compilation (entk 79 s, dp_kip 205 s); each paper cell runs in its own process and
# its results file is rewritten after each cell, so a call cut at its limit keeps its rows.
set -u
PARTS=${PARTS:-cells}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PRIVKERNELS_DATA=$PWD/.gpudata/data
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax, numpy, scipy; print('jax', jax.__version__, jax.devices(),
  'numpy', numpy.__version__, 'scipy', scipy.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [[ ,$PARTS, == *,cells,* ]]; then
t2=$(date +%s)
# shellcheck disable=SC2086  # CELL_SETS is a list of --set words
timeout -k 10 "${CELLS_S:-540}" python3 -m benchmarks perf --device gpu --paper-cells \
  --cells "${CELLS:-kip_feature,dp_ntk,kip_input}" --cell-timeout "${CELL_S:-170}" \
  ${CELL_SETS:-} --out "$OUT/cells" > "$OUT/cells.log" 2>&1
echo "cells rc=$? wall=$(( $(date +%s) - t2 ))s" | tee -a "$OUT/cells.log"
grep "^\[perf\] row" "$OUT/cells.log" | cut -c1-600
fi

if [[ ,$PARTS, == *,tests,* ]]; then
t0=$(date +%s)
timeout -k 10 "${TESTS_S:-420}" python3 -m pytest -n "${WORKERS:-14}" --dist load -v --instafail \
  --timeout=120 --tb=short -p no:cacheprovider -rfE ${TESTS:-} > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? wall=$(( $(date +%s) - t0 ))s" | tee -a "$OUT/pytest.log"
# the run's leftovers only: pytest, and xdist's execnet workers (python3 -c "...stdin.readline...")
pkill -9 -f "python3 -m pytest -n" 2>/dev/null; pkill -9 -f "sys.stdin.readline" 2>/dev/null; sleep 2
for s in PASSED FAILED SKIPPED ERROR; do
  echo "$s $(grep -cE "\] $s tests/" "$OUT/pytest.log")"
done | tee "$OUT/counts.txt"
fi
[[ ,$PARTS, == *,perf,* ]] || exit 0

t1=$(date +%s)
PRIVKERNELS_PERF_SECTIONS=${SECTIONS:-entk,dp_kip,dp_kip_epoch,dp_kip_targets,scatternet,gsm} \
  timeout -k 10 "${PERF_S:-200}" python3 -m benchmarks perf --device gpu --quick \
  --out "$OUT/perf" > "$OUT/perf.log" 2>&1
echo "perf rc=$? wall=$(( $(date +%s) - t1 ))s" | tee -a "$OUT/perf.log"
grep "^\[perf\]" "$OUT/perf.log" | cut -c1-400
