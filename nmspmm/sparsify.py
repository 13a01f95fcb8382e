"""One command from a dense Hugging Face causal LM to a saved vector-wise N:M sparse one.

    python -m nmspmm.sparsify MODEL OUT_DIR --pattern 16:32:32 [--method sparsegpt|wanda|magnitude]
        [--calibration FILE] [--calibration-tokens K] [--permute] [--recover-tokens T] [--eval FILE]

MODEL is a local directory holding a transformers checkpoint and its tokenizer, or a ``.gguf`` file
(dequantised on load; needs the ``gguf`` package). The command

1. checks everything it can before loading weights: the pattern's syntax and range, the files, the
   output directory, and that every target projection (``nmspmm.nn.DEFAULT_TARGETS``) of the model's
   architecture fits the pattern (``in_features % M == 0``, ``out_features % L == 0``; a layer that
   does not is an error naming it, unless ``--skip-unfit`` keeps such layers dense);
2. loads the model and tokenizer, tokenizes the calibration text (default: the English prose shipped
   as ``nmspmm/data/calibration.txt``) and the evaluation text (``--eval FILE``, default: the last
   ``--holdout`` fraction of the calibration text, which is then not used for calibration or recovery);
3. measures the dense model's perplexity, prunes with ``nmspmm.sparsify_`` (calibrated: SparseGPT by
   default, layer by layer on the pruned model's activations), measures again;
4. with ``--recover-tokens T``, distils the kept values from the dense model
   (``nmspmm.recovery.recover``: T tokens of the calibration text in steps of ``--batch`` windows of
   ``--seq`` tokens, Adam at peak lr ``--lr`` with 5 % linear warm-up, cosine decay and gradient
   clipping at 1.0, the recipe of docs/pruning.md) and measures a third time;
5. saves with ``model.save_pretrained(OUT_DIR)`` and the tokenizer, so that
   ``AutoModelForCausalLM.from_pretrained(OUT_DIR)`` after ``import nmspmm`` returns the sparse model,
   and writes the summary printed at the end to ``OUT_DIR/nmspmm_sparsify.json``.

Perplexity is exp(mean next-token cross-entropy) over non-overlapping ``--seq``-token windows of the
evaluation text (the first ``--eval-tokens`` tokens; a shorter last window counts too), with no
special tokens added.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import re
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

REPORT_NAME = "nmspmm_sparsify.json"
DEFAULT_SEQ = 512
DEFAULT_CALIB_WINDOWS = 64      # calibration default: 64 windows of --seq tokens, at most the text once
DEFAULT_EVAL_TOKENS = 32768
DEFAULT_LR = 1e-3               # the best peak lr of docs/pruning.md's recovery rows
WARMUP_FRACTION = 0.05
MAX_GRAD_NORM = 1.0
METHODS = ("sparsegpt", "wanda", "magnitude")


class CliError(Exception):
    """A problem with the command's inputs: printed as one line, exit status 2."""


def shipped_calibration_path() -> str:
    """Path of the calibration text shipped inside the package."""
    from importlib import resources
    return str(resources.files("nmspmm").joinpath("data", "calibration.txt"))


# ----------------------------------------------------------------------------------- parsing
def parse_pattern(text: str) -> Tuple[int, int, int]:
    from .format import _check_pattern
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m:
        raise CliError(f"--pattern must be N:M:L with three integers (e.g. 16:32:32), got {text!r}")
    N, M, L = (int(g) for g in m.groups())
    try:
        _check_pattern(N, M, L, who=f"--pattern {text}")
    except ValueError as e:
        raise CliError(str(e)) from None
    return N, M, L


