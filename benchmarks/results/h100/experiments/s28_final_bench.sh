#!/usr/bin/env bash
# Session 28, final code (every math thread releases a stage): build, racecheck / memcheck of kernel 21,
# its GPU tests, then the full benchmark.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for tool in racecheck memcheck; do
  NMSPMM_SANITIZE_KERNELS=21 timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_${tool}_s28_k21.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_${tool}_s28_k21.txt") ($(( $(date +%s) - t0 )) s)"
done
timeout 120 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "k21 or 21 or large_m or llama_shapes or transpose or chain or workspace_split or deterministic" > "$OUT/logs/gpu_test_k21_final.txt" 2>&1
echo "k21 tests rc=$? $(tail -1 "$OUT/logs/gpu_test_k21_final.txt") ($(( $(date +%s) - t0 )) s)"
python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/logs/bench_full.txt" 2>&1
echo "full rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 "$OUT/logs/bench_full.txt"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
