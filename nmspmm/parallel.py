"""Tensor parallelism (Megatron-style) for sparsified Hugging Face Llama models.

    import torch.distributed as dist, nmspmm
    dist.init_process_group("nccl")                # or "gloo" on the CPU; one process per rank
    nmspmm.sparsify_(model, 16, 32, 32)            # every rank builds the same full model
    nmspmm.parallelize_(model)                     # each rank keeps its shard of every block
    model = nmspmm.parallel.from_pretrained(dir)   # or: each rank reads only its shard of a checkpoint

Each attention block and each MLP is split over the ranks of one process group:

* q/k/v and gate/up become :class:`ColumnParallelNMLinear`: rank r keeps outputs
  ``[r*out/W, (r+1)*out/W)``, i.e. the columns ``[r*out/W, ...)`` of ``values`` and
  ``[r*out/W/L, ...)`` of ``indices`` (whole L-vectors) and the matching slice of the bias. Their
  input is the full (replicated) hidden state, so they need no communication. Unstructured and
  dense projections become :class:`ColumnParallelCSRLinear` (its rows) and
  :class:`ColumnParallelLinear` (its weight rows).
* o and down become :class:`RowParallelNMLinear`: rank r keeps inputs ``[r*in/W, (r+1)*in/W)``,
  i.e. the compressed rows ``[r*in/W/M*N, ...)`` of ``values`` and ``indices`` (whole M-windows),
  and the full bias. Its partial product is summed over the ranks by one all-reduce
  (``torch.distributed._functional_collectives.all_reduce``, traceable by ``torch.compile``), and
  the bias is added once, after the reduction. :class:`RowParallelCSRLinear` keeps the nonzeros of
  its input columns (rebased), :class:`RowParallelLinear` its weight columns.

The same split is available as ``torch.distributed.tensor.parallel`` styles for
``parallelize_module``: :class:`NMColwiseParallel` and :class:`NMRowwiseParallel` turn one
:class:`~nmspmm.NMLinear` into its shard in place, and :func:`llama_tp_plan` is the plan that
``parallelize_`` applies (q/k/v, gate/up column-wise; o, down row-wise)::

    from torch.distributed.tensor.parallel import parallelize_module
    mesh = torch.distributed.device_mesh.init_device_mesh("cuda", (2,))
    nmspmm.parallel.check_parallelizable(model, 2)   # the styles check one layer at a time
    parallelize_module(model, mesh, nmspmm.parallel.llama_tp_plan())

So each attention block and each MLP costs one all-reduce of the hidden state in the forward, and
with gradients one more in the backward (Megatron's f and g: the column-parallel layers sum their
input gradient over the ranks; the row-parallel reduction passes its gradient through). Attention is split
by heads: every rank keeps ``num_attention_heads/W`` query heads and ``num_key_value_heads/W``
key/value heads, and the attention module's reshapes (``view(..., -1, head_dim)``) and its
``num_key_value_groups`` stay valid unchanged. The vocabulary is split too (Megatron's
vocabulary-parallel embedding and output layer): rank r keeps rows ``[r*V/W, (r+1)*V/W)`` of the
token embedding (:class:`VocabParallelEmbedding`, one more all-reduce per forward) and of lm_head
(:class:`VocabParallelLMHead`, its logits slice gathered over the ranks into the full logits);
tied weights stay one tensor. A vocabulary that does not divide by W stays replicated, as do the
norms.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

from .format import NMWeight
from .csr import CSRLinear, _longest_row
from .nn import NMLinear, _spmm
from .peer_exchange import peer_exchange

try:
    from torch.distributed.tensor.parallel import ParallelStyle as _ParallelStyle
except ImportError:  # a torch built without torch.distributed: the styles cannot be applied
    _ParallelStyle = object

__all__ = ["parallelize_", "check_parallelizable", "from_pretrained", "ColumnParallelNMLinear", "RowParallelNMLinear",
           "ColumnParallelCSRLinear", "RowParallelCSRLinear", "ColumnParallelLinear", "RowParallelLinear",
           "VocabParallelEmbedding", "VocabParallelLMHead", "NMColwiseParallel", "NMRowwiseParallel",
           "NMVocabParallel", "llama_tp_plan"]

_ATTN_COLUMN = ("q_proj", "k_proj", "v_proj")
_ATTN_ROW = "o_proj"
_MLP_COLUMN = ("gate_proj", "up_proj")
_MLP_ROW = "down_proj"


def _all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    from torch.distributed import _functional_collectives as funcol

    y = funcol.all_reduce(t, "sum", group)
    return y.wait() if isinstance(y, funcol.AsyncCollectiveTensor) else y


def _sum_over_ranks(y: torch.Tensor, group) -> torch.Tensor:
    """``y`` (a fresh partial result this module owns) summed over ``group``. Eager and without
    gradients it is reduced in place by ``torch.distributed.all_reduce``: the functional collective
    costs several times its host time (an output allocation, a wrapper tensor, a wait), and at
    prefill the host time is what the ranks wait on. Traced, or with gradients, the functional one
    (``torch.compile`` sees it, autograd through Megatron's g)."""
    if torch.is_grad_enabled() and y.requires_grad:
        return _ReduceFromParallel.apply(y, group)
    if torch.compiler.is_compiling():
        return _all_reduce(y, group)
    import torch.distributed as dist

    dist.all_reduce(y, group=group)
    return y


def _sequence_parallel_applies(x: torch.Tensor, world: int, tokens: Optional[int] = None) -> bool:
    """Whether a sequence-parallel layer splits this forward's sequence (``tokens``, else
    ``x.shape[1]`` of an [B, T, ...] input) over ``world`` ranks: without gradients (its
    collectives have none) and when T divides into ``world`` slices, so prefill but not a decode
    step. The layer and its row-parallel projections decide by this one rule."""
    if torch.is_grad_enabled() or x.dim() < 3:
        return False
    t = x.shape[1] if tokens is None else tokens
    return t >= world and t % world == 0


def _gather_sequence(x: torch.Tensor, group, world: int) -> torch.Tensor:
    """[B, T/W, ...] slices of the sequence, one per rank in rank order -> [B, T, ...]."""
    if torch.compiler.is_compiling():
        from torch.distributed import _functional_collectives as funcol

        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
        y = gather(x.contiguous(), 1, group)
        return y.wait() if isinstance(y, funcol.AsyncCollectiveTensor) else y
    import torch.distributed as dist

    out = x.new_empty(world * x.numel())
    dist.all_gather_into_tensor(out, x.contiguous().view(-1), group=group)
    # [W, B, t, ...] -> [B, W*t, ...] (a view for B = 1)
    return out.view((world,) + tuple(x.shape)).transpose(0, 1).reshape(
        (x.shape[0], world * x.shape[1]) + tuple(x.shape[2:]))


def _scatter_sequence(y: torch.Tensor, group, world: int) -> torch.Tensor:
    """Partial sums [B, T, ...] -> this rank's slice [B, T/W, ...] of their sum over the ranks."""
    if torch.compiler.is_compiling():
        from torch.distributed import _functional_collectives as funcol

        out = funcol.reduce_scatter_tensor(y.contiguous(), "sum", 1, group)
        return out.wait() if isinstance(out, funcol.AsyncCollectiveTensor) else out
    import torch.distributed as dist

    B, T = y.shape[0], y.shape[1]
    parts = y.reshape((B, world, T // world) + tuple(y.shape[2:])).transpose(0, 1).contiguous()  # [W, B, t, ...]
    out = y.new_empty(tuple(parts.shape[1:]))
    dist.reduce_scatter_tensor(out.view(-1), parts.view(-1), group=group)
    return out


class _CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward; the backward sums the input gradient over the ranks (each
    column shard contributes the gradient of its own outputs)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.contiguous(), ctx.group), None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: sums the partial products over the ranks; identity backward, because every
    rank holds the same (replicated) output and loss."""

    @staticmethod
    def forward(ctx, y, group):
        return _all_reduce(y, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ColumnParallel:
    """Shared part of the column-parallel layers: this rank's slice of the outputs
    (``out_features`` is the local count), forward as the base layer's (no communication); with
    gradients enabled, the input's gradient is summed over ``tp_group`` in the backward."""

    tp_rank: int = 0
    tp_world: int = 1
    tp_group = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and self.tp_world > 1 and x.requires_grad:
            x = _CopyToParallel.apply(x, self.tp_group)
        return super().forward(x)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp=column {self.tp_rank}/{self.tp_world}"


class _RowParallel:
    """Shared part of the row-parallel layers: this rank's slice of the inputs (``in_features``
    is the local count, ``out_features`` the full one). Forward computes the local partial
    product (``_partial``, no bias), all-reduces it (sum) over ``tp_group`` and then adds the full
    bias. With gradients enabled the reduction's backward is the identity (Megatron's g): every
    rank holds the same output and loss."""

    tp_rank: int = 0
    tp_world: int = 1
    tp_group = None

    def _partial(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.dtype]:
        raise NotImplementedError

    tp_sequence_parallel: bool = False  # in a sequence-parallel decoder layer (parallelize_(..., sequence_parallel=True))

    def _partial_dtype(self, x: torch.Tensor) -> torch.dtype:
        """The dtype of ``_partial(x)``'s product."""
        return x.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # No bias in the partial products: it would be summed W times.
        if self.tp_sequence_parallel and _sequence_parallel_applies(x, self.tp_world):
            # The layer keeps this rank's slice of the sequence: reduce-scatter instead of all-reduce.
            rows = x.shape[0] * (x.shape[1] // self.tp_world)
            out_bytes = rows * self.out_features * self._partial_dtype(x).itemsize
            ex = peer_exchange(self.tp_group, x, out_bytes)
            if ex is not None:  # on the copy engines, the peers' partials pushed while ours is computed
                y = ex.reduce_scatter(lambda xc: self._partial(xc)[0], x, out_bytes)
                return self._finish(y, x.dtype)
            y, out_dtype = self._partial(x)
            y = _scatter_sequence(y, self.tp_group, self.tp_world)
        else:
            y, out_dtype = self._partial(x)
            y = _sum_over_ranks(y, self.tp_group)
        return self._finish(y, out_dtype)

    def _finish(self, y: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """The summed partial products plus the (full) bias, in the input's dtype."""
        bias = self._parameters["bias"]
        if bias is not None:
            y = y + bias
        return y if y.dtype == out_dtype else y.to(out_dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp=row {self.tp_rank}/{self.tp_world}"


class ColumnParallelNMLinear(_ColumnParallel, NMLinear):
    """An :class:`NMLinear` holding one rank's slice of the outputs of a column-parallel layer
    (whole L-vectors)."""


class RowParallelNMLinear(_RowParallel, NMLinear):
    """An :class:`NMLinear` holding one rank's slice of the inputs of a row-parallel layer (whole
    M-windows); its partial products are summed over the ranks."""

    def _partial(self, x):
        buffers = self._buffers
        values = buffers["values"]
        x_dtype = x.dtype
        if x_dtype != values.dtype:
            if not x.is_floating_point():
                raise TypeError(f"nmspmm.RowParallelNMLinear: x must be a floating tensor, got {x_dtype}")
            x = x.to(values.dtype)
        return _spmm(x, values, buffers["indices"], self.N, self.M, self.L, None, buffers["col_info"],
                     buffers["packed_indices"], buffers["tc_meta"]), x_dtype

    def _partial_dtype(self, x):
        return self._buffers["values"].dtype


class ColumnParallelCSRLinear(_ColumnParallel, CSRLinear):
    """A :class:`~nmspmm.CSRLinear` holding one rank's rows (outputs) of a column-parallel layer."""


class RowParallelCSRLinear(_RowParallel, CSRLinear):
    """A :class:`~nmspmm.CSRLinear` holding the nonzeros of one rank's inputs of a row-parallel
    layer (columns rebased to the slice); its partial products are summed over the ranks."""

    def _partial(self, x):
        return torch.ops.nmspmm.csr_spmm(x, self.crow_indices, self.col_indices, self.values, self.in_features,
                                         None, self.max_row_nnz), x.dtype


class ColumnParallelLinear(_ColumnParallel, nn.Linear):
    """A dense ``nn.Linear`` (a projection ``sparsify_`` kept dense) holding one rank's outputs."""


class RowParallelLinear(_RowParallel, nn.Linear):
    """A dense ``nn.Linear`` holding one rank's inputs; its partial products are summed over the
    ranks."""

    def _partial(self, x):
        return nn.functional.linear(x, self.weight), x.dtype


class _GatherFromParallel(torch.autograd.Function):
    """Concatenates the ranks' slices of the last dimension; the backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx, y, group, rank, world):
        from torch.distributed import _functional_collectives as funcol

        ctx.rank, ctx.world = rank, world
        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor  # (the name of torch >= 2.13)
        out = gather(y.contiguous(), y.dim() - 1, group)
        return out.wait() if isinstance(out, funcol.AsyncCollectiveTensor) else out

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(ctx.world, -1)[ctx.rank], None, None, None


class VocabParallelEmbedding(nn.Embedding):
    """One rank's rows ``[vocab_start, vocab_start + num_embeddings)`` of the token embedding
    (Megatron's vocabulary-parallel embedding): a token outside the slice looks up zeros, and one
    all-reduce sums the ranks' rows into the full embedding, exactly (one rank adds the row, the
    others zeros)."""

    tp_rank: int = 0
    tp_world: int = 1
    tp_group = None
    vocab_start: int = 0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        outside = (local < 0) | (local >= self.num_embeddings)
        y = nn.functional.embedding(local.masked_fill(outside, 0), self.weight, self.padding_idx)
        return _sum_over_ranks(y.masked_fill(outside.unsqueeze(-1), 0), self.tp_group)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tp=vocab {self.tp_rank}/{self.tp_world} from {self.vocab_start}"


class VocabParallelLMHead(_ColumnParallel, nn.Linear):
    """One rank's rows (vocabulary entries) of the output projection: its logits slice, gathered
    over the ranks into the full logits (no sum, so the logits are exactly the unsplit layer's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        if self.tp_world == 1:
            return y
        return _GatherFromParallel.apply(y, self.tp_group, self.tp_rank, self.tp_world)


_PARALLEL = (ColumnParallelNMLinear, RowParallelNMLinear, ColumnParallelCSRLinear, RowParallelCSRLinear,
             ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, VocabParallelLMHead)
_SPLITTABLE = "an NMLinear, a CSRLinear or a dense nn.Linear"


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


def _split_problem(mod: nn.Module, fqn: str, kind: str, world: int) -> Optional[str]:
    """Why ``mod`` cannot be split ``kind``-wise (``"column"``: its outputs, ``"row"``: its inputs)
    over ``world`` ranks, or None: N:M layers split in whole L-vectors / M-windows, CSR and dense
    layers in equal slices."""
    if not isinstance(mod, (NMLinear, CSRLinear, nn.Linear)):
        return f"{fqn} is a {type(mod).__name__}, not {_SPLITTABLE}"
    if kind == "column":
        unit = mod.L if isinstance(mod, NMLinear) else 1
        if mod.out_features % (world * unit):
            return (f"{fqn}: out_features={mod.out_features} is not divisible by world_size x L = {world} x {unit} "
                    f"(a shard would cut an L-vector)" if unit > 1 else
                    f"{fqn}: out_features={mod.out_features} is not divisible by world_size={world}")
    else:
        unit = mod.M if isinstance(mod, NMLinear) else 1
        if mod.in_features % (world * unit):
            return (f"{fqn}: in_features={mod.in_features} is not divisible by world_size x M = {world} x {unit} "
                    f"(a shard would cut an M-window)" if unit > 1 else
                    f"{fqn}: in_features={mod.in_features} is not divisible by world_size={world}")
    return None


def check_parallelizable(model: nn.Module, world_size: int) -> None:
    """Raise ``ValueError`` (naming the layer and the sizes) unless :func:`parallelize_` can split
    ``model`` over ``world_size`` ranks: every q/k/v/o/gate/up/down projection is an
    :class:`NMLinear`, a :class:`~nmspmm.CSRLinear` or a dense ``nn.Linear``; q/k/v/gate/up's
    outputs divide by ``world_size`` (N:M: ``world_size*L``), o/down's inputs by ``world_size``
    (N:M: ``world_size*M``); and both head counts divide by ``world_size``. Changes nothing."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"nmspmm.parallelize_: world_size must be a positive int, got {world_size!r}")
    attns, mlps = _blocks(model)
    if not attns and not mlps:
        raise ValueError("nmspmm.parallelize_: found no attention block (q/k/v/o_proj) and no MLP "
                         "(gate/up/down_proj) to split")
    problems: List[str] = []
    for fqn, mod in model.named_modules():
        if isinstance(mod, _PARALLEL):
            raise ValueError(f"nmspmm.parallelize_: {fqn} is already tensor-parallel "
                             f"({type(mod).__name__}); parallelize_ runs once, on the full model")

    def check(parent_fqn, parent, name, kind):
        fqn = f"{parent_fqn}.{name}" if parent_fqn else name
        problem = _split_problem(parent._modules[name], fqn, kind, world_size)
        if problem:
            problems.append(problem)

    for fqn, attn in attns:
        heads, kv_heads = _head_counts(model, attn)
        if heads % world_size or kv_heads % world_size:
            problems.append(f"{fqn}: num_attention_heads={heads} and num_key_value_heads={kv_heads} "
                            f"must both be divisible by world_size={world_size} (a shard would cut a head)")
        for name in _ATTN_COLUMN:
            check(fqn, attn, name, "column")
        check(fqn, attn, _ATTN_ROW, "row")
    for fqn, mlp in mlps:
        for name in _MLP_COLUMN:
            check(fqn, mlp, name, "column")
        check(fqn, mlp, _MLP_ROW, "row")
    if problems:
        raise ValueError(f"nmspmm.parallelize_: cannot split the model over {world_size} ranks: "
                         + "; ".join(problems))


def _nm_column_shard(mod: NMLinear, rank: int, world: int) -> ColumnParallelNMLinear:
    out = mod.out_features // world
    lo, hi = rank * out, (rank + 1) * out
    packed = NMWeight(values=mod.values[:, lo:hi].contiguous(),
                      indices=mod.canonical_indices()[:, lo // mod.L:hi // mod.L].contiguous(),
                      N=mod.N, M=mod.M, L=mod.L, shape=(out, mod.in_features))
    bias = None if mod.bias is None else mod.bias.detach()[lo:hi]
    return ColumnParallelNMLinear.from_packed(packed, bias)


def _nm_row_shard(mod: NMLinear, rank: int, world: int) -> RowParallelNMLinear:
    local_in = mod.in_features // world
    rows = local_in // mod.M * mod.N  # compressed rows of local_in inputs (whole windows)
    lo, hi = rank * rows, (rank + 1) * rows
    # clone: a row slice is a view that would keep the full tensor alive
    packed = NMWeight(values=mod.values[lo:hi].clone(), indices=mod.canonical_indices()[lo:hi].clone(),
                      N=mod.N, M=mod.M, L=mod.L, shape=(mod.out_features, local_in))
    return RowParallelNMLinear.from_packed(packed, None if mod.bias is None else mod.bias.detach())


def _csr_rows(crow: torch.Tensor, col: torch.Tensor, vals: torch.Tensor, lo: int, hi: int):
    """The CSR fields of rows [lo, hi) (row pointers rebased to 0)."""
    b, e = int(crow[lo]), int(crow[hi])
    return (crow[lo:hi + 1] - b).contiguous(), col[b:e].clone(), vals[b:e].clone()


def _csr_columns(crow: torch.Tensor, col: torch.Tensor, vals: torch.Tensor, lo: int, hi: int):
    """The CSR fields of the entries in columns [lo, hi), columns rebased to 0 (every row kept)."""
    keep = (col >= lo) & (col < hi)
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1, device=crow.device), (crow[1:] - crow[:-1]).long())
    counts = torch.bincount(rows[keep], minlength=crow.numel() - 1)
    new_crow = torch.zeros_like(crow)
    new_crow[1:] = torch.cumsum(counts, 0).to(crow.dtype)
    return new_crow, (col[keep] - lo).to(col.dtype), vals[keep].clone()


def _csr_layer(cls, fields, in_features: int, out_features: int, bias) -> CSRLinear:
    crow, col, vals = fields
    layer = cls(in_features, out_features, bias=bias is not None, device=vals.device, dtype=vals.dtype)
    layer.crow_indices, layer.col_indices, layer.values = crow, col, vals
    layer.max_row_nnz = _longest_row(crow)
    if bias is not None:
        layer.bias = nn.Parameter(bias.detach().clone())
    return layer


def _dense_layer(cls, weight: torch.Tensor, bias, requires_grad: bool) -> nn.Linear:
    layer = cls(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight.clone(), requires_grad=requires_grad)
    if bias is not None:
        layer.bias = nn.Parameter(bias.clone())
    return layer


def _split(mod: nn.Module, kind: str, rank: int, world: int, group) -> nn.Module:
    """This rank's shard of ``mod``: its outputs [r*out/W, (r+1)*out/W) for ``kind == "column"``
    (with that slice of the bias), its inputs [r*in/W, (r+1)*in/W) for ``"row"`` (the whole bias)."""
    column = kind == "column"
    if isinstance(mod, NMLinear):
        shard = _nm_column_shard(mod, rank, world) if column else _nm_row_shard(mod, rank, world)
    else:
        part = (mod.out_features if column else mod.in_features) // world
        lo, hi = rank * part, (rank + 1) * part
        bias = None if mod.bias is None else mod.bias.detach()[lo:hi] if column else mod.bias.detach()
        shape = (mod.in_features, part) if column else (part, mod.out_features)
        if isinstance(mod, CSRLinear):
            fields = (_csr_rows if column else _csr_columns)(mod.crow_indices, mod.col_indices, mod.values, lo, hi)
            shard = _csr_layer(ColumnParallelCSRLinear if column else RowParallelCSRLinear, fields, *shape, bias)
        else:
            weight = mod.weight.detach()
            shard = _dense_layer(ColumnParallelLinear if column else RowParallelLinear,
                                 weight[lo:hi] if column else weight[:, lo:hi], bias, mod.weight.requires_grad)
    shard.tp_rank, shard.tp_world, shard.tp_group = rank, world, group
    return shard


def _vocab_modules(model: nn.Module):
    """(embedding, output head, tied) when ``parallelize_`` splits the vocabulary of ``model``
    (an ``nn.Embedding`` input and, if any, an ``nn.Linear`` head over the same vocabulary), else
    None. A vocabulary that does not divide by the ranks stays replicated."""
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    emb = get_in() if get_in else None
    head = get_out() if get_out else None
    if type(emb) is not nn.Embedding:
        return None
    if head is not None and (type(head) is not nn.Linear or head.out_features != emb.num_embeddings):
        head = None
    return emb, head, head is not None and head.weight is emb.weight


def _vocab_range(vocab: int, rank: int, world: int) -> Tuple[int, int]:
    part = vocab // world
    return rank * part, (rank + 1) * part


def _vocab_embedding(weight: torch.Tensor, padding_idx, lo: int, rank: int, world: int, group,
                     requires_grad: bool = False) -> VocabParallelEmbedding:
    rows = weight.shape[0]
    local_pad = padding_idx - lo if padding_idx is not None and lo <= padding_idx < lo + rows else None
    emb = VocabParallelEmbedding(rows, weight.shape[1], padding_idx=local_pad, device="meta")
    emb.weight = nn.Parameter(weight, requires_grad=requires_grad)
    emb.tp_rank, emb.tp_world, emb.tp_group, emb.vocab_start = rank, world, group, lo
    return emb


def _vocab_head(weight: nn.Parameter, bias, rank: int, world: int, group) -> VocabParallelLMHead:
    head = VocabParallelLMHead(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    head.weight = weight  # a Parameter: the embedding's own when the two are tied
    if bias is not None:
        head.bias = nn.Parameter(bias, requires_grad=False)
    head.tp_rank, head.tp_world, head.tp_group = rank, world, group
    return head


def _split_vocab(model: nn.Module, rank: int, world: int, group) -> None:
    """Replace the embedding and the output head by this rank's vocabulary slice (tied weights
    stay tied: both shards hold one Parameter)."""
    found = _vocab_modules(model)
    if found is None or found[0].num_embeddings % world:
        return
    emb, head, tied = found
    lo, hi = _vocab_range(emb.num_embeddings, rank, world)
    new_emb = _vocab_embedding(emb.weight.detach()[lo:hi].clone(), emb.padding_idx, lo, rank, world, group,
                               emb.weight.requires_grad)
    model.set_input_embeddings(new_emb)
    if head is not None:
        weight = new_emb.weight if tied else nn.Parameter(head.weight.detach()[lo:hi].clone(),
                                                          requires_grad=head.weight.requires_grad)
        bias = None if head.bias is None else head.bias.detach()[lo:hi].clone()
        model.set_output_embeddings(_vocab_head(weight, bias, rank, world, group))


def _sequence_parallel_forward(self, hidden_states: torch.Tensor, *args, **kwargs):
    """A decoder layer's forward with the sequence split over the ranks (Megatron's sequence
    parallelism): the norms and the residual adds run on this rank's slice of the tokens, an
    all-gather brings the normed slices to the attention and the MLP, whose row-parallel
    projections reduce-scatter their partial sums back into slices instead of all-reducing them.
    The same bytes cross the links as with two all-reduces, and the work of the norms and residual
    adds is divided by W. The first layer takes its slice of the full hidden state, the last one
    gathers its output. Without the conditions of ``_sequence_parallel_applies`` (gradients, a
    decode step) it is the layer's own forward."""
    group, rank, world, first, last = self._nmspmm_sequence_parallel
    pe = kwargs.get("position_embeddings")
    if args or not isinstance(pe, (tuple, list)) or not _sequence_parallel_applies(hidden_states, world,
                                                                                    pe[0].shape[-2]):
        return super(type(self), self).forward(hidden_states, *args, **kwargs)
    if first:
        hidden_states = hidden_states.chunk(world, 1)[rank]
    residual = hidden_states
    x = self.input_layernorm(hidden_states)
    ex = peer_exchange(group, x, x.numel() * x.element_size())
    x = ex.all_gather(x, view=True) if ex is not None else _gather_sequence(x, group, world)
    hidden_states = residual + self.self_attn(hidden_states=x, **kwargs)[0]
    residual = hidden_states
    x = self.post_attention_layernorm(hidden_states)
    x = ex.all_gather(x, view=True) if ex is not None else _gather_sequence(x, group, world)
    hidden_states = residual + self.mlp(x)
    if not last:
        return hidden_states
    return ex.all_gather(hidden_states) if ex is not None else _gather_sequence(hidden_states, group, world)


_SEQUENCE_PARALLEL_CLASSES: dict = {}


def _enable_sequence_parallel(model: nn.Module, rank: int, world: int, group) -> int:
    """Make every Llama-style decoder layer of ``model`` (input_layernorm, self_attn with a
    row-parallel o_proj, post_attention_layernorm, mlp with a row-parallel down_proj) sequence
    parallel (its class becomes a subclass with ``_sequence_parallel_forward``); returns how many."""
    layers = [m for m in model.modules()
              if all(hasattr(m, n) for n in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"))
              and isinstance(getattr(m.self_attn, _ATTN_ROW, None), _RowParallel)
              and isinstance(getattr(m.mlp, _MLP_ROW, None), _RowParallel)]
    for i, layer in enumerate(layers):
        cls = type(layer)
        if cls not in _SEQUENCE_PARALLEL_CLASSES.values():
            if cls not in _SEQUENCE_PARALLEL_CLASSES:
                _SEQUENCE_PARALLEL_CLASSES[cls] = type(f"SequenceParallel{cls.__name__}", (cls,),
                                                       {"forward": _sequence_parallel_forward})
            layer.__class__ = _SEQUENCE_PARALLEL_CLASSES[cls]
        layer._nmspmm_sequence_parallel = (group, rank, world, i == 0, i == len(layers) - 1)
        getattr(layer.self_attn, _ATTN_ROW).tp_sequence_parallel = True
        getattr(layer.mlp, _MLP_ROW).tp_sequence_parallel = True
    return len(layers)


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
def parallelize_(model: nn.Module, mesh_or_group=None, *, sequence_parallel: bool = False) -> nn.Module:
    """Split a model already passed through :func:`nmspmm.sparsify_` over the ranks of
    ``mesh_or_group`` (a 1-D ``DeviceMesh``, a ``ProcessGroup``, or None for the default group),
    in place, and return it. Every rank must call it on an identical full model (same weights),
    placed on that rank's device. All checks (:func:`check_parallelizable`) run before anything
    changes.

    ``sequence_parallel=True`` also splits the tokens of each decoder layer's norms and residual
    adds over the ranks where the sequence divides by W and no gradient is recorded (prefill
    under ``torch.no_grad`` / ``inference_mode``), with a reduce-scatter and an all-gather in
    place of each all-reduce: faster prefill, the same logits. While a CUDA graph is captured
    these collectives run on the copy engines, overlapped with the row-parallel products
    (:mod:`nmspmm.peer_exchange`; warm up eagerly first). The intermediate hidden states
    (``output_hidden_states``) of such a forward are then each rank's slice of the sequence,
    except the last."""
    import torch.distributed as dist

    group = _resolve_group(mesh_or_group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    check_parallelizable(model, world)
    attns, mlps = _blocks(model)
    for blocks, columns, row in ((attns, _ATTN_COLUMN, _ATTN_ROW), (mlps, _MLP_COLUMN, _MLP_ROW)):
        for _, block in blocks:
            for name in columns:
                setattr(block, name, _shard_layer(block._modules[name], "column", rank, world, group))
            setattr(block, row, _shard_layer(block._modules[row], "row", rank, world, group))
    _split_vocab(model, rank, world, group)
    if sequence_parallel:
        _enable_sequence_parallel(model, rank, world, group)
    model._nmspmm_tp = (rank, world)
    return model


def _shard_layer(old: nn.Module, kind: str, rank: int, world: int, group) -> nn.Module:
    new = _split(old, kind, rank, world, group)
    if getattr(old, "_with_col_info", False):
        new.enable_col_info()
    new.train(old.training)
    if old.bias is not None:  # the shard's bias trains as the full layer's did
        new.bias.requires_grad_(old.bias.requires_grad)
    return new


# ------------------------------------------------------------------ torch.distributed.tensor.parallel
class _NMStyle(_ParallelStyle):
    """Shared part of the two styles: ``_apply(module, device_mesh)`` turns ``module`` (an
    :class:`~nmspmm.NMLinear`, a :class:`~nmspmm.CSRLinear` or a dense ``nn.Linear`` with the full
    weight, identical on every rank) into this rank's shard in place, so ``parallelize_module``'s
    plan dictionaries (which keep the module object) work."""

    kind = ""

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        import torch.distributed as dist

        name = type(self).__name__
        if isinstance(module, _PARALLEL):
            raise ValueError(f"nmspmm.{name}: the layer is already tensor-parallel ({type(module).__name__})")
        if not isinstance(module, (NMLinear, CSRLinear, nn.Linear)):
            raise ValueError(f"nmspmm.{name}: expects {_SPLITTABLE}, got a {type(module).__name__}")
        group = _resolve_group(device_mesh)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        problem = _split_problem(module, "the layer", self.kind, world)
        if problem:
            raise ValueError(f"nmspmm.{name}: {problem}")
        with torch.no_grad():
            shard = _shard_layer(module, self.kind, rank, world, group)
        # The plan keeps the module object: it becomes the shard (class, parameters, buffers).
        module.__class__ = type(shard)
        module.__dict__.clear()
        module.__dict__.update(shard.__dict__)
        return module

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NMColwiseParallel(_NMStyle):
    """``parallelize_module`` style: this rank keeps outputs ``[r*out/W, (r+1)*out/W)`` (whole
    L-vectors of an NMLinear; rows of a CSRLinear or a dense Linear); input replicated, output sharded on the last dimension, as local
    tensors (``ColwiseParallel`` with ``use_local_output=True``). No communication."""

    kind = "column"


class NMRowwiseParallel(_NMStyle):
    """``parallelize_module`` style: this rank keeps inputs ``[r*in/W, (r+1)*in/W)`` (whole
    M-windows of an NMLinear; the nonzeros in those columns of a CSRLinear; those columns of a
    dense Linear); input sharded on the last dimension, partial products summed by one
    all-reduce and the bias added once; a replicated local output (``RowwiseParallel``)."""

    kind = "row"


class NMVocabParallel(_ParallelStyle):
    """``parallelize_module`` style for the token embedding (an ``nn.Embedding``) or the output
    head (an ``nn.Linear`` over the vocabulary): this rank keeps vocabulary rows
    ``[r*V/W, (r+1)*V/W)`` and becomes a :class:`VocabParallelEmbedding` (one all-reduce) or a
    :class:`VocabParallelLMHead` (the logits gathered). Applied one module at a time, tied weights
    become two shards; :func:`parallelize_` keeps them one."""

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        import torch.distributed as dist

        if isinstance(module, _PARALLEL):
            raise ValueError(f"nmspmm.NMVocabParallel: the layer is already tensor-parallel ({type(module).__name__})")
        if type(module) not in (nn.Embedding, nn.Linear):
            raise ValueError(f"nmspmm.NMVocabParallel: expects an nn.Embedding or an nn.Linear head, got a "
                             f"{type(module).__name__}")
        group = _resolve_group(device_mesh)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        embedding = type(module) is nn.Embedding
        vocab = module.num_embeddings if embedding else module.out_features
        if vocab % world:
            raise ValueError(f"nmspmm.NMVocabParallel: the vocabulary ({vocab}) is not divisible by "
                             f"world_size={world}")
        lo, hi = _vocab_range(vocab, rank, world)
        weight = module.weight.detach()[lo:hi].clone()
        if embedding:
            shard = _vocab_embedding(weight, module.padding_idx, lo, rank, world, group,
                                     module.weight.requires_grad)
        else:
            shard = _vocab_head(nn.Parameter(weight, requires_grad=module.weight.requires_grad),
                                None if module.bias is None else module.bias.detach()[lo:hi].clone(),
                                rank, world, group)
        module.__class__ = type(shard)
        module.__dict__.clear()
        module.__dict__.update(shard.__dict__)
        return module

    def __repr__(self) -> str:
        return "NMVocabParallel()"


def llama_tp_plan(prefix: str = "model.layers.*", vocab: Tuple[str, ...] = ("model.embed_tokens", "lm_head")) -> dict:
    """The ``parallelize_module`` plan of :func:`parallelize_` for a Hugging Face Llama-style
    model: q/k/v and gate/up with :class:`NMColwiseParallel`, o and down with
    :class:`NMRowwiseParallel`, under ``prefix`` (the decoder layers); the modules named in
    ``vocab`` (the embedding and the head; ``()`` keeps them replicated) with
    :class:`NMVocabParallel`."""
    plan = {f"{prefix}.self_attn.{n}": NMColwiseParallel() for n in _ATTN_COLUMN}
    plan[f"{prefix}.self_attn.{_ATTN_ROW}"] = NMRowwiseParallel()
    plan.update({f"{prefix}.mlp.{n}": NMColwiseParallel() for n in _MLP_COLUMN})
    plan[f"{prefix}.mlp.{_MLP_ROW}"] = NMRowwiseParallel()
    plan.update({name: NMVocabParallel() for name in vocab})
    return plan


# ------------------------------------------------------------------------ sharded checkpoint load
def _shard_plan(model: nn.Module, rank: int, world: int) -> dict:
    """{fqn: ("column" | "row", lo, hi)} for every projection parallelize_ splits: the output range
    of a column-parallel layer; the input range of a row-parallel one, in compressed rows for an
    N:M layer."""
    plan = {}
    attns, mlps = _blocks(model)
    for blocks, columns, row in ((attns, _ATTN_COLUMN, _ATTN_ROW), (mlps, _MLP_COLUMN, _MLP_ROW)):
        for fqn, block in blocks:
            for name in columns:
                mod = block._modules[name]
                out = mod.out_features // world
                plan[f"{fqn}.{name}"] = ("column", rank * out, (rank + 1) * out)
            mod = block._modules[row]
            span = mod.in_features // world // mod.M * mod.N if isinstance(mod, NMLinear) else mod.in_features // world
            plan[f"{fqn}.{row}"] = ("row", rank * span, (rank + 1) * span)
    return plan


def _empty_shard(mod: nn.Module, kind: str, world: int, group, rank: int) -> nn.Module:
    bias = mod.bias is not None
    if isinstance(mod, NMLinear):
        dtype = mod.values.dtype
        if kind == "column":
            shard = ColumnParallelNMLinear(mod.in_features, mod.out_features // world, mod.N, mod.M, mod.L,
                                           bias=bias, device="cpu", dtype=dtype)
        else:
            shard = RowParallelNMLinear(mod.in_features // world, mod.out_features, mod.N, mod.M, mod.L,
                                        bias=bias, device="cpu", dtype=dtype)
    else:
        dtype = mod.values.dtype if isinstance(mod, CSRLinear) else mod.weight.dtype
        cls = {(True, "column"): ColumnParallelCSRLinear, (True, "row"): RowParallelCSRLinear,
               (False, "column"): ColumnParallelLinear, (False, "row"): RowParallelLinear}[
                   (isinstance(mod, CSRLinear), kind)]
        inp = mod.in_features if kind == "column" else mod.in_features // world
        out = mod.out_features // world if kind == "column" else mod.out_features
        shard = cls(inp, out, bias=bias, device="cpu" if cls in (ColumnParallelCSRLinear, RowParallelCSRLinear)
                    else "meta", dtype=dtype)
    shard.tp_rank, shard.tp_world, shard.tp_group = rank, world, group
    return shard


def _read_shard(get_slice, fqn: str, layer: nn.Module, kind: str, lo: int, hi: int) -> dict:
    """{name: tensor} of this rank's part of one split layer, read through ``get_slice(key)``
    (a safetensors slice): the slices of an N:M or dense layer; a CSR layer's rows (only their
    nonzeros are read) or, row-parallel, its entries in the rank's columns (the whole layer read)."""
    def full(name):
        return get_slice(f"{fqn}.{name}")[:]

    out = {}
    if isinstance(layer, NMLinear):
        for name in ("values", "indices"):
            part = get_slice(f"{fqn}.{name}")
            if kind == "column":
                out[name] = part[:, lo:hi] if name == "values" else part[:, lo // layer.L:hi // layer.L]
            else:
                out[name] = part[lo:hi]
    elif isinstance(layer, CSRLinear):
        if kind == "column":
            crow = get_slice(f"{fqn}.crow_indices")[lo:hi + 1]
            b, e = int(crow[0]), int(crow[-1])
            out["crow_indices"] = crow - b
            out["col_indices"] = get_slice(f"{fqn}.col_indices")[b:e]
            out["values"] = get_slice(f"{fqn}.values")[b:e]
        else:
            fields = _csr_columns(full("crow_indices"), full("col_indices"), full("values"), lo, hi)
            out.update(zip(("crow_indices", "col_indices", "values"), fields))
    else:
        part = get_slice(f"{fqn}.weight")
        out["weight"] = part[lo:hi] if kind == "column" else part[:, lo:hi]
    if layer.bias is not None:
        out["bias"] = get_slice(f"{fqn}.bias")[lo:hi] if kind == "column" else full("bias")
    return {k: v.contiguous() for k, v in out.items()}


def from_pretrained(directory: str, mesh_or_group=None, *, dtype: Optional[torch.dtype] = None,
                    device=None, model_cls=None, sequence_parallel: bool = False) -> nn.Module:
    """Load an nmspmm checkpoint (``save_pretrained`` of a sparsified model, one or several
    safetensors files) straight into this rank's tensor-parallel shard: the model of
    :func:`parallelize_` on the full checkpoint, but each rank reads only its own slices of the
    split projections and of the split vocabulary (safetensors ``get_slice``), and no full sparse
    weight is built on any rank; the norms are read whole. Call it on every rank of
    the group after ``init_process_group``; ``dtype`` casts the floating tensors, ``device`` moves
    the model after loading, ``sequence_parallel`` is :func:`parallelize_`'s. The checks of :func:`check_parallelizable` run before any tensor is
    read."""
    import json
    import os

    import torch.distributed as dist
    from accelerate import init_empty_weights
    from safetensors import safe_open

    from . import hf

    hf.check_transformers()
    from transformers import AutoConfig

    path = os.path.join(directory, "config.json")
    raw = json.load(open(path)) if os.path.exists(path) else {}
    qc = raw.get("quantization_config")
    if not isinstance(qc, dict) or qc.get("quant_method") != hf.QUANT_METHOD:
        raise ValueError(f"nmspmm.parallel.from_pretrained: {directory} is not an nmspmm checkpoint "
                         "(config.json has no quantization_config with quant_method 'nmspmm')")
    group = _resolve_group(mesh_or_group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    config = AutoConfig.from_pretrained(directory)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the sparse layers are built here, not by the quantizer
    if model_cls is None:
        from transformers import AutoModelForCausalLM as model_cls
    # Parameters on the meta device (nothing allocated), buffers (rotary tables) real.
    with init_empty_weights(include_buffers=False):
        model = model_cls.from_config(config, dtype=dtype or getattr(config, "dtype", None) or torch.float32)
    model.eval()
    for fqn, pattern in qc.get("layers", {}).items():
        linear = model.get_submodule(fqn)
        if list(pattern) == [hf.CSR]:
            new = CSRLinear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta",
                            dtype=linear.weight.dtype)
        else:
            N, M, L = pattern
            new = NMLinear(linear.in_features, linear.out_features, N, M, L, bias=linear.bias is not None,
                           device="meta", dtype=linear.weight.dtype)
        parent, _, leaf = fqn.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
    check_parallelizable(model, world)
    plan = _shard_plan(model, rank, world)
    full_layers = {fqn: model.get_submodule(fqn) for fqn in plan}
    for fqn, (kind, _, _) in plan.items():
        parent, _, leaf = fqn.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, leaf, _empty_shard(owner._modules[leaf], kind, world, group, rank))
    # The vocabulary slices {fqn: (lo, hi)} of the embedding and the head, where parallelize_ splits them.
    vocab_plan, vocab = {}, _vocab_modules(model)
    if vocab is not None and vocab[0].num_embeddings % world == 0:
        emb, head, tied = vocab
        names = {id(m): fqn for fqn, m in model.named_modules()}
        lo, hi = _vocab_range(emb.num_embeddings, rank, world)
        new_emb = _vocab_embedding(torch.empty(hi - lo, emb.embedding_dim, device="meta", dtype=emb.weight.dtype),
                                   emb.padding_idx, lo, rank, world, group)
        vocab_plan[names[id(emb)]] = (lo, hi)
        model.set_input_embeddings(new_emb)
        if head is not None:
            vocab_plan[names[id(head)]] = (lo, hi)
            weight = new_emb.weight if tied else nn.Parameter(
                torch.empty(hi - lo, head.in_features, device="meta", dtype=head.weight.dtype), requires_grad=False)
            bias = None if head.bias is None else torch.empty(hi - lo, device="meta", dtype=head.bias.dtype)
            model.set_output_embeddings(_vocab_head(weight, bias, rank, world, group))

    files = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"nmspmm.parallel.from_pretrained: no .safetensors file in {directory}")
    wanted = model.state_dict(keep_vars=True)
    handles = [safe_open(file, "pt") for file in files]
    where = {key: f for f in handles for key in f.keys()}

    def get_slice(key):
        if key not in where:
            raise ValueError(f"nmspmm.parallel.from_pretrained: the checkpoint lacks {key}")
        return where[key].get_slice(key)

    state = {}
    for fqn, (kind, lo, hi) in plan.items():  # this rank's part of every split layer
        layer = full_layers[fqn]
        for name, t in _read_shard(get_slice, fqn, layer, kind, lo, hi).items():
            state[f"{fqn}.{name}"] = t
        if isinstance(layer, NMLinear):
            # The full layer's shape and pattern, checked; the shard keeps its own.
            full = where[f"{fqn}._extra_state"].get_tensor(f"{fqn}._extra_state").tolist() \
                if f"{fqn}._extra_state" in where else None
            if full is None or full[:4] != [1, layer.N, layer.M, layer.L]:
                raise ValueError(f"nmspmm.parallel.from_pretrained: {fqn}._extra_state is {full}, the layer "
                                 f"is {layer.N}:{layer.M}:{layer.L}")
            state[f"{fqn}._extra_state"] = model.get_submodule(fqn).get_extra_state()
    for key, f in where.items():  # the replicated tensors whole, the vocabulary's rows by slice
        fqn = key.rpartition(".")[0]
        if key in wanted and fqn in vocab_plan:
            lo, hi = vocab_plan[fqn]
            state[key] = f.get_slice(key)[lo:hi].contiguous()
        elif key in wanted and fqn not in plan:
            state[key] = f.get_tensor(key)  # (not wanted: the zero-size dense-loader markers, tied copies)
    if dtype is not None:
        state = {k: t.to(dtype) if t.is_floating_point() else t for k, t in state.items()}
    missing = [k for k in wanted if k not in state and not k.endswith("lm_head.weight")]
    if missing:
        raise ValueError(f"nmspmm.parallel.from_pretrained: the checkpoint lacks {', '.join(missing[:8])}")
    model.load_state_dict(state, strict=False, assign=True)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, VocabParallelLMHead) and vocab[2]:  # tied: the head shares the embedding's slice
        head.weight = model.get_input_embeddings().weight
    elif "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    for fqn, p in model.named_parameters():
        if p.is_meta:
            raise ValueError(f"nmspmm.parallel.from_pretrained: {fqn} was not loaded from the checkpoint")
        p.requires_grad_(False)
    for mod in model.modules():
        if isinstance(mod, NMLinear):
            mod.rebuild_metadata()
    if sequence_parallel:
        _enable_sequence_parallel(model, rank, world, group)
    model._nmspmm_tp = (rank, world)
    return model.to(device) if device is not None else model
