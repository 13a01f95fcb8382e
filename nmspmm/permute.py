"""Zero-cost output-row permutations for vector-wise N:M pruning.

Under VW-N:M the L output rows of a vector share one mask per window of M inputs. Rows that want
the same inputs (their important weights sit at the same positions) lose little when grouped
together; rows that want different inputs lose a lot. Permuting the output rows of a projection,
and undoing the permutation where its output is consumed, changes nothing in the dense model but
lets the pruner choose which rows share a vector.

Where the permutation is absorbed exactly (Llama-style layers):

* MLP: ``down(act(gate(x)) * up(x))`` -- gate and up rows take the same permutation P, down's input
  columns take P too. Exact for every P (the activation and product are elementwise).
* Attention values: ``o(concat_h softmax(q_h k_h^T) v_{kv(h)})`` -- v rows may be permuted within
  each kv head (head_dim rows), and o's input columns of every query head that reads that kv head
  take the same permutation. Exact for every within-head P.
* q and k are not permuted: RoPE rotates fixed dimension pairs at fixed frequencies, so a
  permutation of head dimensions changes the attention scores. o and down output rows feed the
  residual stream and are not permuted either (that would permute the whole model's hidden state).

The permutation is found by alternating optimisation of the retained importance (like k-means with
clusters of exactly L rows): given the groups, each group's mask is the per-window top-N of its
summed scores; given the masks, rows are reassigned to groups (capacity L) greedily by the score
each mask keeps of them. The retained score never decreases below the identity grouping's: the
best grouping seen is returned.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = ["vector_permutation", "mlp_permutation", "retained_score", "permute_mlp_",
           "permute_attention_v_"]


def _group_masks(score: torch.Tensor, groups: torch.Tensor, n_groups: int, N: int, M: int) -> torch.Tensor:
    """float [n_groups, in]: per group, 1 at the per-window top-N of its summed rows' scores."""
    out, inp = score.shape
    summed = torch.zeros(n_groups, inp, dtype=score.dtype, device=score.device).index_add_(0, groups, score)
    s = summed.reshape(n_groups, inp // M, M)
    keep = s.topk(N, dim=-1).indices
    return torch.zeros_like(s).scatter_(-1, keep, 1.0).reshape(n_groups, inp)


def retained_score(score: torch.Tensor, N: int, M: int, L: int,
                   perm: Optional[torch.Tensor] = None) -> float:
    """Sum of ``score`` kept by the vector-wise N:M mask of the rows ordered by ``perm``."""
    s = score if perm is None else score[perm]
    out = s.shape[0]
    groups = torch.arange(out, device=s.device) // L
    masks = _group_masks(s, groups, out // L, N, M)
    return float((masks[groups] * s).sum())


def _assign(gain: torch.Tensor, L: int) -> torch.Tensor:
    """Greedy capacity-L assignment of rows to groups maximising ``gain[row, group]``."""
    rows, n_groups = gain.shape
    order = torch.argsort(gain.flatten(), descending=True)
    r_of = (order // n_groups).tolist()
    g_of = (order % n_groups).tolist()
    group = [-1] * rows
    free = [L] * n_groups
    left = rows
    for r, g in zip(r_of, g_of):
        if group[r] < 0 and free[g] > 0:
            group[r] = g
            free[g] -= 1
            left -= 1
            if left == 0:
                break
    return torch.tensor(group, dtype=torch.long, device=gain.device)


def _optimise(score: torch.Tensor, N: int, M: int, L: int, iters: int) -> Tuple[torch.Tensor, float, float]:
    """Permutation of the rows of ``score`` [rows, in]; returns (perm, retained, identity)."""
    rows = score.shape[0]
    n_groups = rows // L
    groups = torch.arange(rows, device=score.device) // L
    base = best = None
    best_groups = groups
    for _ in range(iters):
        masks = _group_masks(score, groups, n_groups, N, M)
        kept = float((masks[groups] * score).sum())
        if base is None:
            base = kept
        if best is not None and kept <= best * (1 + 1e-7):
            if kept > best:
                best, best_groups = kept, groups
            break
        best, best_groups = kept, groups
        groups = _assign(score @ masks.T, L)
    # Rows of group g become rows g*L .. g*L+L-1 (stable within the group).
    perm = torch.argsort(best_groups * rows + torch.arange(rows, device=score.device))
    return perm, best, base


def vector_permutation(scores: Sequence[torch.Tensor], N: int, M: int, L: int,
                       block: Optional[int] = None, iters: int = 20) -> Tuple[torch.Tensor, float]:
    """A row permutation shared by the projections whose importance ``scores`` ([out, in_i] each,
    same out) are given, grouping rows that want the same inputs into L-vectors.

    ``block``: rows move only within consecutive blocks of that many rows (e.g. head_dim).
    Returns ``(perm, gain)``: ``perm`` [out] int64 (new row r is old row perm[r]) and the relative
    gain of retained score over the identity order.
    """
    score = torch.cat([s.float() for s in scores], dim=1)
    out = score.shape[0]
    if L == 1 or out <= L:
        return torch.arange(out, device=score.device), 0.0
    block = out if block is None else block
    if out % block or block % L:
        raise ValueError(f"nmspmm.permute: out={out} must be a multiple of block={block}, a multiple of L={L}")
    # The concatenated score is N:M per projection: every input width is a multiple of M.
    perm = torch.empty(out, dtype=torch.long, device=score.device)
    kept = ident = 0.0
    for b0 in range(0, out, block):
        p, k, i = _optimise(score[b0:b0 + block], N, M, L, iters)
        perm[b0:b0 + block] = p + b0
        kept += k
        ident += i
    return perm, (kept / ident - 1.0) if ident > 0 else 0.0


def mlp_permutation(scores: Sequence[torch.Tensor], N: int, M: int, L: int,
                    iters: int = 20) -> Tuple[torch.Tensor, float]:
    """Row permutation for a gated MLP from the scores of gate and up (see vector_permutation)."""
    return vector_permutation(scores, N, M, L, iters=iters)


@torch.no_grad()
def _rows_(linear: nn.Linear, perm: torch.Tensor) -> None:
    linear.weight.copy_(linear.weight[perm.to(linear.weight.device)])
    if linear.bias is not None:
        linear.bias.copy_(linear.bias[perm.to(linear.bias.device)])


@torch.no_grad()
def _cols_(linear: nn.Linear, perm: torch.Tensor) -> None:
    linear.weight.copy_(linear.weight[:, perm.to(linear.weight.device)])


def permute_mlp_(mlp: nn.Module, perm: torch.Tensor) -> None:
    """Permute a gated MLP's intermediate features in place: rows of ``gate_proj`` and ``up_proj``,
    columns of ``down_proj``. The module computes exactly the same function."""
    _rows_(mlp.gate_proj, perm)
    _rows_(mlp.up_proj, perm)
    _cols_(mlp.down_proj, perm)


def permute_attention_v_(attn: nn.Module, perm: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Permute the value features of an attention module in place: rows of ``v_proj`` (``perm``
    must map every kv head's rows onto themselves) and, for every query head, the matching columns
    of ``o_proj``. Exact for grouped-query attention (query head h reads kv head h // group).
    Returns the permutation applied to o's columns."""
    v, o = attn.v_proj, attn.o_proj
    kv_rows = v.out_features
    n_kv = kv_rows // head_dim
    n_q = o.in_features // head_dim
    perm = perm.to(v.weight.device)
    if perm.shape[0] != kv_rows or not torch.equal(perm // head_dim,
                                                   torch.arange(kv_rows, device=perm.device) // head_dim):
        raise ValueError("nmspmm.permute_attention_v_: perm must permute rows within each kv head")
    group = n_q // n_kv
    cols = torch.cat([perm[(h // group) * head_dim:(h // group + 1) * head_dim] - (h // group) * head_dim
                      + h * head_dim for h in range(n_q)])
    _rows_(v, perm)
    _cols_(o, cols)
    return cols
