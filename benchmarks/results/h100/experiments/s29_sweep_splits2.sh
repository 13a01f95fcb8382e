#!/usr/bin/env bash
# Session 29, device call 2: build with the extended split candidates (kSplitCandidates), then sweep
# splits to 4.5 waves on the 100 NM-SpMM points (m = 256..2048) and on the llama suite (m = 32..256).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 280 python3 tools/sweep_splits.py --ms 256,512,1024,2048 --out "$OUT" --name sweep_splits2_nmspmm100.csv > "$OUT/logs/sweep2_nmspmm100.txt" 2>&1
echo "nmspmm100 rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep2_nmspmm100.txt") mismatches"
timeout 200 python3 tools/sweep_splits.py --grid llama --ms 32,64,128,256 --out "$OUT" --name sweep_splits2_llama.csv > "$OUT/logs/sweep2_llama.txt" 2>&1
echo "llama rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/sweep2_llama.txt") mismatches"
