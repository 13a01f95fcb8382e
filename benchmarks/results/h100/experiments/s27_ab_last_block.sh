#!/usr/bin/env bash
# Session 27: split-K through the workspace reduced in the last-arriving block of each tile
# (arrival counters zeroed by the transpose) against the second launch (reduce_splits):
# NMSPMM_SPLIT_COUNTERS 0 / 1 read per call, flushed timings of the heuristic's plans (only its
# split >= 3 plans of the xT-reading kernels change path; the rest are the control), then the new
# kernel tests.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
ab() {  # name, args...
  local name=$1; shift
  timeout 170 python3 tools/ab_variants_flushed.py --env NMSPMM_SPLIT_COUNTERS --variants 0,1 --Ns 16,12,8,4 --plans auto \
    --large-plans auto --out "$OUT/logs/$name" "$@" > "$OUT/logs/ab_$name.txt" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s mismatches $(grep -c MISMATCH "$OUT/logs/ab_$name.txt")"
  grep -A20 "variant-0 time" "$OUT/logs/ab_$name.txt"
}
ab llama1 --nk llama --ms 32,64,128,256
ab small1 --ms 256,512,1024
ab llama2 --nk llama --ms 32,64,128,256
ab large --ms 2048,4096 --cube
timeout 200 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "last_block or during_transpose or chain or cluster_split or bulk_store or overlapped" > "$OUT/logs/gpu_test_new.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/gpu_test_new.txt")"; grep -E "FAILED|Error" "$OUT/logs/gpu_test_new.txt" | head -20
tar -czf "$OUT/logs_ab.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
