"""Calibrated one-shot pruning to vector-wise N:M, and recovery of the kept values.

Methods (every (N, M, L) the format supports):

* ``magnitude``: per window of M inputs and vector of L outputs, keep the N inputs with the
  largest L2 norm over the vector's rows (``nmspmm.prune``). Needs no data.
* ``wanda``: score ``|W[j, c]| * ||X[:, c]||_2`` (the input feature's norm over the calibration
  tokens), summed over the L rows of each vector; keep the N best per (vector, window). Weights are
  not changed.
* ``sparsegpt``: optimal-brain-surgeon pruning from the layer Hessian ``H = X^T X`` (damped), as in
  SparseGPT, with the mask chosen per (L-vector, M-window): at the first column of each window the
  OBS saliency ``w^2 / [chol(H^-1)]_cc^2`` of every candidate is summed over the vector's L rows and
  the N best positions are kept; then, column by column, the pruned weights' error is compensated
  on the not yet processed columns (blocks of ``blocksize`` columns, lazy batched updates).

With calibration data the projections are pruned layer by layer (``sequential=True``): the inputs
of a decoder layer come from the already-pruned layers below it, and inside a Llama-style layer
the projections are pruned in execution order (q/k/v, o, gate/up, down) so each sees the outputs
of the pruned ones before it. Optionally (``permute=True``) the rows of gate/up (with the columns
of down) and of v (within heads, with the columns of o) are permuted first so that rows wanting
the same inputs share an L-vector (``nmspmm.permute``); the permutation is absorbed exactly.

Recovery of the kept values after pruning is :mod:`nmspmm.recovery`. This module works on
``nn.Linear`` weights only and imports nothing from :mod:`nmspmm.nn`, which builds on it.
"""
from __future__ import annotations

import contextlib
import fnmatch
import time
import types
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._ops import ops

# Leaf names of the projections sparsify_ swaps by default (HF Llama/Mistral/Qwen; PEFT's usual
# target_modules). lm_head and embeddings are never swapped.
DEFAULT_TARGETS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})

Pattern = Tuple[int, int, int]
PatternSpec = Union[None, Mapping[str, Optional[Pattern]], Callable[[str, nn.Module], Optional[Pattern]]]

METHODS = ("magnitude", "wanda", "sparsegpt")

__all__ = ["METHODS", "vw_topk_mask", "unstructured_mask", "magnitude_mask", "wanda_mask", "sparsegpt_prune",
           "sparsegpt_prune_unstructured",
           "resolve_pattern", "prune_linears", "PruneStats", "layer_sensitivity", "allocate_patterns",
           "DEFAULT_TARGETS"]


# ------------------------------------------------------------------------------------ masks
def vw_topk_mask(score: torch.Tensor, N: int, M: int, L: int) -> torch.Tensor:
    """Bool mask [out, in]: per vector of L consecutive rows and window of M consecutive columns,
    keep the N columns whose score, summed over the vector's rows, is largest."""
    out, inp = score.shape
    s = score.float().reshape(out // L, L, inp // M, M).sum(1)          # [out/L, in/M, M]
    keep = s.topk(N, dim=-1).indices
    m = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, keep, True)
    return m.unsqueeze(1).expand(out // L, L, inp // M, M).reshape(out, inp)


def unstructured_mask(score: torch.Tensor, sparsity: float, per_row: bool = True) -> torch.Tensor:
    """Bool mask [out, in] keeping the largest scores: round((1 - sparsity) * in) per row, or, with
    ``per_row=False``, round((1 - sparsity) * out * in) over the whole matrix; ties keep the lower
    index."""
    if not isinstance(sparsity, (int, float)) or isinstance(sparsity, bool) or not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"nmspmm: sparsity must be a number in [0, 1], got {sparsity!r}")
    s = score.detach().float()
    out, inp = s.shape
    flat = s if per_row else s.reshape(1, -1)
    keep = round((1.0 - sparsity) * flat.shape[1])
    mask = torch.zeros_like(flat, dtype=torch.bool)
    if keep > 0:
        # Stable descending order: equal scores keep the lower index.
        order = torch.sort(flat, dim=1, descending=True, stable=True).indices[:, :keep]
        mask.scatter_(1, order, True)
    return mask.reshape(out, inp)


