"""End-to-end Llama benchmark: dense vs nmspmm-sparsified LlamaForCausalLM (random weights).

  python benchmarks/e2e_llama.py                      # Llama-2-7B and Llama-3-8B shapes, 2 layers, ~5 min
  python benchmarks/e2e_llama.py --layers 4 --models llama-3-8b --dtypes bf16

The models are built from the real configs (benchmarks/shapes.py) with --layers decoder layers
(default 2; the real models have 32), random weights, SDPA attention. For every model, dtype
(fp32 with TF32 off, bf16) and variant (dense, then nmspmm.sparsify_ at each pattern, L=32):
  * prefill: one forward of 1 x --prefill tokens (no cache, last-token logits), median of --reps;
  * decode: greedy generation of --new-tokens tokens after a --prompt token prompt, at each batch
    size, (a) eager with HF's DynamicCache (what a plain HF loop gets) and (b) one decode step
    captured in a CUDA graph with HF's StaticCache and replayed (launch overhead removed);
  * peak memory (torch.cuda.max_memory_allocated) per phase and the model's parameter+buffer bytes.
A last variant, no-proj, is the dense model whose decoder-layer projections return zeros without a
kernel: its speedup is the ceiling of any projection speedup (--no-ceiling skips it).
Every sparse model is checked before it is timed, in every dtype: its logits against those of the
same model whose NMLinear layers are swapped for nn.Linear holding the original weights times a mask
computed in plain torch (nmspmm.demo.reference_mask, the rule of docs/format.md; no nmspmm op), in
the same dtype; the relative Frobenius error must stay below --check-tol (fp32) or --check-tol-half
(bf16), else the run stops with exit status 3. A bf16 model keeps bf16 values and takes the native
fp16/bf16 plans (decode, tensor-core prefill, dense expansion) where the registry has them.
Writes <out>/e2e_llama.csv and <out>/e2e_llama.json; see docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes as S  # noqa: E402
from common import (collect_env, default_out_dir, log, set_tf32, tf32_setting, write_csv,  # noqa: E402
                    write_json)

DEFAULT_MODELS = "llama-2-7b,llama-3-8b"
TINY = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
            head_dim=64, vocab_size=512, max_position_embeddings=4096)

CSV_COLUMNS = [
    "model", "layers", "dtype", "variant", "sparsity", "status", "prefill_tokens", "prefill_ms",
    "prefill_tok_s", "prefill_speedup", "prefill_peak_mib", "decode_b1_ms", "decode_b1_tok_s",
    "decode_b1_speedup", "decode_b1_graph_ms", "decode_b1_graph_tok_s", "decode_b1_graph_speedup",
    "decode_b16_ms", "decode_b16_tok_s", "decode_b16_speedup", "decode_b16_graph_ms",
    "decode_b16_graph_tok_s", "decode_b16_graph_speedup", "decode_peak_mib", "weight_mib",
    "linear_weight_mib", "weight_ratio", "check_rel_err", "sparsify_s", "sparsify_path", "note",
]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma list (default {DEFAULT_MODELS})")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers per model (default 2)")
    ap.add_argument("--patterns", default=S.DEFAULT_PATTERNS, help="N:M[:L] list (default L=32)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="fp32 (TF32 off) and/or bf16")
    ap.add_argument("--prefill", type=int, default=2048, help="prefill tokens (batch 1)")
    ap.add_argument("--prompt", type=int, default=128, help="decode prompt length")
    ap.add_argument("--new-tokens", type=int, default=32, help="decode steps timed per run")
    ap.add_argument("--batches", default="1,16", help="decode batch sizes")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions (median)")
    ap.add_argument("--no-graph", action="store_true", help="skip CUDA-graph decode")
    ap.add_argument("--no-ceiling", action="store_true",
                    help="skip the no-proj row (the dense model without its decoder-layer projections)")
    ap.add_argument("--no-check", action="store_true", help="skip the sparse-vs-pruned-dense logits check")
    ap.add_argument("--check-tol", type=float, default=1e-3, help="logits relative error bound (fp32)")
    ap.add_argument("--check-tol-half", type=float, default=5e-2,
                    help="logits relative error bound (bf16: both models round every layer's output)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with --tiny (smoke test)")
    ap.add_argument("--tiny", action="store_true", help="tiny hidden sizes (pipeline smoke test only)")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results/e2e_<time>)")
    ap.add_argument("--dry-run", action="store_true", help="list the runs and the layer shapes; no GPU")
    return ap


def dry_run(args, models, patterns, dtypes) -> None:
    variants = ["dense"] + [str(p) for p in patterns]
    batches = [int(x) for x in args.batches.split(",") if x.strip()]
    for m in models:
        hp = S.LLAMA_MODELS[m]
        projs = "  ".join(f"{lab}:{n}x{k}" for lab, n, k in S.model_projections(m))
        log(f"{m}: {args.layers} of {hp['num_hidden_layers']} decoder layers, vocab {hp['vocab_size']}; {projs}")
    runs = len(models) * len(variants) * len(dtypes)
    log(f"{runs} runs = {len(models)} models x {len(variants)} variants ({', '.join(variants)}) x "
        f"{len(dtypes)} dtypes ({', '.join(dtypes)}); each: prefill 1x{args.prefill} ({args.reps} reps), "
        f"decode {args.new_tokens} tokens at batch {batches} eager" + ("" if args.no_graph else " + CUDA graph"))
    log(f"{len(models) * len(patterns)} sparsify_ calls (CPU fallback when the build has no device "
        f"compression ops: ~5-10 s each); expected total on an H100 ~2-4 min")


# ------------------------------------------------------------------------------------ helpers
class Clock:
    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def ms(self, fn: Callable[[], object]) -> float:
        """Wall time of fn() in ms, the device synchronized on both sides."""
        self.sync()
        if self.cuda:
            s = self.torch.cuda.Event(enable_timing=True)
            e = self.torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            return s.elapsed_time(e)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def tensor_bytes(module) -> int:
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def linear_weight_bytes(model) -> int:
    """Bytes of the seven projections' weight state (dense weight, or values + the indices a layer holds + metadata)."""
    from torch import nn

    total = 0
    for fqn, mod in model.named_modules():
        leaf = fqn.rsplit(".", 1)[-1]
        if leaf in S.PROJECTIONS and (isinstance(mod, nn.Linear) or hasattr(mod, "values")):
            total += tensor_bytes(mod)
    return total


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_mib(device: str) -> Optional[float]:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return None