def parse_tokens(text: str) -> int:
    """A token count: ``4096``, ``250k``, ``1M``, ``1.5M``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"expected a token count such as 4096, 250k or 1M, got {text!r}")
    value = float(m.group(1)) * {"": 1, "k": 1000, "K": 1000, "m": 10 ** 6, "M": 10 ** 6}[m.group(2)]
    if value != int(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a token count must be a whole number >= 0, got {text!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m nmspmm.sparsify", description=__doc__.split("\n\n")[0],
        epilog="Details: docs/llama.md, section 'One command'.")
    ap.add_argument("model", help="a local transformers checkpoint directory, or a .gguf file")
    ap.add_argument("out_dir", help="where the sparse checkpoint goes (must be empty unless --overwrite)")
    ap.add_argument("--pattern", required=True, help="N:M:L, e.g. 16:32:32 (N of every M inputs kept, "
                    "one mask per L outputs)")
    ap.add_argument("--method", choices=METHODS, default="sparsegpt", help="pruning method (default sparsegpt)")
    ap.add_argument("--calibration", metavar="FILE", help="plain-text calibration file (default: the text "
                    "shipped in nmspmm/data/calibration.txt)")
    ap.add_argument("--calibration-tokens", metavar="K", type=parse_tokens, default=None,
                    help="calibration tokens, cycled through the text when it is shorter (default: the "
                         f"text once, at most {DEFAULT_CALIB_WINDOWS} windows of --seq)")
    ap.add_argument("--permute", action="store_true", help="zero-cost row permutations before pruning")
    ap.add_argument("--true-sequential", action="store_true",
                    help="prune q/k/v, o, gate/up, down of a layer in turn (5 calibration passes per layer "
                         "instead of 2)")
    ap.add_argument("--recover-tokens", metavar="T", type=parse_tokens, default=0,
                    help="distil the kept values from the dense model on T tokens of the calibration text "
                         "(default 0: no recovery)")
    ap.add_argument("--lr", type=float, default=DEFAULT_LR, help=f"recovery peak learning rate (default {DEFAULT_LR:g})")
    ap.add_argument("--eval", metavar="FILE", help="plain-text evaluation file (default: the held-out end "
                    "of the calibration text)")
    ap.add_argument("--eval-tokens", type=parse_tokens, default=DEFAULT_EVAL_TOKENS,
                    help=f"evaluate on at most this many tokens (default {DEFAULT_EVAL_TOKENS})")
    ap.add_argument("--holdout", type=float, default=0.2,
                    help="without --eval: fraction of the calibration text held out for evaluation (default 0.2)")
    ap.add_argument("--seq", type=int, default=None,
                    help=f"window length in tokens (default {DEFAULT_SEQ}, at most the model's max positions)")
    ap.add_argument("--batch", type=int, default=8, help="windows per forward pass and per recovery step (default 8)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="default: the checkpoint's (float32 for GGUF)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--skip-unfit", action="store_true",
                    help="keep projections that do not fit the pattern dense instead of failing")
    ap.add_argument("--overwrite", action="store_true", help="write into a non-empty OUT_DIR")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return ap


# ------------------------------------------------------------------------------ checks, loading
def _model_source(path: str) -> Tuple[str, Optional[str]]:
    """(directory, gguf file name or None) of MODEL, or CliError."""
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CliError(f"{path} is a directory without config.json: not a transformers checkpoint")
        return path, None
    if os.path.isfile(path):
        if not path.endswith(".gguf"):
            raise CliError(f"{path} is a file but not a .gguf: pass a checkpoint directory or a GGUF file")
        if importlib.util.find_spec("gguf") is None:
            raise CliError(f"loading {path} needs the gguf package, which is not installed: pip install gguf")
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    raise CliError(f"model {path} does not exist")


def _check_out_dir(out_dir: str, model_dir: str, overwrite: bool) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise CliError(f"OUT_DIR {out_dir} exists and is not a directory")
    if os.path.isdir(out_dir) and os.path.realpath(out_dir) == os.path.realpath(model_dir):
        raise CliError(f"OUT_DIR {out_dir} is the model's own directory: the dense checkpoint would be overwritten")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not overwrite:
        raise CliError(f"OUT_DIR {out_dir} is not empty; pass --overwrite to write into it")


def _read_text(path: str, what: str) -> str:
    if not os.path.isfile(path):
        raise CliError(f"{what} file {path} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.strip():
        raise CliError(f"{what} file {path} is empty")
    return text


def _load_config(model_dir: str, gguf: Optional[str]):
    from transformers import AutoConfig
    kw = {"gguf_file": gguf} if gguf else {}
    try:
        return AutoConfig.from_pretrained(model_dir, **kw)
    except (OSError, ValueError, KeyError) as e:
        raise CliError(f"cannot read the model's config from {model_dir}{' / ' + gguf if gguf else ''}: {e}") from None


def target_layers(config) -> List[Tuple[str, int, int]]:
    """(fqn, in_features, out_features) of the projections ``sparsify_`` picks by default, read from
    the architecture built on the meta device (no weights allocated or loaded)."""
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM
    from .nn import DEFAULT_TARGETS
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    out = []
    for fqn, mod in skeleton.named_modules():
        leaf = fqn.rsplit(".", 1)[-1]
        if isinstance(mod, nn.Linear) and leaf in DEFAULT_TARGETS:
            out.append((fqn, mod.in_features, mod.out_features))
    return out


def check_fit(layers: Sequence[Tuple[str, int, int]], N: int, M: int, L: int, skip_unfit: bool) -> List[str]:
    """The target layers that do not fit N:M:L (with ``skip_unfit``); CliError otherwise."""
    from .nn import _shape_problem
    if not layers:
        raise CliError("the model has no projection named " + ", ".join(sorted(_default_targets())) +
                       ": nothing to sparsify")
    unfit = [(fqn, i, o, _shape_problem(i, o, M, L)) for fqn, i, o in layers]
    unfit = [u for u in unfit if u[3]]
    if unfit and (not skip_unfit or len(unfit) == len(layers)):
        shown = "; ".join(f"{fqn} [in {i}, out {o}]: {why}" for fqn, i, o, why in unfit[:6])
        more = f"; and {len(unfit) - 6} more" if len(unfit) > 6 else ""
        hint = ("no target projection fits it" if len(unfit) == len(layers) else
                "pass --skip-unfit to keep those layers dense")
        raise CliError(f"pattern {N}:{M}:{L} does not fit {len(unfit)} of {len(layers)} target projections "
                       f"(M must divide in_features, L must divide out_features): {shown}{more}; {hint}")
    return [u[0] for u in unfit]


def _default_targets():
    from .nn import DEFAULT_TARGETS
    return DEFAULT_TARGETS


def load_model(model_dir: str, gguf: Optional[str], dtype: Optional[str]):
    """The dense model (CPU, eval mode) and its tokenizer."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    kw = {}
    if gguf:
        kw["gguf_file"] = gguf
        if hasattr(transformers, "GgufConfig"):  # unpack the blocks: pruning needs dense nn.Linear weights
            kw["quantization_config"] = transformers.GgufConfig(dequantize=True)
        kw["dtype"] = getattr(torch, dtype or "float32")
    else:
        kw["dtype"] = getattr(torch, dtype) if dtype else "auto"
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, **({"gguf_file": gguf} if gguf else {}))
    except (OSError, ValueError) as e:
        raise CliError(f"cannot load a tokenizer from {model_dir}: {e}") from None
    model = AutoModelForCausalLM.from_pretrained(model_dir, **kw)
    if getattr(model, "hf_quantizer", None) is not None:
        method = model.hf_quantizer.quantization_config.quant_method
        raise CliError(f"{model_dir} loads as a quantized model ({method}); nmspmm.sparsify needs a dense checkpoint")
    return model.eval(), tokenizer


