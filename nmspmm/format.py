"""The compressed N:M weight and the functional API. The format is documented in docs/format.md."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

import torch

from ._ops import cuda_kernels_built, ops


def _check_device(t: torch.Tensor, what: str) -> None:
    if t.is_cuda and not cuda_kernels_built():
        raise RuntimeError(f"nmspmm: {what} is a CUDA tensor but this nmspmm build has no CUDA "
                           "kernels; reinstall with torch+CUDA and nvcc (NMSPMM_BUILD_CUDA=1)")


@dataclass(frozen=True)
class NMWeight:
    """A weight W[out_features, in_features] compressed under vector-wise N:M sparsity.

    values:  [in_features*N/M, out_features], the weight's dtype. Row u = g*N + s holds, for
             every output channel j, the s-th kept input of window g (inputs g*M .. g*M+M-1).
    indices: [in_features*N/M, out_features/L] uint8. The in-window position (0..M-1) of row u
             for the vector of L output channels j//L; ascending within each (window, vector).
    col_info, packed_indices: derived packing metadata for the high-sparsity kernels (see
             ``nmspmm.col_info``); never a second source of truth, rebuilt on demand.
    """

    values: torch.Tensor
    indices: torch.Tensor
    N: int
    M: int
    L: int
    shape: Tuple[int, int]
    col_info: Optional[torch.Tensor] = None
    packed_indices: Optional[torch.Tensor] = None

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    @property
    def sparsity(self) -> float:
        return 1.0 - self.N / self.M

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def nbytes(self, with_metadata: bool = False) -> int:
        """Bytes of the compressed form (values + indices; + packing metadata if asked)."""
        n = self.values.numel() * self.values.element_size() + self.indices.numel()
        if with_metadata and self.col_info is not None:
            n += self.col_info.numel() + self.packed_indices.numel()
        return n

    def with_col_info(self) -> "NMWeight":
        """Return a copy carrying the packing metadata for the high-sparsity kernels."""
        if self.col_info is not None:
            return self
        cols, packed = col_info(self)
        return replace(self, col_info=cols, packed_indices=packed)

    def to(self, device=None, dtype=None) -> "NMWeight":
        """Move to a device and/or cast the values (indices stay uint8; metadata follows)."""
        def mv(t, cast=False):
            if t is None:
                return None
            return t.to(device=device, dtype=dtype if cast else None)
        return replace(self, values=mv(self.values, True), indices=mv(self.indices),
                       col_info=mv(self.col_info), packed_indices=mv(self.packed_indices))


def _pattern_args(N: int, M: int, L: int) -> Tuple[int, int, int]:
    for name, v in (("N", N), ("M", M), ("L", L)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"nmspmm: {name} must be an int, got {type(v).__name__}")
    return N, M, L


def prune(weight: torch.Tensor, N: int, M: int, L: int) -> torch.Tensor:
    """Magnitude pruning mask (bool, same shape as ``weight[out, in]``).

    Per window of M consecutive inputs and vector of L consecutive outputs, keeps the N input
    positions whose L2 norm over the vector's L rows is largest; ties keep the lower index.
    """
    _pattern_args(N, M, L)
    _check_device(weight, "weight")
    return ops.prune(weight.detach(), N, M, L)


def compress(weight: torch.Tensor, N: int, M: int, L: int,
             mask: Optional[torch.Tensor] = None) -> NMWeight:
    """Compress ``weight[out, in]`` (nn.Linear layout) to an :class:`NMWeight`.

    ``mask`` (bool, same shape) must be vector-wise N:M; if None, ``prune`` computes it.
    The packing metadata (col_info) is built too, so the result is ready for every kernel.
    """
    _pattern_args(N, M, L)
    _check_device(weight, "weight")
    weight = weight.detach()  # the compressed weight is frozen data, not part of a graph
    if mask is None:
        mask = ops.prune(weight, N, M, L)
    values, indices = ops.compress(weight, mask, N, M, L)
    packed = NMWeight(values, indices, N, M, L, (weight.shape[0], weight.shape[1]))
    return packed.with_col_info()


def decompress(packed: NMWeight) -> torch.Tensor:
    """Dense ``weight[out, in]`` with zeros at pruned positions (the values' dtype)."""
    return ops.decompress(packed.values, packed.indices, packed.N, packed.M, packed.L)


def col_info(packed: NMWeight) -> Tuple[torch.Tensor, torch.Tensor]:
    """Packing metadata: ``(col_info, packed_indices)``.

    col_info: uint8 [ceil(out/128), ceil(in/64), 64]. For each column tile of 128 outputs and
      k-block of 64 inputs, the ascending in-block input offsets that some kept weight of the
      tile uses, padded with 255.
    packed_indices: uint8 like ``indices``; each entry is the position of its input in that list.
    """
    _check_device(packed.indices, "indices")
    return ops.col_info(packed.indices, packed.N, packed.M, packed.L)


def spmm(x: torch.Tensor, packed: NMWeight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``y[..., out] = x[..., in] @ decompress(packed).T (+ bias)`` with fp32 accumulation.

    x may have any leading dims and strides and must share the packed values' dtype and device.
    On CUDA, float16/bfloat16 calls with at least 17 tokens (M in {8, 16, 32, 64}, L in
    {16, 32, 64, 128}, sm_80+) run native tensor-core kernels with fp32 accumulation; other
    float16/bfloat16 calls are computed in float32 and returned in the input dtype.
    """
    _check_device(x, "x")
    return ops.spmm(x, packed.values, packed.indices, packed.N, packed.M, packed.L, bias,
                    packed.col_info, packed.packed_indices)
