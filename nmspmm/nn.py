"""Module-level API: :class:`NMLinear`, a drop-in replacement for ``nn.Linear`` holding an N:M
compressed weight, and :func:`sparsify_`, which swaps the projections of a model in place.

State of an :class:`NMLinear`:

* ``values``  [in*N/M, out] (the layer's dtype) and ``indices`` [in*N/M, out/L] (uint8):
  persistent buffers, the only weight state in ``state_dict()`` (no dense copy).
* ``bias`` [out]: an ordinary ``nn.Parameter`` (or None), as in ``nn.Linear``.
* ``col_info`` and ``packed_indices``: the packing kernels' metadata, None by default (the
  heuristic never picks those kernels; docs/kernels.md). ``enable_col_info()`` derives them from
  ``indices`` (``torch.ops.nmspmm.col_info``) as non-persistent buffers; from then on they are
  rebuilt whenever a state dict is loaded and follow the module on ``.to()``/``.cuda()``; they are
  never saved and never a second source of truth.
* ``tc_meta``: for N:M = 2:4, the sparse tensor-core kernels' metadata (``torch.ops.nmspmm.
  sparse_tc_meta``, 2 bits per kept value at L = 1), a non-persistent buffer derived from
  ``indices`` wherever the packing metadata is rebuilt (construction, load, ``rebuild_metadata``);
  None for other patterns.
* The compact 2:4 form: a 2:4 layer in float16 / bfloat16 (without ``enable_col_info``), on the CPU
  or a GPU of compute capability 9.0 (whose 2:4 kernels read ``tc_meta`` alone), holds its
  kept positions in ``tc_meta`` alone, and ``indices`` is an empty [0, out/L] buffer, so it keeps
  values + 2 bits per kept value (L = 1) instead of values + a byte per kept value + ``tc_meta``.
  ``canonical_indices()`` rebuilds the [in/2, out/L] indices (``torch.ops.nmspmm.sparse_tc_indices``);
  ``state_dict()``, ``packed`` and ``to_dense()`` use them, so checkpoints keep the canonical
  format; a cast to float32 or ``enable_col_info()`` restores them in the buffer.

The sparse weight is frozen (buffers take no gradient); gradients flow to the input and bias.
"""
from __future__ import annotations

import itertools
import json
import logging
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from ._ops import ops
from . import pruning
from .csr import CSRLinear
from .format import NMWeight, _check_device, _check_pattern, _trusted
from .pruning import DEFAULT_TARGETS

# The spmm overload itself: calling it skips the packet's per-call overload lookup.
_spmm = ops.spmm.default

__all__ = ["NMLinear", "sparsify_", "sparsify_report", "SparsifyReport", "LayerReport",
           "DEFAULT_TARGETS", "sparse_metadata"]

logger = logging.getLogger("nmspmm")

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Key under which NMLinear records its pattern in the state dict's per-module metadata
# (``state_dict()._metadata[prefix]``, which torch.save keeps); checked on load.
_PATTERN_KEY = "nmspmm_pattern"
# The layer's ``_extra_state`` entry: an int64 tensor [format version, N, M, L, in, out], so a
# checkpoint describes itself in every container (torch.save, safetensors).
FORMAT_VERSION = 1
_EXTRA_FIELDS = ("format_version", "N", "M", "L", "in_features", "out_features")


def _shape_problem(in_features: int, out_features: int, M: int, L: int) -> Optional[str]:
    problems = []
    if in_features % M:
        problems.append(f"in_features={in_features} % M={M} != 0")
    if out_features % L:
        problems.append(f"out_features={out_features} % L={L} != 0")
    return ", ".join(problems) or None


def _check_features(name: str, v) -> None:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"nmspmm.NMLinear: {name} must be an int, got {type(v).__name__}")
    if v < 0:
        raise ValueError(f"nmspmm.NMLinear: {name} must be >= 0, got {v}")


def _compact_device(device: torch.device) -> bool:
    """Where an NMLinear holds the compact 2:4 form: the CPU (its reference rebuilds the indices per
    call) and GPUs of compute capability 9.0, whose 2:4 plans read tc_meta alone. Other GPUs plan
    kernels that read the indices (the dense expansion, the split-K decode), which would rebuild
    them on every call."""
    if device.type == "cpu":
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0)


def _record_pattern(module: "NMLinear", state_dict, prefix, local_metadata) -> None:
    local_metadata[_PATTERN_KEY] = f"{module.N}:{module.M}:{module.L}"


