#!/usr/bin/env bash
# Session 31, device call 3: the producer warpgroup's mbarrier waits with __nanosleep between tries
# (NMSPMM_WAIT_NS even: sleep ns; odd: suspend-time hint; 0: plain try_wait loop), both x paths,
# flushed A/B at m = 1024 and 4096^3; ncu instruction counts of 12:32 4096^3 with sleep 256.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 60 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "row_major_x" > "$OUT/logs/tests.txt" 2>&1
echo "tests rc=$? $(tail -1 "$OUT/logs/tests.txt")"
for xt in 1 0; do
  NMSPMM_PRODUCER_XT=$xt timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_WAIT_NS --variants 0,64,256,1001 --ms 1024 \
    --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --cube --out "$OUT/logs/wait_xt$xt" > "$OUT/logs/wait_xt$xt.txt" 2>&1
  echo "wait A/B xt=$xt rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/wait_xt$xt.txt")"
  grep -A12 "variant-0 time" "$OUT/logs/wait_xt$xt.txt"
done
for xt in 1 0; do
  NMSPMM_WAIT_NS=256 NMSPMM_PRODUCER_XT=$xt timeout 90 ncu --section SourceCounters --section SchedulerStats \
    -k regex:spmm_producer --launch-skip 2 --launch-count 1 -o "$OUT/logs/ncu_12_xt${xt}_sleep" \
    python3 tools/profile_one.py 4096 4096 4096 12 32 32 21 1 > /dev/null 2>&1
  ncu -i "$OUT/logs/ncu_12_xt${xt}_sleep.ncu-rep" --page source --csv --print-source sass > "$OUT/logs/ncu_12_xt${xt}_sleep_sass.csv" 2>&1
  rm -f "$OUT/logs/ncu_12_xt${xt}_sleep.ncu-rep"
done
echo "$(( $(date +%s) - t0 )) s"
tar -czf "$OUT/s31_wait_probe_logs.tgz" -C "$OUT" logs
