#!/usr/bin/env bash
# Session 30, device call 1: build with kernel 22 (kernel 21 with split-K on the last round's tiles),
# run its GPU tests, then a flushed sweep of kernels 21 and 22 at every candidate split on the 100
# NM-SpMM points at m = 512..4096 (tools/sweep_splits.py; the heuristic's plan first).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 170 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k22 or tail_split or test_large_m" > "$OUT/logs/tests_k22.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/logs/tests_k22.txt")"
timeout 40 python3 -m pytest -q tests/test_heuristic.py > "$OUT/logs/tests_heuristic.txt" 2>&1
echo "heuristic rc=$?: $(tail -1 "$OUT/logs/tests_heuristic.txt")"
timeout 320 python3 tools/sweep_splits.py --kernels 21,22 --ms 512,1024,2048,4096 --out "$OUT" --name s30_sweep_tail.csv > "$OUT/logs/s30_sweep_tail.txt" 2>&1
echo "sweep rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/s30_sweep_tail.txt") mismatches"
tail -5 "$OUT/logs/s30_sweep_tail.txt"
