#!/usr/bin/env bash
# Session 36: the FFMA ceiling probe with kernel 21's FMA order and with a 2x2 serpentine order.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/ffma_rows tools/ffma_ceiling_probe.cu || exit 1
nvcc -std=c++17 -O3 -arch=sm_90a -DFFMA_ORDER_SERPENTINE=1 -o /tmp/ffma_serp tools/ffma_ceiling_probe.cu || exit 1
for r in 1 2; do
  echo "== rows-major (kernel 21's order), run $r"; /tmp/ffma_rows 10000
  echo "== 2x2 serpentine, run $r"; /tmp/ffma_serp 10000
done 2>&1 | tee $OUT/s36_ffma_order.txt
# Run twice: s36/s36_ffma_order.txt (variants regs, lds, gather), then with the k21map variant added
# (s36/s36_ffma_order_k21map.txt).
