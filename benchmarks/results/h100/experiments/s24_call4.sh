#!/usr/bin/env bash
# Session 24, device call 4: A/B of L2 prefetch hints and a 4th stage in the warp-packed kernels
# (s24_wp_prefetch.diff applied to d2181e3: NMSPMM_WP_VARIANT 0 base, 1 prefetch 2 stages ahead,
# 2 prefetch 4, 3 = 4 stages (TM 4 / 8) + prefetch 2), flushed timings; then the kernels' tests and
# memcheck under each variant.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 300 python3 tools/ab_variants_flushed.py --variants 0,1,2,3 --ms 256,512,1024,4096 --Ns 8,4 --cube --out "$OUT" > "$OUT/ab_variants.txt" 2>&1
echo "ab rc=$?"; grep -c MISMATCH "$OUT/ab_variants.txt"; tail -12 "$OUT/ab_variants.txt"
echo "t=$(( $(date +%s) - t0 )) s"
for v in 1 2 3; do
  NMSPMM_WP_VARIANT=$v timeout 120 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "k18- or k19- or k20-" > "$OUT/tests_v$v.txt" 2>&1; echo "tests v$v rc=$? $(tail -1 $OUT/tests_v$v.txt)"
done
NMSPMM_WP_VARIANT=3 NMSPMM_SANITIZE_KERNELS=18,19,20 timeout 90 compute-sanitizer --tool memcheck python3 tools/sanitize_run.py 2>&1 | tail -1
echo "total $(( $(date +%s) - t0 )) s"
