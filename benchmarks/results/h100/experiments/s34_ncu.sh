#!/usr/bin/env bash
# Session 34: ncu of the current kernel 21 (split 1) at 4096^3, 16:32 / 8:32 / 4:32: where the math warps
# stall (the full-barrier wait against the FFMA block), as evidence for issue #3's 4096^3 targets.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "4096 4096 4096 16 21 1" "4096 4096 4096 8 21 1" "4096 4096 4096 4 21 1"; do
  set -- $spec
  tag="$1x$2x$3_$4_k$5_s$6"
  timeout 150 ncu --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_$tag" \
    python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_${tag}_sass.csv" 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page details > "$OUT/ncu_${tag}_details.txt" 2>&1
  rm -f "$OUT/logs/ncu_$tag.ncu-rep"
  echo "$tag: $(grep -E '^ +Duration' "$OUT/ncu_${tag}_details.txt" | head -1 | tr -s ' ') ($(( $(date +%s) - t0 )) s)"
done
python3 tools/ncu_source_summary.py --top=25 "$OUT"/logs/ncu_*_sass.csv > "$OUT/s34_ncu_k21_summary.txt" 2>&1
grep -E "^==|  all|main loop|epilogue|  BRA|  FFMA" "$OUT/s34_ncu_k21_summary.txt"
for f in "$OUT"/ncu_*_details.txt; do echo "== $f"; grep -E "Duration|L2 Cache Throughput|DRAM Throughput|Issued Warp Per Scheduler|No Eligible|Compute \(SM\) Throughput|L1/TEX Hit|L2 Hit Rate" "$f" | tr -s ' ' | head -12; done
tar -czf "$OUT/s34_ncu_k21_sass.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
