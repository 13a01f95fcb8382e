#!/usr/bin/env bash
# Session 36: the tiled / packing kernels with 8- and 4-row thread tiles (3, 4, 5, 11 timed; the packing kernels 7 and 8 need col_info) with their
# FMAs in a 2x2 serpentine (NMSPMM_TILED_VARIANT=1, read per call by the experiment build,
# experiments/s36_tiled_serpentine.diff) against the rows-major order (variant 0), timed as the
# benchmark does (L2 flushed), outputs compared. The build has the warp-packed serpentine (TM <= 8).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
python3 tools/ab_variants_flushed.py --env NMSPMM_TILED_VARIANT --variants 0,1 --ms 256,512 --Ns 16,12,8,4 \
  --plans auto,3/1,3/2,4/1,4/2,5/1,5/2,5/4,11/1 --out $OUT/tiled_serp 2>&1 | tail -12 | tee $OUT/s36_tiled_serp_ab.txt
echo "total $(( $(date +%s) - t0 )) s"
