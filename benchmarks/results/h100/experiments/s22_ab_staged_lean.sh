#!/usr/bin/env bash
# Session-22 prepared A/B (not yet run): the staged decode kernel without runtime divisions in its
# x staging, zero fill and batch bookkeeping (s22_staged_lean.diff). Static SASS of the m <= 16
# kernel with 128-column tiles: x copy loop ~3.6 instructions per 16-byte copy instead of ~34; an
# estimated ~20% fewer instructions per warp at 16x4096x4096 4:32 (ncu: 2290 per warp, of which
# ~720 math), the cell that misses its target because it is issue-bound.
#   bash benchmarks/results/h100/experiments/s22_ab_staged_lean.sh   (GPU machine, repo root, ~7 min)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
EXP=benchmarks/results/h100/experiments
SHAPES=4096x4096,11008x4096,4096x11008,1024x4096,14336x4096,4096x14336
sweep() {  # the staged plans the rule picks on these layers (clusters 5, 7, 8, 16), m = 3, 8, 16
  timeout 150 python3 tools/decode_sweep.py --out "$OUT/$1" --ms 3,8,16 --shape-list $SHAPES \
    --splits 5,7,8,16 > "$OUT/$1.txt" 2>&1; echo "sweep $1 rc=$?"
}
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_base.log" 2>&1 || exit 1
sweep base
git apply "$EXP/s22_staged_lean.diff" || exit 1
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_lean.log" 2>&1 || exit 1
sweep lean
timeout 120 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k15- or k16- or k17- or llama_shapes" > "$OUT/tests_lean.txt" 2>&1; echo "tests rc=$? $(tail -1 "$OUT/tests_lean.txt")"
NMSPMM_SANITIZE_KERNELS=15,16,17 timeout 60 compute-sanitizer --tool memcheck python3 tools/sanitize_run.py 2>&1 | tail -1
NMSPMM_SANITIZE_KERNELS=15,16,17 timeout 90 compute-sanitizer --tool racecheck python3 tools/sanitize_run.py 2>&1 | tail -1
git apply -R "$EXP/s22_staged_lean.diff"
python3 - "$OUT" <<'PY'
import csv, math, sys, collections
out = sys.argv[1]
def load(t):
    return {(r["n"], r["k"], r["N"], r["m"], r["kernel"], r["split"]): float(r["us"])
            for r in csv.DictReader(open(f"{out}/{t}/decode_sweep.csv")) if int(r["kernel"]) >= 15}
b, l = load("base"), load("lean")
by = collections.defaultdict(list)
for key in b:
    if key in l:
        by[(key[3], key[2])].append(math.log(b[key] / l[key]))
for (m, N), v in sorted(by.items(), key=lambda kv: (int(kv[0][0]), -int(kv[0][1]))):
    print(f"m={m:>2} {N:>2}:32  base/lean geomean {math.exp(sum(v) / len(v)):.3f} over {len(v)} plans")
allv = [x for v in by.values() for x in v]
print(f"all {math.exp(sum(allv) / len(allv)):.3f} over {len(allv)} plans")
PY
