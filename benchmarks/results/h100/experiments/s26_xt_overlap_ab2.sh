#!/usr/bin/env bash
# Session 26, device call 3: the warp-packed kernels launched during the x transpose with shared
# memory padded to ceil(blocks / SMs) blocks per SM (NMSPMM_XT_OVERLAP 0 / 1), flushed A/B.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
  echo "== ab small m, rep $rep ($(( $(date +%s) - t0 )) s)"
  timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 256,512,1024 \
    --Ns 16,12,8,4 --plans auto,20/1,20/2,19/1,19/2,18/1 --out "$OUT/logs/small$rep" > "$OUT/logs/ab_small$rep.txt" 2>&1
  echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_small$rep.txt"; grep -A20 "variant-0 time" "$OUT/logs/ab_small$rep.txt"
done
echo "== ab large m ($(( $(date +%s) - t0 )) s)"
timeout 120 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 2048,4096 --Ns 8,4 \
  --large-plans auto,19/1 --cube --out "$OUT/logs/large" > "$OUT/logs/ab_large.txt" 2>&1
echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_large.txt"; grep -A10 "variant-0 time" "$OUT/logs/ab_large.txt"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