def magnitude_mask(weight: torch.Tensor, N: int, M: int, L: int) -> torch.Tensor:
    """Magnitude mask (L2 norm of each candidate over the vector's rows); ``nmspmm.prune``, run
    on the CPU for a CUDA weight when this build has no CUDA kernels."""
    w = weight.detach()
    if w.is_cuda and not torch._C._dispatch_has_kernel_for_dispatch_key("nmspmm::prune", "CUDA"):
        return ops.prune(w.cpu(), N, M, L).to(w.device)
    return ops.prune(w, N, M, L)


def wanda_mask(weight: torch.Tensor, feature_norm: torch.Tensor, N: int, M: int, L: int) -> torch.Tensor:
    """Wanda mask: ``|W| * feature_norm[None, :]`` summed over each L-vector, N best per window.
    ``feature_norm[in]`` is the L2 norm of each input feature over the calibration tokens."""
    return vw_topk_mask(weight.detach().float().abs() * feature_norm.float()[None, :], N, M, L)


def _sparsegpt(weight: torch.Tensor, hessian: torch.Tensor, blocksize: int, percdamp: float, step: int,
               select) -> Tuple[torch.Tensor, torch.Tensor]:
    """The SparseGPT sweep (OBS updates column by column, lazily per block of ``blocksize``
    columns): at every ``step``-th column of a block, ``select(saliency [out, cols])`` picks the
    kept entries of the next ``step`` columns (fewer at the block's end)."""
    W = weight.detach().float().clone()
    out, cols = W.shape
    H = hessian.detach().to(device=W.device, dtype=torch.float32).clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = percdamp * torch.mean(torch.diag(H))
    H.diagonal().add_(damp)
    # Upper Cholesky factor of H^-1: row c holds the OBS update of column c onto columns > c.
    for attempt in range(6):
        try:
            Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
            break
        except RuntimeError:  # not positive definite in float32: more damping
            H.diagonal().add_(damp * 10 ** attempt)
    else:
        raise RuntimeError("nmspmm.sparsegpt_prune: the damped Hessian is not positive definite")
    mask = torch.zeros(out, cols, dtype=torch.bool, device=W.device)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        d1 = torch.diag(Hinv1)
        for i in range(i2 - i1):
            if i % step == 0:
                j = min(i + step, i2 - i1)
                sal = W1[:, i:j] ** 2 / d1[i:j][None, :] ** 2
                mask[:, i1 + i:i1 + j] = select(sal)
            w = W1[:, i]
            q = w * mask[:, i1 + i]
            err = (w - q) / d1[i]
            W1[:, i:].addr_(err, Hinv1[i, i:], alpha=-1)
            Q1[:, i] = q
            Err1[:, i] = err
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return W, mask


