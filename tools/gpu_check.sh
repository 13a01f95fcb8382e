#!/usr/bin/env bash
# One device call: build the CUDA flavour, run the whole test suite on the GPU, a
# compute-sanitizer pass over every kernel, and (optionally) the benchmarks.
#   bash tools/gpu_check.sh [tests] [sanitize] [quick] [full] [e2e]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} HF_HUB_OFFLINE=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for phase in "$@"; do
  t=$(date +%s)
  case "$phase" in
    tests) mkdir -p "$OUT/gpu_tests"
      for f in tests/test_*.py; do
        name=$(basename "$f" .py)
        timeout 300 python3 -m pytest -q -rf --no-header -p no:cacheprovider "$f" > "$OUT/gpu_tests/gpu_$name.txt" 2>&1
        echo "$name rc=$? $(tail -1 "$OUT/gpu_tests/gpu_$name.txt")"
      done ;;
    sanitize) mkdir -p "$OUT/gpu_tests"
      for tool in memcheck racecheck; do timeout 240 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_$tool.txt" 2>&1; echo "sanitizer $tool rc=$?"; tail -3 "$OUT/gpu_tests/sanitizer_$tool.txt"; done ;;
    quick) python3 benchmarks/bench_spmm.py --quick --out "$OUT/quick" > "$OUT/bench_quick.txt" 2>&1; echo "quick rc=$?"; tail -40 "$OUT/bench_quick.txt" ;;
    full) python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/bench_full.txt" 2>&1; echo "full rc=$?"; tail -60 "$OUT/bench_full.txt" ;;
    e2e) python3 benchmarks/e2e_llama.py --out "$OUT/full" > "$OUT/e2e.txt" 2>&1; echo "e2e rc=$?"; tail -40 "$OUT/e2e.txt" ;;
  esac
  echo "$phase: $(( $(date +%s) - t )) s"
done
# At most 8 files come back from the device: the per-file logs travel as one archive.
if [ -d "$OUT/gpu_tests" ]; then tar -czf "$OUT/gpu_tests.tar.gz" -C "$OUT" gpu_tests && rm -rf "$OUT/gpu_tests"; fi
