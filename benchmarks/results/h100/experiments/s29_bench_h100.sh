#!/usr/bin/env bash
# Session 29 (split candidates 1-8, 10, 12, 16) on H100: build, the heuristic and CUDA-kernel tests,
# then the full benchmark. Two calls: `bash s29_bench_h100.sh tests`, then `... bench` on the warm machine.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/full"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
MODE=${1:-tests}
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
[ "$MODE" = tests ] && for f in test_heuristic test_cuda_kernels; do
  timeout 240 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/$f.py -x > "$OUT/gpu_$f.txt" 2>&1
  echo "$f rc=$? $(tail -1 "$OUT/gpu_$f.txt") ($(( $(date +%s) - t0 )) s)"
done
[ "$MODE" = tests ] && exit 0
python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/bench_full.txt" 2>&1
echo "full rc=$? ($(( $(date +%s) - t0 )) s)"; grep -A6 "== nmspmm100" "$OUT/bench_full.txt"; tail -9 "$OUT/bench_full.txt"
