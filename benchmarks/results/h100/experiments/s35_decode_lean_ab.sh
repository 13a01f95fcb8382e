#!/usr/bin/env bash
# Session 35: A/B of the staged decode kernels (15-17) with lean whole batches (per-call switch
# NMSPMM_DECODE_LEAN=1: no per-row bounds in whole batches, row addresses from 32-bit byte strides)
# against the plain kernels, in one build. Then the staged kernels' tests and memcheck with it on.
#   bash benchmarks/results/h100/experiments/s35_decode_lean_ab.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 330 python3 tools/ab_decode_variants.py --env NMSPMM_DECODE_LEAN --variants 0,1 --ms 3,4,8,16 \
  --plans auto,15/8,16/9 --rounds 2 --out "$OUT" > "$OUT/ab_decode.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^v1|target|^  |failures" "$OUT/ab_decode.txt"
NMSPMM_DECODE_LEAN=1 timeout 150 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k15- or k16- or k17- or llama_shapes" > "$OUT/tests_lean.txt" 2>&1
echo "tests lean rc=$? $(tail -1 "$OUT/tests_lean.txt")"
NMSPMM_DECODE_LEAN=1 NMSPMM_SANITIZE_KERNELS=15,16,17 timeout 90 compute-sanitizer --tool memcheck \
  python3 tools/sanitize_run.py > "$OUT/memcheck_lean.txt" 2>&1; echo "memcheck rc=$? $(tail -1 "$OUT/memcheck_lean.txt")"
echo "total $(( $(date +%s) - t0 )) s"
