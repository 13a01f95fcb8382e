"""nmspmm's main job on the machine at hand: sparsify a Llama-architecture model, check it, measure it.

    python -m nmspmm.demo                         # a tiny random Llama (no download)
    python -m nmspmm.demo --model PATH_OR_HUB_ID  # a real one (transformers' from_pretrained)
    python -m nmspmm.demo --pattern 8:32:32 --device cpu --dtype bfloat16

Steps: build or load the model; keep a CPU copy of its projection weights; swap the projections
for N:M sparse ``NMLinear`` layers (``nmspmm.sparsify_``, one decoder layer at a time with a progress
bar); time the sparse model; turn every ``NMLinear`` back into an ``nn.Linear`` holding the original
weight times a mask computed here in plain torch (``reference_mask``: the rule of docs/format.md, no
nmspmm op) and time that; compare the logits of the two and print memory saved and speed against
dense. Exits non-zero when the sparse logits do not match the pruned dense ones, so a fault in
prune, compress, decompress or spmm fails the demo.

On the CPU the op is the reference path (decompress, then a dense matmul), so the sparse model is
slower than dense there by design: the speed comes from the CUDA kernels.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from torch import nn

import nmspmm
from nmspmm.nn import DEFAULT_TARGETS, NMLinear

try:
    from tqdm.auto import tqdm
except ImportError:  # the progress bar is optional
    def tqdm(iterable, **_):
        return iterable

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Tolerance on max|sparse - dense| / max|dense| over the logits: float32 differs only by summation
# order; half precision rounds every layer's output, through the whole model.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}


def parse_pattern(text):
    try:
        n, m, l = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"pattern must be N:M:L, e.g. 16:32:32, got {text!r}")
    return n, m, l


def tiny_llama(device, dtype, big):
    """A random Llama-architecture model, built offline. ``big`` (for a GPU) makes the projections
    large enough that their speed, not launch overhead, is what gets measured."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if big:
        cfg = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                   num_attention_heads=16, num_key_value_heads=4, vocab_size=4096)
    else:
        cfg = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=1024)
    config = LlamaConfig(max_position_embeddings=512, tie_word_embeddings=False, **cfg)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


def decoder_layers(model):
    """(name, ModuleList) of the decoder layers: the longest ModuleList in the model."""
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and (best is None or len(mod) > len(best[1])):
            best = (name, mod)
    return best


def linear_bytes(model, cls):
    total = 0
    for mod in model.modules():
        if isinstance(mod, cls):
            if cls is NMLinear:
                total += mod.weight_nbytes
            else:
                total += mod.weight.numel() * mod.weight.element_size()
                if mod.bias is not None:
                    total += mod.bias.numel() * mod.bias.element_size()
    return total


def model_bytes(model):
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def sparsify_by_layer(model, N, M, L):
    """``nmspmm.sparsify_`` one decoder layer at a time (a progress bar for big models)."""
    found = decoder_layers(model)
    if found is None:
        return nmspmm.sparsify_(model, N, M, L)
    name, layers = found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped layers are summed up below
        for i in tqdm(range(len(layers)), desc=f"sparsify {N}:{M} L={L}", unit="layer"):
            prefix = f"{name}.{i}."
            nmspmm.sparsify_(model, N, M, L, filter_fn=lambda m, fqn, p=prefix: fqn.startswith(p)
                             and fqn.rsplit(".", 1)[-1] in DEFAULT_TARGETS)
    return nmspmm.sparsify_(model, N, M, L)  # any target outside the decoder layers