def sparsify(model, p: S.Pattern, device: str) -> str:
    """nmspmm.sparsify_ on the device; if this build has no device implementation of the pruning
    or compression ops, compress the decoder layers on the CPU and move them back."""
    import nmspmm

    try:
        nmspmm.sparsify_(model, p.N, p.M, p.L)
        return "device"
    except (RuntimeError, NotImplementedError) as e:
        if device == "cpu":
            raise
        first = str(e).splitlines()[0][:120]
    layers = model.model.layers
    layers.to("cpu")
    nmspmm.sparsify_(layers, p.N, p.M, p.L)
    layers.to(device)
    return f"cpu-fallback ({first})"


def drop_projections(model) -> None:
    """The no-proj row: every nn.Linear of the decoder layers returns a cached zero output of its
    shape (no kernel, no weight bytes), so the row times what no projection speedup can remove
    (attention, norms, rotary, cache updates, embeddings, lm_head, launches)."""
    from torch import nn

    class ZeroProjection(nn.Module):
        def __init__(self, out_features: int):
            super().__init__()
            self.out_features = out_features
            self.cache: Dict = {}

        def forward(self, x):
            key = (tuple(x.shape[:-1]), x.dtype, x.device)
            if key not in self.cache:
                self.cache[key] = x.new_zeros(*x.shape[:-1], self.out_features)
            return self.cache[key]

    for _, parent in list(model.model.layers.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, ZeroProjection(child.out_features))


def projection_weights(model) -> Dict:
    """CPU copies of the weights sparsify_ replaces (its default targets), by module name: the
    pruned dense reference is built from them, not from the compressed weights."""
    import torch
    from torch import nn
    from nmspmm.nn import DEFAULT_TARGETS

    with torch.no_grad():
        return {fqn: mod.weight.detach().to("cpu", copy=True) for fqn, mod in model.named_modules()
                if isinstance(mod, nn.Linear) and fqn.rsplit(".", 1)[-1] in DEFAULT_TARGETS}


