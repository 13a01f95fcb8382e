#!/usr/bin/env bash
# Session 35: the cluster decode kernels (12-14, m <= 2) reading x by plain loads instead of __ldg
# (per-call switch NMSPMM_DECODE_XPLAIN=1). __ldg is an invariant (non-coherent) load that the
# compiler may hoist above griddepcontrol.wait, i.e. read x before the previous kernel has written it:
# session 35's lean variant v2 did exactly that (its back-to-back graph test failed). The plain
# kernels' SASS has no x load before the wait today; plain loads keep it so whatever the compiler.
# A/B in one build, then the cluster kernels' tests and sanitizers with it on.
#   bash benchmarks/results/h100/experiments/s35_cluster_xplain_ab.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 240 python3 tools/ab_decode_variants.py --env NMSPMM_DECODE_XPLAIN --variants 0,1 --ms 1,2 \
  --plans auto --rounds 4 --out "$OUT" > "$OUT/ab_cluster_xplain.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^v1 auto|target|bitwise|failures" "$OUT/ab_cluster_xplain.txt"
NMSPMM_DECODE_XPLAIN=1 timeout 150 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k12- or k13- or k14- or llama_shapes or back_to_back or weight_written or graph" > "$OUT/tests_cluster_xplain.txt" 2>&1
echo "tests lean rc=$? $(tail -1 "$OUT/tests_cluster_xplain.txt")"
NMSPMM_DECODE_XPLAIN=1 NMSPMM_SANITIZE_KERNELS=12,13,14 timeout 90 compute-sanitizer --tool memcheck \
  python3 tools/sanitize_run.py > "$OUT/memcheck_cluster_xplain.txt" 2>&1; echo "memcheck rc=$? $(tail -1 "$OUT/memcheck_cluster_xplain.txt")"
NMSPMM_DECODE_XPLAIN=1 NMSPMM_SANITIZE_KERNELS=12,13,14 timeout 90 compute-sanitizer --tool racecheck \
  python3 tools/sanitize_run.py > "$OUT/racecheck_cluster_xplain.txt" 2>&1; echo "racecheck rc=$? $(tail -1 "$OUT/racecheck_cluster_xplain.txt")"
echo "total $(( $(date +%s) - t0 )) s"
