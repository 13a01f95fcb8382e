#!/usr/bin/env bash
# Session 33: the fused transpose with its x boxes prefetched into L2 16 boxes ahead (+ the debug
# timeline build): timeline of 4096^3 4:32, the fused test, and the flushed A/B against the transpose
# launch (NMSPMM_XT_FUSED=0) on the heuristic's plans at m = 256, 1024, 4096 and 4096^3.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 60 python3 tools/profile_one.py 4096 4096 4096 4 32 32 21 1 > "$OUT/s33_prefetch_timeline.txt" 2>&1
grep -A9 "^block 0 " "$OUT/s33_prefetch_timeline.txt"
timeout 100 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "fused" > "$OUT/tests_fused3.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_fused3.txt") ($(( $(date +%s) - t0 )) s)"
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_FUSED --variants 0,1 --ms 256,1024,4096 --Ns 16,12,8,4 \
  --plans auto --large-plans auto --cube --out "$OUT" > "$OUT/ab_fused3.txt" 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "m=" "$OUT/ab_fused3.txt"; grep -E "4096x 4096x 4096" "$OUT/ab_fused3.txt"
