#!/usr/bin/env bash
# Session 34: tools/probe_xt_chunks.py (large-m calls as m-chunks that reuse one L2-resident xT block).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 300 python3 tools/probe_xt_chunks.py --ms 2048,4096 --chunks 512,1024,2048 --cube > "$OUT/s34_xt_chunks.txt" 2>&1
echo "probe rc=$? ($(( $(date +%s) - t0 )) s)"; grep -c MISMATCH "$OUT/s34_xt_chunks.txt"
grep -A40 "geomean" "$OUT/s34_xt_chunks.txt"; grep " 4096x 4096x 4096" "$OUT/s34_xt_chunks.txt"
