#!/usr/bin/env bash
# INDEX_AHEAD / small-tile STAGES A/B: base, ia2, ia3, ia3s4 (trees under .exp/s20/<v>, made here from
# the working tree with the macros prepended to spmm_tiled.cuh). Kernel tests on each, then flushed
# graph timings of the heuristic plans on the 100 points, interleaved, 2 reps.
set -u
export TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
R=$PWD
VARS=${VARS:-"base ia2 ia3 ia3s4"}
for v in $VARS; do
  d=$R/.exp/s20/t_$v; rm -rf $d; mkdir -p $d
  cp -r csrc nmspmm setup.py pyproject.toml $d/ 2>/dev/null; rm -f $d/nmspmm/*.so
  h=$d/csrc/cuda/kernels/spmm_tiled.cuh
  case $v in
    ia2) sed -i '1i #define NMSPMM_EXP_INDEX_AHEAD 2' $h;;
    ia3) sed -i '1i #define NMSPMM_EXP_INDEX_AHEAD 3' $h;;
    ia3s4) sed -i '1i #define NMSPMM_EXP_INDEX_AHEAD 3\n#define NMSPMM_EXP_SMALL_STAGES 4' $h;;
  esac
  (cd $d && MAX_JOBS=4 python3 setup.py build_ext --inplace > $OUT/build_$v.log 2>&1; echo "rc=$?" >> $OUT/build_$v.log) &
done
wait; for v in $VARS; do echo "$v $(tail -1 $OUT/build_$v.log)"; done; el built
timed() { for v in $VARS; do
  d=$R/.exp/s20/t_$v
  PYTHONPATH=$d timeout 200 python3 .exp/s20/ab_flush.py $v ${MS:-256,512,1024,2048,4096} > $OUT/t_${v}_$1.txt 2> $OUT/err_${v}_$1.txt; el "timed $v $1 rc=$? lines=$(wc -l < $OUT/t_${v}_$1.txt)"
done; }
(PYTHONPATH=$R/.exp/s20/t_base timeout 60 python3 .exp/s20/host.py > $OUT/host.txt 2>&1); el "host rc=$?"
timed 1
for v in $VARS; do
  [ $(( $(date +%s) - T0 )) -gt ${TEST_DEADLINE:-420} ] && break
  d=$R/.exp/s20/t_$v
  (cd $d && PYTHONPATH=$d timeout 100 python3 -m pytest -q -x --no-header -p no:cacheprovider $R/tests/test_cuda_kernels.py -k "kernel_matches_fp64" > $OUT/test_$v.txt 2>&1); el "tests $v rc=$? $(tail -1 $OUT/test_$v.txt)"
done
[ $(( $(date +%s) - T0 )) -lt ${REP2_DEADLINE:-400} ] && timed 2
for v in $VARS; do [ $v = base ] && continue; echo "== $v vs base"; python3 .exp/s19/cmp.py $OUT/t_base_*.txt -- $OUT/t_${v}_*.txt 2>/dev/null | tee $OUT/cmp_$v.txt | grep -v "^('N,m'"; done
cd $OUT && tar -czf t.tar.gz t_*.txt test_*.txt err_*.txt && rm -f t_*.txt err_*.txt
