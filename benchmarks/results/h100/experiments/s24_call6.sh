#!/usr/bin/env bash
# Session 24, device call 6: A/B of the warp-packed prologue loading the first two index groups back
# to back (s24_wp_index_prologue.diff; ncu call 5: 13% of the 256x2048x2048 4:32 kernel's warp
# samples wait on the index load at a group start), base and patched builds, flushed timings; then
# the warp-packed kernels' tests, memcheck and racecheck on the patched build.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONUNBUFFERED=1
EXP=benchmarks/results/h100/experiments
t0=$(date +%s)
build() { python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_$1.log" 2>&1 || { tail -20 "$OUT/build_$1.log"; exit 1; }; echo "build $1 $(( $(date +%s) - t0 )) s"; }
ab() { timeout 150 python3 tools/ab_variants_flushed.py --variants 0 --ms 256,512,1024 --Ns 8,4 --cube \
         --plans auto,20/1,20/2,19/1,19/2,18/1 --out "$OUT/$1" > "$OUT/ab_$1.txt" 2>&1; echo "ab $1 rc=$?"; }
git apply -R "$EXP/s24_wp_index_prologue.diff" || exit 1
build base; ab base
git apply "$EXP/s24_wp_index_prologue.diff" || exit 1
build new; ab new
python3 - "$OUT" <<'PY'
import csv, math, sys, collections
out = sys.argv[1]
def load(t):
    return {(r["m"], r["n"], r["k"], r["N"], r["kernel"], r["split"]): (float(r["ms"]), r["auto"]) for r in csv.DictReader(open(f"{out}/{t}/ab_variants.csv"))}
a, b = load("base"), load("new")
by = collections.defaultdict(list); byauto = collections.defaultdict(list)
for key, (t, auto) in a.items():
    if key in b:
        by[(key[3], key[0], key[4], key[5])].append(math.log(t / b[key][0]))
        if auto == "1": byauto[(key[3], key[0])].append(math.log(t / b[key][0]))
g = lambda v: math.exp(sum(v) / len(v))
for (N, m), v in sorted(byauto.items()): print(f"{N}:32 m={m:>5s} auto plan base/new {g(v):.3f} (min {math.exp(min(v)):.3f} max {math.exp(max(v)):.3f}, {len(v)} shapes)")
for key, v in sorted(by.items()): print(f"  {key[0]}:32 m={key[1]:>5s} plan {key[2]}/{key[3]} base/new {g(v):.3f}")
PY
echo "t=$(( $(date +%s) - t0 )) s"
timeout 120 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_cuda_kernels.py -k "k18- or k19- or k20- or bulk_store or cluster_split_bitwise or deterministic" > "$OUT/tests_new.txt" 2>&1; echo "tests rc=$? $(tail -1 $OUT/tests_new.txt)"
timeout 60 python3 -m pytest -q --no-header -p no:cacheprovider tests/test_heuristic.py tests/test_ops.py > "$OUT/tests_ops.txt" 2>&1; echo "ops/heuristic rc=$? $(tail -1 $OUT/tests_ops.txt)"
for tool in memcheck racecheck; do NMSPMM_SANITIZE_KERNELS=18,19,20 timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/sanitizer_$tool.txt" 2>&1; echo "$tool rc=$? $(tail -1 $OUT/sanitizer_$tool.txt)"; done
echo "total $(( $(date +%s) - t0 )) s"
rm -f "$OUT"/build_*.log
