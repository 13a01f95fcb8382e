"""The compressed N:M weight and the functional API. The format is documented in docs/format.md."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ._ops import cuda_kernels_built, ops


def _check_device(t: torch.Tensor, what: str) -> None:
    if t.is_cuda and not cuda_kernels_built():
        raise RuntimeError(f"nmspmm: {what} is a CUDA tensor but this nmspmm build has no CUDA "
                           "kernels; reinstall with torch+CUDA and nvcc (NMSPMM_BUILD_CUDA=1)")


_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _trusted(cls, **fields):
    """Build an NMWeight from tensors that are already valid (derived from a validated weight
    by nmspmm itself), skipping the checks of ``__post_init__``."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(obj, f.name, fields.get(f.name, f.default))
    return obj


@dataclass(frozen=True)
class NMWeight:
    """A weight W[out_features, in_features] compressed under vector-wise N:M sparsity.

    values:  [in_features*N/M, out_features], the weight's dtype. Row u = g*N + s holds, for
             every output channel j, the s-th kept input of window g (inputs g*M .. g*M+M-1).
    indices: [in_features*N/M, out_features/L] uint8. The in-window position (0..M-1) of row u
             for the vector of L output channels j//L; ascending within each (window, vector).
    col_info, packed_indices: derived packing metadata for the high-sparsity kernels (see
             ``nmspmm.col_info``); never a second source of truth, rebuilt on demand.
    tc_meta: for N:M = 2:4, the positions in the sparse tensor cores' form (int32
             [ceil(in/32), round_up(out/L, 4)], ``torch.ops.nmspmm.sparse_tc_meta``), derived from
             indices; ``compress`` attaches it. Without it a 2:4 call builds it for the call.
    """

    values: torch.Tensor
    indices: torch.Tensor
    N: int
    M: int
    L: int
    shape: Tuple[int, int]
    col_info: Optional[torch.Tensor] = None
    packed_indices: Optional[torch.Tensor] = None
    tc_meta: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        # A weight built from user tensors is checked here, where it enters: types, shapes and
        # devices, then the index data (each index < M, strictly ascending within each (window,
        # vector); col_info/packed_indices equal to what nmspmm.col_info computes from indices).
        # The spmm hot path checks none of the data (see docs/format.md, "Validation").
        _validate(self)

    def _fields(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

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
        if with_metadata and self.tc_meta is not None:
            n += self.tc_meta.numel() * self.tc_meta.element_size()
        return n

    def with_col_info(self) -> "NMWeight":
        """Return a copy carrying the packing metadata for the high-sparsity kernels."""
        if self.col_info is not None:
            return self
        cols, packed = col_info(self)
        return _trusted(NMWeight, **{**self._fields(), "col_info": cols, "packed_indices": packed})

    def to(self, device=None, dtype=None) -> "NMWeight":
        """Move to a device and/or cast the values (indices stay uint8; metadata follows)."""
        def mv(t, cast=False):
            if t is None:
                return None
            return t.to(device=device, dtype=dtype if cast else None)
        return _trusted(NMWeight, **{**self._fields(), "values": mv(self.values, True),
                                     "indices": mv(self.indices), "col_info": mv(self.col_info),
                                     "packed_indices": mv(self.packed_indices), "tc_meta": mv(self.tc_meta)})


def _pattern_args(N: int, M: int, L: int) -> Tuple[int, int, int]:
    for name, v in (("N", N), ("M", M), ("L", L)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"nmspmm: {name} must be an int, got {type(v).__name__}")
    return N, M, L


def _is_pow2(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


def _check_pattern(N: int, M: int, L: int, who: str = "nmspmm") -> Tuple[int, int, int]:
    """Mirror of csrc/checks.h::check_pattern, raised before any work is done: TypeError for a
    non-int, ValueError (naming `who`) for a pattern out of range."""
    _pattern_args(N, M, L)
    if not (_is_pow2(M) and 2 <= M <= 64):
        raise ValueError(f"{who}: M must be a power of two in [2, 64], got M={M}")
    if not 1 <= N <= M:
        raise ValueError(f"{who}: N must satisfy 1 <= N <= M, got N={N}, M={M}")
    if not (_is_pow2(L) and L <= 128):
        raise ValueError(f"{who}: L must be a power of two in [1, 128], got L={L}")
    return N, M, L


def _validate(w: "NMWeight") -> None:
    """The checks of NMWeight construction (ValueError / TypeError naming the field)."""
    N, M, L = _check_pattern(w.N, w.M, w.L, "nmspmm.NMWeight")
    shape = w.shape
    if (not isinstance(shape, (tuple, list, torch.Size)) or len(shape) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise ValueError(f"nmspmm.NMWeight: shape must be (out_features, in_features) of non-negative "
                         f"ints, got {shape!r}")
    out, inp = shape
    if inp % M or out % L:
        raise ValueError(f"nmspmm.NMWeight: shape {tuple(shape)} does not fit {N}:{M} with L={L} "
                         f"(in_features % M and out_features % L must be 0)")
    for name in ("values", "indices"):
        if not isinstance(getattr(w, name), torch.Tensor):
            raise TypeError(f"nmspmm.NMWeight: {name} must be a torch.Tensor, got "
                            f"{type(getattr(w, name)).__name__}")
    if w.values.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"nmspmm.NMWeight: values must be float32, float16 or bfloat16, got {w.values.dtype}")
    if w.indices.dtype != torch.uint8:
        raise TypeError(f"nmspmm.NMWeight: indices must be uint8, got {w.indices.dtype} (indices are "
                        "in-window positions 0..M-1; they are not cast)")
    rows = inp // M * N
    for name, t, want in (("values", w.values, (rows, out)), ("indices", w.indices, (rows, out // L))):
        if tuple(t.shape) != want:
            raise ValueError(f"nmspmm.NMWeight: {name} must have shape {list(want)} for shape "
                             f"{tuple(shape)} and {N}:{M}, L={L}, got {list(t.shape)}")
    if w.indices.device != w.values.device:
        raise ValueError(f"nmspmm.NMWeight: indices is on {w.indices.device} but values is on "
                         f"{w.values.device}")
    if (w.col_info is None) != (w.packed_indices is None):
        raise ValueError("nmspmm.NMWeight: col_info and packed_indices must be given together")
    for name in ("col_info", "packed_indices"):
        t = getattr(w, name)
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            raise TypeError(f"nmspmm.NMWeight: {name} must be a uint8 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.device != w.values.device:
            raise ValueError(f"nmspmm.NMWeight: {name} is on {t.device} but values is on {w.values.device}")
    if w.tc_meta is not None:
        if (N, M) != (2, 4):
            raise ValueError(f"nmspmm.NMWeight: tc_meta is the metadata of 2:4 weights, but the pattern is {N}:{M}")
        if not isinstance(w.tc_meta, torch.Tensor) or w.tc_meta.dtype != torch.int32:
            raise TypeError(f"nmspmm.NMWeight: tc_meta must be an int32 tensor, got "
                            f"{getattr(w.tc_meta, 'dtype', type(w.tc_meta).__name__)}")
        if w.tc_meta.device != w.values.device:
            raise ValueError(f"nmspmm.NMWeight: tc_meta is on {w.tc_meta.device} but values is on {w.values.device}")
        want = ((inp + 31) // 32, (out // L + 3) // 4 * 4)
        if tuple(w.tc_meta.shape) != want or not w.tc_meta.is_contiguous():
            raise ValueError(f"nmspmm.NMWeight: tc_meta must be a contiguous [{want[0]}, {want[1]}] tensor for "
                             f"shape {tuple(shape)} and L={L}, got {list(w.tc_meta.shape)} with strides "
                             f"{tuple(w.tc_meta.stride())}")
    _check_device(w.values, "NMWeight.values")
    if w.indices.is_meta:
        return  # no data to check
    # The index data: col_info checks each index is < M and strictly ascending (on CUDA: one
    # device check and one synchronization), and its result is the reference for the metadata.
    cols, packed = ops.col_info(w.indices, N, M, L)
    if w.col_info is not None:
        if tuple(w.col_info.shape) != tuple(cols.shape) or not torch.equal(w.col_info, cols):
            raise ValueError("nmspmm.NMWeight: col_info does not match indices (rebuild it with "
                             "nmspmm.col_info or NMWeight.with_col_info)")
        if tuple(w.packed_indices.shape) != tuple(packed.shape) or not torch.equal(w.packed_indices, packed):
            raise ValueError("nmspmm.NMWeight: packed_indices does not match indices (rebuild it with "
                             "nmspmm.col_info or NMWeight.with_col_info)")
    if w.tc_meta is not None:
        meta = ops.sparse_tc_meta(w.indices, N, M, L, inp)
        if not torch.equal(w.tc_meta, meta):
            raise ValueError("nmspmm.NMWeight: tc_meta does not match indices (rebuild it with "
                             "torch.ops.nmspmm.sparse_tc_meta)")


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
    The packing kernels' metadata (col_info) is not built: the heuristic never picks those
    kernels; ``.with_col_info()`` adds it for ``spmm_with_plan``.
    """
    _pattern_args(N, M, L)
    _check_device(weight, "weight")
    weight = weight.detach()  # the compressed weight is frozen data, not part of a graph
    if mask is None:
        mask = ops.prune(weight, N, M, L)
    values, indices = ops.compress(weight, mask, N, M, L)
    meta = ops.sparse_tc_meta(indices, N, M, L, weight.shape[1]) if (N, M) == (2, 4) else None
    return _trusted(NMWeight, values=values, indices=indices, N=N, M=M, L=L,
                    shape=(weight.shape[0], weight.shape[1]), tc_meta=meta)


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

    ``packed`` may also be an unstructured :class:`nmspmm.CSRWeight` (``torch.ops.nmspmm.csr_spmm``).

    x may have any leading dims and strides and must share the packed values' dtype and device.
    On CUDA the call runs the plan of least estimated time among the kernels that support it
    (``spmm_heuristic`` names it; README.md, "Support matrix"): float16/bfloat16 run native
    tensor-core kernels with fp32 accumulation where the support matrix says so (2:4 on Hopper's
    sparse tensor cores, the gathered and decode kernels for L >= 16, the fused expansions for short
    vectors), and otherwise the weight expanded to dense for cuBLAS or an fp32 kernel on upcast
    inputs, returned in the input dtype.
    """
    _check_device(x, "x")
    from .csr import CSRWeight
    if isinstance(packed, CSRWeight):
        return ops.csr_spmm(x, packed.crow_indices, packed.col_indices, packed.values, packed.in_features, bias,
                            packed.max_row_nnz)
    return ops.spmm(x, packed.values, packed.indices, packed.N, packed.M, packed.L, bias,
                    packed.col_info, packed.packed_indices, packed.tc_meta)
