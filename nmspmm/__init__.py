"""nmspmm: vector-wise N:M sparse matrix multiplication for PyTorch.

Data path: nmspmm.spmm / NMLinear (Python) -> torch.ops.nmspmm.spmm (csrc/nmspmm_ops.cpp)
-> CPU reference (csrc/cpu/ops_cpu.cpp) or the CUDA binding (csrc/cuda/spmm_ops.cpp), which asks
the heuristic (csrc/dispatch.h) for a plan -> torch-free kernels and their launcher (csrc/cuda/kernels).
"""
from ._ops import PACK_K_BLOCK, PACK_TILE_N, cuda_kernels_built
from .format import NMWeight, col_info, compress, decompress, prune, spmm
from .nn import NMLinear, sparsify_, sparsify_report
from . import permute, pruning  # noqa: E402  (calibrated pruning, permutations, recovery)

__all__ = ["NMWeight", "prune", "compress", "decompress", "col_info", "spmm", "cuda_kernels_built",
           "PACK_TILE_N", "PACK_K_BLOCK", "NMLinear", "sparsify_", "sparsify_report", "pruning", "permute"]
__version__ = "0.1.0"
