#!/usr/bin/env bash
# Session 28, device call: build, kernel 21's GPU tests, the heuristic A/B with and without kernel 21.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m pytest -q -x -rf --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "k21 or 21 or PRODUCER or large_m or llama_shapes or transpose or chain or workspace_split" > "$OUT/logs/gpu_test_k21.txt" 2>&1
echo "k21 tests rc=$? $(tail -1 "$OUT/logs/gpu_test_k21.txt") ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 tools/ab_producer.py --grid nmspmm100 --ms 256,512,1024,2048,4096 --Ns 16,12,8 --extra --out "$OUT/logs" --name ab_producer_nmspmm100.csv > "$OUT/logs/ab_nmspmm100.txt" 2>&1
echo "ab100 rc=$? ($(( $(date +%s) - t0 )) s)"; grep -c MISMATCH "$OUT/logs/ab_nmspmm100.txt"; grep -A20 "^old / new" "$OUT/logs/ab_nmspmm100.txt"
timeout 150 python3 tools/ab_producer.py --grid llama --ms 128,256,512,1024 --Ns 16,12,8 --out "$OUT/logs" --name ab_producer_llama.csv > "$OUT/logs/ab_llama.txt" 2>&1
echo "ab llama rc=$? ($(( $(date +%s) - t0 )) s)"; grep -c MISMATCH "$OUT/logs/ab_llama.txt"; grep -A20 "^old / new" "$OUT/logs/ab_llama.txt"
tar -czf "$OUT/logs_ab.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
