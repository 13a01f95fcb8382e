#!/usr/bin/env bash
# Session 24, device call 5: per-instruction warp-state samples (ncu SourceCounters, caches flushed
# by ncu) of the warp-packed 32x128 kernel at 256x2048x2048 4:32, split 1 and 2 (one warp / two
# warps per scheduler), summarized by tools/ncu_source_summary.py --top=25.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for split in 1 2; do
  timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:spmm_warp_packed \
    --launch-skip 2 --launch-count 1 -o /tmp/wp_s$split python3 tools/profile_one.py 256 2048 2048 4 32 32 20 $split > /dev/null 2>&1
  ncu -i /tmp/wp_s$split.ncu-rep --page source --csv --print-source sass > /tmp/wp_s$split.csv 2>&1
  echo "ncu split $split rc=$?"
done
python3 tools/ncu_source_summary.py --top=25 /tmp/wp_s1.csv /tmp/wp_s2.csv > "$OUT/ncu_s24_wp20_256_source_summary.txt" 2>&1
cat "$OUT/ncu_s24_wp20_256_source_summary.txt" | head -80
echo "total $(( $(date +%s) - t0 )) s"
