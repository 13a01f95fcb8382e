#!/usr/bin/env bash
# Session 33: ncu of the fused-transpose kernel 21 (256x4096x4096 16:32 split 4, 4096^3 4:32): where do
# the owner's transposer warps and the waiting producers spend their time?
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "256 4096 4096 16 21 4" "4096 4096 4096 4 21 1"; do
  set -- $spec
  tag="$1x$2x$3_$4_k$5_s$6"
  timeout 120 ncu --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_$tag" \
    python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_${tag}_sass.csv" 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page details > "$OUT/logs/ncu_${tag}_details.txt" 2>&1
  rm -f "$OUT/logs/ncu_$tag.ncu-rep"
  echo "$tag: $(grep -E '^ +Duration' "$OUT/logs/ncu_${tag}_details.txt" | head -1 | tr -s ' ') ($(( $(date +%s) - t0 )) s)"
done
python3 tools/ncu_source_summary.py --top=40 "$OUT"/logs/ncu_*_sass.csv > "$OUT/s33_fused_ncu_summary.txt" 2>&1
tar -czf "$OUT/s33_fused_ncu.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
