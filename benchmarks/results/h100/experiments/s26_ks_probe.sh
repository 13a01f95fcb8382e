#!/usr/bin/env bash
# Session 26, device call 1: build, flushed sweeps of the warp-packed kernels with and without the
# in-block k-split (19-23) on small grids, the CUDA kernel tests, memcheck and racecheck of 19-23.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
step sweep100
timeout 170 python3 tools/sweep_flushed.py --grid nmspmm100 --ms 256,512,1024 --kernels 19,20,21,22,23 \
  --out "$OUT" --name s26_ks_sweep_100.csv --budget-s 140 > "$OUT/logs/sweep100.txt" 2>&1; echo "rc=$?"
grep -c MISMATCH "$OUT/logs/sweep100.txt"; tail -2 "$OUT/logs/sweep100.txt"
step sweepllama
timeout 130 python3 tools/sweep_flushed.py --grid llama --ms 32,64,128,256,512 --kernels 19,20,21,22,23 \
  --out "$OUT" --name s26_ks_sweep_llama.csv --budget-s 100 > "$OUT/logs/sweepllama.txt" 2>&1; echo "rc=$?"
grep -c MISMATCH "$OUT/logs/sweepllama.txt"; tail -2 "$OUT/logs/sweepllama.txt"
step tests
timeout 220 python3 -m pytest -q -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py > "$OUT/logs/gpu_test_cuda_kernels.txt" 2>&1
echo "rc=$? $(tail -1 "$OUT/logs/gpu_test_cuda_kernels.txt")"
for tool in memcheck racecheck; do
  step $tool
  NMSPMM_SANITIZE_KERNELS=19,20,21,22,23 timeout 100 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_${tool}_19-23.txt" 2>&1
  echo "rc=$?"; tail -2 "$OUT/logs/sanitizer_${tool}_19-23.txt"
done
step done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
