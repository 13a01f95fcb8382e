#!/usr/bin/env bash
# Build, time the main tiled kernels at 4096^3 and profile them with ncu (GPU machine).
#   bash tools/ncu_probe.sh  -> $OUT/probe.txt, $OUT/ncu_*.txt
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
python3 tools/probe.py ${PROBE_ARGS:-} 2>&1 | tee "$OUT/probe.txt"
for spec in ${NCU_SPECS:-"16 2" "4 2"}; do
  set -- $spec
  timeout 200 ncu --clock-control none --set full --import-source no -k regex:spmm_tiled --launch-skip 2 --launch-count 1 \
    -o "$OUT/ncu_$1_$2" python3 tools/profile_one.py 4096 4096 4096 $1 32 32 $2 1 > /dev/null 2>&1
  ncu --import "$OUT/ncu_$1_$2.ncu-rep" --page details > "$OUT/ncu_$1_$2_details.txt" 2>&1
  ncu --import "$OUT/ncu_$1_$2.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_$1_$2_sass.csv" 2>&1
  grep -E "Duration|Executed Ipc|Issue Slots|Registers|Achieved Occupancy|No Eligible|L2 Cache Throughput|DRAM Throughput|Warp Cycles Per Issued" "$OUT/ncu_$1_$2_details.txt" | head -20
  rm -f "$OUT/ncu_$1_$2.ncu-rep"
done