def reference_mask(weight, N, M, L):
    """The vector-wise N:M magnitude mask of docs/format.md, in plain torch: per (window of M inputs,
    vector of L outputs) the N positions with the largest squared L2 norm over the L rows
    (accumulated in float64 in row order), ties to the lower position. Independent of nmspmm's ops."""
    out, inp = weight.shape
    w = weight.double().reshape(out // L, L, inp // M, M)
    norms = torch.zeros(out // L, inp // M, M, dtype=torch.float64, device=weight.device)
    for r in range(L):
        norms += w[:, r] * w[:, r]
    top = torch.sort(norms, dim=-1, descending=True, stable=True).indices[..., :N]
    keep = torch.zeros_like(norms, dtype=torch.bool).scatter_(-1, top, True)
    return keep[:, None].expand(out // L, L, inp // M, M).reshape(out, inp)


@torch.no_grad()
def projection_weights(model):
    """CPU copies of the weights of the layers sparsify_ targets, by module name."""
    return {fqn: mod.weight.detach().to("cpu", copy=True) for fqn, mod in model.named_modules()
            if isinstance(mod, nn.Linear) and fqn.rsplit(".", 1)[-1] in DEFAULT_TARGETS}


@torch.no_grad()
def densify(model, originals):
    """Replace every NMLinear by an nn.Linear holding its original weight (``originals``, by module
    name) times ``reference_mask``: the pruned dense model, built without nmspmm."""
    swaps = [(fqn, mod) for fqn, mod in model.named_modules() if isinstance(mod, NMLinear)]
    for fqn, mod in tqdm(swaps, desc="pruned dense reference", unit="linear"):
        dense = nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None,
                          device=mod.values.device, dtype=mod.values.dtype)
        w = originals.pop(fqn)
        dense.weight.copy_(w * reference_mask(w, mod.N, mod.M, mod.L))
        if mod.bias is not None:
            dense.bias.copy_(mod.bias)
        parent_name, _, leaf = fqn.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, dense)
    return model


@torch.no_grad()
def time_forward(model, ids, reps, label):
    """Median seconds of one forward pass (no KV cache) over ``reps`` runs, after 2 warm-ups."""
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    for _ in range(2):
        model(ids, use_cache=False)
    sync()
    times = []
    for _ in tqdm(range(reps), desc=label, unit="run", leave=False, disable=None):
        t0 = time.perf_counter()
        model(ids, use_cache=False)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mb(n):
    return f"{n / 2**20:.1f} MiB"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m nmspmm.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a local directory or hub id for AutoModelForCausalLM "
                    "(default: a tiny random Llama built offline)")
    ap.add_argument("--pattern", type=parse_pattern, default=(16, 32, 32), metavar="N:M:L",
                    help="vector-wise N:M pattern with vector length L (default 16:32:32)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--dtype", choices=["auto", *DTYPES], default="auto",
                    help="auto: the model's own dtype (float32 for the tiny model)")
    ap.add_argument("--tokens", type=int, default=0,
                    help="prompt length of the prefill timing (default: 512 on CUDA, 64 on the CPU)")
    ap.add_argument("--reps", type=int, default=0, help="timed runs per case (default: by device)")
    args = ap.parse_args(argv)
    N, M, L = args.pattern

    info = nmspmm.build_info()
    cuda_ready = torch.cuda.is_available() and info["cuda_kernels_built"]
    device = ("cuda" if cuda_ready else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not cuda_ready:
        sys.exit("nmspmm.demo: --device cuda needs a GPU and nmspmm built with CUDA kernels "
                 f"(torch.cuda.is_available()={torch.cuda.is_available()}, "
                 f"cuda_kernels_built={info['cuda_kernels_built']})")
    archs = ";".join(info["cuda_archs"]) or "-"
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"nmspmm {info['version']}: torch {info['torch_running']}, CUDA kernels "
          f"{'built for ' + archs if info['cuda_kernels_built'] else 'not built'}; running on {where}")

    if args.model:
        from transformers import AutoModelForCausalLM
        dtype = DTYPES.get(args.dtype, "auto")
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
        source = args.model
    else:
        dtype = DTYPES.get(args.dtype, torch.float32)
        model = tiny_llama(device, dtype, big=device == "cuda")
        source = "tiny random Llama"
    dtype = next(model.parameters()).dtype
    c = model.config
    print(f"model: {source}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
          f"intermediate {c.intermediate_size}, {dtype}, {mb(model_bytes(model))}")

    dense_linear = linear_bytes(model, nn.Linear)
    before = model_bytes(model)
    originals = projection_weights(model)
    sparsify_by_layer(model, N, M, L)
    swapped = [m for m in model.modules() if isinstance(m, NMLinear)]
    if not swapped:
        sys.exit(f"nmspmm.demo: no projection of this model fits {N}:{M} with L={L}")
    sparse_linear = linear_bytes(model, NMLinear)
    metadata = sum(m.metadata_nbytes for m in swapped)
    after = model_bytes(model)
    dense_swapped = dense_linear - linear_bytes(model, nn.Linear)

    g = torch.Generator().manual_seed(1)
    tokens = args.tokens or (512 if device == "cuda" else 64)
    prefill = torch.randint(0, c.vocab_size, (1, tokens), generator=g).to(device)
    one = prefill[:, :1]
    reps = args.reps or (20 if device == "cuda" else 3)
    with torch.no_grad():
        sparse_logits = model(prefill, use_cache=False).logits.float()
    t_sparse = {n: time_forward(model, x, reps, f"sparse {n}") for n, x in
                (("prefill", prefill), ("1 token", one))}

    densify(model, originals)
    with torch.no_grad():
        dense_logits = model(prefill, use_cache=False).logits.float()
    t_dense = {n: time_forward(model, x, reps, f"dense {n}") for n, x in
               (("prefill", prefill), ("1 token", one))}

    err = (sparse_logits - dense_logits).abs().max().item()
    scale = dense_logits.abs().max().item() or 1.0
    tol = TOLERANCE[dtype]
    agree = (sparse_logits.argmax(-1) == dense_logits.argmax(-1)).float().mean().item()
    ok = err <= tol * scale
    print(f"check: sparse vs pruned dense logits (mask computed from the original weights in plain "
          f"torch): max |diff| = {err:.3g} "
          f"({err / scale:.2g} of max |logit|, tolerance {tol:g}), same next token at "
          f"{agree:.0%} of positions: {'OK' if ok else 'MISMATCH'}")
    saved = 1 - (sparse_linear + metadata) / dense_swapped
    print(f"memory: {len(swapped)} projections {N}:{M} L={L}: {mb(dense_swapped)} dense -> "
          f"{mb(sparse_linear)} compressed + {mb(metadata)} packing metadata ({saved:.0%} saved); "
          f"whole model {mb(before)} -> {mb(after)}")
    for name in t_sparse:
        shape = f"prefill of {prefill.shape[1]} tokens" if name == "prefill" else "1 token"
        print(f"speed ({device}, {dtype}, {shape}, median of {reps}): sparse "
              f"{t_sparse[name] * 1e3:.2f} ms, dense {t_dense[name] * 1e3:.2f} ms: "
              f"{t_dense[name] / t_sparse[name]:.2f}x dense speed")
    if device == "cpu":
        print("note: on the CPU nmspmm runs its reference path (decompress + dense matmul); the "
              "speed-up comes from the CUDA kernels")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