def check_against_pruned_dense(model, ids, originals: Dict) -> float:
    """Relative Frobenius error of the sparse model's logits against the same model whose NMLinear
    layers are swapped (temporarily) for nn.Linear holding the original weight times the magnitude
    mask computed in plain torch (nmspmm.demo.reference_mask), in the layer's dtype."""
    import torch
    from torch import nn
    import nmspmm
    from nmspmm.demo import reference_mask

    y = model(input_ids=ids, use_cache=False).logits.double()
    swaps = []
    for fqn, child in list(model.named_modules()):
        if not isinstance(child, nmspmm.NMLinear):
            continue
        parent_name, _, leaf = fqn.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        lin = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                        device=child.values.device, dtype=child.values.dtype)
        with torch.no_grad():
            w = originals[fqn].to(child.values.device)
            lin.weight.copy_(w * reference_mask(w, child.N, child.M, child.L))
            if child.bias is not None:
                lin.bias.copy_(child.bias)
        del w
        swaps.append((parent, leaf, child))
        setattr(parent, leaf, lin)
    try:
        ref = model(input_ids=ids, use_cache=False).logits.double()
    finally:
        for parent, leaf, child in swaps:
            setattr(parent, leaf, child)
    if not swaps:
        raise RuntimeError("no NMLinear found after sparsify_")
    return ((y - ref).norm() / ref.norm()).item()


# ------------------------------------------------------------------------------------ phases
def time_prefill(model, clock: Clock, args, vocab: int, gen) -> float:
    import torch

    ids = torch.randint(0, vocab, (1, args.prefill), device=args.device, generator=gen)

    def run():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    run()
    return statistics.median(clock.ms(run) for _ in range(args.reps))


def time_decode_eager(model, clock: Clock, args, vocab: int, batch: int, gen) -> float:
    """ms per decode step (batch tokens) with a DynamicCache, greedy."""
    import torch

    prompt = torch.randint(0, vocab, (batch, args.prompt), device=args.device, generator=gen)
    times = []
    for rep in range(args.reps):  # rep 0 is warmup
        out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        state = {"cache": cache, "tok": tok}

        def steps():
            for _ in range(args.new_tokens):
                o = model(input_ids=state["tok"], past_key_values=state["cache"], use_cache=True)
                state["cache"], state["tok"] = o.past_key_values, o.logits[:, -1:].argmax(-1)
        t = clock.ms(steps) / args.new_tokens
        if rep > 0 or args.reps == 1:
            times.append(t)
    return statistics.median(times)


