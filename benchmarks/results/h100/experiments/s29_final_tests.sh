#!/usr/bin/env bash
# Session 29, final code: build (sm_90a), every GPU test file, compute-sanitizer memcheck / racecheck /
# synccheck of kernels 18 and 21, ncu of kernel 21 at 4096^3 4:32 (k-blocks of 128) and 8:32.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gpu_tests"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/gpu_tests/build.log" 2>&1 || { tail -30 "$OUT/gpu_tests/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in tests/test_*.py; do
  name=$(basename "$f" .py)
  timeout 280 python3 -m pytest -q -rf --no-header -p no:cacheprovider "$f" > "$OUT/gpu_tests/gpu_$name.txt" 2>&1
  echo "$name rc=$? $(tail -1 "$OUT/gpu_tests/gpu_$name.txt") ($(( $(date +%s) - t0 )) s)"
done
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=18,21 timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_${tool}_s29.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/gpu_tests/sanitizer_${tool}_s29.txt") ($(( $(date +%s) - t0 )) s)"
done
for N in 4 8; do
  timeout 60 ncu --clock-control none --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:spmm_producer --launch-skip 2 --launch-count 1 \
    python3 tools/profile_one.py 4096 4096 4096 $N 32 32 21 1 > "$OUT/gpu_tests/ncu_s29_k21_$N-32.txt" 2>&1
  echo "ncu k21 $N:32 rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "Duration|Issued Warp|L2 Cache Throughput|FMA|No Eligible" "$OUT/gpu_tests/ncu_s29_k21_$N-32.txt" | head -8
done
