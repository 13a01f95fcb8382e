#!/usr/bin/env bash
# Prepared, not run (session 33 had no device time left): apply experiments/s33_fused_transpose_next.diff
# (the fused transpose with its x boxes prefetched into L2, one counter release per k-block of the
# readers, and the debug timeline that prints on the third fused call), then:
#   git apply benchmarks/results/h100/experiments/s33_fused_transpose_next.diff
#   bash benchmarks/results/h100/experiments/s33_next_fused_ab.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "4096 4096 4096 4 21 1" "4096 4096 4096 16 21 1"; do
  set -- $spec
  echo "== $spec"; timeout 60 python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 2>&1 | grep -A9 "^block 0 "
done
timeout 100 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "fused" > "$OUT/tests_fused.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_fused.txt") ($(( $(date +%s) - t0 )) s)"
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_FUSED --variants 0,1 --ms 256,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT" > "$OUT/ab_fused.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/ab_fused.txt"; grep -E "4096x 4096x 4096" "$OUT/ab_fused.txt"
