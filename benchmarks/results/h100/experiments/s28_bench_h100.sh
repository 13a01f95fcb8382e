#!/usr/bin/env bash
# Session 28, final code on H100: build and the full benchmark only (the tests ran in s28_final_tests.sh
# and s28_final_bench.sh).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/full"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/bench_full.txt" 2>&1
echo "full rc=$? ($(( $(date +%s) - t0 )) s)"; grep -A6 "== nmspmm100" "$OUT/bench_full.txt"; tail -9 "$OUT/bench_full.txt"
