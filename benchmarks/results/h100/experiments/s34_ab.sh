#!/usr/bin/env bash
# Session 34, one device call: session 33's two prepared experiments applied together
# (experiments/s33_fused_transpose_next.diff + s33_transpose64_prepared.diff):
#  1. transpose_x_tile64_kernel (NMSPMM_TRANSPOSE64=1) against transpose_x_kernel: tests, flushed A/B;
#  2. the fused transpose with one counter release per reader k-block (NMSPMM_XT_FUSED=1): timeline, A/B.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/t64" "$OUT/fused"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_XT_FUSED=0 NMSPMM_TRANSPOSE64=1 timeout 150 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "kernel_matches_fp64 or non_contiguous or large_m or launch_during or llama_shapes" > "$OUT/t64/tests_t64.txt" 2>&1
echo "t64 tests rc=$? $(tail -1 "$OUT/t64/tests_t64.txt") ($(( $(date +%s) - t0 )) s)"
NMSPMM_XT_FUSED=0 timeout 170 python3 tools/ab_variants_flushed.py --env NMSPMM_TRANSPOSE64 --variants 0,1 --ms 256,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT/t64" > "$OUT/t64/ab_t64.txt" 2>&1
echo "t64 ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/t64/ab_t64.txt"; grep -E "4096x 4096x 4096|  256x 2048x 2048" "$OUT/t64/ab_t64.txt"
for spec in "4096 4096 4096 4 21 1" "4096 4096 4096 16 21 1"; do
  set -- $spec
  echo "== fused timeline $spec"; NMSPMM_XT_FUSED=1 timeout 40 python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 2>&1 | grep -A9 "^block 0 "
done
timeout 80 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "fused" > "$OUT/fused/tests_fused.txt" 2>&1
echo "fused tests rc=$? $(tail -1 "$OUT/fused/tests_fused.txt") ($(( $(date +%s) - t0 )) s)"
timeout 120 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_FUSED --variants 0,1 --ms 4096 --Ns 16,4 \
  --plans auto --large-plans auto --cube --out "$OUT/fused" > "$OUT/fused/ab_fused.txt" 2>&1
echo "fused ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/fused/ab_fused.txt"; grep -E "4096x 4096x 4096" "$OUT/fused/ab_fused.txt"