# ---------------------------------------------------------------------------------- text, windows
def tokenize(tokenizer, text: str):
    import torch
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def eval_windows(ids, seq: int, max_tokens: int):
    """Non-overlapping windows of ``seq`` tokens over the first ``max_tokens`` ids; a shorter last
    window is kept when it has at least 2 tokens (one prediction)."""
    ids = ids[:max_tokens]
    out = [ids[i:i + seq] for i in range(0, ids.numel(), seq)]
    return [w for w in out if w.numel() >= 2]


def cycled_windows(ids, seq: int, tokens: int):
    """``tokens`` ids read cyclically from ``ids``, in windows of ``seq`` (the last may be shorter)."""
    reps = -(-tokens // ids.numel())
    stream = ids.repeat(reps)[:tokens] if reps > 1 else ids[:tokens]
    return [stream[i:i + seq] for i in range(0, tokens, seq)]


def batches_of(windows, batch: int):
    """[b, seq] input_ids tensors of up to ``batch`` consecutive windows of equal length."""
    import torch
    out, group = [], []
    for w in windows:
        if group and (len(group) == batch or group[0].numel() != w.numel()):
            out.append(torch.stack(group))
            group = []
        group.append(w)
    if group:
        out.append(torch.stack(group))
    return out


def perplexity(model, batches, progress: bool = True, desc: str = "perplexity") -> float:
    """exp(mean next-token cross-entropy) over the [b, seq] input_ids batches."""
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm
    dev = next(model.parameters()).device
    nll = torch.zeros((), dtype=torch.float64)
    count = 0
    with torch.no_grad():
        for x in tqdm(batches, desc=desc, disable=not progress, leave=False, unit="batch"):
            x = x.to(dev)
            logits = model(input_ids=x, use_cache=False).logits.float()
            nll += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                   reduction="sum").double().cpu()
            count += x.shape[0] * (x.shape[1] - 1)
    return math.exp(float(nll) / count)


