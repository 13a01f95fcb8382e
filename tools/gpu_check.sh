#!/usr/bin/env bash
# One device call: build the CUDA flavour, then the phases named (in order):
#   tests     the whole test suite on the GPU: tests_kernels (tests/test_cuda_kernels.py, about 150 s
#             on an H200) then tests_rest (every other file but the four that never touch the GPU,
#             which CI runs); each fits one device call alone
#   sanitize  memcheck then racecheck over every kernel (tools/sanitize_run.py); each alone fits a
#             call (NMSPMM_SANITIZE_KERNELS splits racecheck further). racecheck reports hazards inside
#             cuBLAS's own kernels (nvjet_*, which the expansion plans call): its row counts the hazards
#             in nmspmm's kernels apart from those. Filtering nvjet out with --kernel-name-exclude
#             makes the CUDA 13.0 compute-sanitizer fail with an internal error, so nothing is filtered
#   fuzz      tools/gpu_fuzz.py: 10,000 random configurations + corrupted-index, -col_info and
#             -tc_meta and non-finite-x cases against fp64 references
#   csrcheck  tools/csr_kernel_check.cu (torch-free, corrupted CSR cases) plain, under memcheck and
#             under racecheck
#   fuzzmem   the same harness on small shapes under compute-sanitizer memcheck, every tensor its own
#             allocation (PYTORCH_NO_CUDA_MEMORY_CACHING=1)
#   bench100  the committed benchmark: the 100 NM-SpMM points, nmspmm fp32 and bf16 against cuBLAS
#             fp32 / bf16 and PyTorch 2:4 bf16 (BENCH_HALF=fp16,bf16: fp16 rows too)
#   decode    bench_decode_half.py --stream-ref $DECODE_ARGS (bf16 and fp16 decode rows, m-sweep)
#   quick | full | e2e   benchmarks (bench_spmm --quick, --suite all, e2e_llama)
#   plantable benchmarks/plan_table.py: every plan the policy compares, timed against cuBLAS (the
#             CSV tests/test_policy_table.py replays; commit it as benchmarks/results/h200/plan_table.csv)
#   tp        benchmarks/tp_llama.py under torchrun on every GPU of the host (the two-GPU kind):
#             tensor-parallel Llama-2-7B shapes against one GPU, sparse and dense (results: $OUT/tp)
#   arch90    a second build with TORCH_CUDA_ARCH_LIST=9.0 (in a copy of the tree), timed against
#             this one on the 100 NM-SpMM points in fp32
#   checks    tests + fuzz + fuzzmem + sanitize + csrcheck: the full GPU check of a change under csrc/; more than
#             one device call holds, so run it as: tests_kernels, tests_rest, fuzz fuzzmem, memcheck,
#             racecheck csrcheck (a warm machine keeps the build between calls)
# Every call records the tree it ran (tree.txt: git rev-parse HEAD, git rev-parse HEAD:csrc, the
# dirty state of the tree and of csrc/, a sha256 of `git diff HEAD`) and appends one row per check
# phase to gpu_checks_rows.md, in the format of benchmarks/results/h100/gpu_checks.md, naming that
# tree: paste the rows there.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} HF_HUB_OFFLINE=1
# One thread per test process: 12 xdist workers with a full thread pool each oversubscribe the
# host's cores, and the CPU-bound tests (Llama generate, gloo ranks) then stall.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TORCHINDUCTOR_COMPILE_THREADS=1
HEAD_SHA=$(git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)
CSRC_TREE=$(git rev-parse --short=10 HEAD:csrc 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null)
CSRC_DIRTY=$(git status --porcelain --untracked-files=no -- csrc 2>/dev/null)
TREE="csrc ${CSRC_TREE} (HEAD ${HEAD_SHA}$([ -n "$DIRTY" ] && echo ", uncommitted changes$([ -n "$CSRC_DIRTY" ] && echo " IN csrc/") (diff sha256 $(git diff HEAD | sha256sum | cut -c1-10))"))"
{ echo "HEAD $(git rev-parse HEAD 2>/dev/null)"; echo "HEAD:csrc $(git rev-parse HEAD:csrc 2>/dev/null)"
  echo "dirty: $([ -n "$DIRTY" ] && echo yes || echo no)"; echo "csrc dirty: $([ -n "$CSRC_DIRTY" ] && echo yes || echo no)"
  [ -n "$DIRTY" ] && { echo "$DIRTY"; echo "diff sha256 $(git diff HEAD | sha256sum | cut -d' ' -f1)"; }
  nvidia-smi -L 2>/dev/null; python3 -c "import torch; print('torch', torch.__version__)"; } > "$OUT/tree.txt"
