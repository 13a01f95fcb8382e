#!/usr/bin/env bash
# Session 26, device call 5: x transpose with 16-byte accesses (NMSPMM_XT_TRANSPOSE=1) against the
# 4-byte one (0), both with the warp-packed kernels launched during it; flushed A/B of the heuristic's
# plans on the 100 points (and 4096^3), outputs compared between variants.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
  echo "== ab small m, rep $rep ($(( $(date +%s) - t0 )) s)"
  timeout 120 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_TRANSPOSE --variants 0,1 --ms 256,512,1024 \
    --Ns 16,12,8,4 --plans auto --out "$OUT/logs/small$rep" > "$OUT/logs/ab_small$rep.txt" 2>&1
  echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_small$rep.txt"; grep -A20 "variant-0 time" "$OUT/logs/ab_small$rep.txt"
done
echo "== ab large m ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_TRANSPOSE --variants 0,1 --ms 2048,4096 --Ns 16,12,8,4 \
  --large-plans auto --cube --out "$OUT/logs/large" > "$OUT/logs/ab_large.txt" 2>&1
echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_large.txt"; grep -A10 "variant-0 time" "$OUT/logs/ab_large.txt"
echo "== done ($(( $(date +%s) - t0 )) s)"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
