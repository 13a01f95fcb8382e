#!/usr/bin/env bash
# Session 35: A/B of the whole-batch staged decode kernels (m <= 8) with batches of 8 (main), 12 and
# 16 compressed rows per warp (per-call switch NMSPMM_DECODE_BATCH; ptxas: m <= 4 clean at 12, spills
# at 16; m = 5..8 spills 64-80 bytes at 12, ~400 at 16), one build; then the staged kernels' tests
# with batches of 12.
#   bash benchmarks/results/h100/experiments/s35_decode_batch_ab.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 300 python3 tools/ab_decode_variants.py --env NMSPMM_DECODE_BATCH --variants 8,12,16 --ms 3,4,8 \
  --plans auto,15/5,15/6 --rounds 2 --out "$OUT" > "$OUT/ab_batch.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^v|target|failures" "$OUT/ab_batch.txt" | grep -v " 1x\| 16x"
NMSPMM_DECODE_BATCH=12 timeout 100 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k15- or k16- or k17-" > "$OUT/tests_b12.txt" 2>&1
echo "tests b12 rc=$? $(tail -1 "$OUT/tests_b12.txt")"
echo "total $(( $(date +%s) - t0 )) s"
