"""Unstructured sparse weights in CSR: the weight type, its construction from dense, torch sparse
or raw tensors, and :class:`CSRLinear`, a drop-in for ``nn.Linear``. The format is documented in
docs/format.md ("Unstructured CSR weights"); the product is ``torch.ops.nmspmm.csr_spmm``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import nn

from ._ops import ops
from .format import _check_device
from .pruning import unstructured_mask

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_INDEX_LIMIT = 2**31 - 1  # int32 indices


def _trusted(max_row_nnz: Optional[int] = None, **fields) -> "CSRWeight":
    """A CSRWeight from tensors nmspmm derived from a validated weight (no checks; the longest row
    is counted unless given)."""
    obj = object.__new__(CSRWeight)
    for f in dataclasses.fields(CSRWeight):
        object.__setattr__(obj, f.name, fields[f.name])
    object.__setattr__(obj, "max_row_nnz", _longest_row(obj.crow_indices) if max_row_nnz is None else max_row_nnz)
    return obj


def _longest_row(crow: torch.Tensor) -> int:
    """The most nonzeros of one row (-1 on the meta device). The product's kernel choice on CUDA
    takes it as a hint (torch.ops.nmspmm.csr_spmm's max_row_nnz): rows much longer than the mean
    run on the balanced kernel."""
    if crow.is_meta:
        return -1
    return int((crow[1:] - crow[:-1]).max()) if crow.shape[0] > 1 else 0


@dataclass(frozen=True)
class CSRWeight:
    """A weight W[out_features, in_features] with unstructured sparsity, in CSR with rows = outputs.

    crow_indices: int32 [out_features + 1]; row j holds entries crow_indices[j] .. crow_indices[j+1] - 1,
                  crow_indices[0] == 0 and crow_indices[-1] == nnz.
    col_indices:  int32 [nnz], the input of each entry, strictly ascending within a row.
    values:       [nnz], float32, float16 or bfloat16.

    The fields are those of ``torch.sparse_csr_tensor`` (``to_sparse_csr`` / ``from_sparse``
    convert). Built from raw tensors, the index data is checked here, where the weight enters
    (one synchronization on CUDA): unsorted or duplicate columns are refused; ``from_sparse``
    sorts and sums duplicates first. ``max_row_nnz`` (not a field) is the longest row's count,
    which the CUDA product takes as a hint for its kernel choice.
    """

    crow_indices: torch.Tensor
    col_indices: torch.Tensor
    values: torch.Tensor
    shape: Tuple[int, int]

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "max_row_nnz", _longest_row(self.crow_indices))

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    @property
    def nnz(self) -> int:
        return self.values.shape[0]

    @property
    def density(self) -> float:
        numel = self.shape[0] * self.shape[1]
        return self.nnz / numel if numel else 0.0

    @property
    def sparsity(self) -> float:
        return 1.0 - self.density

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def nbytes(self) -> int:
        """Bytes of the CSR form (values + column indices + row pointers)."""
        return sum(t.numel() * t.element_size() for t in (self.values, self.col_indices, self.crow_indices))

    def to(self, device=None, dtype=None) -> "CSRWeight":
        """Move to a device and/or cast the values (indices stay int32)."""
        return _trusted(crow_indices=self.crow_indices.to(device=device), col_indices=self.col_indices.to(device=device),
                        values=self.values.to(device=device, dtype=dtype), shape=self.shape,
                        max_row_nnz=self.max_row_nnz)

    def to_dense(self) -> torch.Tensor:
        """Dense ``weight[out, in]`` with zeros where no entry is stored (the values' dtype)."""
        return ops.csr_decompress(self.crow_indices, self.col_indices, self.values, self.in_features)

    def to_sparse_csr(self) -> torch.Tensor:
        """The weight as a ``torch.sparse_csr_tensor`` (shares the index and value tensors)."""
        return torch.sparse_csr_tensor(self.crow_indices, self.col_indices, self.values, size=self.shape,
                                       check_invariants=False)  # checked where the weight entered

    @classmethod
    def from_sparse(cls, t: torch.Tensor) -> "CSRWeight":
        """From a 2-D torch sparse tensor (CSR or COO, int32 or int64 indices): entries sorted by
        (row, column), duplicates summed (as ``coalesce`` does)."""
        if not isinstance(t, torch.Tensor) or t.layout not in (torch.sparse_csr, torch.sparse_coo) or t.dim() != 2:
            raise TypeError("nmspmm.CSRWeight.from_sparse: expected a 2-D torch.sparse_csr or sparse_coo tensor, got "
                            f"{getattr(t, 'layout', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        coo = (t.to_sparse_coo() if t.layout == torch.sparse_csr else t).coalesce()
        rows, cols = coo.indices()
        out, inp = (int(d) for d in t.shape)
        if coo.values().numel() > _INDEX_LIMIT or inp > _INDEX_LIMIT:
            raise ValueError(f"nmspmm.CSRWeight.from_sparse: at most 2^31 - 1 nonzeros and in_features, got "
                             f"{coo.values().numel()} and {inp}")
        crow = torch.zeros(out + 1, dtype=torch.int32, device=coo.device)
        crow[1:] = torch.bincount(rows, minlength=out).cumsum(0)
        return cls(crow, cols.to(torch.int32), coo.values(), (out, inp))

    @classmethod
    def from_dense(cls, weight: torch.Tensor, mask: Optional[torch.Tensor] = None,
                   sparsity: Optional[float] = None) -> "CSRWeight":
        """Compress ``weight[out, in]`` (nn.Linear layout) keeping the entries of ``mask`` (bool, same
        shape), or, without a mask, the largest-magnitude entries of each row at ``sparsity``
        (``nmspmm.pruning.unstructured_mask``)."""
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.dtype not in _FLOAT_DTYPES:
            raise TypeError("nmspmm.CSRWeight.from_dense: weight must be a 2-D float32, float16 or bfloat16 tensor, "
                            f"got {getattr(weight, 'dtype', type(weight).__name__)} {tuple(getattr(weight, 'shape', ()))}")
        weight = weight.detach()
        if mask is None:
            if sparsity is None:
                raise ValueError("nmspmm.CSRWeight.from_dense: give a mask or a sparsity")
            mask = unstructured_mask(weight.abs(), sparsity)
        elif sparsity is not None:
            raise ValueError("nmspmm.CSRWeight.from_dense: give a mask or a sparsity, not both")
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != weight.shape:
            raise ValueError(f"nmspmm.CSRWeight.from_dense: mask must be a bool tensor of the weight's shape "
                             f"{tuple(weight.shape)}, got {getattr(mask, 'dtype', type(mask).__name__)} "
                             f"{tuple(getattr(mask, 'shape', ()))}")
        mask = mask.to(weight.device)
        out, inp = weight.shape
        if inp > _INDEX_LIMIT:
            raise ValueError(f"nmspmm.CSRWeight.from_dense: in_features must be below 2^31, got {inp}")
        nz = mask.nonzero()  # row-major: by row, then ascending column
        if nz.shape[0] > _INDEX_LIMIT:
            raise ValueError(f"nmspmm.CSRWeight.from_dense: at most 2^31 - 1 nonzeros, got {nz.shape[0]}")
        crow = torch.zeros(out + 1, dtype=torch.int32, device=weight.device)
        crow[1:] = mask.sum(1).cumsum(0)
        return _trusted(crow_indices=crow, col_indices=nz[:, 1].to(torch.int32).contiguous(),
                        values=weight[mask].contiguous(), shape=(out, inp))


def _validate(w: CSRWeight) -> None:
    """The checks of CSRWeight construction (TypeError / ValueError naming the field)."""
    shape = w.shape
    if (not isinstance(shape, (tuple, list, torch.Size)) or len(shape) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise ValueError(f"nmspmm.CSRWeight: shape must be (out_features, in_features) of non-negative ints, "
                         f"got {shape!r}")
    out, inp = shape
    for name in ("crow_indices", "col_indices", "values"):
        if not isinstance(getattr(w, name), torch.Tensor):
            raise TypeError(f"nmspmm.CSRWeight: {name} must be a torch.Tensor, got {type(getattr(w, name)).__name__}")
    crow, col, vals = w.crow_indices, w.col_indices, w.values
    for name, t in (("crow_indices", crow), ("col_indices", col)):
        if t.dtype != torch.int32 or t.dim() != 1:
            raise TypeError(f"nmspmm.CSRWeight: {name} must be a 1-D int32 tensor, got {t.dtype} {tuple(t.shape)} "
                            "(torch.int64 indices: CSRWeight.from_sparse converts)")
    if vals.dtype not in _FLOAT_DTYPES or vals.dim() != 1:
        raise TypeError(f"nmspmm.CSRWeight: values must be a 1-D float32, float16 or bfloat16 tensor, got "
                        f"{vals.dtype} {tuple(vals.shape)}")
    if crow.shape[0] != out + 1:
        raise ValueError(f"nmspmm.CSRWeight: crow_indices must have out_features + 1 = {out + 1} entries, got "
                         f"{crow.shape[0]}")
    if col.shape[0] != vals.shape[0]:
        raise ValueError(f"nmspmm.CSRWeight: col_indices has {col.shape[0]} entries but values has {vals.shape[0]}")
    if inp > _INDEX_LIMIT:
        raise ValueError(f"nmspmm.CSRWeight: in_features must be below 2^31 (int32 indices), got {inp}")
    if crow.device != vals.device or col.device != vals.device:
        raise ValueError(f"nmspmm.CSRWeight: crow_indices ({crow.device}), col_indices ({col.device}) and values "
                         f"({vals.device}) must be on one device")
    _check_device(vals, "CSRWeight.values")
    if vals.is_meta:
        return
    nnz = vals.shape[0]
    c64 = crow.long()
    steps = c64[1:] - c64[:-1]
    # Every check in one transfer: first entry, last entry, monotone rows, column range, order.
    first_ok = c64[0] == 0
    last_ok = c64[-1] == nnz
    monotone = (steps >= 0).all()
    in_range = ((col >= 0) & (col < inp)).all() if nnz else torch.ones((), dtype=torch.bool, device=col.device)
    if nnz > 1 and bool(first_ok & last_ok & monotone):
        starts = torch.zeros(nnz + 1, dtype=torch.bool, device=col.device)
        starts[c64[:-1].clamp(0, nnz)] = True
        ascending = (starts[1:nnz] | (col[1:] > col[:-1])).all()
    else:
        ascending = torch.ones((), dtype=torch.bool, device=col.device)
    ok = torch.stack([first_ok, last_ok, monotone, in_range, ascending]).tolist()
    if not ok[0]:
        raise ValueError(f"nmspmm.CSRWeight: crow_indices[0] must be 0, got {int(crow[0])}")
    if not ok[1]:
        raise ValueError(f"nmspmm.CSRWeight: crow_indices[-1] must equal nnz = {nnz}, got {int(crow[-1])}")
    if not ok[2]:
        raise ValueError("nmspmm.CSRWeight: crow_indices must be non-decreasing")
    if not ok[3]:
        raise ValueError(f"nmspmm.CSRWeight: col_indices must be in [0, in_features = {inp})")
    if not ok[4]:
        raise ValueError("nmspmm.CSRWeight: col_indices must be strictly ascending within each row (no "
                         "duplicates; CSRWeight.from_sparse sorts and sums them)")


def csr_spmm(x: torch.Tensor, weight: CSRWeight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``y[..., out] = x[..., in] @ weight.to_dense().T (+ bias)`` with fp32 accumulation."""
    _check_device(x, "x")
    return ops.csr_spmm(x, weight.crow_indices, weight.col_indices, weight.values, weight.in_features, bias,
                        weight.max_row_nnz)


_CSR_BUFFERS = ("crow_indices", "col_indices", "values")


class CSRLinear(nn.Module):
    """``nn.Linear`` with an unstructured sparse weight in CSR (frozen; the bias trains).

    The state_dict holds the CSR fields (``crow_indices``, ``col_indices``, ``values``) and
    ``bias``; loading accepts any number of nonzeros and checks the index data as
    :class:`CSRWeight` does. A new layer holds an all-zero weight until it is loaded.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"nmspmm.CSRLinear: {name} must be a non-negative int, got {v!r}")
        dtype = dtype or torch.get_default_dtype()
        if dtype not in _FLOAT_DTYPES:
            raise TypeError(f"nmspmm.CSRLinear: dtype must be float32, float16 or bfloat16, got {dtype}")
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("crow_indices", torch.zeros(out_features + 1, dtype=torch.int32, device=device))
        self.register_buffer("col_indices", torch.zeros(0, dtype=torch.int32, device=device))
        self.register_buffer("values", torch.zeros(0, dtype=dtype, device=device))
        self.max_row_nnz = 0  # the longest row's nonzeros: the CUDA product's kernel-choice hint
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)  # as nn.Linear: a registered, absent bias

    @classmethod
    def from_weight(cls, weight: CSRWeight, bias: Optional[torch.Tensor] = None) -> "CSRLinear":
        layer = cls(weight.in_features, weight.out_features, bias=bias is not None, device=weight.device,
                    dtype=weight.dtype)
        layer.crow_indices, layer.col_indices, layer.values = weight.crow_indices, weight.col_indices, weight.values
        layer.max_row_nnz = weight.max_row_nnz
        if bias is not None:
            layer.bias = nn.Parameter(bias.detach().to(device=weight.device, dtype=weight.dtype).clone())
        return layer

    @classmethod
    def from_dense(cls, linear: nn.Linear, sparsity: Optional[float] = None,
                   mask: Optional[torch.Tensor] = None) -> "CSRLinear":
        """The layer of ``linear`` with its weight at ``sparsity`` by magnitude per row, or under ``mask``."""
        weight = CSRWeight.from_dense(linear.weight, mask=mask, sparsity=sparsity)
        return cls.from_weight(weight, linear.bias)

    @property
    def weight_csr(self) -> CSRWeight:
        return _trusted(crow_indices=self.crow_indices, col_indices=self.col_indices, values=self.values,
                        shape=(self.out_features, self.in_features), max_row_nnz=self.max_row_nnz)

    def to_dense(self) -> torch.Tensor:
        return self.weight_csr.to_dense()

    @property
    def weight_nbytes(self) -> int:
        return self.weight_csr.nbytes()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.csr_spmm(x, self.crow_indices, self.col_indices, self.values, self.in_features, self.bias,
                            self.max_row_nnz)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # The number of nonzeros is the checkpoint's: check the incoming CSR as a CSRWeight, then
        # give the buffers its sizes so that the default loader copies into them.
        keys = [prefix + n for n in _CSR_BUFFERS]
        if all(k in state_dict for k in keys):
            crow, col, vals = (state_dict[k] for k in keys)
            try:
                incoming = CSRWeight(crow, col, vals.to(self.values.dtype) if isinstance(vals, torch.Tensor) else vals,
                                     (self.out_features, self.in_features))
            except (TypeError, ValueError) as e:
                error_msgs.append(f"{prefix or 'CSRLinear'}: {e}")
                return
            self.max_row_nnz = incoming.max_row_nnz
            for name, t in zip(_CSR_BUFFERS, (crow, col, vals)):
                ours = self._buffers[name]
                self._buffers[name] = torch.empty(t.shape, dtype=ours.dtype, device=ours.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"nnz={self.values.shape[0]}, density={self.weight_csr.density:.4f}")
