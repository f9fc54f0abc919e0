#!/usr/bin/env bash
# The device check in one call: the default test suite on the GPU, then the GPU perf table.
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
# and carry both (carry=[".whl", ".gpudata"]). The tree (about 26 MiB) and these fit the
# 64 MiB a call takes; Fashion-MNIST (30 MiB) does not. Perf rows print as each section ends ("[perf] row {...}").
# Then run `bash scripts/gpu_check.sh` there with OUT set to a folder that comes back.
# TESTS_S and PERF_S bound the two parts (seconds); SECTIONS picks perf sections; TESTS
# names test files or folders (default: the whole suite).
#
# Lessons of the first H200 run (2026-11-26, benchmarks/results/gpu-h200-tests.md):
# failures print their tracebacks as they happen (instafail), since a suite stopped at
# its limit prints no summary; each test has its own timeout; xdist workers are killed
# before the perf part starts, or they load the cores the perf part measures.
#
# Lessons of the second (same day, later session; gpu-h200-perf-quick.md): the suite
# takes about 350 s with 14 workers, starting a machine about 40 s, and the quick perf
# sections need far more than the rest of 15 minutes (entk 79 s, dp_kip 205 s, mostly
# compilation), so run the parts as separate calls: PARTS=tests (TESTS_S=420), then
# PARTS=perf with SECTIONS naming the sections still missing from the last table.
set -u
PARTS=${PARTS:-tests,perf}
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
