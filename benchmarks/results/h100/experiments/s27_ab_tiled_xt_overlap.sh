#!/usr/bin/env bash
# Session 27: session 26's prepared A/B (s26_ab_tiled_xt_overlap.sh) on the branch with the diff
# applied, split in two device calls: "ab" (build, flushed A/B of NMSPMM_XT_OVERLAP 0 / 1 on the
# heuristic's plans and forced tiled plans) and "tests" (kernel tests, sanitizers of the tiled kernels).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "${1:-ab}" = ab ]; then
for rep in 1 2; do
  timeout 170 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 256,512,1024 \
    --Ns 16,12,8,4 --plans auto,2/1,2/2,3/1,4/1,5/1 --out "$OUT/logs/small$rep" > "$OUT/logs/ab_small$rep.txt" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s"; grep -c MISMATCH "$OUT/logs/ab_small$rep.txt"; grep -A20 "variant-0 time" "$OUT/logs/ab_small$rep.txt"
done
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 2048,4096 --Ns 16,12 \
  --large-plans auto,2/1 --cube --out "$OUT/logs/large" > "$OUT/logs/ab_large.txt" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s"; grep -c MISMATCH "$OUT/logs/ab_large.txt"; grep -A10 "variant-0 time" "$OUT/logs/ab_large.txt"
else
timeout 250 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py > "$OUT/logs/gpu_test_cuda_kernels.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/gpu_test_cuda_kernels.txt")"
for tool in memcheck racecheck; do
  NMSPMM_SANITIZE_KERNELS=2,3,4,5,6,9,10,11 timeout 100 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_$tool.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_$tool.txt")"
done
fi
tar -czf "$OUT/logs_${1:-ab}.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
