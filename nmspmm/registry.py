"""The kernel registry (csrc/registry.h) from Python: ``kernels()`` lists every kernel by name,
``kernel_supports(name, ...)`` says whether it runs a problem, ``plan_candidates(...)`` what the policy
compares for one, ``kernel_info(name)`` what it needs, as a named tuple whose fields are the op
schema's (family, dtype, tile_m, tile_n, warps, min_L, max_M, max_m, min_compute_capability,
needs_sm90a, needs_col_info, reads_xt, max_split_k; max_M / max_m 0: any)."""
import collections
import functools

import torch

from . import _ops  # noqa: F401  (loads the op library)


def kernels() -> list:
    """Every kernel of the registry, by name, in registry order."""
    return list(torch.ops.nmspmm.kernels())


@functools.lru_cache(maxsize=None)
def _info_type():
    fields = [r.name for r in torch.ops.nmspmm.kernel_info.default._schema.returns]
    return collections.namedtuple("KernelInfo", fields)


def kernel_info(name: str):
    """What the registry knows of one kernel (a named tuple); RuntimeError for an unknown name."""
    return _info_type()(*torch.ops.nmspmm.kernel_info(name))


def kernel_supports(name: str, m: int, N: int, M: int, L: int, has_col_info: bool = False,
                    compute_capability: int = 90) -> bool:
    """Whether the kernel runs an m-row problem with pattern N:M:L on a device of this compute
    capability (major * 10 + minor)."""
    return torch.ops.nmspmm.kernel_supports(name, m, N, M, L, has_col_info, compute_capability)


def plan_candidates(m: int, n: int, k: int, N: int, M: int, L: int, dtype: torch.dtype,
                    compute_capability: int = 90, num_sms: int = 132, max_cluster: int = 16) -> list:
    """What the policy compares for a problem (csrc/policy.h): every kernel family's plan as
    ``(kernel, split_k, estimated_us)``, in the policy's tie order. ``spmm_heuristic`` returns the
    first plan of least estimated time."""
    names, splits, costs = torch.ops.nmspmm.spmm_plan_candidates(m, n, k, N, M, L, dtype, compute_capability,
                                                               num_sms, max_cluster)
    return list(zip(names, splits, costs))
