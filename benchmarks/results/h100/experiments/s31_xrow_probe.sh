#!/usr/bin/env bash
# Session 31, device call 2: why row-major x (in-kernel transpose) is slower. ncu source counters of
# kernel 21 at 4096^3 (12:32, 4:32) with xT and with row-major x, and a flushed A/B of a suspend-time
# hint on the producer warpgroup's mbarrier waits (NMSPMM_WAIT_NS, read per call), both x paths.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 60 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "row_major_x or (k21 and 1:2)" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/tests.txt")"
for N in 12 4; do for xt in 1 0; do
  NMSPMM_PRODUCER_XT=$xt timeout 90 ncu --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats \
    -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_${N}_xt$xt" \
    python3 tools/profile_one.py 4096 4096 4096 $N 32 32 21 1 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_${N}_xt$xt.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_${N}_xt${xt}_sass.csv" 2>&1
  ncu -i "$OUT/logs/ncu_${N}_xt$xt.ncu-rep" --page details > "$OUT/logs/ncu_${N}_xt${xt}_details.txt" 2>&1
  echo "ncu $N:32 xt=$xt: $(grep -E "^ +Duration" "$OUT/logs/ncu_${N}_xt${xt}_details.txt" | head -1) $(grep -E "Issue Slots Busy|Issued Warp Per Scheduler" "$OUT/logs/ncu_${N}_xt${xt}_details.txt" | head -2 | tr -s ' ' | tr '\n' ' ')"
  rm -f "$OUT/logs/ncu_${N}_xt$xt.ncu-rep"
done; done
echo "$(( $(date +%s) - t0 )) s"
for xt in 1 0; do
  NMSPMM_PRODUCER_XT=$xt timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_WAIT_NS --variants 0,2000,200000 --ms 1024 \
    --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --cube --out "$OUT/logs/hint_xt$xt" > "$OUT/logs/hint_xt$xt.txt" 2>&1
  echo "hint A/B xt=$xt rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/hint_xt$xt.txt")"
  grep -A12 "variant-0 time" "$OUT/logs/hint_xt$xt.txt"
done
tar -czf "$OUT/s31_xrow_probe_logs.tgz" -C "$OUT" logs
