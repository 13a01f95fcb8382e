"""Recovery of the kept values of a pruned model by distillation from the dense one.

:func:`trainable_values` makes the kept values of every :class:`~nmspmm.NMLinear` of a model
trainable (mask frozen; the gradient is ``(grad_y^T x)`` gathered at the kept positions), and
:func:`recover` fine-tunes them, or the pruned dense weights of ``nn.Linear`` layers under their
masks, by distillation from the dense model (docs/pruning.md).
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Iterable, List, Mapping, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ._ops import ops
from .nn import NMLinear
from .pruning import _as_batches, _move, _progress

__all__ = ["spmm_trainable", "trainable_values", "recover"]

def _kept_columns(indices: torch.Tensor, N: int, M: int, L: int, out_features: int) -> torch.Tensor:
    """int64 [in*N/M, out]: the input column of every stored value."""
    rows = indices.shape[0]
    base = (torch.arange(rows, device=indices.device) // N * M)[:, None]
    return base + indices.long().repeat_interleave(L, dim=1)[:, :out_features]


class _SpmmValues(torch.autograd.Function):
    """y = x @ decompress(values).T + bias with gradients for x, the kept values and the bias."""

    @staticmethod
    def forward(ctx, x, values, bias, indices, cols, N, M, L, col_info, packed_indices, tc_meta):
        ctx.save_for_backward(x, values, indices, cols)
        ctx.pattern = (N, M, L)
        ctx.has_bias = bias is not None
        return ops.spmm(x.detach(), values.detach(), indices, N, M, L,
                        None if bias is None else bias.detach(), col_info, packed_indices, tc_meta)

    @staticmethod
    def backward(ctx, gy):
        x, values, indices, cols = ctx.saved_tensors
        N, M, L = ctx.pattern
        gx = gv = gb = None
        g2 = gy.reshape(-1, gy.shape[-1])
        if ctx.needs_input_grad[0]:
            dense = ops.decompress(values.detach(), indices, N, M, L)
            gx = (g2 @ dense.to(g2.dtype)).reshape(*gy.shape[:-1], dense.shape[1]).to(x.dtype)
        if ctx.needs_input_grad[1]:
            x2 = x.reshape(-1, x.shape[-1]).to(g2.dtype)
            gW_t = x2.T @ g2                                         # [in, out]
            gv = gW_t.gather(0, cols).to(values.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gv, gb, None, None, None, None, None, None, None, None


def spmm_trainable(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, N: int, M: int,
                   L: int, bias: Optional[torch.Tensor] = None,
                   cols: Optional[torch.Tensor] = None, col_info: Optional[torch.Tensor] = None,
                   packed_indices: Optional[torch.Tensor] = None,
                   tc_meta: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``nmspmm.spmm`` with gradients for ``values`` too (the mask, ``indices``, stays frozen):
    ``grad_values[u, j] = (grad_y^T x)[j, col(u, j)]``. ``cols`` (from the indices) is recomputed
    when not given; ``col_info``/``packed_indices``/``tc_meta`` are the derived metadata, as for ``spmm``."""
    if cols is None:
        cols = _kept_columns(indices, N, M, L, values.shape[1])
    return _SpmmValues.apply(x, values, bias, indices, cols, N, M, L, col_info, packed_indices, tc_meta)


def _trainable_forward(self, x):
    v = self.values_param
    y = spmm_trainable(x.to(v.dtype), v, self._train_indices, self.N, self.M, self.L, self.bias, self._cols,
                       self.col_info, self.packed_indices, self.tc_meta)
    return y.to(x.dtype)


@contextlib.contextmanager
def trainable_values(model: nn.Module):
    """Inside the context every :class:`~nmspmm.NMLinear` of ``model`` exposes its kept values as
    an ``nn.Parameter`` (``values_param``, shared storage with the ``values`` buffer) and its forward
    computes gradients for them; the indices (the mask) never change. Yields the parameters."""
    layers = [m for m in model.modules() if isinstance(m, NMLinear)]
    split = [type(m).__name__ for m in layers if getattr(m, "tp_world", 1) > 1]
    if split:
        # Their forward reduces over the ranks, which the trainable forward would skip.
        raise ValueError(f"nmspmm.trainable_values: the model has tensor-parallel layers ({split[0]}); "
                         f"recover the values before nmspmm.parallelize_")
    params = []
    for m in layers:
        m.values_param = nn.Parameter(m.values.detach(), requires_grad=True)  # same storage
        m._train_indices = m.canonical_indices()  # the backward's decompress reads the canonical form
        m._cols = _kept_columns(m._train_indices, m.N, m.M, m.L, m.out_features)
        m.forward = types.MethodType(_trainable_forward, m)
        params.append(m.values_param)
    try:
        yield params
    finally:
        for m in layers:
            with torch.no_grad():
                m.values.copy_(m.values_param.detach())
            del m.forward
            del m.values_param
            del m._cols
            del m._train_indices


