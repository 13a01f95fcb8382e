#!/usr/bin/env bash
# Session 31: the 32x128 warp-packed kernel (id 20) capped at 112 registers (__maxnreg__; its FFMA loop
# allocated with 11% instead of 18% of the FFMAs reading B and the accumulator from one register bank),
# NMSPMM_WP_REGS=1 (read per call): kernel tests, then flushed A/Bs of kernel 20's plans.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_WP_REGS=1 timeout 60 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k20" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/tests.txt")"
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_WP_REGS --variants 0,1 --ms 256,512,1024 \
  --Ns 16,12,8,4 --plans auto,20/1,20/2,20/4 --out "$OUT/logs/ab" > "$OUT/logs/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab.txt")"
grep -A14 "variant-0 time" "$OUT/logs/ab.txt"
timeout 120 python3 tools/ab_variants_flushed.py --env NMSPMM_WP_REGS --variants 0,1 --nk llama --ms 64,128,256 \
  --Ns 16,12,8,4 --plans auto,20/1,20/2,20/4 --out "$OUT/logs/ab_llama" > "$OUT/logs/ab_llama.txt" 2>&1
echo "ab_llama rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab_llama.txt")"
grep -A14 "variant-0 time" "$OUT/logs/ab_llama.txt"
tar -czf "$OUT/s31_wp_regs_logs.tgz" -C "$OUT" logs
