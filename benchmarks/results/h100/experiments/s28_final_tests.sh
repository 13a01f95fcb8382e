#!/usr/bin/env bash
# Session 28, final code: build (sm_90a), every GPU test file, compute-sanitizer memcheck / racecheck /
# synccheck of kernel 21 (and 2, 18 beside it), ncu of kernel 21 and kernel 2 at 4096^3 16:32.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gpu_tests"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/gpu_tests/build.log" 2>&1 || { tail -30 "$OUT/gpu_tests/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in tests/test_*.py; do
  name=$(basename "$f" .py)
  timeout 300 python3 -m pytest -q -rf --no-header -p no:cacheprovider "$f" > "$OUT/gpu_tests/gpu_$name.txt" 2>&1
  echo "$name rc=$? $(tail -1 "$OUT/gpu_tests/gpu_$name.txt") ($(( $(date +%s) - t0 )) s)"
done
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=2,18,21 timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_${tool}_s28.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/gpu_tests/sanitizer_${tool}_s28.txt") ($(( $(date +%s) - t0 )) s)"
done
for spec in "21 producer" "2 tiled"; do
  set -- $spec
  timeout 100 ncu --clock-control none --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section SpeedOfLight -k regex:spmm_$2 --launch-skip 2 --launch-count 1 \
    python3 tools/profile_one.py 4096 4096 4096 16 32 32 $1 1 > "$OUT/gpu_tests/ncu_s28_k$1_16-32.txt" 2>&1
  echo "ncu k$1 rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "Duration|Issued Warp|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers|FMA|Stall" "$OUT/gpu_tests/ncu_s28_k$1_16-32.txt" | head -14
done
tar -czf "$OUT/gpu_tests.tar.gz" -C "$OUT" gpu_tests && rm -rf "$OUT/gpu_tests"
