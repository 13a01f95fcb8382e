#!/usr/bin/env bash
# Session 34: a flushed sweep of every prefill family's splits (kernels 21, 22, 18-20, 5, 3, 2) on the 100
# NM-SpMM points at m = 256..1024 with the current code (session 30's kernels), for a refit of the heuristic.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 480 python3 tools/sweep_splits.py --ms 256,512,1024 --out "$OUT" --name s34_sweep_all.csv > "$OUT/s34_sweep_all.txt" 2>&1
echo "sweep rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/s34_sweep_all.txt") mismatches, $(wc -l < "$OUT/s34_sweep_all.csv") rows"
