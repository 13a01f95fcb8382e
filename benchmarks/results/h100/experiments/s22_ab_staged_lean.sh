#!/usr/bin/env bash
# Session-22 prepared A/B (not yet run) of the staged decode kernel (kernels 15-17):
#   lean  (s22_staged_lean.diff): no runtime divisions in the x staging, zero fill and batch
#         bookkeeping;
#   lean2 (s22_staged_lean2.diff = lean + ...): the m = 9..16 kernel's rolling prefetch reads the
#         next batch through pointers carried across batches, instead of re-deriving each row's
#         addresses (which ptxas rematerialized at its 128-register cap).
# Static SASS (sm_90) of the 16-row, 128-column kernel: 3792 -> 3456 -> 3384 instructions; its
# 4-row batch loop 544 (base and lean) -> 445 (lean2), of which 320 are FFMA + LDS; the x copy
# ~34 -> ~3.6 instructions per 16-byte copy; 126-128 registers, no spill. ncu at 16x4096x4096
# 4:32 (ncu_s22_decode_m16_*): 2290 instructions per warp, ~720 of them math; issue-bound.
#   bash benchmarks/results/h100/experiments/s22_ab_staged_lean.sh   (GPU machine, repo root, ~8 min)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
EXP=benchmarks/results/h100/experiments
SHAPES=4096x4096,11008x4096,4096x11008,1024x4096,14336x4096,4096x14336
build() { python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_$1.log" 2>&1 || { tail -20 "$OUT/build_$1.log"; exit 1; }; }
sweep() {  # the staged plans the rule picks on these layers (clusters 5, 7, 8, 16), m = 3, 8, 16
  timeout 150 python3 tools/decode_sweep.py --out "$OUT/$1" --ms 3,8,16 --shape-list $SHAPES \
    --splits 5,7,8,16 > "$OUT/$1.txt" 2>&1; echo "sweep $1 rc=$? $(tail -1 "$OUT/$1.txt")"
}
build base; sweep base
git apply "$EXP/s22_staged_lean.diff" || exit 1
build lean; sweep lean
git apply -R "$EXP/s22_staged_lean.diff"; git apply "$EXP/s22_staged_lean2.diff" || exit 1
build lean2; sweep lean2
timeout 120 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py \
  -k "k15- or k16- or k17- or llama_shapes" > "$OUT/tests_lean2.txt" 2>&1; echo "tests lean2 rc=$? $(tail -1 "$OUT/tests_lean2.txt")"
NMSPMM_SANITIZE_KERNELS=15,16,17 timeout 60 compute-sanitizer --tool memcheck python3 tools/sanitize_run.py 2>&1 | tail -1
NMSPMM_SANITIZE_KERNELS=15,16,17 timeout 90 compute-sanitizer --tool racecheck python3 tools/sanitize_run.py 2>&1 | tail -1
git apply -R "$EXP/s22_staged_lean2.diff"
python3 - "$OUT" <<'PY'
import csv, math, sys, collections
out = sys.argv[1]
def load(t):
    return {(r["n"], r["k"], r["N"], r["m"], r["kernel"], r["split"]): float(r["us"])
            for r in csv.DictReader(open(f"{out}/{t}/decode_sweep.csv")) if int(r["kernel"]) >= 15}
t = {name: load(name) for name in ("base", "lean", "lean2")}
for name in ("lean", "lean2"):
    by = collections.defaultdict(list)
    for key, us in t["base"].items():
        if key in t[name]:
            by[(int(key[3]), int(key[2]))].append(math.log(us / t[name][key]))
    for (m, N), v in sorted(by.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        print(f"{name:5s} m={m:2d} {N:2d}:32  base/{name} geomean {math.exp(sum(v) / len(v)):.3f} over {len(v)} plans")
    allv = [x for v in by.values() for x in v]
    print(f"{name:5s} all {math.exp(sum(allv) / len(allv)):.3f} over {len(allv)} plans")
k = ("4096", "4096", "4", "16", "15", "7")  # 16x4096x4096 4:32, the heuristic's plan (target 9.0 us)
print("16x4096x4096 4:32 staged128/7 us:", {name: round(t[name].get(k, float("nan")), 2) for name in t})
PY
