#!/usr/bin/env bash
# Session 30, device call 2: kernel 21 with split-K reduced inside a thread-block cluster (splits 2..8).
# Build, how many clusters of each size a one-block-per-SM kernel keeps resident, kernel 21/22 tests,
# compute-sanitizer on kernels 21 and 22, then flushed sweeps of kernel 21's splits with the cluster
# reduction (default) and through the workspace (NMSPMM_NO_CLUSTER_SPLIT=1) at m = 256..1024.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvcc -std=c++17 -arch=sm_90a -o /tmp/cluster_probe tools/cluster_occupancy_probe.cu && /tmp/cluster_probe | tee "$OUT/s30_cluster_occupancy.txt"
timeout 200 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or tail_split or test_large_m or cluster_split_bitwise or workspace_split_repeated or overlapped" > "$OUT/logs/tests_k21.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/logs/tests_k21.txt")"
for tool in memcheck racecheck; do
  NMSPMM_SANITIZE_KERNELS=21,22 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/sanitize_run.py > "$OUT/logs/sanitize_$tool.txt" 2>&1
  echo "$tool rc=$? ($(( $(date +%s) - t0 )) s): $(tail -2 "$OUT/logs/sanitize_$tool.txt" | tr '\n' ' ')"
done
timeout 150 python3 tools/sweep_splits.py --kernels 21 --ms 256,512,1024 --out "$OUT" --name s30_sweep_k21_cluster.csv > "$OUT/logs/s30_sweep_k21_cluster.txt" 2>&1
echo "sweep cluster rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/s30_sweep_k21_cluster.txt") mismatches"
NMSPMM_NO_CLUSTER_SPLIT=1 timeout 150 python3 tools/sweep_splits.py --kernels 21 --ms 256,512,1024 --out "$OUT" --name s30_sweep_k21_ws.csv > "$OUT/logs/s30_sweep_k21_ws.txt" 2>&1
echo "sweep ws rc=$? ($(( $(date +%s) - t0 )) s) $(grep -c MISMATCH "$OUT/logs/s30_sweep_k21_ws.txt") mismatches"
