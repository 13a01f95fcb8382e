#!/usr/bin/env bash
# Session 24, device call 3: a second pass of the call-2 flushed plan sweeps (the fit takes the
# lower of the two medians per plan, as the benchmark keeps the lower of its two do_bench medians).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
python3 tools/sweep_flushed.py --grid nmspmm100 --ms 256,512,1024,2048,4096 --budget-s 250 --name flushed_sweep_nmspmm100_pass2.csv --out "$OUT" > "$OUT/sweep_nmspmm100_pass2.txt" 2>&1
echo "sweep100 rc=$? $(tail -1 $OUT/sweep_nmspmm100_pass2.txt)"
python3 tools/sweep_flushed.py --grid llama --ms 32,64,128,256,512 --budget-s 150 --name flushed_sweep_llama_pass2.csv --out "$OUT" > "$OUT/sweep_llama_pass2.txt" 2>&1
echo "sweep llama rc=$? $(tail -1 $OUT/sweep_llama_pass2.txt)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
echo "total $(( $(date +%s) - t0 )) s"
