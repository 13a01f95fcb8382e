#!/usr/bin/env bash
# Session 22 call 7: ncu of the decode kernels at the three m > 1 / m = 1 missed cells (final code).
set -u
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
mkdir -p $OUT/ncu
for spec in "16 4096 4096 4 15 7" "16 4096 4096 4 16 11" "8 1024 4096 4 15 8" "1 1024 4096 4 12 9"; do
  set -- $spec
  name=m$1_${2}x$3_$4-32_k$5_s$6
  t=$(date +%s)
  timeout 100 ncu --set full --import-source no -k regex:spmm_decode --launch-skip 2 --launch-count 1 \
    -o $OUT/ncu/$name python3 tools/profile_one.py $1 $2 $3 $4 32 32 $5 $6 > $OUT/ncu/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s"
  ncu --import $OUT/ncu/$name.ncu-rep --page details > $OUT/ncu/${name}_details.txt 2>&1
  grep -E "^  [a-z_]+|Duration|Elapsed Cycles|SM Active Cycles|Executed Ipc Active|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Warp Cycles Per Issued|No Eligible|Waves Per SM|Cluster" $OUT/ncu/${name}_details.txt | head -24
  rm -f $OUT/ncu/$name.ncu-rep
done
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $OUT/ncu.tar.gz -C $OUT ncu && rm -rf $OUT/ncu
