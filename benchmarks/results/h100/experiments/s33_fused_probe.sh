#!/usr/bin/env bash
# Session 33, kernels 21 / 22 with the x transpose fused in (SpmmParams::xt_fused): build, the
# producer-kernel tests (the new fused-vs-launch bitwise test among them), memcheck of 21 / 22.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 240 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "fused or tail_split or launch_during or chain_reads or workspace_split_repeated or cuda_graph or torch_compile or binding_runs" > "$OUT/tests_fused.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/tests_fused.txt") ($(( $(date +%s) - t0 )) s)"
tail -25 "$OUT/tests_fused.txt" | grep -v "^$" | head -25
NMSPMM_SANITIZE_KERNELS=21,22 timeout 150 compute-sanitizer --tool memcheck --print-limit 10 python3 tools/sanitize_run.py > "$OUT/sanitizer_memcheck.txt" 2>&1
echo "memcheck rc=$? $(tail -1 "$OUT/sanitizer_memcheck.txt") ($(( $(date +%s) - t0 )) s)"
