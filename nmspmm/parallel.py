"""Tensor parallelism (Megatron-style) for sparsified Hugging Face Llama models.

    import torch.distributed as dist, nmspmm
    dist.init_process_group("nccl")                # or "gloo" on the CPU; one process per rank
    nmspmm.sparsify_(model, 16, 32, 32)            # every rank builds the same full model
    nmspmm.parallelize_(model)                     # each rank keeps its shard of every block

Each attention block and each MLP is split over the ranks of one process group:

* q/k/v and gate/up become :class:`ColumnParallelNMLinear`: rank r keeps outputs
  ``[r*out/W, (r+1)*out/W)``, i.e. the columns ``[r*out/W, ...)`` of ``values`` and
  ``[r*out/W/L, ...)`` of ``indices`` (whole L-vectors) and the matching slice of the bias. Their
  input is the full (replicated) hidden state, so they need no communication.
* o and down become :class:`RowParallelNMLinear`: rank r keeps inputs ``[r*in/W, (r+1)*in/W)``,
  i.e. the compressed rows ``[r*in/W/M*N, ...)`` of ``values`` and ``indices`` (whole M-windows),
  and the full bias. Its partial product is summed over the ranks by one all-reduce
  (``torch.distributed._functional_collectives.all_reduce``, traceable by ``torch.compile``), and
  the bias is added once, after the reduction.

So each attention block and each MLP costs one all-reduce of the hidden state. Attention is split
by heads: every rank keeps ``num_attention_heads/W`` query heads and ``num_key_value_heads/W``
key/value heads, and the attention module's reshapes (``view(..., -1, head_dim)``) and its
``num_key_value_groups`` stay valid unchanged. Embeddings, norms and lm_head stay replicated.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

from .format import NMWeight
from .nn import NMLinear, _spmm

__all__ = ["parallelize_", "check_parallelizable", "ColumnParallelNMLinear", "RowParallelNMLinear"]

_ATTN_COLUMN = ("q_proj", "k_proj", "v_proj")
_ATTN_ROW = "o_proj"
_MLP_COLUMN = ("gate_proj", "up_proj")
_MLP_ROW = "down_proj"


class ColumnParallelNMLinear(NMLinear):
    """An :class:`NMLinear` holding one rank's slice of the outputs of a column-parallel layer
    (``out_features`` is the local count). Its forward is NMLinear's: no communication."""

    tp_rank: int = 0
    tp_world: int = 1

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp=column {self.tp_rank}/{self.tp_world}"


