#!/usr/bin/env bash
# Session 29, device call: kernel 21 with longer stages at 8:32 (k-blocks of 64, 16 rows, 3 stages) and
# 4:32 (128, 16, 2). Build; kernel-21 and heuristic GPU tests; compute-sanitizer on kernel 21; flushed
# split sweep of every prefill family on the 100 points (the heuristic's picks against the best plan).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py tests/test_heuristic.py \
  -k "k21 or heuristic or non_contiguous or large_m or llama or transpose or chain or workspace or empty_batch or deterministic" > "$OUT/logs/gpu_test_k21.txt" 2>&1
echo "k21 tests rc=$? $(tail -1 "$OUT/logs/gpu_test_k21.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "FAILED|Error" "$OUT/logs/gpu_test_k21.txt" | head -5
for tool in memcheck racecheck; do
  NMSPMM_SANITIZE_KERNELS=21 timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_${tool}_k21_stages.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_${tool}_k21_stages.txt") ($(( $(date +%s) - t0 )) s)"
done
timeout 220 python3 tools/sweep_splits.py --ms 256,512,1024,2048 --out "$OUT" --name sweep_stages_small.csv > "$OUT/logs/sweep_stages_small.txt" 2>&1
echo "sweep small rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep_stages_small.txt") mismatches"
timeout 80 python3 tools/sweep_splits.py --ms 4096 --kernels 21,18,2 --out "$OUT" --name sweep_stages_4096.csv > "$OUT/logs/sweep_stages_4096.txt" 2>&1
echo "sweep 4096 rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep_stages_4096.txt") mismatches"
