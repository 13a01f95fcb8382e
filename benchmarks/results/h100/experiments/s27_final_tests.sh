#!/usr/bin/env bash
# Session 27, final code: build, every GPU test file, compute-sanitizer memcheck / racecheck /
# synccheck of the warp-packed kernels and of the tiled and packing kernels (all launched during the x transpose).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gpu_tests"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 HF_HUB_OFFLINE=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/gpu_tests/build.log" 2>&1 || { tail -30 "$OUT/gpu_tests/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for f in tests/test_*.py; do
  name=$(basename "$f" .py)
  timeout 300 python3 -m pytest -q -rf --no-header -p no:cacheprovider "$f" > "$OUT/gpu_tests/gpu_$name.txt" 2>&1
  echo "$name rc=$? $(tail -1 "$OUT/gpu_tests/gpu_$name.txt") ($(( $(date +%s) - t0 )) s)"
done
for tool in memcheck racecheck synccheck; do
  NMSPMM_SANITIZE_KERNELS=2,5,6,9,18,19,20 timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_${tool}_s27.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/gpu_tests/sanitizer_${tool}_s27.txt") ($(( $(date +%s) - t0 )) s)"
done
tar -czf "$OUT/gpu_tests.tar.gz" -C "$OUT" gpu_tests && rm -rf "$OUT/gpu_tests"
