#!/usr/bin/env bash
# One device call: build the CUDA flavour, then the phases named (in order):
#   tests     the whole test suite on the GPU (pytest-xdist, 8 workers)
#   sanitize  compute-sanitizer memcheck and racecheck over every kernel (tools/sanitize_run.py)
#   fuzz      tools/gpu_fuzz.py: 10,000 random configurations + corrupted-index, corrupted-col_info
#             and non-finite-x cases against fp64 references
#   fuzzmem   the same harness on small shapes under compute-sanitizer memcheck, every tensor its own
#             allocation (PYTORCH_NO_CUDA_MEMORY_CACHING=1)
#   bench100  the committed benchmark: the 100 NM-SpMM points, nmspmm fp32 and bf16 against cuBLAS
#             fp32 / bf16 and PyTorch 2:4 bf16 (BENCH_HALF=fp16,bf16: fp16 rows too)
#   decode    bench_decode_half.py --stream-ref $DECODE_ARGS (bf16 and fp16 decode rows, m-sweep)
#   quick | full | e2e   benchmarks (bench_spmm --quick, --suite all, e2e_llama)
#   plantable benchmarks/plan_table.py: every plan the policy compares, timed against cuBLAS (the
#             CSV tests/test_policy_table.py replays; commit it as benchmarks/results/plan_table.csv)
#   arch90    a second build with TORCH_CUDA_ARCH_LIST=9.0 (in a copy of the tree), timed against
#             this one on the 100 NM-SpMM points in fp32
#   bash tools/gpu_check.sh tests fuzz fuzzmem sanitize
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} HF_HUB_OFFLINE=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for phase in "$@"; do
  t=$(date +%s)
  case "$phase" in
    tests) mkdir -p "$OUT/gpu_tests"
      timeout 900 python3 -m pytest -q -rf --no-header -p no:cacheprovider -n 8 tests > "$OUT/gpu_tests/pytest.txt" 2>&1
      echo "tests rc=$? $(tail -1 "$OUT/gpu_tests/pytest.txt")"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests/pytest.txt" | head -20 ;;
    fuzz) mkdir -p "$OUT/gpu_tests"
      timeout 900 python3 tools/gpu_fuzz.py --out "$OUT/gpu_tests/fuzz_summary.txt" > "$OUT/gpu_tests/fuzz.txt" 2>&1
      echo "fuzz rc=$?"; cat "$OUT/gpu_tests/fuzz_summary.txt" ;;
    fuzzmem) mkdir -p "$OUT/gpu_tests"
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 600 compute-sanitizer --tool memcheck --print-limit 20 \
        python3 tools/gpu_fuzz.py --cases 150 --small --corrupt-cases 10 > "$OUT/gpu_tests/fuzz_memcheck.txt" 2>&1
      echo "fuzz under memcheck rc=$?"; tail -16 "$OUT/gpu_tests/fuzz_memcheck.txt" ;;
    arch90) src=$(pwd); rm -rf /tmp/nmspmm_arch90; mkdir -p /tmp/nmspmm_arch90
      tar --exclude=./build --exclude='*.so' --exclude=./.git -cf - . | tar -xf - -C /tmp/nmspmm_arch90
      (cd /tmp/nmspmm_arch90 && TORCH_CUDA_ARCH_LIST=9.0 python3 setup.py build_ext --inplace > "$OUT/build_arch90.log" 2>&1) || { tail -20 "$OUT/build_arch90.log"; continue; }
      for tree in "$src" /tmp/nmspmm_arch90; do
        name=arch_$(basename "$tree")
        (cd "$tree" && export PYTHONPATH="$tree" && python3 -c "import nmspmm; print(nmspmm.__file__, nmspmm.build_info())" &&
         python3 benchmarks/bench_spmm.py --suite nmspmm100 --dtypes fp32 --nm-dtypes fp32 --semi24 none \
           --out "$OUT/$name" > "$OUT/$name.txt" 2>&1; tail -8 "$OUT/$name.txt")
      done ;;
    sanitize) mkdir -p "$OUT/gpu_tests"
      for tool in memcheck racecheck; do timeout 240 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_run.py > "$OUT/gpu_tests/sanitizer_$tool.txt" 2>&1; echo "sanitizer $tool rc=$?"; tail -3 "$OUT/gpu_tests/sanitizer_$tool.txt"; done ;;
    bench100) mkdir -p "$OUT/bench"; python3 benchmarks/bench_spmm.py --suite nmspmm100 --dtypes "fp32,${BENCH_HALF:-bf16}" \
        --nm-dtypes "fp32,${BENCH_HALF:-bf16}" --semi24 "${BENCH_HALF:-bf16}" \
        --out "$OUT/bench" > "$OUT/bench/console.txt" 2>&1; echo "bench100 rc=$?"; tail -30 "$OUT/bench/console.txt" ;;
    decode) timeout 900 python3 benchmarks/bench_decode_half.py --stream-ref ${DECODE_ARGS:-} --out "$OUT/decode" > "$OUT/decode_console.txt" 2>&1
      echo "decode rc=$?"; tail -45 "$OUT/decode_console.txt" ;;
    plantable) timeout 900 python3 benchmarks/plan_table.py --out "$OUT/plan_table.csv" > "$OUT/plan_table.txt" 2>&1
      echo "plantable rc=$?"; tail -40 "$OUT/plan_table.txt" ;;
    quick) python3 benchmarks/bench_spmm.py --quick --out "$OUT/quick" > "$OUT/bench_quick.txt" 2>&1; echo "quick rc=$?"; tail -40 "$OUT/bench_quick.txt" ;;
    full) python3 benchmarks/bench_spmm.py --suite all --out "$OUT/full" > "$OUT/bench_full.txt" 2>&1; echo "full rc=$?"; tail -60 "$OUT/bench_full.txt" ;;
    e2e) python3 benchmarks/e2e_llama.py --out "$OUT/full" > "$OUT/e2e.txt" 2>&1; echo "e2e rc=$?"; tail -40 "$OUT/e2e.txt" ;;
  esac
  echo "$phase: $(( $(date +%s) - t )) s"
done
# At most 8 files come back from the device: everything travels as one archive.
tar -czf /tmp/gpu_check.tar.gz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/gpu_check.tar.gz "$OUT/"
