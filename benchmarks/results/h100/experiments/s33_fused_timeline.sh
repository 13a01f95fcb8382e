#!/usr/bin/env bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "256 4096 4096 16 21 4" "4096 4096 4096 4 21 1" "4096 4096 4096 16 21 1"; do
  set -- $spec
  echo "== $spec"
  timeout 60 python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 2>&1 | head -80
done > "$OUT/s33_fused_timeline.txt"
head -120 "$OUT/s33_fused_timeline.txt"
