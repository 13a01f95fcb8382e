#!/usr/bin/env bash
# Session 26, device call 2: the warp-packed kernels launched during the x transpose (programmatic
# dependent launch, NMSPMM_XT_OVERLAP 0 / 1 / 2) A/B, flushed timings; then the kernel tests and the
# sanitizers of the warp-packed kernels with the default (1).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
for rep in 1 2; do
  step "ab small m, rep $rep"
  timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1,2 --ms 256,512,1024 \
    --Ns 16,12,8,4 --plans auto,20/1,20/2,19/1,19/2 --out "$OUT/logs/small$rep" > "$OUT/logs/ab_small$rep.txt" 2>&1
  echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_small$rep.txt"; grep -A20 "variant-0 time" "$OUT/logs/ab_small$rep.txt"
done
step "ab large m"
timeout 120 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1,2 --ms 2048,4096 --Ns 8,4 \
  --large-plans auto --cube --out "$OUT/logs/large" > "$OUT/logs/ab_large.txt" 2>&1
echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_large.txt"; grep -A10 "variant-0 time" "$OUT/logs/ab_large.txt"
step tests
timeout 200 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py > "$OUT/logs/gpu_test_cuda_kernels.txt" 2>&1
echo "rc=$? $(tail -1 "$OUT/logs/gpu_test_cuda_kernels.txt")"
for tool in memcheck racecheck synccheck; do
  step $tool
  NMSPMM_SANITIZE_KERNELS=18,19,20 timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_${tool}_18-20.txt" 2>&1
  echo "rc=$?"; tail -2 "$OUT/logs/sanitizer_${tool}_18-20.txt"
done
step done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
