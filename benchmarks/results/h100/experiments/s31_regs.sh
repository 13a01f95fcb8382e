#!/usr/bin/env bash
# Session 31: kernels 21 / 22 with other producer / math register splits of the setmaxnreg reallocation
# (NMSPMM_REGS=0..4: 40/232 (session 30), 40/224, 40/216, 56/216, 56/208; each a different ptxas
# allocation of the same math loop). Tests per variant, then flushed A/Bs (two repetitions on the
# 100 NM-SpMM points, one on the llama suite's shapes).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for v in 1 2 3 4; do
  NMSPMM_REGS=$v timeout 60 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or tail_split" > "$OUT/logs/tests_regs$v.txt" 2>&1
  echo "tests v$v rc=$? $(tail -1 "$OUT/logs/tests_regs$v.txt")"
done
for rep in 1 2; do
  timeout 200 python3 tools/ab_variants_flushed.py --env NMSPMM_REGS --variants 0,1,2,3,4 --ms 256,512,1024,2048,4096 \
    --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --cube --out "$OUT/logs/ab$rep" > "$OUT/logs/ab$rep.txt" 2>&1
  echo "ab$rep rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab$rep.txt")"
  grep -A24 "variant-0 time" "$OUT/logs/ab$rep.txt"
done
timeout 150 python3 tools/ab_variants_flushed.py --env NMSPMM_REGS --variants 0,1,2,3,4 --nk llama --ms 512,2048 \
  --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --out "$OUT/logs/ab_llama" > "$OUT/logs/ab_llama.txt" 2>&1
echo "ab_llama rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab_llama.txt")"
grep -A12 "variant-0 time" "$OUT/logs/ab_llama.txt"
tar -czf "$OUT/s31_regs_logs.tgz" -C "$OUT" logs
