#!/usr/bin/env bash
# Session 33: fourth transposer (4x4 register blocks into a k-major shared box, one tensor store per box); NMSPMM_XT_FUSED = 0 (transpose launch) or
# 1 (fused).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 100 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "fused" > "$OUT/tests_fused4.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_fused4.txt") ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_FUSED --variants 0,1 --ms 256,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT" > "$OUT/ab_fused4.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/ab_fused4.txt"; grep -E "4096x 4096x 4096|  256x 4096x 4096" "$OUT/ab_fused4.txt"