# ---------------------------------------------------------------------------------------- report
def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if os.path.isfile(os.path.join(path, f)))


def _weights_bytes(model_dir: str, gguf: Optional[str]) -> int:
    if gguf:
        return os.path.getsize(os.path.join(model_dir, gguf))
    return sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
               if f.endswith((".safetensors", ".bin")))


def _fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def summary_table(rep: dict) -> str:
    N, M, L = rep["pattern"]
    ppl, sec, b, lay = rep["perplexity"], rep["seconds"], rep["bytes"], rep["layers"]
    rows = [("dense", ppl["dense"], sec["eval_dense"]),
            (f"pruned ({rep['method']}{', permuted' if rep['permute'] else ''})", ppl["pruned"], sec["prune"])]
    if rep["recovery"]:
        r = rep["recovery"]
        rows.append((f"recovered ({r['tokens']} tokens, {r['steps']} steps)", ppl["recovered"], sec["recover"]))
    lines = [f"nmspmm.sparsify {N}:{M}:{L}: {rep['model']} -> {rep['out_dir']} ({rep['device']}, {rep['dtype']})",
             f"perplexity on {rep['eval']['tokens']} tokens of {rep['eval']['source']}:",
             "| model | perplexity | seconds |", "|---|---:|---:|"]
    lines += [f"| {name} | {p:.4g} | {s:.1f} |" for name, p, s in rows]
    skipped = f", kept dense: {', '.join(f for f, _ in lay['skipped'])}" if lay["skipped"] else ""
    lines += [f"layers sparsified: {lay['count']} of {lay['targets']} target projections{skipped}",
              f"projection bytes: {_fmt_bytes(b['projections_dense'])} -> {_fmt_bytes(b['projections_sparse'])}; "
              f"model (parameters + buffers): {_fmt_bytes(b['model_before'])} -> {_fmt_bytes(b['model_after'])}; "
              f"files: {_fmt_bytes(b['source_weights'])} -> {_fmt_bytes(b['checkpoint'])}",
              "time: " + ", ".join(f"{k} {v:.1f} s" for k, v in sec.items() if k != "total")
              + f"; total {sec['total']:.1f} s",
              f"load it: import nmspmm; AutoModelForCausalLM.from_pretrained({rep['out_dir']!r})"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main
def _log(msg: str) -> None:
    print(f"nmspmm.sparsify: {msg}", file=sys.stderr, flush=True)


def run(args) -> dict:
    t_start = time.perf_counter()
    N, M, L = parse_pattern(args.pattern)
    if args.batch < 1:
        raise CliError("--batch must be >= 1")
    if args.seq is not None and args.seq < 2:
        raise CliError("--seq must be >= 2")
    if not 0 < args.holdout < 1:
        raise CliError(f"--holdout must be in (0, 1), got {args.holdout}")
    if args.eval_tokens < 2:
        raise CliError("--eval-tokens must be >= 2")
    if args.calibration_tokens == 0:
        raise CliError("--calibration-tokens must be >= 1")
    model_dir, gguf = _model_source(args.model)
    _check_out_dir(args.out_dir, model_dir, args.overwrite)
    calib_path = args.calibration or shipped_calibration_path()
    calib_text = _read_text(calib_path, "calibration")
    eval_text = _read_text(args.eval, "evaluation") if args.eval else None

    import torch
    import nmspmm
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CliError(f"--device {args.device}: torch sees no CUDA device")
        if not nmspmm.cuda_kernels_built():
            raise CliError("this nmspmm build has no CUDA kernels (nmspmm.build_info()['reason'] says why); "
                           "pass --device cpu or rebuild nmspmm with CUDA")
    nmspmm.hf.check_transformers()
    config = _load_config(model_dir, gguf)
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", qc)
        raise CliError(f"{args.model} is already quantized (quant_method {method}); nmspmm.sparsify needs a "
                       "dense checkpoint")
    layers = target_layers(config)
    unfit = check_fit(layers, N, M, L, args.skip_unfit)
    max_pos = getattr(config, "max_position_embeddings", None) or DEFAULT_SEQ
    seq = args.seq or min(DEFAULT_SEQ, max_pos)
    torch.manual_seed(args.seed)
    progress = not args.no_progress
    seconds: Dict[str, float] = {}

    t0 = time.perf_counter()
    _log(f"loading {args.model}")
    model, tokenizer = load_model(model_dir, gguf, args.dtype)
    model.to(device)
    seconds["load"] = time.perf_counter() - t0
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")

    calib_ids = tokenize(tokenizer, calib_text)
    if eval_text is not None:
        eval_ids, eval_source = tokenize(tokenizer, eval_text), args.eval
    else:
        hold = max(2, round(args.holdout * calib_ids.numel()))
        if calib_ids.numel() - hold < 1:
            raise CliError(f"the calibration text {calib_path} has {calib_ids.numel()} tokens: too short to hold "
                           "out an evaluation part; pass --eval FILE")
        calib_ids, eval_ids = calib_ids[:-hold], calib_ids[-hold:]
        eval_source = f"the last {args.holdout:.0%} of {calib_path} (held out)"
    if calib_ids.numel() < 1:
        raise CliError(f"the calibration text {calib_path} gives no tokens")
    eval_batches = batches_of(eval_windows(eval_ids, seq, args.eval_tokens), args.batch)
    if not eval_batches:
        raise CliError("the evaluation text gives fewer than 2 tokens")
    eval_tokens = sum(b.numel() for b in eval_batches)
    needs_calib = args.method != "magnitude" or args.permute
    calib_tokens = args.calibration_tokens or min(calib_ids.numel(), DEFAULT_CALIB_WINDOWS * seq)
    calib_batches = batches_of(cycled_windows(calib_ids, seq, calib_tokens), args.batch) if needs_calib else None

    t0 = time.perf_counter()
    ppl = {"dense": perplexity(model, eval_batches, progress, "perplexity, dense")}
    seconds["eval_dense"] = time.perf_counter() - t0
    _log(f"dense perplexity {ppl['dense']:.4g} on {eval_tokens} tokens")

    teacher = copy.deepcopy(model) if args.recover_tokens else None
    t0 = time.perf_counter()
    _log(f"pruning to {N}:{M}:{L} with {args.method}" + (f" on {calib_tokens} calibration tokens" if needs_calib else ""))
    kw = dict(method=args.method, permute=args.permute, device=device, progress=progress,
              true_sequential=args.true_sequential)
    if needs_calib:
        kw["calibration"] = calib_batches
    import warnings
    with warnings.catch_warnings():
        if args.skip_unfit:  # the summary lists the layers kept dense
            warnings.filterwarnings("ignore", message="nmspmm.sparsify_: skipped")
        nmspmm.sparsify_(model, N, M, L, **kw)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds["prune"] = time.perf_counter() - t0
    report = nmspmm.sparsify_report(model)

    t0 = time.perf_counter()
    ppl["pruned"] = perplexity(model, eval_batches, progress, "perplexity, pruned")
    seconds["eval_pruned"] = time.perf_counter() - t0
    _log(f"pruned perplexity {ppl['pruned']:.4g}")

    recovery = None
    if args.recover_tokens:
        rec_batches = batches_of(cycled_windows(calib_ids, seq, args.recover_tokens), args.batch)
        steps = len(rec_batches)
        warmup = max(1, round(WARMUP_FRACTION * steps))
        _log(f"recovering on {args.recover_tokens} tokens ({steps} steps of up to {args.batch} x {seq}, "
             f"peak lr {args.lr:g})")
        t0 = time.perf_counter()
        losses = nmspmm.recovery.recover(model, teacher, rec_batches, steps, lr=args.lr, warmup=warmup,
                                        max_grad_norm=MAX_GRAD_NORM, progress=progress)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds["recover"] = time.perf_counter() - t0
        del teacher
        recovery = dict(tokens=args.recover_tokens, steps=steps, lr=args.lr, warmup_steps=warmup,
                        max_grad_norm=MAX_GRAD_NORM, kl_first=losses[0], kl_last=losses[-1])
        t0 = time.perf_counter()
        ppl["recovered"] = perplexity(model, eval_batches, progress, "perplexity, recovered")
        seconds["eval_recovered"] = time.perf_counter() - t0
        _log(f"recovered perplexity {ppl['recovered']:.4g}")

    t0 = time.perf_counter()
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir)
    tokenizer.save_pretrained(args.out_dir)
    seconds["save"] = time.perf_counter() - t0
    checkpoint_bytes = _dir_bytes(args.out_dir)
    seconds["total"] = time.perf_counter() - t_start

    import transformers
    rep = dict(
        model=args.model, out_dir=args.out_dir, pattern=[N, M, L], method=args.method, permute=args.permute,
        true_sequential=args.true_sequential, dtype=dtype, device=str(device), seq=seq, batch=args.batch,
        calibration=dict(source=calib_path, tokens=calib_tokens if needs_calib else 0),
        eval=dict(source=eval_source, tokens=eval_tokens, max_tokens=args.eval_tokens,
                  held_out=eval_text is None),
        perplexity=ppl, recovery=recovery,
        layers=dict(count=len(report.swapped), targets=len(layers), names=[r.fqn for r in report.swapped],
                    skipped=[list(s) for s in report.skipped], unfit=unfit),
        bytes=dict(model_before=report.model_bytes_before, model_after=report.model_bytes_after,
                   projections_dense=report.dense_bytes, projections_sparse=report.sparse_bytes,
                   projections_resident=report.resident_bytes,
                   source_weights=_weights_bytes(model_dir, gguf), checkpoint=checkpoint_bytes),
        seconds=seconds,
        versions=dict(nmspmm=nmspmm.__version__, torch=torch.__version__, transformers=transformers.__version__),
    )
    with open(os.path.join(args.out_dir, REPORT_NAME), "w") as f:
        json.dump(rep, f, indent=1)
    return rep


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rep = run(args)
    except CliError as e:
        print(f"nmspmm.sparsify: error: {e}", file=sys.stderr)
        return 2
    print(summary_table(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
