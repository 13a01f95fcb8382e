#!/usr/bin/env bash
# Session 30, device call 6: kernel 21's cluster epilogue as a kernel instance of its own (the plain
# instance's SASS is again that of session 29). Build, kernel-21 tests, then flushed sweeps of kernel 21's
# splits with the cluster reduction at split 2 (default) and through the workspace (NMSPMM_NO_CLUSTER_SPLIT=1).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or cluster_split_bitwise or workspace_split_repeated or tail_split" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/logs/tests.txt")"
NMSPMM_SANITIZE_KERNELS=21,22 timeout 60 compute-sanitizer --tool racecheck python3 tools/sanitize_run.py > "$OUT/logs/racecheck.txt" 2>&1
echo "racecheck rc=$? $(tail -1 "$OUT/logs/racecheck.txt")"
timeout 150 python3 tools/sweep_splits.py --kernels 21 --ms 256,512,1024,2048 --out "$OUT" --name s30_sweep_k21_cluster2.csv > "$OUT/logs/cl.txt" 2>&1
echo "sweep cluster rc=$? ($(( $(date +%s) - t0 )) s)"
NMSPMM_NO_CLUSTER_SPLIT=1 timeout 150 python3 tools/sweep_splits.py --kernels 21 --ms 256,512,1024,2048 --out "$OUT" --name s30_sweep_k21_ws2.csv > "$OUT/logs/ws.txt" 2>&1
echo "sweep ws rc=$? ($(( $(date +%s) - t0 )) s)"
