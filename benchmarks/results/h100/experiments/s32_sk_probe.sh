#!/usr/bin/env bash
# Session 32, first look at kernel 23 (stream-K kernel 21): build, its tests, sanitizers, and a flushed
# A/B of the heuristic's plan against 23/1 on NM-SpMM's 100 points at m = 256..2048.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "stream or k23 or workspace_split_repeated or launch_during or chain_reads" > "$OUT/tests_sk.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_sk.txt") ($(( $(date +%s) - t0 )) s)"
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=23 timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 tools/sanitize_run.py > "$OUT/sanitizer_${tool}.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/sanitizer_${tool}.txt") ($(( $(date +%s) - t0 )) s)"
done
timeout 270 python3 tools/ab_variants_flushed.py --env NMSPMM_UNUSED --variants 0 --ms 256,512,1024,2048 --Ns 16,12,8,4 \
  --plans auto,23/1 --large-plans auto,23/1 --out "$OUT" > "$OUT/ab_sk.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
tail -3 "$OUT/ab_sk.txt"
