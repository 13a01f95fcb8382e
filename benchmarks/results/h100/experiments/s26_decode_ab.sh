#!/usr/bin/env bash
# Session 26: m = 1 decode CUDA-graph timings of the session-25 build (s25_src, git archive of
# 76256c8) and this session's, alternated on one machine (the final benchmark's m = 1 cells with
# cluster sizes 4 / 5 / 12 ran 5-6 us slower than session 25's run with unchanged decode code).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_new.log" 2>&1 || { tail -20 "$OUT/build_new.log"; exit 1; }
(cd s25_src && python3 setup.py build_ext --inplace > "$OUT/build_old.log" 2>&1) || { tail -20 "$OUT/build_old.log"; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
for rep in 1 2; do
  python3 tools/decode_graph_probe.py --tag new
  PYTHONPATH=s25_src python3 tools/decode_graph_probe.py --tag old
done 2>&1 | tee "$OUT/decode_ab.txt"
echo "done $(( $(date +%s) - t0 )) s"
