#!/usr/bin/env bash
# Session 36, final code (serpentine FMA order in the warp-packed kernels 19, 20 and the 64-row tiled kernels 3, 5): build (sm_90a), every GPU test file, compute-sanitizer memcheck / racecheck / synccheck of kernels 3, 5, 19, 20.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gpu_tests"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/gpu_tests/build.log" 2>&1 || { tail -30 "$OUT/gpu_tests/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in tests/test_*.py; do
  name=$(basename "$f" .py)
  timeout 280 python3 -m pytest -q -rf --no-header -p no:cacheprovider "$f" > "$OUT/gpu_tests/gpu_$name.txt" 2>&1
  echo "$name rc=$? $(tail -1 "$OUT/gpu_tests/gpu_$name.txt") ($(( $(date +%s) - t0 )) s)"
done
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=3,5,19,20 timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_${tool}_s36.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/gpu_tests/sanitizer_${tool}_s36.txt") ($(( $(date +%s) - t0 )) s)"
done
cd "$OUT" && tar czf gpu_tests.tgz gpu_tests && rm -rf gpu_tests
