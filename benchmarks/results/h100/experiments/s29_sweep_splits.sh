#!/usr/bin/env bash
# Session 29, device call: build, then sweep every split 1..8, 10, 12, 16 of the prefill kernels on the
# 100 NM-SpMM points (tools/sweep_splits.py), flushed as the benchmark times a call.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 330 python3 tools/sweep_splits.py --ms 256,512,1024,2048 --out "$OUT" --name sweep_splits_small.csv > "$OUT/logs/sweep_small.txt" 2>&1
echo "small rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep_small.txt") mismatches"
timeout 100 python3 tools/sweep_splits.py --ms 4096 --kernels 21,18,2 --out "$OUT" --name sweep_splits_4096.csv > "$OUT/logs/sweep_4096.txt" 2>&1
echo "4096 rc=$? ($(( $(date +%s) - t0 )) s)"
tail -5 "$OUT/logs/sweep_small.txt"
