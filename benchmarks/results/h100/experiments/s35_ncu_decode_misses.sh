#!/usr/bin/env bash
# Session 35: ncu of the final code's decode kernels at the missed cells (heuristic plans): 16x4096x4096 4:32
# (staged 128, cluster 7), 8x1024x4096 4:32 (staged 128, cluster 8), 1x1024x4096 4:32 (cluster decode,
# 4 warps, cluster 9). One isolated launch each: ncu's clocks, caches flushed, no graph, no PDL overlap.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
mkdir -p $OUT/ncu
for spec in "16 4096 4096 4 15 7" "8 1024 4096 4 15 8" "1 1024 4096 4 12 9"; do
  set -- $spec
  name=m$1_${2}x$3_$4-32_k$5_s$6
  t=$(date +%s)
  timeout 100 ncu --set full --import-source no -k regex:spmm_decode --launch-skip 2 --launch-count 1 \
    -o $OUT/ncu/$name python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 > $OUT/ncu/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s"
  ncu --import $OUT/ncu/$name.ncu-rep --page details > $OUT/ncu/${name}_details.txt 2>&1
  grep -E "Duration|Elapsed Cycles|SM Active Cycles|Executed Ipc Active|Achieved Occupancy|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Warp Cycles Per Issued|No Eligible|Issued Warp" $OUT/ncu/${name}_details.txt | head -16
  rm -f $OUT/ncu/$name.ncu-rep
done
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $OUT/ncu.tar.gz -C $OUT ncu && rm -rf $OUT/ncu
