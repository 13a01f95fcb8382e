#!/usr/bin/env bash
# Session 32: ncu of kernel 21 (split 1) against kernel 23 (stream-K, experiments/s32_stream_k.diff applied)
# at 4096^3 16:32 / 4:32 and 256x13824x5120 16:32 (108 tiles): is the stream-K kernel's steady-state loss
# its math loop's register allocation (61% same-bank FFMAs against 9%)?
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "4096 4096 4096 16 21" "4096 4096 4096 16 23" "4096 4096 4096 4 21" "4096 4096 4096 4 23" "256 13824 5120 16 21" "256 13824 5120 16 23"; do
  set -- $spec
  tag="$1x$2x$3_$4_k$5"
  timeout 90 ncu --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_$tag" \
    python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 1 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_${tag}_sass.csv" 2>&1
  ncu -i "$OUT/logs/ncu_$tag.ncu-rep" --page details > "$OUT/logs/ncu_${tag}_details.txt" 2>&1
  rm -f "$OUT/logs/ncu_$tag.ncu-rep"
  echo "$tag: $(grep -E '^ +Duration' "$OUT/logs/ncu_${tag}_details.txt" | head -1 | tr -s ' ') $(grep -E 'Issued Warp Per Scheduler' "$OUT/logs/ncu_${tag}_details.txt" | head -1 | tr -s ' ') ($(( $(date +%s) - t0 )) s)"
done
python3 tools/ncu_source_summary.py "$OUT"/logs/ncu_*_sass.csv > "$OUT/s32_sk_ncu_summary.txt" 2>&1
tar -czf "$OUT/s32_sk_ncu.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