class NMLinear(nn.Module):
    """``y = x @ W.T + b`` with ``W[out, in]`` stored under vector-wise N:M sparsity.

    ``NMLinear(in_features, out_features, N, M, L)`` builds an *empty* layer (zero values, valid
    indices) with the buffer shapes of the pattern, ready for ``load_state_dict``; use
    :meth:`from_dense` to prune and compress an ``nn.Linear``.

    ``forward`` accepts ``x[..., in_features]`` in float32, float16 or bfloat16. If ``x`` has a
    different floating dtype than the layer (``values``), it is cast to the layer's dtype and the
    result is cast back to ``x``'s dtype; integer, bool and complex inputs are refused, as by
    ``nn.Linear``. On CUDA, half-precision calls run native fp16/bf16 kernels where the README's
    support matrix says so (decode, tensor-core prefill, dense expansion) and are upcast to float32
    inside the op elsewhere.

    The state dict holds ``values``, ``indices``, ``bias`` and ``_extra_state`` (the pattern and
    format version); ``load_state_dict`` checks all of it before it changes anything.
    """

    def __init__(self, in_features: int, out_features: int, N: int, M: int, L: int,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_features("in_features", in_features)
        _check_features("out_features", out_features)
        _check_pattern(N, M, L)
        problem = _shape_problem(in_features, out_features, M, L)
        if problem:
            raise ValueError(f"nmspmm.NMLinear: shape [{out_features}, {in_features}] does not fit "
                             f"{N}:{M} with L={L}: {problem}")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype not in _SUPPORTED_DTYPES:
            raise TypeError(f"nmspmm.NMLinear: dtype must be float32, float16 or bfloat16, got {dtype}")
        self.in_features = in_features
        self.out_features = out_features
        self.N, self.M, self.L = N, M, L
        rows = in_features // M * N
        # An all-zero weight with valid indices: window g keeps positions 0..N-1.
        self.register_buffer("values", torch.zeros(rows, out_features, device=device, dtype=dtype))
        positions = torch.arange(N, device=device, dtype=torch.uint8).repeat(in_features // M)
        self.register_buffer("indices", positions[:, None].expand(rows, out_features // L).contiguous())
        self.register_buffer("col_info", None, persistent=False)
        self.register_buffer("packed_indices", None, persistent=False)
        self.register_buffer("tc_meta", None, persistent=False)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.register_state_dict_post_hook(_record_pattern)
        self.rebuild_metadata()

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_packed(cls, packed: NMWeight, bias: Optional[torch.Tensor] = None) -> "NMLinear":
        """Wrap an :class:`NMWeight` (and optional bias[out], cast to the values' dtype) without
        copying its values and indices; the packing metadata is rebuilt from the indices."""
        if not isinstance(packed, NMWeight):
            raise TypeError(f"nmspmm.NMLinear.from_packed: packed must be an NMWeight, got "
                            f"{type(packed).__name__}")
        out_features, in_features = packed.shape
        layer = cls(in_features, out_features, packed.N, packed.M, packed.L, bias=bias is not None,
                    device="meta", dtype=packed.values.dtype)
        if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (out_features,)
                                 or not bias.is_floating_point()):
            raise ValueError(f"nmspmm.NMLinear.from_packed: bias must be a floating tensor of shape "
                             f"[{out_features}], got {getattr(bias, 'dtype', type(bias).__name__)} "
                             f"{list(getattr(bias, 'shape', []))}")
        if tuple(packed.values.shape) != tuple(layer.values.shape) or \
                tuple(packed.indices.shape) != tuple(layer.indices.shape):
            raise ValueError(f"nmspmm.NMLinear.from_packed: values {tuple(packed.values.shape)} / "
                             f"indices {tuple(packed.indices.shape)} do not match shape {packed.shape} "
                             f"and {packed.N}:{packed.M}, L={packed.L}")
        if packed.indices.dtype != torch.uint8:
            raise TypeError(f"nmspmm.NMLinear.from_packed: indices must be uint8, got {packed.indices.dtype}")
        layer.values = packed.values.detach()
        layer.indices = packed.indices.detach()
        if bias is not None:
            b = bias.detach().to(device=packed.values.device, dtype=packed.values.dtype).clone()
            layer.bias = nn.Parameter(b, requires_grad=bias.requires_grad)
        layer.rebuild_metadata()  # from the indices, whatever metadata ``packed`` carries
        return layer

    @classmethod
    def from_dense(cls, linear: nn.Linear, N: int, M: int, L: int,
                   mask: Optional[torch.Tensor] = None) -> "NMLinear":
        """Prune ``linear.weight`` (magnitude, ``nmspmm.prune``) or apply ``mask`` (bool [out, in],
        vector-wise N:M), and compress it. The bias is copied; dtype and device are kept."""
        _check_pattern(N, M, L)
        weight = linear.weight.detach()
        problem = _shape_problem(weight.shape[1], weight.shape[0], M, L)
        if problem:
            raise ValueError(f"nmspmm.NMLinear.from_dense: weight {tuple(weight.shape)} does not fit "
                             f"{N}:{M} with L={L}: {problem}")
        if mask is None:
            mask = ops.prune(weight, N, M, L)
        values, indices = ops.compress(weight, mask.to(device=weight.device, dtype=torch.bool), N, M, L)
        packed = _trusted(NMWeight, values=values, indices=indices, N=N, M=M, L=L,
                          shape=(weight.shape[0], weight.shape[1]))
        return cls.from_packed(packed, linear.bias)

    # ---------------------------------------------------------------------------------- metadata
    @torch.no_grad()
    def enable_col_info(self) -> "NMLinear":
        """Build and keep the packing kernels' metadata (``col_info``/``packed_indices``), for
        ``spmm_with_plan`` with a packing kernel; ``nmspmm.spmm`` does not need it."""
        self._with_col_info = True
        self.rebuild_metadata()
        return self

    @torch.no_grad()
    def rebuild_metadata(self) -> None:
        """Recompute ``col_info``/``packed_indices`` from ``indices`` where the layer keeps them
        (``enable_col_info``; done automatically on ``load_state_dict``; call it after editing
        ``indices`` in place). Checks the indices either way (the metadata is built and, unless
        kept, dropped)."""
        _check_device(self.indices, "NMLinear.indices")
        indices = self.canonical_indices()
        metadata = ops.col_info(indices, self.N, self.M, self.L)  # checks every index < M, ascending
        if getattr(self, "_with_col_info", False):
            self.indices = indices  # the packing kernels read the canonical indices
            self.col_info, self.packed_indices = metadata
        self._rebuild_tc_meta()

    def _rebuild_tc_meta(self) -> None:
        # In the compact form tc_meta is the positions' only copy: nothing to rebuild it from.
        if (self.N, self.M) == (2, 4) and not self.indices_compact:
            self.tc_meta = ops.sparse_tc_meta(self.indices, 2, 4, self.L, self.in_features)
        self._sync_compact()

    @property
    def indices_compact(self) -> bool:
        """True when the layer holds the compact 2:4 form (``indices`` [0, out/L], positions in
        ``tc_meta``)."""
        return self.indices.shape[0] == 0 and self.values.shape[0] > 0

    def _compact_eligible(self) -> bool:
        return ((self.N, self.M) == (2, 4) and self.values.dtype in (torch.float16, torch.bfloat16)
                and self.tc_meta is not None and self.values.shape[0] > 0
                and not getattr(self, "_with_col_info", False) and _compact_device(self.values.device))

    def _sync_compact(self) -> None:
        """Hold the compact 2:4 form exactly where it applies (dtype, pattern, no col_info)."""
        compact, eligible = self.indices_compact, self._compact_eligible()
        if eligible and not compact:
            self.indices = self.indices.new_empty((0, self.out_features // self.L))
        elif compact and not eligible:
            self.indices = self.canonical_indices()

    def canonical_indices(self) -> torch.Tensor:
        """The layer's indices [in*N/M, out/L] (uint8) in the canonical format, rebuilt from
        ``tc_meta`` in the compact 2:4 form (a new tensor then; the buffer itself otherwise)."""
        if not self.indices_compact:
            return self.indices
        return ops.sparse_tc_indices(self.tc_meta, self.L, self.in_features, self.out_features)

    def get_extra_state(self) -> torch.Tensor:
        """[format version, N, M, L, in_features, out_features] (int64): what a checkpoint must
        match to load into this layer."""
        return torch.tensor([FORMAT_VERSION, self.N, self.M, self.L, self.in_features,
                             self.out_features], dtype=torch.int64)

    def set_extra_state(self, state) -> None:
        # load_state_dict checks it with everything else before anything is loaded
        # (_load_from_state_dict); loaders that set it directly (transformers) are checked here.
        problem = self._check_extra_state(state, "_extra_state")
        if problem:
            raise ValueError(problem)

    def _check_extra_state(self, state, key: str) -> Optional[str]:
        if not isinstance(state, torch.Tensor) or state.dtype != torch.int64 or tuple(state.shape) != (6,):
            return (f"nmspmm: {key} must be an int64 tensor [format_version, N, M, L, in_features, "
                    f"out_features], got {getattr(state, 'dtype', type(state).__name__)} "
                    f"{list(getattr(state, 'shape', []))}")
        if state.is_meta:
            return None
        saved = dict(zip(_EXTRA_FIELDS, state.tolist()))
        if saved["format_version"] != FORMAT_VERSION:
            return (f"nmspmm: {key}: format_version {saved['format_version']} is not supported "
                    f"(this nmspmm reads format_version {FORMAT_VERSION})")
        mine = dict(zip(_EXTRA_FIELDS, self.get_extra_state().tolist()))
        for name in _EXTRA_FIELDS[1:]:
            if saved[name] != mine[name]:
                return (f"nmspmm: {key}: the checkpoint has {name}={saved[name]} but this layer has "
                        f"{name}={mine[name]} (N:M:L {saved['N']}:{saved['M']}:{saved['L']}, "
                        f"[{saved['out_features']}, {saved['in_features']}] saved; "
                        f"{self.N}:{self.M}:{self.L}, [{self.out_features}, {self.in_features}] here)")
        return None

    def _check_incoming(self, state_dict, prefix, local_metadata):
        """Everything a load must satisfy, checked before anything changes. Returns (errors, the
        packing metadata of the incoming indices or None)."""
        mine = f"{self.N}:{self.M}:{self.L}"
        saved = local_metadata.get(_PATTERN_KEY)
        if saved is not None and saved != mine:
            return [f"nmspmm: {prefix or 'NMLinear'} was saved with N:M:L={saved} but this layer is "
                    f"{mine}"], None
        assign = local_metadata.get("assign_to_params_buffers", False)
        own = {"values": self.values, "indices": self.indices}
        if self.indices_compact:  # checkpoints hold the canonical indices: their shape and device
            own["indices"] = self.indices.new_empty(()).expand(self.values.shape[0], self.out_features // self.L)
        if self.bias is not None:
            own["bias"] = self.bias
        extra_key = prefix + "_extra_state"
        if extra_key in state_dict:
            problem = self._check_extra_state(state_dict[extra_key], extra_key)
            if problem:
                return [problem], None
        # A key that is missing is left as it is and reported by load_state_dict (nn.Module
        # passes strict=True here whatever the caller's strict; see load_state_dict below).
        incoming = {name: state_dict[prefix + name] for name in own if prefix + name in state_dict}
        errors = []
        for name, t in incoming.items():
            key = prefix + name
            if not isinstance(t, torch.Tensor):
                errors.append(f"nmspmm: {key} must be a tensor, got {type(t).__name__}")
                continue
            if tuple(t.shape) != tuple(own[name].shape):
                errors.append(f"nmspmm: {key} must have shape {list(own[name].shape)} for "
                              f"[{self.out_features}, {self.in_features}] {mine}, got {list(t.shape)}")
            if name == "indices" and t.dtype != torch.uint8:
                errors.append(f"nmspmm: {key} must be uint8, got {t.dtype} (indices are not cast)")
            if name != "indices" and not t.is_floating_point():
                errors.append(f"nmspmm: {key} must be a floating tensor, got {t.dtype} (not cast)")
        if errors:
            return errors, None
        # The devices after the load (assign moves the incoming tensors in as they are).
        final = {name: (incoming[name].device if assign and name in incoming else t.device)
                 for name, t in own.items()}
        if len(set(final.values())) > 1:
            return [f"nmspmm: {prefix or 'NMLinear'}: the load would leave values, indices and bias on "
                    f"different devices ({', '.join(f'{k} on {v}' for k, v in final.items())})"], None
        if "indices" not in incoming:
            return [], None
        idx = incoming["indices"].detach().to(final["indices"])
        try:
            # Checks every index < M and strictly ascending; its result is the new metadata.
            return [], ops.col_info(idx, self.N, self.M, self.L)
        except RuntimeError as e:
            return [f"nmspmm: {prefix}indices: {e}"], None

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``, with the layer's checks (``_load_from_state_dict``); a
        strict load into this layer that misses a key is refused before anything is copied."""
        if strict:
            keys = ["values", "indices"] + (["bias"] if self.bias is not None else [])
            meta = getattr(state_dict, "_metadata", {}) or {}
            if _PATTERN_KEY not in meta.get("", {}):  # a torch.save from before _extra_state
                keys.append("_extra_state")
            missing = [k for k in keys if k not in state_dict]
            if missing:
                raise RuntimeError(f"Error(s) in loading state_dict for NMLinear:\n\tMissing key(s) in "
                                   f"state_dict: {', '.join(repr(k) for k in missing)} (nothing was loaded)")
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # Atomic: every check runs before anything is copied, so a refused load leaves the layer
        # (values, indices, bias and the packing metadata) exactly as it was.
        errors, metadata = self._check_incoming(state_dict, prefix, local_metadata)
        if errors:
            error_msgs.extend(errors)
            return
        n_errors, n_missing = len(error_msgs), len(missing_keys)
        compact = self.indices_compact
        if compact:  # load the canonical indices into a buffer of their shape (compacted again below)
            held = self.indices
            self.indices = self.canonical_indices()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        if compact and len(error_msgs) != n_errors:
            self.indices = held
        # A checkpoint from before _extra_state that records its pattern in the metadata (checked
        # above) is complete.
        extra_key = prefix + "_extra_state"
        if local_metadata.get(_PATTERN_KEY) is not None and extra_key in missing_keys[n_missing:]:
            missing_keys.remove(extra_key)
        if len(error_msgs) == n_errors and metadata is not None:
            if getattr(self, "_with_col_info", False):
                self.col_info, self.packed_indices = metadata
            self._rebuild_tc_meta()
        elif len(error_msgs) == n_errors:
            self.rebuild_metadata()

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.indices_compact:  # checkpoints hold the canonical format (exact: rebuilt from tc_meta)
            destination[prefix + "indices"] = self.canonical_indices()

    def _apply(self, fn, recurse=True):
        # nn.Module.to()/.half() only convert floating tensors, but .type() and custom fns convert
        # everything: keep the uint8 index buffers uint8 (their values, < 256, survive any cast) and
        # the int32 tc_meta int32 (a float cast would lose bits of its words: it follows fn's device
        # unconverted instead).
        def keep_integer(t):
            r = fn(t)
            if t.dtype == torch.uint8 and isinstance(r, torch.Tensor) and r.dtype != torch.uint8:
                r = r.to(torch.uint8)
            elif t.dtype == torch.int32 and isinstance(r, torch.Tensor) and r.dtype != torch.int32:
                r = t.to(r.device)
            return r
        module = super()._apply(keep_integer, recurse)
        self._sync_compact()  # a cast to float32 (or to the meta device) restores the canonical indices
        return module

    # ----------------------------------------------------------------------------------- compute
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # At decode the host time of this method is what a step waits on, so it reads the buffer
        # and parameter dicts directly (nn.Module.__getattr__ costs ~1 us per name), calls the op
        # overload (not the packet, which resolves it per call) and skips same-dtype .to() calls.
        buffers = self._buffers
        values = buffers["values"]
        args = (buffers["indices"], self.N, self.M, self.L, self._parameters["bias"],
                buffers["col_info"], buffers["packed_indices"], buffers["tc_meta"])
        if x.dtype == values.dtype:
            return _spmm(x, values, *args)
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"nmspmm.NMLinear: x must be a floating tensor (float32, float16 or "
                            f"bfloat16), got {getattr(x, 'dtype', type(x).__name__)}; integer, bool "
                            f"and complex inputs are not cast")
        return _spmm(x.to(values.dtype), values, *args).to(x.dtype)

    @property
    def packed(self) -> NMWeight:
        """The layer's weight as an :class:`NMWeight` (shares storage with the buffers)."""
        return _trusted(NMWeight, values=self.values, indices=self.canonical_indices(), N=self.N, M=self.M,
                        L=self.L, shape=(self.out_features, self.in_features), col_info=self.col_info,
                        packed_indices=self.packed_indices, tc_meta=self.tc_meta)

    @torch.no_grad()
    def to_dense(self) -> torch.Tensor:
        """The pruned dense weight [out, in] (zeros where pruned), in the layer's dtype."""
        return ops.decompress(self.values, self.canonical_indices(), self.N, self.M, self.L)

    @property
    def weight_nbytes(self) -> int:
        """Bytes of the persistent state (the state dict): values + canonical indices (+ bias)."""
        n = self.values.numel() * self.values.element_size() + self.values.shape[0] * (self.out_features // self.L)
        if self.bias is not None:
            n += self.bias.numel() * self.bias.element_size()
        return n

    @property
    def resident_nbytes(self) -> int:
        """Bytes the layer keeps on its device: values, the indices it holds (none in the compact
        2:4 form), bias and the derived metadata."""
        n = self.values.numel() * self.values.element_size() + self.indices.numel() + self.metadata_nbytes
        if self.bias is not None:
            n += self.bias.numel() * self.bias.element_size()
        return n

    @property
    def metadata_nbytes(self) -> int:
        """Bytes of the derived metadata (col_info + packed_indices, tc_meta; 0 without them)."""
        n = 0 if self.tc_meta is None else self.tc_meta.numel() * self.tc_meta.element_size()
        if self.col_info is None:
            return n
        return n + self.col_info.numel() + self.packed_indices.numel()

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"N={self.N}, M={self.M}, L={self.L}, bias={self.bias is not None}, "
                f"dtype={self.values.dtype}")


# --------------------------------------------------------------------------------- sparsify_
@dataclass
class LayerReport:
    fqn: str
    in_features: int
    out_features: int
    dense_bytes: int     # weight + bias of the nn.Linear
    sparse_bytes: int    # values + indices + bias of the NMLinear (its state_dict)
    metadata_bytes: int  # col_info + packed_indices, tc_meta (derived, not saved)
    resident_bytes: int = 0  # what the layer holds: the compact 2:4 form has no indices (NMLinear.resident_nbytes)


@dataclass
class SparsifyReport:
    """What :func:`sparsify_` did. Bytes count unique parameters + buffers. ``pattern`` is
    (N, M, L), or the sparsity of unstructured (CSR) layers."""
    pattern: Union[Tuple[int, int, int], float]
    swapped: List[LayerReport] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (fqn, reason)
    model_bytes_before: int = 0
    model_bytes_after: int = 0

    @property
    def dense_bytes(self) -> int:
        return sum(r.dense_bytes for r in self.swapped)

    @property
    def sparse_bytes(self) -> int:
        return sum(r.sparse_bytes for r in self.swapped)

    @property
    def metadata_bytes(self) -> int:
        return sum(r.metadata_bytes for r in self.swapped)

    @property
    def resident_bytes(self) -> int:
        return sum(r.resident_bytes for r in self.swapped)

    def __str__(self) -> str:
        if isinstance(self.pattern, float):
            what = f"unstructured {self.pattern:.0%} (CSR)"
        else:
            N, M, L = self.pattern
            what = f"{N}:{M} L={L}"
        return (f"nmspmm.sparsify_ {what}: swapped {len(self.swapped)} Linear layers "
                f"({self.dense_bytes} B dense -> {self.sparse_bytes} B compressed in the state dict, "
                f"{self.resident_bytes} B held with the kernels' metadata), skipped {len(self.skipped)}; "
                f"model parameters+buffers {self.model_bytes_before} B -> {self.model_bytes_after} B")


def _tensor_bytes(model: nn.Module) -> int:
    seen = set()
    total = 0
    for t in itertools.chain(model.parameters(), model.buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def _tied_linears(model: nn.Module) -> set:
    """ids of modules whose weight is also owned by another module (e.g. lm_head tied to the
    token embedding)."""
    owners: Dict[int, set] = {}
    for _, mod in model.named_modules(remove_duplicate=False):
        for p in mod._parameters.values():
            if p is not None:
                owners.setdefault(id(p), set()).add(id(mod))
    tied = set()
    for _, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if isinstance(mod, nn.Linear) and isinstance(w, torch.Tensor) and len(owners.get(id(w), ())) > 1:
            tied.add(id(mod))
    return tied


def sparsify_(model: nn.Module, N: Optional[int] = None, M: Optional[int] = None, L: Optional[int] = None,
              filter_fn: Optional[Callable[[nn.Module, str], bool]] = None, *,
              sparsity: Optional[float] = None, empty: bool = False, method: Optional[str] = None,
              calibration=None, patterns=None, **prune_kwargs) -> nn.Module:
    """Replace ``nn.Linear`` layers of ``model`` in place by :class:`NMLinear` and return ``model``.

    With ``sparsity=s`` instead of ``N, M, L`` the layers become unstructured
    :class:`nmspmm.CSRLinear` layers at sparsity s (magnitude and Wanda keep the best entries of
    each row, SparseGPT those of each block of columns; ``patterns`` does not apply).

    filter_fn(module, fqn) -> bool picks the layers (default: leaf name in ``DEFAULT_TARGETS``).
    lm_head (the model's output embedding), embeddings and Linears whose weight is tied to another
    module are never swapped. Picked layers that do not fit the pattern (in_features % M or
    out_features % L) are skipped with a single warning. With ``empty=True`` the layers are
    swapped for empty NMLinear layers (no pruning), ready for ``load_state_dict`` of a sparse
    checkpoint. The report is logged (logger "nmspmm", INFO) and kept: ``sparsify_report(model)``.

    Pruning (``nmspmm.pruning``, docs/pruning.md): ``method`` is "magnitude", "wanda" or
    "sparsegpt"; by default "sparsegpt" when ``calibration`` (an iterable of input_ids tensors or
    of dicts of model kwargs) is given, else "magnitude". ``patterns`` gives layers their own
    (N, M, L): a mapping from module name or fnmatch glob, or a callable ``(fqn, module)``; a
    pattern of None keeps that layer dense. Other keyword arguments go to
    ``nmspmm.pruning.prune_linears`` (sequential, permute, blocksize, percdamp, device, progress).
    """
    from . import hf
    unstructured = sparsity is not None
    if unstructured:
        if (N, M, L) != (None, None, None) or patterns is not None:
            raise ValueError("nmspmm.sparsify_: give N, M, L (N:M sparsity) or sparsity= (unstructured), not both; "
                             "patterns applies to N:M only")
        if not isinstance(sparsity, (int, float)) or isinstance(sparsity, bool) or not 0.0 <= sparsity < 1.0:
            raise ValueError(f"nmspmm.sparsify_: sparsity must be a number in [0, 1), got {sparsity!r}")
        sparsity = float(sparsity)
        if prune_kwargs.get("permute"):
            raise ValueError("nmspmm.sparsify_: permute=True permutes rows for N:M vectors; it does not apply to "
                             "unstructured sparsity")
    elif None in (N, M, L):
        raise TypeError("nmspmm.sparsify_: needs the pattern N, M, L (or sparsity= for unstructured sparsity)")
    else:
        _check_pattern(N, M, L)
    transformers = sys.modules.get("transformers")
    hf_model = transformers is not None and isinstance(model, transformers.PreTrainedModel)
    if hf_model:
        hf.check_transformers()  # before anything changes: the model must save as it loads
    if method is None:
        method = "sparsegpt" if calibration is not None else "magnitude"
    if method not in pruning.METHODS:
        raise ValueError(f"nmspmm.sparsify_: method must be one of {pruning.METHODS}, got {method!r}")
    if method != "magnitude" and calibration is None and not empty:
        raise ValueError(f"nmspmm.sparsify_: method={method!r} needs calibration data")
    report = SparsifyReport(pattern=sparsity if unstructured else (N, M, L), model_bytes_before=_tensor_bytes(model))
    never = set()
    get_out = getattr(model, "get_output_embeddings", None)
    if callable(get_out):
        try:
            out_emb = get_out()
        except (NotImplementedError, AttributeError):
            out_emb = None
        if out_emb is not None:
            never.add(id(out_emb))
    tied = _tied_linears(model)

    # Materialize the module list before swapping anything.
    modules = list(model.named_modules())
    replaced: Dict[int, nn.Module] = {}
    picked_layers = []
    for fqn, mod in modules:
        if not isinstance(mod, nn.Linear):
            continue
        leaf = fqn.rsplit(".", 1)[-1]
        picked = filter_fn(mod, fqn) if filter_fn is not None else leaf in DEFAULT_TARGETS
        if not picked:
            continue
        if fqn == "":
            report.skipped.append(("<root>", "the root module cannot be replaced in place; "
                                   "use NMLinear.from_dense"))
            continue
        if id(mod) in never or leaf == "lm_head":
            report.skipped.append((fqn, "output embedding (lm_head) is never sparsified"))
            continue
        if id(mod) in tied:
            report.skipped.append((fqn, "weight is tied to another module"))
            continue
        if unstructured:
            pattern = sparsity
        else:
            pattern = pruning.resolve_pattern(patterns, (N, M, L), fqn, mod)
            if pattern is None:
                report.skipped.append((fqn, "kept dense by patterns"))
                continue
            _check_pattern(*pattern)
            problem = _shape_problem(mod.in_features, mod.out_features, pattern[1], pattern[2])
            if problem:
                report.skipped.append((fqn, problem))
                continue
        if mod.weight.dtype not in _SUPPORTED_DTYPES:
            report.skipped.append((fqn, f"dtype {mod.weight.dtype} is not float32/float16/bfloat16"))
            continue
        picked_layers.append((fqn, mod, pattern))

    masks: Dict[str, torch.Tensor] = {}
    if not empty and (method != "magnitude" or prune_kwargs.get("permute")):
        masks, stats = pruning.prune_linears(model, {f: p for f, _, p in picked_layers}, method,
                                             calibration, **prune_kwargs)
        model._nmspmm_prune_stats = stats
    for fqn, mod, pattern in picked_layers:
        if unstructured and empty:
            new = CSRLinear(mod.in_features, mod.out_features, bias=mod.bias is not None, device=mod.weight.device,
                            dtype=mod.weight.dtype)
        elif unstructured:
            mask = masks.get(fqn)
            new = CSRLinear.from_dense(mod, mask=mask) if mask is not None else CSRLinear.from_dense(mod, pattern)
        elif empty:
            new = NMLinear(mod.in_features, mod.out_features, *pattern, bias=mod.bias is not None,
                           device=mod.weight.device, dtype=mod.weight.dtype)
        else:
            new = NMLinear.from_dense(mod, *pattern, mask=masks.get(fqn))
        new.train(mod.training)
        replaced[id(mod)] = new
        dense = mod.weight.numel() * mod.weight.element_size()
        bias_bytes = 0 if mod.bias is None else mod.bias.numel() * mod.bias.element_size()
        dense += bias_bytes
        if unstructured:
            report.swapped.append(LayerReport(fqn, mod.in_features, mod.out_features, dense,
                                              new.weight_nbytes + bias_bytes, 0, new.weight_nbytes + bias_bytes))
        else:
            report.swapped.append(LayerReport(fqn, mod.in_features, mod.out_features, dense,
                                              new.weight_nbytes, new.metadata_nbytes, new.resident_nbytes))

    # Swap every reference (a module shared under several names is replaced everywhere).
    for fqn, mod in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(mod._modules.items()):
            if child is not None and id(child) in replaced:
                setattr(mod, child_name, replaced[id(child)])

    if report.skipped:
        listing = "; ".join(f"{fqn} ({why})" for fqn, why in report.skipped)
        what = f"sparsity {sparsity}" if unstructured else f"{N}:{M} L={L}"
        warnings.warn(f"nmspmm.sparsify_: skipped {len(report.skipped)} layer(s) for {what}: "
                      f"{listing}", stacklevel=2)
    report.model_bytes_after = _tensor_bytes(model)
    model._nmspmm_report = report
    if hf_model:
        hf.attach(model)  # model.save_pretrained writes an nmspmm checkpoint (nmspmm/hf.py)
    logger.info("%s", report)
    for r in report.swapped:
        logger.debug("nmspmm.sparsify_: %s [%d -> %d] %d B -> %d B", r.fqn, r.in_features,
                     r.out_features, r.dense_bytes, r.sparse_bytes)
    return model


def sparsify_report(model: nn.Module) -> Optional[SparsifyReport]:
    """The report of the last :func:`sparsify_` call on ``model`` (None if never sparsified)."""
    return getattr(model, "_nmspmm_report", None)


def sparse_metadata(model: nn.Module) -> Dict[str, str]:
    """Text metadata describing the NMLinear layers of ``model``, for
    ``safetensors.torch.save_file(model.state_dict(), path, metadata=sparse_metadata(model))``.

    Keys: ``nmspmm_format`` ("1"), ``nmspmm_layers`` (JSON {fqn: [N, M, L]}) and, when every layer
    shares one pattern, ``N``, ``M``, ``L``.
    """
    layers = {fqn: [m.N, m.M, m.L] for fqn, m in model.named_modules() if isinstance(m, NMLinear)}
    meta = {"nmspmm_format": "1", "nmspmm_layers": json.dumps(layers, sort_keys=True)}
    patterns = {tuple(p) for p in layers.values()}
    if len(patterns) == 1:
        (N, M, L), = patterns
        meta.update(N=str(N), M=str(M), L=str(L))
    return meta