class RowParallelNMLinear(NMLinear):
    """An :class:`NMLinear` holding one rank's slice of the inputs of a row-parallel layer
    (``in_features`` is the local count, ``out_features`` the full one). Forward computes the
    local partial product, all-reduces it (sum) over ``tp_group`` and then adds the full bias."""

    tp_rank: int = 0
    tp_world: int = 1
    tp_group = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol

        buffers = self._buffers
        values = buffers["values"]
        x_dtype = x.dtype
        if x_dtype != values.dtype:
            if not x.is_floating_point():
                raise TypeError(f"nmspmm.RowParallelNMLinear: x must be a floating tensor, got {x_dtype}")
            x = x.to(values.dtype)
        # No bias in the partial products: it would be summed W times.
        y = _spmm(x, values, buffers["indices"], self.N, self.M, self.L, None,
                  buffers["col_info"], buffers["packed_indices"], buffers["tc_meta"])
        y = funcol.all_reduce(y, "sum", self.tp_group)
        bias = self._parameters["bias"]
        if bias is not None:
            y = y + bias
        return y if y.dtype == x_dtype else y.to(x_dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp=row {self.tp_rank}/{self.tp_world}"


def _blocks(model: nn.Module) -> Tuple[list, list]:
    """(attention modules, MLP modules) of ``model``: modules with q/k/v/o_proj children and with
    gate/up/down_proj children."""
    attns, mlps = [], []
    for fqn, mod in model.named_modules():
        children = mod._modules
        if all(n in children for n in _ATTN_COLUMN + (_ATTN_ROW,)):
            attns.append((fqn, mod))
        if all(n in children for n in _MLP_COLUMN + (_MLP_ROW,)):
            mlps.append((fqn, mod))
    return attns, mlps


def _head_counts(model: nn.Module, attn: nn.Module) -> Tuple[int, int]:
    config = getattr(attn, "config", None) or getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if heads is None:
        raise ValueError("nmspmm.parallelize_: the model has no config.num_attention_heads, so the "
                         "attention heads cannot be split")
    return heads, kv_heads


def check_parallelizable(model: nn.Module, world_size: int) -> None:
    """Raise ``ValueError`` (naming the layer and the sizes) unless :func:`parallelize_` can split
    ``model`` over ``world_size`` ranks: every q/k/v/o/gate/up/down projection is an
    :class:`NMLinear` (dense projections are refused), ``out % (world_size*L) == 0`` for q/k/v/
    gate/up, ``in % (world_size*M) == 0`` for o/down, and both head counts divide by
    ``world_size``. Changes nothing."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"nmspmm.parallelize_: world_size must be a positive int, got {world_size!r}")
    attns, mlps = _blocks(model)
    if not attns and not mlps:
        raise ValueError("nmspmm.parallelize_: found no attention block (q/k/v/o_proj) and no MLP "
                         "(gate/up/down_proj) to split")
    problems: List[str] = []
    for fqn, mod in model.named_modules():
        if isinstance(mod, (ColumnParallelNMLinear, RowParallelNMLinear)):
            raise ValueError(f"nmspmm.parallelize_: {fqn} is already tensor-parallel "
                             f"({type(mod).__name__}); parallelize_ runs once, on the full model")

    def layer(parent_fqn, parent, name):
        mod = parent._modules[name]
        fqn = f"{parent_fqn}.{name}" if parent_fqn else name
        if not isinstance(mod, NMLinear):
            problems.append(f"{fqn} is a dense {type(mod).__name__}, not an NMLinear (only "
                            f"sparsified projections are split; sparsify_ it first)")
            return None, fqn
        return mod, fqn

    def column(parent_fqn, parent, name):
        mod, fqn = layer(parent_fqn, parent, name)
        if mod is not None and mod.out_features % (world_size * mod.L):
            problems.append(f"{fqn}: out_features={mod.out_features} is not divisible by world_size "
                            f"x L = {world_size} x {mod.L} (a shard would cut an L-vector)")

    def row(parent_fqn, parent, name):
        mod, fqn = layer(parent_fqn, parent, name)
        if mod is not None and mod.in_features % (world_size * mod.M):
            problems.append(f"{fqn}: in_features={mod.in_features} is not divisible by world_size "
                            f"x M = {world_size} x {mod.M} (a shard would cut an M-window)")

    for fqn, attn in attns:
        heads, kv_heads = _head_counts(model, attn)
        if heads % world_size or kv_heads % world_size:
            problems.append(f"{fqn}: num_attention_heads={heads} and num_key_value_heads={kv_heads} "
                            f"must both be divisible by world_size={world_size} (a shard would cut a head)")
        for name in _ATTN_COLUMN:
            column(fqn, attn, name)
        row(fqn, attn, _ATTN_ROW)
    for fqn, mlp in mlps:
        for name in _MLP_COLUMN:
            column(fqn, mlp, name)
        row(fqn, mlp, _MLP_ROW)
    if problems:
        raise ValueError(f"nmspmm.parallelize_: cannot split the model over {world_size} ranks: "
                         + "; ".join(problems))


def _column_shard(mod: NMLinear, rank: int, world: int) -> ColumnParallelNMLinear:
    out = mod.out_features // world
    lo, hi = rank * out, (rank + 1) * out
    packed = NMWeight(values=mod.values[:, lo:hi].contiguous(),
                      indices=mod.indices[:, lo // mod.L:hi // mod.L].contiguous(),
                      N=mod.N, M=mod.M, L=mod.L, shape=(out, mod.in_features))
    bias = None if mod.bias is None else mod.bias.detach()[lo:hi]
    shard = ColumnParallelNMLinear.from_packed(packed, bias)
    shard.tp_rank, shard.tp_world = rank, world
    return shard


def _row_shard(mod: NMLinear, rank: int, world: int, group) -> RowParallelNMLinear:
    local_in = mod.in_features // world
    rows = local_in // mod.M * mod.N  # compressed rows of local_in inputs (whole windows)
    lo, hi = rank * rows, (rank + 1) * rows
    # clone: a row slice is a view that would keep the full tensor alive
    packed = NMWeight(values=mod.values[lo:hi].clone(), indices=mod.indices[lo:hi].clone(),
                      N=mod.N, M=mod.M, L=mod.L, shape=(mod.out_features, local_in))
    shard = RowParallelNMLinear.from_packed(packed, None if mod.bias is None else mod.bias.detach())
    shard.tp_rank, shard.tp_world, shard.tp_group = rank, world, group
    return shard


def _resolve_group(mesh_or_group):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("nmspmm.parallelize_: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    if mesh_or_group is None:
        return dist.group.WORLD
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(mesh_or_group, DeviceMesh):
        if mesh_or_group.ndim != 1:
            raise ValueError(f"nmspmm.parallelize_: the device mesh must be 1-D (the tensor-parallel "
                             f"dimension), got {mesh_or_group.ndim}-D; pass mesh['tp']")
        return mesh_or_group.get_group()
    return mesh_or_group


@torch.no_grad()
def parallelize_(model: nn.Module, mesh_or_group=None) -> nn.Module:
    """Split a model already passed through :func:`nmspmm.sparsify_` over the ranks of
    ``mesh_or_group`` (a 1-D ``DeviceMesh``, a ``ProcessGroup``, or None for the default group),
    in place, and return it. Every rank must call it on an identical full model (same weights),
    placed on that rank's device. All checks (:func:`check_parallelizable`) run before anything
    changes."""
    import torch.distributed as dist

    group = _resolve_group(mesh_or_group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    check_parallelizable(model, world)
    attns, mlps = _blocks(model)
    for blocks, columns, row in ((attns, _ATTN_COLUMN, _ATTN_ROW), (mlps, _MLP_COLUMN, _MLP_ROW)):
        for _, block in blocks:
            for name in columns:
                old = block._modules[name]
                new = _column_shard(old, rank, world)
                if getattr(old, "_with_col_info", False):
                    new.enable_col_info()
                new.train(old.training)
                setattr(block, name, new)
            old = block._modules[row]
            new = _row_shard(old, rank, world, group)
            if getattr(old, "_with_col_info", False):
                new.enable_col_info()
            new.train(old.training)
            setattr(block, row, new)
    model._nmspmm_tp = (rank, world)
    return model
