#!/usr/bin/env bash
# Session 36: the warp-packed kernels (18-20) with their FMAs in a 2x2 serpentine (NMSPMM_WP_VARIANT=1,
# read per call by the experiment build, experiments/s36_wp_serpentine.diff) against kernel 21's
# rows-major order (variant 0), timed as the benchmark does (L2 flushed), outputs compared.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
python3 tools/ab_variants_flushed.py --env NMSPMM_WP_VARIANT --variants 0,1 --ms 256,512,1024 --Ns 16,8,4 \
  --plans auto,20/1,20/2,19/1,19/2,18/1,18/2 --out $OUT/wp_serp 2>&1 | tail -16 | tee $OUT/s36_wp_serp_ab.txt
echo "total $(( $(date +%s) - t0 )) s"
