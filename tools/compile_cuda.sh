#!/usr/bin/env bash
# Compile-only check of every CUDA source (csrc/cuda/**/*.cu) with nvcc, for sm_90a and sm_80,
# on a machine without a GPU and with a CPU-only torch. Nothing is linked or run: the point is
# that a kernel or binding change that does not compile fails CI before it reaches a GPU box, and
# so does a kernel whose wgmma ptxas serializes (warning C7520).
#
#   bash tools/compile_cuda.sh            # all .cu files, 2 in parallel
#   NMSPMM_NVCC_JOBS=4 bash tools/compile_cuda.sh
#   bash tools/compile_cuda.sh csrc/cuda/kernels/f32/spmm_small.cu   # just these files
#
# tools/compile_check_include supplies c10/cuda/impl/cuda_cmake_macros.h, which CPU torch wheels
# lack; binding .cu files may include only <torch/all.h>, <c10/cuda/CUDAStream.h> and
# <c10/cuda/CUDAGuard.h> from torch. Exits non-zero if any file fails to compile.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "compile_cuda.sh: SKIP: nvcc not found (set NVCC or put nvcc on PATH); CUDA sources not checked"
  exit 0
fi

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find csrc/cuda \( -name '*.cu' -o -name '*.cpp' \) -type f 2>/dev/null | sort)
fi
if [ "${#files[@]}" -eq 0 ]; then
  echo "compile_cuda.sh: SKIP: no .cu files under csrc/cuda yet"
  exit 0
fi

PYTHON="${PYTHON:-python}"
TORCH="$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
JOBS="${NMSPMM_NVCC_JOBS:-2}"
CUDA_INC="$(dirname "$(dirname "$(command -v "$NVCC")")")/include"
[ -f "$CUDA_INC/cuda_runtime.h" ] || CUDA_INC=/usr/local/cuda/include
LOGDIR="$(mktemp -d)"
trap 'rm -rf "$LOGDIR"' EXIT

# One nvcc call per file builds device code for both architectures (the host pass runs once).
FLAGS=(-std=c++20 -c -o /dev/null
       -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80
       --expt-relaxed-constexpr -diag-suppress 3306
       -I csrc -I tools/compile_check_include
       -I "$TORCH/include" -I "$TORCH/include/torch/csrc/api/include")

echo "compile_cuda.sh: $("$NVCC" --version | tail -n 1)"
echo "compile_cuda.sh: ${#files[@]} file(s), sm_90a + sm_80, $JOBS in parallel"

compile_one() {
  local f="$1" log start
  log="$LOGDIR/$(echo "$f" | tr '/' '_').log"
  start=$SECONDS
  local cmd=("$NVCC" "${FLAGS[@]}")
  # Op bindings (.cpp) are host C++ that setup.py compiles with the C++ compiler.
  if [[ "$f" == *.cpp ]]; then
    cmd=("${CXX:-g++}" -std=c++20 -c -o /dev/null -DNMSPMM_WITH_CUDA -I csrc -I tools/compile_check_include
         -I "$TORCH/include" -I "$TORCH/include/torch/csrc/api/include" -I "$CUDA_INC")
  fi
  if "${cmd[@]}" "$f" >"$log" 2>&1; then
    # ptxas serializes every wgmma of a kernel (warning C7520) when a register a wgmma reads is
    # written after the warpgroup's fence; the kernel still runs, at about 0.8x: refuse it here.
    if grep -q "C7520" "$log"; then
      echo "  FAIL $f ($((SECONDS - start)) s): ptxas serializes its wgmma"
      sed 's/^/       /' "$log"
      return 1
    fi
    echo "  ok   $f ($((SECONDS - start)) s)"
  else
    echo "  FAIL $f ($((SECONDS - start)) s)"
    sed 's/^/       /' "$log"
    return 1
  fi
}

# Job pool: at most $JOBS compiles at once; count every failure.
failed=0
running=0
for f in "${files[@]}"; do
  compile_one "$f" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done

if [ "$failed" -ne 0 ]; then
  echo "compile_cuda.sh: $failed of ${#files[@]} file(s) FAILED to compile"
  exit 1
fi
echo "compile_cuda.sh: all ${#files[@]} file(s) compiled"
