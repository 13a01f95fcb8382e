#!/usr/bin/env bash
# Session 23, first GPU look at the warp-packed kernels (ids 18-20): build, their fp64 / bitwise
# tests, then tools/ab_warp_packed.py (heuristic plan vs warp-packed plans, 100-point pairs + 4096^3).
# (Ran on the experiment builds with NMSPMM_WP_VARIANT; with the final build, set AB_PLANS with
# variant 0 only.)
#   bash benchmarks/results/h100/experiments/s23_warp_packed_ab.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -q -x --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k18- or k19- or k20-" > "$OUT/tests_wp.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_wp.txt")"; grep -m5 -E "FAIL|Error" "$OUT/tests_wp.txt"
timeout ${AB_TIMEOUT:-330} python3 tools/ab_warp_packed.py --cube --ms ${AB_MS:-64,128,256,1024,4096} \
  --plans ${AB_PLANS:-18/1/0,18/1/1,18/1/2,18/2/1,19/1/0,19/1/1,19/2/0,19/4/0,20/1/0,20/1/1,20/2/1,20/4/1} --out "$OUT" 2>&1 | tee "$OUT/ab_wp.txt" | tail -25
echo "total: $(( $(date +%s) - t0 )) s"
