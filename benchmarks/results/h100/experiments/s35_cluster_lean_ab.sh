#!/usr/bin/env bash
# Session 35: A/B of the cluster decode kernels (12-14, m <= 2) with lean whole batches (per-call
# switch NMSPMM_DECODE_LEAN=1: no per-row bounds in a whole batch, rows and windows walked
# incrementally; v2: one batch body for whole and last batches, SASS batch loop 844 -> ~500 instructions at m = 1, ~1010 -> ~700 at m = 2; v1 (two bodies) in s35/cluster_lean_ab_v1.*) against the
# plain kernels, in one build. Then the cluster kernels' tests and memcheck with it on.
#   bash benchmarks/results/h100/experiments/s35_cluster_lean_ab.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 240 python3 tools/ab_decode_variants.py --env NMSPMM_DECODE_LEAN --variants 0,1 --ms 1,2 \
  --plans auto --rounds 4 --out "$OUT" > "$OUT/ab_cluster_lean.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^v1 auto|target|bitwise|failures" "$OUT/ab_cluster_lean.txt"
NMSPMM_DECODE_LEAN=1 timeout 150 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k12- or k13- or k14- or llama_shapes or back_to_back or weight_written or graph" > "$OUT/tests_cluster_lean.txt" 2>&1
echo "tests lean rc=$? $(tail -1 "$OUT/tests_cluster_lean.txt")"
NMSPMM_DECODE_LEAN=1 NMSPMM_SANITIZE_KERNELS=12,13,14 timeout 90 compute-sanitizer --tool memcheck \
  python3 tools/sanitize_run.py > "$OUT/memcheck_cluster_lean.txt" 2>&1; echo "memcheck rc=$? $(tail -1 "$OUT/memcheck_cluster_lean.txt")"
NMSPMM_DECODE_LEAN=1 NMSPMM_SANITIZE_KERNELS=12,13,14 timeout 90 compute-sanitizer --tool racecheck \
  python3 tools/sanitize_run.py > "$OUT/racecheck_cluster_lean.txt" 2>&1; echo "racecheck rc=$? $(tail -1 "$OUT/racecheck_cluster_lean.txt")"
echo "total $(( $(date +%s) - t0 )) s"
