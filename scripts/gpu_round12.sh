#!/usr/bin/env bash
# Issue 16, validation round 12 (FMNIST eps 10) on one lent GPU, in one call: the eps 10
# choice and two candidates (scripts/dp_kip_scatternet_validation.py, ROUND12), seeds 0 and
# 1 side by side; the committed rule (`--round12`, 0.3 points over the choice's rerun) then
# decides, and only if it names a winner are the test sets read once: FMNIST eps 10 and
# MNIST eps 10 by transfer, seeds 0, 1 and 2, all six side by side.
#
# Carry [".whl", ".gpudata-xz"]: the wheels of scripts/gpu_check.sh, and the eight MNIST /
# Fashion-MNIST IDX files, the images as .xz (the .gz files and the tree exceed 64 MiB):
#   for f in {mnist,fashion_mnist}/{train,t10k}-images-idx3-ubyte; do mkdir -p .gpudata-xz/${f%/*}
#     zcat "$PRIVKERNELS_DATA/$f.gz" | xz -9e > .gpudata-xz/$f.xz; done
#   cp "$PRIVKERNELS_DATA"/{mnist,fashion_mnist}/*labels*.gz ... (into the same folders)
# XLA's deterministic GPU ops are on, so a rerun with the same keys gives the same numbers.
set -u
OUT=${OUT:-gpu-round12-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
python3 - <<'PY' || exit 1
import lzma, shutil
from pathlib import Path
for f in Path(".gpudata-xz").rglob("*"):
    if f.is_file():
        dst = Path("/tmp/data") / f.relative_to(".gpudata-xz")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix == ".xz":
            with lzma.open(f) as src, open(dst.with_suffix(""), "wb") as out:
                shutil.copyfileobj(src, out)
        else:
            shutil.copy(f, dst)
PY
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PRIVKERNELS_DATA=/tmp/data PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_deterministic_ops=true
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; git log --oneline -1
} > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"

t0=$(date +%s)
for i in 0 1 2; do
  name=$(python3 -c "import sys; sys.path.insert(0, 'scripts')
import dp_kip_scatternet_validation as v; print(v.ROUND12[$i])")
  for s in 0 1; do
    timeout -k 5 "${VAL_S:-300}" python3 scripts/dp_kip_scatternet_validation.py fashion_mnist 10 \
      "--only=$name" --seed=$s > "$OUT/val-$i-s$s.jsonl" 2> "$OUT/val-$i-s$s.err" &
  done
done
wait
echo "validation wall=$(( $(date +%s) - t0 ))s"; cat "$OUT"/val-*.jsonl
python3 scripts/dp_kip_scatternet_validation.py --round12 "$OUT"/val-*.jsonl | tee "$OUT/decision.json"
sets=$(python3 -c "import json; print(json.load(open('$OUT/decision.json')).get('sets', ''))")
[[ -n $sets ]] || { echo "no winner: the test sets are not read"; exit 0; }

t1=$(date +%s)
for ds in fashion_mnist mnist; do
  for s in 0 1 2; do
    timeout -k 5 "${TEST_S:-240}" python3 -m benchmarks run dp-kip-table2 --profile quick --seeds $s \
      --out "$OUT/t-$ds-s$s" --set datasets=$ds --set kernels=scatternet --set epsilons=10 \
      $sets > "$OUT/t-$ds-s$s.log" 2>&1 &
  done
done
wait
echo "test wall=$(( $(date +%s) - t1 ))s"
grep -h "krr_test_acc" "$OUT"/t-*.log | grep "^{" | cut -c1-300