@torch.no_grad()
def sparsegpt_prune(weight: torch.Tensor, hessian: torch.Tensor, N: int, M: int, L: int,
                    blocksize: int = 128, percdamp: float = 0.01) -> Tuple[torch.Tensor, torch.Tensor]:
    """Vector-wise N:M SparseGPT on one layer.

    weight [out, in], hessian [in, in] = sum of x x^T over the calibration inputs (any positive
    scale). Returns ``(pruned weight, mask)``: the pruned weight (float32, zeros where pruned) has
    the error of the pruned entries compensated on later columns; mask is bool [out, in],
    vector-wise N:M. ``blocksize`` is rounded up to a multiple of M.
    """
    blocksize = max(M, -(-blocksize // M) * M)
    return _sparsegpt(weight, hessian, blocksize, percdamp, M, lambda sal: vw_topk_mask(sal, N, M, L))


@torch.no_grad()
def sparsegpt_prune_unstructured(weight: torch.Tensor, hessian: torch.Tensor, sparsity: float,
                                 blocksize: int = 128, percdamp: float = 0.01) -> Tuple[torch.Tensor, torch.Tensor]:
    """Unstructured SparseGPT on one layer: in each block of ``blocksize`` columns, the entries of
    lowest saliency w^2 / [H^-1]_cc^2 over the whole block are pruned (``sparsity`` of them; rows
    may keep different counts), the rest updated as in :func:`sparsegpt_prune`."""
    return _sparsegpt(weight, hessian, blocksize, percdamp, blocksize,
                      lambda sal: unstructured_mask(sal, sparsity, per_row=False))


# --------------------------------------------------------------------------- pattern lookup
def resolve_pattern(patterns: PatternSpec, default: Optional[Pattern], fqn: str,
                    module: nn.Module) -> Optional[Pattern]:
    """The (N, M, L) of layer ``fqn``, or None to keep it dense.

    ``patterns`` is None (every layer gets ``default``), a callable ``(fqn, module) -> pattern or
    None``, or a mapping whose keys are full module names or fnmatch globs ("*.mlp.down_proj",
    "model.layers.0.*"); the first matching key wins (exact names before globs), a value of None
    keeps the layer dense, and unmatched layers get ``default``."""
    if patterns is None:
        return default
    if callable(patterns):
        p = patterns(fqn, module)
        return None if p is None else tuple(int(v) for v in p)
    if fqn in patterns:
        p = patterns[fqn]
        return None if p is None else tuple(int(v) for v in p)
    for key, p in patterns.items():
        if fnmatch.fnmatchcase(fqn, key):
            return None if p is None else tuple(int(v) for v in p)
    return default


# ------------------------------------------------------------------------ calibration driver
@dataclass
class PruneStats:
    """What :func:`prune_linears` did: per-layer pattern and output reconstruction error
    ``||X W^T - X W_pruned^T||_F^2 / ||X W^T||_F^2`` on the calibration inputs, time and peak
    memory."""
    method: str
    layers: Dict[str, Pattern] = field(default_factory=dict)
    rel_error: Dict[str, float] = field(default_factory=dict)
    permuted: Dict[str, float] = field(default_factory=dict)  # group -> retained-score gain
    seconds: float = 0.0
    tokens: int = 0


class _HessianHook:
    """Accumulates ``H = sum x x^T`` (float32) over the inputs of one Linear."""

    def __init__(self, module: nn.Linear, device: torch.device):
        self.H = torch.zeros(module.in_features, module.in_features, device=device, dtype=torch.float32)
        self.n = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        x = args[0].detach().reshape(-1, args[0].shape[-1]).to(self.H.device, torch.float32)
        self.H.addmm_(x.T, x)
        self.n += x.shape[0]

    def remove(self):
        self.handle.remove()


# Execution order of the projections inside a Llama/Mistral/Qwen decoder layer.
_STAGES = (("q_proj", "k_proj", "v_proj"), ("o_proj",), ("gate_proj", "up_proj"), ("down_proj",))


def _stages(names: List[str], true_sequential: bool) -> List[List[str]]:
    if not true_sequential:
        return [names]
    out, left = [], list(names)
    for stage in _STAGES:
        here = [n for n in left if n.rsplit(".", 1)[-1] in stage]
        if here:
            out.append(here)
            left = [n for n in left if n not in here]
    if left:
        out.append(left)
    return out


def _find_blocks(model: nn.Module, targets: Sequence[str]) -> Tuple[str, Optional[nn.ModuleList]]:
    """The ModuleList of decoder layers holding the target Linears (the longest such list)."""
    best = ("", None)
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0:
            inside = [t for t in targets if t.startswith(name + ".")]
            if inside and (best[1] is None or len(mod) > len(best[1])):
                best = (name, mod)
    return best


class _Stop(Exception):
    pass


def _as_batches(calibration) -> List[dict]:
    batches = []
    for b in calibration:
        if isinstance(b, torch.Tensor):
            b = {"input_ids": b if b.dim() == 2 else b[None]}
        batches.append(dict(b))
    if not batches:
        raise ValueError("nmspmm: calibration is empty")
    return batches


def _progress(total: int, desc: str, enabled: bool):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext(types.SimpleNamespace(update=lambda n=1: None, set_postfix_str=lambda s: None))
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


@torch.no_grad()
def _prune_one(method: str, module: nn.Linear, pattern: Pattern, H: Optional[torch.Tensor],
               n_tokens: int, blocksize: int, percdamp: float) -> Tuple[torch.Tensor, float]:
    """Prune ``module`` in place (its weight becomes the pruned dense weight); returns (mask,
    relative output error on the calibration inputs, NaN without them). ``pattern`` is (N, M, L)
    or, for unstructured pruning, the sparsity (a float): magnitude and Wanda keep the best
    entries of each row, SparseGPT those of each block of columns."""
    W0 = module.weight.detach()
    dev = H.device if H is not None else W0.device
    Wf = W0.to(dev, torch.float32)
    if method not in METHODS:
        raise ValueError(f"nmspmm: unknown pruning method {method!r}; expected one of {METHODS}")
    if isinstance(pattern, float):
        if method == "sparsegpt":
            Wp, mask = sparsegpt_prune_unstructured(Wf, H, pattern, blocksize=blocksize, percdamp=percdamp)
        else:
            score = Wf.abs() if method == "magnitude" else Wf.abs() * torch.diag(H).clamp_min(0).sqrt()[None, :]
            mask = unstructured_mask(score, pattern)
            Wp = Wf * mask
    elif method == "sparsegpt":
        Wp, mask = sparsegpt_prune(Wf, H, *pattern, blocksize=blocksize, percdamp=percdamp)
    else:
        N, M, L = pattern
        mask = magnitude_mask(Wf, N, M, L) if method == "magnitude" else \
            wanda_mask(Wf, torch.diag(H).clamp_min(0).sqrt(), N, M, L)
        Wp = Wf * mask
    err = float("nan")
    if H is not None:
        D = Wf - Wp
        num = ((D @ H) * D).sum()
        den = ((Wf @ H) * Wf).sum()
        err = float(num / den.clamp_min(1e-30))
    module.weight.copy_(Wp.to(W0.device, W0.dtype))
    return mask.to(W0.device), err


def _run_block(block: nn.Module, inputs: List[Tuple[tuple, dict]]) -> List[torch.Tensor]:
    outs = []
    for args, kwargs in inputs:
        y = block(*args, **kwargs)
        outs.append(y[0] if isinstance(y, (tuple, list)) else y)
    return outs


@torch.no_grad()  # the calibration forwards must not record autograd graphs: they would chain
# every decoder layer's activations through the layer-by-layer inputs (memory ~ layers x tokens)
def prune_linears(model: nn.Module, layers: Mapping[str, Pattern], method: str = "sparsegpt",
                  calibration: Optional[Iterable] = None, *, sequential: bool = True,
                  true_sequential: bool = True, permute: bool = False, blocksize: int = 128,
                  percdamp: float = 0.01, device: Optional[Union[str, torch.device]] = None,
                  progress: bool = True) -> Tuple[Dict[str, torch.Tensor], PruneStats]:
    """Prune the Linear layers named in ``layers`` (fqn -> (N, M, L), or a float: unstructured
    sparsity) of ``model`` in place.

    Each pruned layer's ``weight`` becomes its pruned dense weight (zeros where pruned; for
    ``sparsegpt`` the kept weights are also updated). Returns ``({fqn: bool mask}, stats)``; the
    masks are vector-wise N:M, ready for ``nmspmm.compress(weight, N, M, L, mask=...)``.

    calibration: an iterable of ``input_ids`` tensors ([batch, seq] or [seq]) or of dicts of model
    keyword arguments; needed by ``wanda`` and ``sparsegpt``. With ``sequential`` the decoder layers
    (the model's longest ModuleList holding the layers) are processed one after another on the
    pruned model's activations, on ``device`` (default: CUDA when available, else the model's
    device) one layer at a time; otherwise all statistics come from one pass of the dense model.
    ``permute`` permutes MLP and attention-v rows before pruning (Llama-style layers only).
    """
    if method not in METHODS:
        raise ValueError(f"nmspmm: unknown pruning method {method!r}; expected one of {METHODS}")
    if permute and any(isinstance(p, float) for p in layers.values()):
        raise ValueError("nmspmm: permute=True permutes rows for N:M vectors; it does not apply to unstructured "
                         "sparsity")
    t0 = time.perf_counter()
    stats = PruneStats(method=method, layers=dict(layers))
    mods = dict(model.named_modules())
    masks: Dict[str, torch.Tensor] = {}
    if method == "magnitude" and not permute:
        for fqn, pat in layers.items():
            masks[fqn], stats.rel_error[fqn] = _prune_one(method, mods[fqn], pat, None, 0, blocksize, percdamp)
        stats.seconds = time.perf_counter() - t0
        return masks, stats
    if calibration is None:
        raise ValueError(f"nmspmm: method={method!r}" + (" with permute=True" if permute else "") +
                         " needs calibration data (calibration=[input_ids, ...])")
    batches = _as_batches(calibration)
    model_dev = next(model.parameters()).device
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else model_dev
    device = torch.device(device)

    block_name, blocks = _find_blocks(model, list(layers)) if sequential else ("", None)
    if blocks is None:  # one pass over the dense model, all statistics at once
        units = [("", model, list(layers))]
    else:
        units = []
        for i, blk in enumerate(blocks):
            pre = f"{block_name}.{i}."
            names = [n for n in layers if n.startswith(pre)]
            units.append((pre, blk, names))
        outside = [n for n in layers if not any(n in u[2] for u in units)]
        if outside:
            raise ValueError(f"nmspmm: layers outside the decoder blocks {block_name!r} cannot be "
                             f"pruned sequentially: {outside[:4]}; pass sequential=False")

    was_training = model.training
    model.eval()
    try:
        if blocks is None:
            inputs = None
        else:
            inputs = _capture_block_inputs(model, blocks[0], batches, model_dev)
            stats.tokens = sum(int(a[0].shape[0] * a[0].shape[1]) for a, _ in inputs)
        total = sum(len(u[2]) for u in units)
        with _progress(total, f"nmspmm {method}", progress) as bar:
            for pre, unit, names in units:
                if blocks is not None:
                    unit_dev = next(unit.parameters()).device
                    if unit_dev != device:
                        unit.to(device)
                    inputs = [(_move(a, device), _move(k, device)) for a, k in inputs]
                for stage in _stages(names, true_sequential and blocks is not None):
                    hooks = {n: _HessianHook(mods[n], device) for n in stage}
                    try:
                        if blocks is None:
                            for b in batches:
                                model(**_move(b, model_dev), use_cache=False)
                        else:
                            _run_block(unit, inputs)
                    finally:
                        for h in hooks.values():
                            h.remove()
                    if permute:
                        _permute_stage(model, mods, stage, layers, hooks, stats)
                    for n in stage:
                        stats.tokens = stats.tokens or hooks[n].n
                        masks[n], stats.rel_error[n] = _prune_one(method, mods[n], layers[n], hooks[n].H,
                                                                  hooks[n].n, blocksize, percdamp)
                        bar.update(1)
                    del hooks
                if blocks is not None:
                    outs = _run_block(unit, inputs)
                    inputs = [((o,) + tuple(a[1:]), k) for o, (a, k) in zip(outs, inputs)]
                    if unit_dev != device:
                        unit.to(unit_dev)
    finally:
        model.train(was_training)
    stats.seconds = time.perf_counter() - t0
    return masks, stats


def _move(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_move(v, device) for v in obj)
    return obj


@torch.no_grad()
def _capture_block_inputs(model: nn.Module, first: nn.Module, batches: List[dict],
                          device: torch.device) -> List[Tuple[tuple, dict]]:
    """(args, kwargs) of the first decoder layer for every calibration batch."""
    captured: List[Tuple[tuple, dict]] = []

    def hook(mod, args, kwargs):
        kw = {k: v for k, v in kwargs.items() if k not in ("past_key_value", "past_key_values")}
        kw["use_cache"] = False
        captured.append((tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args), kw))
        raise _Stop

    handle = first.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for b in batches:
            try:
                model(**_move(b, device), use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    if len(captured) != len(batches):
        raise RuntimeError("nmspmm: could not capture the inputs of the first decoder layer")
    # Hidden states may arrive as a keyword argument; make them positional.
    fixed = []
    for args, kw in captured:
        if not args and "hidden_states" in kw:
            kw = dict(kw)
            args = (kw.pop("hidden_states"),)
        fixed.append((args, kw))
    return fixed


@torch.no_grad()
def _permute_stage(model, mods, stage, layers, hooks, stats):
    """Before pruning a stage holding (gate, up) or v of a Llama-style layer, permute their rows
    so that rows wanting the same inputs share an L-vector (see nmspmm.permute). The scores are
    Wanda's (|W| x input-feature norm, from the stage's Hessians, which the permutation leaves
    unchanged); Hessians of the consumers (down, o) already collected are permuted to match."""
    from . import permute as P
    leaves = {n.rsplit(".", 1)[-1]: n for n in stage}
    groups = []
    if "gate_proj" in leaves and "up_proj" in leaves:
        groups.append(("mlp", [leaves["gate_proj"], leaves["up_proj"]]))
    if "v_proj" in leaves:
        groups.append(("attn", [leaves["v_proj"]]))
    for kind, rows in groups:
        pats = {layers[n] for n in rows}
        if len(pats) != 1:
            continue
        (N, M, L), = pats
        if L == 1:
            continue
        parent_name = rows[0].rsplit(".", 1)[0]
        parent = mods[parent_name]
        scores = [mods[n].weight.detach().float().to(hooks[n].H.device).abs() *
                  torch.diag(hooks[n].H).clamp_min(0).sqrt()[None, :] for n in rows]
        if kind == "mlp":
            perm, gain = P.mlp_permutation(scores, N, M, L)
            P.permute_mlp_(parent, perm)
            consumer, cols = f"{parent_name}.down_proj", perm
        else:
            cfg = getattr(model, "config", None)
            head_dim = getattr(parent, "head_dim", None) or (cfg.hidden_size // cfg.num_attention_heads)
            perm, gain = P.vector_permutation(scores, N, M, L, block=head_dim)
            cols = P.permute_attention_v_(parent, perm, head_dim)
            consumer = f"{parent_name}.o_proj"
        if consumer in hooks:
            c = cols.to(hooks[consumer].H.device)
            hooks[consumer].H = hooks[consumer].H[c][:, c].contiguous()
        stats.permuted[parent_name] = gain


# ------------------------------------------------------------------ per-layer N under a budget
def _default_targets(model: nn.Module, M: int, L: int) -> List[str]:
    """The Linear layers ``sparsify_`` picks by default (the projections of DEFAULT_TARGETS, never
    lm_head) whose shape fits M and L."""
    out = []
    for fqn, mod in model.named_modules():
        leaf = fqn.rsplit(".", 1)[-1]
        if (isinstance(mod, nn.Linear) and leaf in DEFAULT_TARGETS and leaf != "lm_head"
                and mod.in_features % M == 0 and mod.out_features % L == 0):
            out.append(fqn)
    return out


@torch.no_grad()
def layer_sensitivity(model: nn.Module, calibration: Iterable, M: int, L: int, choices: Sequence[int],
                      layers: Optional[Sequence[str]] = None, method: str = "sparsegpt",
                      percdamp: float = 0.01, device: Optional[Union[str, torch.device]] = None,
                      progress: bool = False) -> Dict[str, Dict[int, float]]:
    """Relative output error ``||X (W - W_N)^T||^2 / ||X W^T||^2`` of every layer pruned alone to
    each N:M L of ``choices``, on the dense model's calibration inputs X (one forward pass; the
    Hessians ``X^T X`` are accumulated by hooks). ``W_N`` is the ``method`` ("sparsegpt": OBS mask
    and update; "wanda" or "magnitude": mask only) pruning. Returns ``{fqn: {N: error}}``; the
    model is not changed."""
    if method not in METHODS:
        raise ValueError(f"nmspmm.layer_sensitivity: unknown method {method!r}; expected one of {METHODS}")
    layers = list(layers) if layers is not None else _default_targets(model, M, L)
    mods = dict(model.named_modules())
    model_dev = next(model.parameters()).device
    dev = torch.device(device) if device is not None else model_dev
    hooks = {n: _HessianHook(mods[n], dev) for n in layers}
    was_training = model.training
    model.eval()
    try:
        for b in _as_batches(calibration):
            model(**_move(b, model_dev), use_cache=False)
    finally:
        for h in hooks.values():
            h.remove()
        model.train(was_training)
    out: Dict[str, Dict[int, float]] = {}
    with _progress(len(layers), "nmspmm sensitivity", progress) as bar:
        for n in layers:
            H = hooks[n].H
            W = mods[n].weight.detach().to(dev, torch.float32)
            den = float(((W @ H) * W).sum().clamp_min(1e-30))
            out[n] = {}
            for N in choices:
                if N == M:
                    out[n][N] = 0.0
                    continue
                if method == "sparsegpt":
                    Wp, _ = sparsegpt_prune(W, H, N, M, L, percdamp=percdamp)
                elif method == "wanda":
                    Wp = W * wanda_mask(W, torch.diag(H).clamp_min(0).sqrt(), N, M, L)
                else:
                    Wp = W * magnitude_mask(W, N, M, L)
                D = W - Wp
                out[n][N] = float(((D @ H) * D).sum()) / den
            bar.update(1)
    del hooks
    return out


def allocate_patterns(model: nn.Module, calibration: Iterable, M: int, L: int, sparsity: float,
                      choices: Optional[Sequence[int]] = None, layers: Optional[Sequence[str]] = None,
                      method: str = "sparsegpt", sensitivity: Optional[Mapping[str, Mapping[int, float]]] = None,
                      **kwargs) -> Dict[str, Pattern]:
    """Per-layer N (out of M, vector length L) that removes at least ``sparsity`` of the chosen
    layers' weights in total while keeping the sum of the layers' relative output errors
    (:func:`layer_sensitivity`) small: every layer starts at the largest N of ``choices`` (default
    M/4, M/2, 3M/4) and, while too many weights are kept, the layer whose next smaller N adds the
    least error per weight removed steps down (greedy on the marginal cost). The result is a
    ``patterns=`` mapping for ``nmspmm.sparsify_`` / :func:`prune_linears`: ``{fqn: (N, M, L)}``.
    ``sensitivity`` skips the measurement (a result of :func:`layer_sensitivity`); other keyword
    arguments go to it. Raises if even the smallest choice everywhere keeps too many weights.

    The errors are measured with every other layer dense and are summed unweighted, so this is a
    heuristic: it moves sparsity away from the layers whose outputs it disturbs most."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"nmspmm.allocate_patterns: sparsity must be in [0, 1), got {sparsity}")
    choices = sorted(set(choices if choices is not None else (M // 4, M // 2, 3 * M // 4)))
    if not choices or choices[0] < 1 or choices[-1] > M:
        raise ValueError(f"nmspmm.allocate_patterns: choices must lie in [1, M={M}], got {choices}")
    layers = list(layers) if layers is not None else (list(sensitivity) if sensitivity is not None
                                                       else _default_targets(model, M, L))
    if sensitivity is None:
        sensitivity = layer_sensitivity(model, calibration, M, L, choices, layers, method=method, **kwargs)
    mods = dict(model.named_modules())
    size = {n: mods[n].weight.numel() for n in layers}
    total = sum(size.values())
    limit = (1.0 - sparsity) * total
    if sum(size[n] * choices[0] / M for n in layers) > limit * (1 + 1e-12):
        raise ValueError(f"nmspmm.allocate_patterns: N={choices[0]} of {M} everywhere keeps "
                         f"{choices[0] / M:.3f} of the weights, more than 1 - sparsity = {1 - sparsity:.3f}")
    level = {n: len(choices) - 1 for n in layers}
    kept = sum(size[n] * choices[-1] / M for n in layers)
    while kept > limit * (1 + 1e-12):
        best = None
        for n in layers:
            k = level[n]
            if k == 0:
                continue
            hi, lo = choices[k], choices[k - 1]
            cost = (sensitivity[n][lo] - sensitivity[n][hi]) / (size[n] * (hi - lo) / M)
            if best is None or cost < best[0]:
                best = (cost, n)
        _, n = best
        kept -= size[n] * (choices[level[n]] - choices[level[n] - 1]) / M
        level[n] -= 1
    return {n: (choices[level[n]], M, L) for n in layers}
