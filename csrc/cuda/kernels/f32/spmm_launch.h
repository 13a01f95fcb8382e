// The launcher: runs a registry kernel (csrc/registry.h) on a problem described by SpmmParams.
// Torch-free; knows the registry, not the heuristic. The op binding (csrc/cuda/spmm_ops.cpp) is
// its only caller.
#pragma once
#include <cuda_runtime.h>

#include "registry.h"
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// Runs `kernel` with p.split_k splits of k: the x transpose first where the kernel reads it, the
// split-K reduction after it where the plan uses the workspace. Returns cudaErrorInvalidValue for a
// kernel that cannot run this problem (kernel_supports) or a plan without the buffers it needs,
// else the launch status.
cudaError_t launch_spmm(const SpmmParams& p, Kernel kernel, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
