#!/usr/bin/env bash
# Session 29, device call: kernel 21 reading row-major x (transposer warps, no x transpose launch).
# Build; kernel-21 GPU tests; compute-sanitizer memcheck / racecheck / synccheck of kernel 21; flushed
# sweep of kernels 21 and 18 over splits, with row-major x (default) and with xT (NMSPMM_PRODUCER_XT=1).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k21 or row_major or non_contiguous or large_m or llama or transpose or chain or workspace or empty_batch or deterministic" > "$OUT/logs/gpu_test_k21.txt" 2>&1
echo "k21 tests rc=$? $(tail -1 "$OUT/logs/gpu_test_k21.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "FAILED|Error|error" "$OUT/logs/gpu_test_k21.txt" | head -5
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=21 timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_${tool}_k21_xrow.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_${tool}_k21_xrow.txt") ($(( $(date +%s) - t0 )) s)"
done
timeout 150 python3 tools/sweep_splits.py --kernels 21,18 --ms 256,512,1024,2048,4096 --out "$OUT" --name sweep_xrow.csv > "$OUT/logs/sweep_xrow.txt" 2>&1
echo "sweep xrow rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep_xrow.txt") mismatches"
NMSPMM_PRODUCER_XT=1 timeout 150 python3 tools/sweep_splits.py --kernels 21,18 --ms 256,512,1024,2048,4096 --out "$OUT" --name sweep_xt.csv > "$OUT/logs/sweep_xt.txt" 2>&1
echo "sweep xt rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep_xt.txt") mismatches"