def _masked_dense(model: nn.Module, masks: Mapping[str, torch.Tensor]) -> List[Tuple[nn.Parameter, torch.Tensor]]:
    """(weight, mask) of every Linear named in ``masks``; checks that the weight is zero off the
    mask (a pruned dense weight from :func:`prune_linears`)."""
    mods = dict(model.named_modules())
    out = []
    for fqn, mask in masks.items():
        mod = mods.get(fqn)
        if not isinstance(mod, nn.Linear):
            raise ValueError(f"nmspmm.recover: masks names {fqn!r}, which is not an nn.Linear of the student")
        m = mask.to(mod.weight.device, torch.bool)
        if m.shape != mod.weight.shape:
            raise ValueError(f"nmspmm.recover: mask of {fqn!r} has shape {tuple(m.shape)}, "
                             f"its weight {tuple(mod.weight.shape)}")
        if bool((mod.weight.detach()[~m] != 0).any()):
            raise ValueError(f"nmspmm.recover: {fqn!r} has nonzero weights outside its mask")
        out.append((mod.weight, m))
    return out


def recover(student: nn.Module, teacher: nn.Module, batches: Iterable, steps: int,
            lr: float = 1e-4, temperature: float = 1.0, weight_decay: float = 0.0,
            progress: bool = True, log_every: int = 0, *, warmup: int = 0,
            max_grad_norm: Optional[float] = None,
            masks: Optional[Mapping[str, torch.Tensor]] = None) -> List[float]:
    """Fine-tune the kept values of ``student``'s sparse layers (masks frozen) by distillation
    from ``teacher`` (the dense model): minimise ``KL(softmax(teacher/T) || softmax(student/T))``
    over the next-token logits of ``batches`` (input_ids tensors or dicts of model kwargs, cycled
    for ``steps`` optimizer steps) with Adam: ``lr`` rises linearly over the first ``warmup``
    steps, then decays to 0 along a cosine; gradients are clipped to ``max_grad_norm`` (global L2)
    when given. Every other parameter of the student stays frozen. Returns the loss of every step.
    Costs about 4 forward passes of the model per token (teacher forward, student forward +
    backward).

    The sparse layers are the student's :class:`~nmspmm.NMLinear` modules (their ``values``), or,
    with ``masks`` (``{fqn: bool mask}`` as returned by :func:`prune_linears`), the named
    ``nn.Linear`` layers holding pruned dense weights: their weights are trained with the gradient
    zeroed off the mask and stay exactly zero there, which is the same optimisation as training
    the compressed values (the values' gradient is the dense gradient at the kept positions), on
    any device, before ``nmspmm.compress(weight, N, M, L, mask=mask)``."""
    batches = _as_batches(batches)
    if steps < 0 or warmup < 0:
        raise ValueError(f"nmspmm.recover: steps and warmup must be >= 0, got {steps}, {warmup}")
    dev = next(student.parameters()).device
    frozen = [p for p in student.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    was_training = student.training
    student.eval()  # no dropout: the recipe tunes values only
    teacher.eval()
    losses: List[torch.Tensor] = []
    dense = _masked_dense(student, masks) if masks is not None else None

    def lr_at(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        decay = max(steps - warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * min(s - warmup, decay) / decay))

    ctx = contextlib.nullcontext([w for w, _ in dense]) if dense is not None else trainable_values(student)
    try:
        with ctx as params:
            for p in params:
                p.requires_grad_(True)
            hooks = [w.register_hook(lambda g, m=m: g * m) for w, m in dense] if dense is not None else []
            opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
            with _progress(steps, "nmspmm recover", progress) as bar:
                for step in range(steps):
                    b = _move(batches[step % len(batches)], dev)
                    with torch.no_grad():
                        t_logits = teacher(**b, use_cache=False).logits.float()
                    s_logits = student(**b, use_cache=False).logits.float()
                    V = s_logits.shape[-1]
                    loss = F.kl_div(F.log_softmax(s_logits.reshape(-1, V) / temperature, -1),
                                    F.log_softmax(t_logits.reshape(-1, V) / temperature, -1),
                                    log_target=True, reduction="batchmean") * temperature ** 2
                    del t_logits, s_logits
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                    opt.step()
                    sched.step()
                    if dense is not None:  # Adam keeps zero-gradient entries at zero; make it exact
                        with torch.no_grad():
                            for w, m in dense:
                                w.mul_(m)
                    losses.append(loss.detach())
                    bar.update(1)
                    if progress or (log_every and (step % log_every == 0 or step == steps - 1)):
                        cur = float(losses[-1])
                        bar.set_postfix_str(f"kl={cur:.4f}")
                        if log_every and (step % log_every == 0 or step == steps - 1):
                            print(f"nmspmm recover step {step}/{steps} kl={cur:.4f} "
                                  f"lr={sched.get_last_lr()[0]:.3g}", flush=True)
            for h in hooks:
                h.remove()
    finally:
        if dense is not None:
            for w, _ in dense:
                w.requires_grad_(False)
        for p in frozen:
            p.requires_grad_(True)
        student.train(was_training)
    return [float(v) for v in torch.stack(losses).cpu()] if losses else []
