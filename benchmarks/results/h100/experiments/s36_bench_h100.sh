#!/usr/bin/env bash
# Session 36 (serpentine FMA order in kernels 3, 5, 19, 20) on H100: build, the full benchmark, the e2e Llama run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/full" "$OUT/e2e"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 60 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_bad_input.py > "$OUT/gpu_test_bad_input.txt" 2>&1
echo "test_bad_input rc=$? $(tail -1 "$OUT/gpu_test_bad_input.txt")"
python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/full/bench_full.txt" 2>&1
echo "full rc=$? ($(( $(date +%s) - t0 )) s)"; grep -A6 "== nmspmm100" "$OUT/full/bench_full.txt"; tail -9 "$OUT/full/bench_full.txt"
timeout 100 python3 benchmarks/e2e_llama.py --out "$OUT/e2e" > "$OUT/e2e/e2e.txt" 2>&1
echo "e2e rc=$? ($(( $(date +%s) - t0 )) s)"; tail -12 "$OUT/e2e/e2e.txt"
cd "$OUT" && tar czf results.tgz full e2e && rm -rf full e2e
