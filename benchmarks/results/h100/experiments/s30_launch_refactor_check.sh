#!/usr/bin/env bash
# Session 30, after the host-side launch refactor (launch_items_after, with_producer_config; kernels'
# SASS unchanged): build, the tests that run the split-K reductions and kernels 21 / 22.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_kernels.py -k "k21 or k22 or k5 or k19 or k2- or tail_split or workspace or overlapped or large_m or cluster_split or auto_path" > "$OUT/gpu_test_launch_refactor.txt" 2>&1
echo "rc=$? $(tail -1 "$OUT/gpu_test_launch_refactor.txt")"
