#!/usr/bin/env bash
# Session 33, kernels 21 / 22 with the x transpose fused in: build, the fused-vs-launch test and the
# producer-kernel tests, memcheck of 21 / 22, and a flushed A/B of NMSPMM_XT_FUSED=0 (transpose launch)
# against 1 (fused) on the heuristic's plans, NM-SpMM's 20 (n, k) at m = 256, 1024, 4096 and 4096^3.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "fused or tail_split or launch_during" > "$OUT/tests_fused.txt" 2>&1
rc=$?
echo "tests rc=$rc $(tail -1 "$OUT/tests_fused.txt") ($(( $(date +%s) - t0 )) s)"
[ $rc -ne 0 ] && { tail -30 "$OUT/tests_fused.txt"; exit 1; }
NMSPMM_SANITIZE_KERNELS=21,22 timeout 90 compute-sanitizer --tool memcheck --print-limit 10 python3 tools/sanitize_run.py > "$OUT/sanitizer_memcheck.txt" 2>&1
echo "memcheck rc=$? $(tail -1 "$OUT/sanitizer_memcheck.txt") ($(( $(date +%s) - t0 )) s)"
timeout 280 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_FUSED --variants 0,1 --ms 256,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT" > "$OUT/ab_fused.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=|cube|4096x4096x4096" "$OUT/ab_fused.txt" | head -40
