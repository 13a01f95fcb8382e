#!/usr/bin/env bash
# Session 31: persistent kernels 21 / 22 with a staged (2 x 32-row buffers, bulk copies) epilogue, producer / math registers 56/216 (v1), 56/224 (v2), 80/200 (v3):
# with the persistent form, sanitizers, then a flushed A/B against the per-tile grid on the 100 NM-SpMM
# points at m = 256..4096 and 4096^3 (the heuristic's plan and kernel 21 split 1).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/logs/build.log" 2>&1 || { tail -30 "$OUT/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NMSPMM_PERSIST=1 timeout 120 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or tail_split or large_m or llama_shapes or deterministic or graph or transpose or chain or non_contiguous or workspace" > "$OUT/logs/tests_persist.txt" 2>&1
echo "tests rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/logs/tests_persist.txt")"
grep -E "^FAILED|Error" "$OUT/logs/tests_persist.txt" | head -5
for tool in memcheck racecheck synccheck; do
  NMSPMM_PERSIST=1 NMSPMM_SANITIZE_KERNELS=21,22 timeout 60 compute-sanitizer --tool $tool --print-limit 10 python3 tools/sanitize_run.py > "$OUT/logs/sanitizer_$tool.txt" 2>&1
  echo "$tool rc=$? $(tail -1 "$OUT/logs/sanitizer_$tool.txt")"
done
for v in 2 3; do NMSPMM_PERSIST=$v timeout 60 python3 -m pytest -q -x tests/test_cuda_kernels.py -k "k21 or k22 or tail_split" > "$OUT/logs/tests_persist$v.txt" 2>&1; echo "tests v$v rc=$? $(tail -1 "$OUT/logs/tests_persist$v.txt")"; done
echo "$(( $(date +%s) - t0 )) s"
timeout 300 python3 tools/ab_variants_flushed.py --env NMSPMM_PERSIST --variants 0,1,2,3 --ms 256,512,1024,2048,4096 \
  --Ns 16,12,8,4 --plans auto,21/1 --large-plans auto,21/1 --cube --out "$OUT/logs/ab" > "$OUT/logs/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s; mismatches $(grep -c MISMATCH "$OUT/logs/ab.txt")"
grep -A24 "variant-0 time" "$OUT/logs/ab.txt"
tar -czf "$OUT/s31_persist_staged_logs.tgz" -C "$OUT" logs