def capture_graph(fn):
    """``fn`` captured in a CUDA graph, after two warm-up calls on a side stream (lazy
    initialisation and allocations happen outside the capture)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_decode_graph(model, clock: Clock, args, cfg, batch: int, gen) -> float:
    """ms per decode step with a StaticCache; one step (forward + greedy argmax written back into
    the input buffer) captured in a CUDA graph and replayed --new-tokens times."""
    import torch
    from transformers import StaticCache

    max_len = args.prompt + 4 + args.new_tokens * (args.reps + 1)
    cache = StaticCache(config=cfg, max_cache_len=max_len)
    prompt = torch.randint(0, cfg.vocab_size, (batch, args.prompt), device=args.device, generator=gen)
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1:].argmax(-1).contiguous()
    del out

    def step():
        o = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok.copy_(o.logits[:, -1:].argmax(-1))

    g = capture_graph(step)

    def replay():
        for _ in range(args.new_tokens):
            g.replay()
    replay()  # warmup
    return statistics.median(clock.ms(replay) for _ in range(args.reps)) / args.new_tokens


# ------------------------------------------------------------------------------------ main loop
def run_variant(model, cfg, model_name: str, dtype: str, variant: str, p: Optional[S.Pattern], args,
                clock: Clock, extra: Dict) -> Dict:
    import torch

    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed + 1)
    row: Dict = {"model": model_name, "layers": cfg.num_hidden_layers, "dtype": dtype, "variant": variant,
                 "sparsity": p.sparsity if p else 0.0, "status": "ok", "prefill_tokens": args.prefill,
                 "weight_mib": tensor_bytes(model) / 2**20, "linear_weight_mib": linear_weight_bytes(model) / 2**20}
    row.update(extra)
    notes = [extra.get("note")] if extra.get("note") else []
    set_tf32(False)
    with torch.inference_mode():
        reset_peak(args.device)
        row["prefill_ms"] = time_prefill(model, clock, args, cfg.vocab_size, gen)
        row["prefill_tok_s"] = args.prefill / (row["prefill_ms"] / 1e3)
        row["prefill_peak_mib"] = peak_mib(args.device)
        reset_peak(args.device)
        for b in [int(x) for x in args.batches.split(",") if x.strip()]:
            t = time_decode_eager(model, clock, args, cfg.vocab_size, b, gen)
            row[f"decode_b{b}_ms"], row[f"decode_b{b}_tok_s"] = t, b / (t / 1e3)
            if clock.cuda and not args.no_graph:
                try:
                    tg = time_decode_graph(model, clock, args, cfg, b, gen)
                    row[f"decode_b{b}_graph_ms"], row[f"decode_b{b}_graph_tok_s"] = tg, b / (tg / 1e3)
                except Exception as e:  # noqa: BLE001 -- the eager numbers still stand
                    torch.cuda.synchronize()
                    notes.append(f"graph b={b} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        row["decode_peak_mib"] = peak_mib(args.device)
    if notes:
        row["note"] = "; ".join(notes)
    return row


def attach_speedups(rows: List[Dict]) -> None:
    dense = {(r["model"], r["dtype"]): r for r in rows if r["variant"] == "dense" and r["status"] == "ok"}
    for r in rows:
        d = dense.get((r["model"], r["dtype"]))
        if not d or r["status"] != "ok":
            continue
        if d.get("weight_mib") and r.get("weight_mib"):
            r["weight_ratio"] = d["weight_mib"] / r["weight_mib"]
        if d.get("prefill_ms") and r.get("prefill_ms"):
            r["prefill_speedup"] = d["prefill_ms"] / r["prefill_ms"]
        for key in [k for k in r if k.startswith("decode_b") and k.endswith("_ms")]:
            if d.get(key) and r.get(key):
                r[key[:-3] + "_speedup"] = d[key] / r[key]


def print_table(rows: List[Dict]) -> None:
    def f(v, spec):
        return "-" if v is None else format(v, spec)
    log(f"\n{'model':12s} {'dtype':5s} {'variant':9s} {'prefill ms':>10s} {'x':>5s} "
        f"{'dec b1 tok/s':>12s} {'graph':>8s} {'x':>5s} {'dec b16 tok/s':>13s} {'graph':>8s} {'x':>5s} "
        f"{'lin MiB':>8s} {'peak MiB':>8s} {'chk err':>8s}")
    for r in rows:
        log(f"{r['model']:12s} {r['dtype']:5s} {r['variant']:9s} {f(r.get('prefill_ms'), '10.2f')} "
            f"{f(r.get('prefill_speedup'), '5.2f')} {f(r.get('decode_b1_tok_s'), '12.1f')} "
            f"{f(r.get('decode_b1_graph_tok_s'), '8.1f')} "
            f"{f(r.get('decode_b1_graph_speedup') or r.get('decode_b1_speedup'), '5.2f')} "
            f"{f(r.get('decode_b16_tok_s'), '13.1f')} {f(r.get('decode_b16_graph_tok_s'), '8.1f')} "
            f"{f(r.get('decode_b16_graph_speedup') or r.get('decode_b16_speedup'), '5.2f')} "
            f"{f(r.get('linear_weight_mib'), '8.0f')} {f(max(r.get('prefill_peak_mib') or 0, r.get('decode_peak_mib') or 0) or None, '8.0f')} "
            f"{f(r.get('check_rel_err'), '8.1e')}" + (f"  [{r['note'][:80]}]" if r.get("note") else ""))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    try:
        patterns = S.parse_patterns(args.patterns)
        models = [S.canonical_model(m) for m in args.models.split(",") if m.strip()]
    except ValueError as e:
        build_parser().error(str(e))
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in ("fp32", "bf16"):
            build_parser().error(f"--dtypes: {d!r} not in fp32,bf16")
    dtypes.sort(key=("fp32", "bf16").index)  # fp32 first: one in-place cast per model build
    if args.dry_run:
        dry_run(args, models, patterns, dtypes)
        return 0
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            log("error: no CUDA device (use --device cpu --tiny for a smoke test)")
            return 2
    elif not args.tiny:
        build_parser().error("--device cpu needs --tiny (the real shapes would take hours on a CPU)")
    from transformers import LlamaForCausalLM

    out = args.out or default_out_dir("e2e")
    os.makedirs(out, exist_ok=True)
    set_tf32(False)
    env = collect_env(args.device)
    env["tf32"] = tf32_setting()
    clock = Clock(args.device)
    settings = {k: getattr(args, k) for k in ("layers", "prefill", "prompt", "new_tokens", "batches", "reps",
                                              "seed", "tiny", "no_graph")}
    settings.update(models=models, patterns=[str(p) for p in patterns], dtypes=dtypes, attn="sdpa",
                    note="bf16 models take nmspmm's native fp16/bf16 plans where the registry has them")
    log(f"e2e: {env.get('gpu_name', args.device)}; models {', '.join(models)} with {args.layers} decoder layers "
        f"(random weights); prefill 1x{args.prefill}; decode {args.new_tokens} tokens at batch {args.batches} "
        f"(prompt {args.prompt}); dtypes {', '.join(dtypes)}; -> {out}")
    rows: List[Dict] = []
    t_start = time.time()
    variants = [("dense", None)] + [(str(p), p) for p in patterns] + ([] if args.no_ceiling else [("no-proj", None)])
    aborted = None
    try:
        for model_name in models:
            cfg = S.make_config(model_name, num_hidden_layers=args.layers, **(TINY if args.tiny else {}))
            cfg._attn_implementation = "sdpa"
            for variant, p in variants:
                t0 = time.time()
                torch.manual_seed(args.seed)
                with torch.device(args.device):
                    model = LlamaForCausalLM(cfg).eval()
                model.requires_grad_(False)
                extra: Dict = {}
                if variant == "no-proj":
                    drop_projections(model)
                originals = None
                if p is not None:
                    if not args.no_check:
                        originals = projection_weights(model)
                    ts = time.time()
                    extra["sparsify_path"] = sparsify(model, p, args.device)
                    extra["sparsify_s"] = time.time() - ts
                for d in dtypes:
                    if d == "bf16":
                        model.to(torch.bfloat16)
                    row_extra = dict(extra)
                    if originals is not None:
                        gen = torch.Generator(device=args.device)
                        gen.manual_seed(args.seed + 2)
                        ids = torch.randint(0, cfg.vocab_size, (1, 64), device=args.device, generator=gen)
                        with torch.inference_mode():
                            err = check_against_pruned_dense(model, ids, originals)
                        row_extra["check_rel_err"] = err
                        tol = args.check_tol if d == "fp32" else args.check_tol_half
                        log(f"  {model_name} {d} {variant}: logits vs the pruned dense model, relative error "
                            f"{err:.2e} (tol {tol:.0e})")
                        if not err < tol:
                            raise RuntimeError(f"{model_name} {d} {variant}: sparse logits differ from the pruned "
                                               f"dense model by {err:.3e} (tol {tol:.0e})")
                    try:
                        row = run_variant(model, cfg, model_name, d, variant, p, args, clock, row_extra)
                    except torch.cuda.OutOfMemoryError as e:
                        row = {"model": model_name, "layers": args.layers, "dtype": d, "variant": variant,
                               "status": "oom", "note": str(e).splitlines()[0][:160]}
                    rows.append(row)
                    log(f"  {model_name} {d} {variant}: prefill {row.get('prefill_ms', float('nan')):.2f} ms, "
                        f"decode b1 {row.get('decode_b1_tok_s', float('nan')):.1f} tok/s"
                        + (f" (graph {row['decode_b1_graph_tok_s']:.1f})" if row.get("decode_b1_graph_tok_s") else "")
                        + f"  [{time.time() - t0:.1f}s]")
                del model, originals
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    except RuntimeError as e:
        aborted = str(e)
        if "differ from the pruned" not in aborted:
            raise
    finally:
        attach_speedups(rows)
        env["wall_seconds"] = round(time.time() - t_start, 1)
        write_csv(os.path.join(out, "e2e_llama.csv"), rows, CSV_COLUMNS)
        write_json(os.path.join(out, "e2e_llama.json"),
                   {"kind": "e2e", "env": env, "settings": settings, "aborted": aborted, "rows": rows})
    if aborted:
        log("!" * 100 + f"\nABORTED: {aborted}\n" + "!" * 100)
        return 3
    print_table(rows)
    log(f"\nspeedups are over the dense model of the same dtype; {args.layers} decoder layers + embeddings + "
        f"lm_head (not sparsified). A bf16 model runs the native fp16/bf16 plans (docs/kernels.md). no-proj: "
        f"the dense model with its decoder-layer projections skipped, the ceiling of any projection speedup.")
    log(f"wrote {out}/e2e_llama.csv and e2e_llama.json in {env['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
