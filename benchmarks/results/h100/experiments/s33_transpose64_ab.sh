#!/usr/bin/env bash
# Prepared, not run (session 33 had no device time left). The x transpose in 64 x 64 tiles with 16-byte
# loads and stores (experiments/s33_transpose64_prepared.diff, switched per call by NMSPMM_TRANSPOSE64=1)
# against transpose_x_kernel (4-byte accesses, 32 x 32 tiles): 50 us of the 430 us 4096^3 4:32 op and
# 3.5 us of the 20.8 us 256x2048x2048 4:32 op (the 100-point minimum) are this launch.
#   git apply benchmarks/results/h100/experiments/s33_transpose64_prepared.diff
#   bash benchmarks/results/h100/experiments/s33_transpose64_ab.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_TRANSPOSE64=1 timeout 200 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "kernel_matches_fp64 or non_contiguous or large_m or launch_during or llama_shapes" > "$OUT/tests_t64.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_t64.txt") ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_TRANSPOSE64 --variants 0,1 --ms 256,512,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT" > "$OUT/ab_t64.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/ab_t64.txt"; grep -E "4096x 4096x 4096|  256x 2048x 2048" "$OUT/ab_t64.txt"
