#!/usr/bin/env bash
# Session 31: kernels 21 / 22 with their 16-row stages run as two unrolled halves (half the main
# loop's code; ncu put 4.5-4.8% of kernel 21's samples at 16:32 / 4:32 in instruction-fetch stalls,
# 1.7% at 12:32 whose 12-row body is smaller). NMSPMM_HALF=1 (read per call). Tests, then a flushed A/B.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_HALF=1 timeout 90 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or tail_split or large_m or llama_shapes" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/tests.txt") ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_HALF --variants 0,1 --ms 256,512,1024,2048,4096 \
  --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --cube --out "$OUT/logs/ab" > "$OUT/logs/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab.txt")"
grep -A24 "variant-0 time" "$OUT/logs/ab.txt"
tar -czf "$OUT/s31_half_logs.tgz" -C "$OUT" logs
