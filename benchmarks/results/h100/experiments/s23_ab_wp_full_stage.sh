#!/usr/bin/env bash
# Session-23 prepared A/B (not run: no device time left) of the warp-packed kernels' copy issue
# (s23_wp_full_stage_copies.diff): the stage's row numbers shifted down to lanes 0..WB-1 once per
# stage (one SHFL.DOWN) so each copy shuffles from a constant lane, and a stage whose rows all exist
# (every stage but a split's last) copies without per-row checks (no clamp, no per-row predicate,
# no B-row select). Static SASS of the 128x128 kernel's stage (sm_90, no spill, 254 registers):
# 1775 -> 1735 instructions outside the index-group fetch (non-FFMA/LDS 167 -> 127).
#   bash benchmarks/results/h100/experiments/s23_ab_wp_full_stage.sh   (GPU machine, repo root, ~6 min)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
EXP=benchmarks/results/h100/experiments
build() { python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_$1.log" 2>&1 || { tail -20 "$OUT/build_$1.log"; exit 1; }; }
ab() {  # warp-packed plans at 8:32 / 4:32 on the 100-point pairs at m = 256, 1024, 4096 + 4096^3
  timeout 200 python3 tools/ab_warp_packed.py --cube --ms 256,1024,4096 --Ns 8,4 \
    --plans 18/1/0,18/2/0,19/1/0,19/2/0,20/2/0 --out "$OUT/$1" > "$OUT/ab_$1.txt" 2>&1; echo "ab $1 rc=$? $(tail -1 "$OUT/ab_$1.txt")"
}
build base; ab base
git apply "$EXP/s23_wp_full_stage_copies.diff" || exit 1
build full; ab full
timeout 150 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "k18- or k19- or k20- or bulk_store or cluster_split_bitwise or deterministic" > "$OUT/tests_full.txt" 2>&1; echo "tests rc=$? $(tail -1 "$OUT/tests_full.txt")"
NMSPMM_SANITIZE_KERNELS=18,19,20 timeout 90 compute-sanitizer --tool memcheck python3 tools/sanitize_run.py 2>&1 | tail -1
git apply -R "$EXP/s23_wp_full_stage_copies.diff"
python3 - "$OUT" <<'PY'
import csv, math, sys, collections
out = sys.argv[1]
def load(t):
    return {(r["m"], r["n"], r["k"], r["N"]): r for r in csv.DictReader(open(f"{out}/{t}/ab_warp_packed.csv"))}
a, b = load("base"), load("full")
for plan in ("k18s1v0", "k18s2v0", "k19s1v0", "k19s2v0", "k20s2v0", "auto_ms"):
    by = collections.defaultdict(list)
    for key, r in a.items():
        if key in b:
            by[(key[3], key[0])].append(math.log(float(r[plan]) / float(b[key][plan])))
    print(plan, "base/full geomean:", "  ".join(f"{N}:32 m={m} {math.exp(sum(v) / len(v)):.3f}" for (N, m), v in sorted(by.items())))
PY
