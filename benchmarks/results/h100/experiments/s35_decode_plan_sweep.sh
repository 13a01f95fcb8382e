#!/usr/bin/env bash
# Session 35: every staged decode plan (kernels 15-17 = 128 / 256 / 512-column tiles, clusters
# 3..12 and 16) on the six Llama decode layers x 4 sparsities at m = 8, 16, 4 (one sweep per m),
# with the lean whole-batch kernels, to check the plan rule (choose_staged_decode).
#   bash benchmarks/results/h100/experiments/s35_decode_plan_sweep.sh   (GPU machine, repo root)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
SHAPES=4096x4096,1024x4096,11008x4096,4096x11008,14336x4096,4096x14336
for m in 8 16 4; do
  timeout 240 python3 tools/decode_sweep.py --out "$OUT/m$m" --ms $m --shape-list $SHAPES \
    --splits 3,4,5,6,7,8,9,10,11,12,16 > "$OUT/sweep_m$m.txt" 2>&1
  echo "sweep m=$m rc=$? $(tail -1 "$OUT/sweep_m$m.txt") ($(( $(date +%s) - t0 )) s)"
  cp "$OUT/m$m/decode_sweep.csv" "$OUT/sweep_m$m.csv" 2>/dev/null
done
