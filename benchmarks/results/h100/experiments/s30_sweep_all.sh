#!/usr/bin/env bash
# Session 30, device call 3: kernel 21 reduces split 2 in a cluster (splits 3..8 through the workspace
# again), kernel 22 in the heuristic. Build, the cluster / workspace bitwise tests, then a flushed sweep of
# every prefill family's splits (kernels 21, 22, 18-20, 5, 3, 2) on the 100 NM-SpMM points at m = 256..1024.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 100 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "cluster_split_bitwise or workspace_split_repeated or tail_split" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/logs/tests.txt")"
timeout 400 python3 tools/sweep_splits.py --ms 256,512,1024 --out "$OUT" --name s30_sweep_all.csv > "$OUT/logs/s30_sweep_all.txt" 2>&1
echo "sweep rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/s30_sweep_all.txt") mismatches"
