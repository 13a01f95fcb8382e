"""nmspmm: vector-wise N:M sparse matrix multiplication for PyTorch.

Data path: nmspmm.spmm / NMLinear (Python) -> torch.ops.nmspmm.spmm (csrc/nmspmm_ops.cpp)
-> CPU reference (csrc/cpu/ops_cpu.cpp) or the CUDA binding (csrc/cuda/spmm_ops.cpp), which asks
the heuristic (csrc/policy.h) for a plan -> torch-free kernels and their launcher (csrc/cuda/kernels).
"""
import torch as _torch

try:
    from ._build_info import BUILD_INFO as _BUILD_INFO
except ImportError:  # imported from a source tree that was never built
    _BUILD_INFO = None

try:
    from ._ops import PACK_K_BLOCK, PACK_TILE_N, cuda_kernels_built
except (ImportError, OSError) as _e:
    _built = _BUILD_INFO["torch"] if _BUILD_INFO else "an unknown torch"
    raise ImportError(f"nmspmm: the compiled op library does not load ({_e}). It was built against "
                      f"torch {_built} and torch {_torch.__version__} is running; nmspmm must be "
                      "rebuilt for the torch it runs with: `python3 install.py` in the repository "
                      "(or `python -m pip install --no-build-isolation -e .`).") from _e

from .format import NMWeight, col_info, compress, decompress, prune, spmm  # noqa: E402
from .nn import NMLinear, sparsify_, sparsify_report  # noqa: E402
from .csr import CSRLinear, CSRWeight, csr_spmm  # noqa: E402  (unstructured sparsity in CSR)
from .parallel import parallelize_  # noqa: E402  (tensor parallelism, docs/llama.md)
from .registry import kernel_info, kernel_supports, kernels, plan_candidates  # noqa: E402
from . import permute, pruning, recovery  # noqa: E402  (calibrated pruning, permutations, recovery)
from . import hf  # noqa: E402  (registers the Hugging Face quantizer where transformers is installed)


def build_info() -> dict:
    """How this copy of nmspmm was built: ``version``, ``torch`` (the torch it was compiled
    against), ``torch_cuda``, ``cuda`` (CUDA kernels compiled), ``cuda_archs`` (the
    TORCH_CUDA_ARCH_LIST it was compiled for, e.g. ``['8.0', '9.0a']``), ``nvcc``, ``cuda_home``,
    ``reason`` (why CUDA was or was not built), plus ``torch_running`` and ``cuda_kernels_built``
    (the op library's own answer, read now)."""
    info = dict(_BUILD_INFO) if _BUILD_INFO else {
        "version": None, "torch": None, "torch_cuda": None, "cuda": None, "cuda_archs": [],
        "nvcc": None, "cuda_home": None, "reason": "no build record (nmspmm/_build_info.py missing)"}
    info["torch_running"] = _torch.__version__
    info["cuda_kernels_built"] = cuda_kernels_built()
    return info


__all__ = ["NMWeight", "prune", "compress", "decompress", "col_info", "spmm", "cuda_kernels_built",
           "build_info", "PACK_TILE_N", "PACK_K_BLOCK", "NMLinear", "sparsify_", "sparsify_report",
           "parallelize_", "CSRWeight", "CSRLinear", "csr_spmm",
           "pruning", "recovery", "permute", "kernels", "kernel_info", "kernel_supports",
           "plan_candidates"]
__version__ = _BUILD_INFO["version"] if _BUILD_INFO else "0.1.0"
