#!/usr/bin/env bash
# Session 31: ncu source counters of kernel 21 at 4096^3 in three compilations of the same math loop:
# the session-30 kernel (v0), the persistent form with 56/224 registers (v1, same-bank FFMA share 0.066)
# and with 40/232 (v3, 0.385). Which stall reasons make the slower allocations slower.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for spec in "16 0" "16 1" "16 3" "4 0" "4 1"; do
  set -- $spec
  NMSPMM_PERSIST=$2 timeout 90 ncu --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_$1_v$2" \
    python3 tools/profile_one.py 4096 4096 4096 $1 32 32 21 1 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_$1_v$2.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_$1_v$2_sass.csv" 2>&1
  ncu -i "$OUT/logs/ncu_$1_v$2.ncu-rep" --page details > "$OUT/logs/ncu_$1_v$2_details.txt" 2>&1
  rm -f "$OUT/logs/ncu_$1_v$2.ncu-rep"
  echo "$1:32 v$2: $(grep -E '^ +Duration' "$OUT/logs/ncu_$1_v$2_details.txt" | head -1 | tr -s ' ') $(grep -E 'Issued Warp Per Scheduler' "$OUT/logs/ncu_$1_v$2_details.txt" | head -1 | tr -s ' ') ($(( $(date +%s) - t0 )) s)"
done
tar -czf "$OUT/s31_alloc_ncu.tgz" -C "$OUT" logs
