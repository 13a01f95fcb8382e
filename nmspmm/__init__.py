"""nmspmm: vector-wise N:M sparse matrix multiplication for PyTorch.

Data path: nmspmm.spmm / NMLinear (Python) -> torch.ops.nmspmm.spmm (csrc/nmspmm_ops.cpp)
-> CPU reference (csrc/cpu) or CUDA binding + heuristic (csrc/cuda/ops_cuda.cu, csrc/dispatch.h)
-> torch-free kernels (csrc/cuda/kernels).
"""
from ._ops import PACK_K_BLOCK, PACK_TILE_N, cuda_kernels_built
from .format import NMWeight, col_info, compress, decompress, prune, spmm
from .nn import NMLinear, sparsify_, sparsify_report

__all__ = ["NMWeight", "prune", "compress", "decompress", "col_info", "spmm", "cuda_kernels_built",
           "PACK_TILE_N", "PACK_K_BLOCK", "NMLinear", "sparsify_", "sparsify_report"]
__version__ = "0.1.0"