echo "tree: $TREE"
[ -n "$CSRC_DIRTY" ] && echo "WARNING: csrc/ differs from HEAD: the rows name HEAD:csrc, which is not the code that runs"
row() { echo "| $1, $TREE | \`$2\` | $3 |" >> "$OUT/gpu_checks_rows.md"; }
t0=$(date +%s)
if python3 -c "import nmspmm, sys; sys.exit(0 if nmspmm.build_info()['cuda'] else 1)" 2>/dev/null; then
  echo "build: kept from the previous call (warm machine)"
else
  python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
phases=()
for phase in "$@"; do
  case "$phase" in
    checks) phases+=(tests_kernels tests_rest fuzz fuzzmem memcheck racecheck csrcheck) ;;
    tests) phases+=(tests_kernels tests_rest) ;;
    sanitize) phases+=(memcheck racecheck) ;;
    *) phases+=("$phase") ;;
  esac
done
for phase in "${phases[@]}"; do
  t=$(date +%s)
  case "$phase" in
    tests_kernels | tests_rest) mkdir -p "$OUT/gpu_tests"
      # tests_rest leaves out the files that never touch the GPU (gloo ranks on the CPU, pure-Python
      # policy and table checks): CI runs them, and here they were 40% of the call's critical path.
      cpu_only=(test_tensor_parallel.py test_policy_table.py test_speed_of_light.py test_readme_tables.py)
      if [ "$phase" = tests_kernels ]; then sel=(tests/test_cuda_kernels.py)
      else sel=(tests --ignore=tests/test_cuda_kernels.py "${cpu_only[@]/#/--ignore=tests/}"); fi
      timeout 540 python3 -m pytest -q -rfs --no-header -p no:cacheprovider -n 12 --durations=20 "${sel[@]}" \
        --junitxml="$OUT/gpu_tests/junit_$phase.xml" > "$OUT/gpu_tests/pytest_$phase.txt" 2>&1
      rc=$?; echo "$phase rc=$rc $(tail -1 "$OUT/gpu_tests/pytest_$phase.txt")"; grep -E "^FAILED|^ERROR|^SKIPPED" "$OUT/gpu_tests/pytest_$phase.txt" | head -20
      row "test suite, ${sel[*]}" "python -m pytest -q -n 12 ${sel[*]}" "rc=$rc: $(tail -1 "$OUT/gpu_tests/pytest_$phase.txt" | tr -d '=' | sed 's/^ *//;s/ *$//')" ;;
    fuzz) mkdir -p "$OUT/gpu_tests"
      timeout 540 python3 tools/gpu_fuzz.py --out "$OUT/gpu_tests/fuzz_summary.txt" > "$OUT/gpu_tests/fuzz.txt" 2>&1
      rc=$?; echo "fuzz rc=$rc"; cat "$OUT/gpu_tests/fuzz_summary.txt"
      row "fuzz" "python tools/gpu_fuzz.py" "rc=$rc: $(awk 'NR > 1 && $(NF-4) ~ /^[0-9]+$/ {run += $(NF-4); fail += $(NF-1)} END {printf "%d checks, %d fail", run, fail}' "$OUT/gpu_tests/fuzz_summary.txt") (per category: gpu_tests/fuzz_summary.txt)" ;;
    fuzzmem) mkdir -p "$OUT/gpu_tests"
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 600 compute-sanitizer --tool memcheck --print-limit 20 \
        python3 tools/gpu_fuzz.py --cases 150 --small --corrupt-cases 10 > "$OUT/gpu_tests/fuzz_memcheck.txt" 2>&1
      rc=$?; echo "fuzz under memcheck rc=$rc"; tail -16 "$OUT/gpu_tests/fuzz_memcheck.txt"
      row "memcheck, fuzz" "PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python tools/gpu_fuzz.py --cases 150 --small --corrupt-cases 10" "rc=$rc: $(grep -E 'ERROR SUMMARY' "$OUT/gpu_tests/fuzz_memcheck.txt" | tail -1)" ;;
    csrcheck) mkdir -p "$OUT/gpu_tests"; log="$OUT/gpu_tests/csr_kernel_check.txt"
      nvcc -std=c++20 -O3 -arch=sm_90a -I csrc -o /tmp/csr_kernel_check tools/csr_kernel_check.cu \
        csrc/cuda/kernels/csr/csr_spmm_xt_gather.cu > "$log" 2>&1 || { tail -20 "$log"; continue; }
      for tool in none memcheck racecheck; do
        if [ $tool = none ]; then /tmp/csr_kernel_check >> "$log" 2>&1; else
          timeout 300 compute-sanitizer --tool $tool --print-limit 20 /tmp/csr_kernel_check >> "$log" 2>&1; fi
        rc=$?; echo "csr_kernel_check ($tool) rc=$rc $(grep -E 'failures|SUMMARY' "$log" | tail -1)"
        row "csr_kernel_check, $tool" "compute-sanitizer --tool $tool /tmp/csr_kernel_check" "rc=$rc: $(grep -E 'failures|SUMMARY' "$log" | tail -1)"
      done ;;
    arch90) src=$(pwd); rm -rf /tmp/nmspmm_arch90; mkdir -p /tmp/nmspmm_arch90
      tar --exclude=./build --exclude='*.so' --exclude=./.git -cf - . | tar -xf - -C /tmp/nmspmm_arch90
      (cd /tmp/nmspmm_arch90 && TORCH_CUDA_ARCH_LIST=9.0 python3 setup.py build_ext --inplace > "$OUT/build_arch90.log" 2>&1) || { tail -20 "$OUT/build_arch90.log"; continue; }
      for tree in "$src" /tmp/nmspmm_arch90; do
        name=arch_$(basename "$tree")
        (cd "$tree" && export PYTHONPATH="$tree" && python3 -c "import nmspmm; print(nmspmm.__file__, nmspmm.build_info())" &&
         python3 benchmarks/bench_spmm.py --suite nmspmm100 --dtypes fp32 --nm-dtypes fp32 --semi24 none \
           --out "$OUT/$name" > "$OUT/$name.txt" 2>&1; tail -8 "$OUT/$name.txt")
      done ;;
    memcheck | racecheck) mkdir -p "$OUT/gpu_tests"  # every registry kernel unless NMSPMM_SANITIZE_KERNELS limits it
      tool=$phase; log="$OUT/gpu_tests/sanitizer_$tool${NMSPMM_SANITIZE_TAG:-}.txt"
      {
        timeout ${SANITIZE_LIMIT_S:-540} compute-sanitizer --tool $tool --print-limit 100000 python3 tools/sanitize_run.py > "$log" 2>&1
        rc=$?; echo "sanitizer $tool rc=$rc"; tail -3 "$log"
        # A hazard report opens with "Race reported between <access> at <kernel>+<offset>".
        ours=$(grep "Race reported between" "$log" | grep -vc "nvjet")
        theirs=$(grep "Race reported between" "$log" | grep -c "nvjet")
        row "$tool, ${NMSPMM_SANITIZE_KERNELS:-every registry kernel}" "compute-sanitizer --tool $tool python tools/sanitize_run.py" \
          "rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|all kernels ran' "$log" | tr '\n' ' ')$([ $tool = racecheck ] && echo "; hazard lines in nmspmm kernels: $ours, in cuBLAS nvjet kernels: $theirs")"
      } ;;
    bench100) mkdir -p "$OUT/bench"; python3 benchmarks/bench_spmm.py --suite nmspmm100 --dtypes "fp32,${BENCH_HALF:-bf16}" \
        --nm-dtypes "fp32,${BENCH_HALF:-bf16}" --semi24 "${BENCH_HALF:-bf16}" \
        --out "$OUT/bench" > "$OUT/bench/console.txt" 2>&1; echo "bench100 rc=$?"; tail -30 "$OUT/bench/console.txt" ;;
    decode) timeout 900 python3 benchmarks/bench_decode_half.py --stream-ref ${DECODE_ARGS:-} --out "$OUT/decode" > "$OUT/decode_console.txt" 2>&1
      echo "decode rc=$?"; tail -45 "$OUT/decode_console.txt" ;;
    plantable) timeout 900 python3 benchmarks/plan_table.py --out "$OUT/plan_table.csv" > "$OUT/plan_table.txt" 2>&1
      echo "plantable rc=$?"; tail -40 "$OUT/plan_table.txt" ;;
    tp) timeout 580 torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" benchmarks/tp_llama.py ${TP_ARGS:-} --out "$OUT/tp" \
        > "$OUT/tp_console.txt" 2>&1; echo "tp rc=$?"; tail -20 "$OUT/tp_console.txt" ;;
    quick) python3 benchmarks/bench_spmm.py --quick --out "$OUT/quick" > "$OUT/bench_quick.txt" 2>&1; echo "quick rc=$?"; tail -40 "$OUT/bench_quick.txt" ;;
    full) python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/bench_full.txt" 2>&1; echo "full rc=$?"; tail -60 "$OUT/bench_full.txt" ;;
    e2e) python3 benchmarks/e2e_llama.py --out "$OUT/full" > "$OUT/e2e.txt" 2>&1; echo "e2e rc=$?"; tail -40 "$OUT/e2e.txt" ;;
  esac
  echo "$phase: $(( $(date +%s) - t )) s"
done
# At most 8 files come back from the device: everything travels as one archive.
tar -czf /tmp/gpu_check.tar.gz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/gpu_check.tar.gz "$OUT/"
