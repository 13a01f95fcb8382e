#!/usr/bin/env bash
# Prepared in session 26, not run (no device time left): the tiled and packing kernels launched
# during the x transpose like the warp-packed ones (s26_tiled_xt_overlap_prepared.diff: values, index
# bytes, gather offsets and col_info before griddepcontrol.wait, shared memory padded to
# ceil(blocks / SMs) blocks per SM), flushed A/B of NMSPMM_XT_OVERLAP 0 / 1 on the heuristic's plans
# and forced tiled plans, then the kernel tests and the sanitizers of the tiled kernels.
# Also check the SASS of the tiled kernels with the switch at 0 against main (the prologue reorder
# changes it) before reading the A/B as the launch's effect alone.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
patch -p1 < benchmarks/results/h100/experiments/s26_tiled_xt_overlap_prepared.diff || exit 1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
  timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 256,512,1024 \
    --Ns 16,12,8,4 --plans auto,2/1,2/2,3/1,4/1,5/1 --out "$OUT/logs/small$rep" > "$OUT/logs/ab_small$rep.txt" 2>&1
  echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_small$rep.txt"; grep -A20 "variant-0 time" "$OUT/logs/ab_small$rep.txt"
done
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_XT_OVERLAP --variants 0,1 --ms 2048,4096 --Ns 16,12 \
  --large-plans auto,2/1 --cube --out "$OUT/logs/large" > "$OUT/logs/ab_large.txt" 2>&1
echo "rc=$?"; grep -c MISMATCH "$OUT/logs/ab_large.txt"; grep -A10 "variant-0 time" "$OUT/logs/ab_large.txt"
timeout 200 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py > "$OUT/logs/gpu_test_cuda_kernels.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/gpu_test_cuda_kernels.txt")"
for tool in memcheck racecheck; do
  NMSPMM_SANITIZE_KERNELS=2,3,4,5,6,9,10,11 timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_$tool.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_$tool.txt")"
done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
