#!/usr/bin/env bash
# Session 24, device call 1: where the small-m calls' time goes (tools/op_breakdown.py: per-kernel
# durations and gaps of the heuristic's plan and a few forced plans, L2 flushed), then session 23's
# prepared warp-packed full-stage copy A/B (s23_ab_wp_full_stage.sh).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
EXP=benchmarks/results/h100/experiments
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 python3 tools/op_breakdown.py --shapes 256x2048x2048,512x2048x2048,256x2048x5632,256x5632x2048,256x6656x17920,4096x4096x4096 \
  --plans 20:2,20:4,19:1,4:1,4:2 > "$OUT/breakdown.txt" 2>&1; echo "breakdown rc=$?"; cat "$OUT/breakdown.txt"
echo "t=$(( $(date +%s) - t0 )) s"
bash $EXP/s23_ab_wp_full_stage.sh
echo "total $(( $(date +%s) - t0 )) s"
