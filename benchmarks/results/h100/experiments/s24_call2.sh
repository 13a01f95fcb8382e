#!/usr/bin/env bash
# Session 24, device call 2: ncu of the smallest 100-point cell's warp-packed kernel (L2 flushed by
# ncu between passes), then flushed plan sweeps of both kernel families (tools/sweep_flushed.py) on
# the 100 points and on the llama suite's layers at small m, for the heuristic refit.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for split in 1 2; do
  timeout 60 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section Occupancy --section InstructionStats -k regex:spmm_warp_packed --launch-skip 2 --launch-count 1 \
    python3 tools/profile_one.py 256 2048 2048 4 32 32 20 $split > "$OUT/ncu_s24_wp20_256x2048x2048_4-32_s$split.txt" 2>&1
  echo "ncu split $split rc=$?"; grep -E "Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|SM Frequency" "$OUT/ncu_s24_wp20_256x2048x2048_4-32_s$split.txt"
done
echo "t=$(( $(date +%s) - t0 )) s"
python3 tools/sweep_flushed.py --grid nmspmm100 --ms 256,512,1024,2048,4096 --budget-s 250 --name flushed_sweep_nmspmm100.csv --out "$OUT" > "$OUT/sweep_nmspmm100.txt" 2>&1
echo "sweep100 rc=$? $(tail -1 $OUT/sweep_nmspmm100.txt)"; grep -c MISMATCH "$OUT/sweep_nmspmm100.txt"
echo "t=$(( $(date +%s) - t0 )) s"
python3 tools/sweep_flushed.py --grid llama --ms 32,64,128,256,512 --budget-s 150 --name flushed_sweep_llama.csv --out "$OUT" > "$OUT/sweep_llama.txt" 2>&1
echo "sweep llama rc=$? $(tail -1 $OUT/sweep_llama.txt)"; grep -c MISMATCH "$OUT/sweep_llama.txt"
echo "total $(( $(date +%s) - t0 )) s"
