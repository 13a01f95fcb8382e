#!/usr/bin/env bash
# Session 34: kernels 21 / 22 writing their tile by tensor stores (8 swizzled 128 x 32 boxes, one
# issuing thread) instead of 128 per-row bulk copies (ncu: a 32-iteration issue loop per warp, ~5-7 us
# per tile round), switched per call by NMSPMM_TSTORE=1. Build, the kernel tests with it on, a flushed
# A/B (outputs compared), memcheck of kernels 21 / 22 with it on.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_TSTORE=1 timeout 200 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "kernel_matches_fp64 or large_m or tail_split or llama_shapes or non_contiguous or bitwise or graph or chain or side_stream or repeated or binding_runs" \
  > "$OUT/tests_tstore.txt" 2>&1
echo "tstore tests rc=$? $(tail -1 "$OUT/tests_tstore.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "FAILED|Error" "$OUT/tests_tstore.txt" | head -10
timeout 240 python3 tools/ab_variants_flushed.py --env NMSPMM_TSTORE --variants 0,1 --ms 256,512,1024,2048,4096 --Ns 16,12,8,4 \
  --plans auto,21/2 --large-plans auto,21/1 --cube --out "$OUT" > "$OUT/ab_tstore.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/ab_tstore.txt"; grep -E "4096x 4096x 4096|  256x 2048x 2048|MISMATCH|differ" "$OUT/ab_tstore.txt" | head -20
NMSPMM_TSTORE=1 NMSPMM_SANITIZE_KERNELS=21,22 timeout 100 compute-sanitizer --tool memcheck --print-limit 20 python3 tools/sanitize_run.py > "$OUT/memcheck_tstore.txt" 2>&1
echo "memcheck rc=$? $(tail -1 "$OUT/memcheck_tstore.txt") ($(( $(date +%s) - t0 )) s)"
