"""Tensor-parallel Llama benchmark: a sparsified Llama split over the GPUs of one host against the
same model on one GPU, with the dense model under the same split for comparison.

  torchrun --nproc-per-node 2 benchmarks/tp_llama.py                     # Llama-2-7B shapes, 8 layers
  torchrun --nproc-per-node 2 benchmarks/tp_llama.py --device cpu --tiny # gloo smoke test, no GPU

Every rank builds the same model (same seed, random weights, --dtype) on its own device, and per
variant (dense, then nmspmm.sparsify_ at each of --patterns, then unstructured CSR at each of
--unstructured):
  1. TP = 1 on every rank at once (no communication): reference logits of a fixed input, the
     greedy tokens of a short generate(), prefill 1 x --prefill (no cache, last-token logits)
     eager and replayed from a CUDA graph (the device time, without the host's launches; the
     replay's logits checked against the eager forward's, `graph_rel_err`: the split model's graph
     runs the collectives on the copy engines, its eager forward NCCL's); decode at each batch with
     one step captured in a CUDA graph (StaticCache); weight bytes;
  2. the model split over all ranks by nmspmm.parallelize_, Megatron-style (the dense model's
     nn.Linear projections the same way as the sparse ones; the vocabulary too; with sequence
     parallelism unless --no-sequence-parallel). Its logits are
     checked against step 1's (relative Frobenius error below --check-tol) and its greedy tokens
     compared: where they differ, the reference's logit margin at the first differing step must be
     within twice the two models' largest logit difference there (a near-tie that rounding flips),
     else the run stops with status 3, as for a logits error; then the same timings. Times are the
     slowest rank's (all-reduce MAX).
  For the sparse variants, before the split: rank 0 saves the model (save_pretrained), every rank
  loads only its shard (nmspmm.parallel.from_pretrained) and checks its logits the same way.
Rank 0 writes <out>/tp_llama.csv and tp_llama.json after every variant: per variant and TP, the
times, the prefill speed over TP = 1 (`prefill_scaling`, `prefill_graph_scaling`), the weight bytes per GPU and their ratio to TP = 1 (all of the model:
`model_weight_ratio`; the projections: `proj_weight_ratio`), the check's error and whether the
greedy tokens matched.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes as S  # noqa: E402
from common import collect_env, default_out_dir, log, write_csv, write_json  # noqa: E402
from e2e_llama import TINY, Clock, capture_graph, time_decode_graph, time_prefill  # noqa: E402

COLUMNS = ["model", "layers", "dtype", "variant", "tp", "sequence_parallel", "status", "prefill_tokens", "prefill_ms", "prefill_tok_s",
           "prefill_scaling", "prefill_graph_ms", "prefill_graph_scaling", "decode_b1_graph_ms", "decode_b1_graph_tok_s", "decode_b16_graph_ms",
           "decode_b16_graph_tok_s", "proj_weight_mib_per_gpu", "proj_weight_ratio", "model_mib_per_gpu",
           "model_weight_ratio", "check_rel_err", "greedy_tokens_equal", "greedy_flip_margin", "greedy_flip_bound",
           "load_rel_err", "graph_rel_err", "note"]
ATTN_COLUMN, ATTN_ROW = ("q_proj", "k_proj", "v_proj"), "o_proj"
MLP_COLUMN, MLP_ROW = ("gate_proj", "up_proj"), "down_proj"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-2-7b")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (default 8; the real model has 32)")
    ap.add_argument("--patterns", default="16:32:32,2:4:1,2:4:32", help="N:M:L list")
    ap.add_argument("--unstructured", default="", help="sparsity list of unstructured CSR variants (e.g. 0.5)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--prompt", type=int, default=128, help="decode prompt length")
    ap.add_argument("--new-tokens", type=int, default=32, help="decode steps timed per repetition")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--generate", type=int, default=8, help="greedy tokens compared between TP = 1 and TP = W")
    ap.add_argument("--check-tol", type=float, default=None,
                    help="logits relative error bound (default 1e-4 in fp32, 3e-2 in bf16: the split "
                         "sums round differently)")
    ap.add_argument("--ckpt-dir", default="/tmp/nmspmm_tp_ckpt",
                    help="where rank 0 saves each sparse model for the sharded-load check (removed after)")
    ap.add_argument("--no-load-check", action="store_true",
                    help="skip the sharded load (nmspmm.parallel.from_pretrained) of the saved full model")
    ap.add_argument("--no-sequence-parallel", action="store_true",
                    help="split without sequence parallelism (parallelize_'s sequence_parallel=False)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with --tiny (gloo smoke test)")
    ap.add_argument("--tiny", action="store_true", help="tiny hidden sizes (pipeline smoke test only)")
    ap.add_argument("--out", default=None)
    return ap


def local_bytes(tensors) -> int:
    """Bytes held on this rank (a DTensor counts its local shard)."""
    seen, total = set(), 0
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def projection_bytes(model) -> int:
    mods = [m for fqn, m in model.named_modules() if fqn.rsplit(".", 1)[-1] in S.PROJECTIONS]
    return local_bytes([t for m in mods for t in list(m.parameters()) + list(m.buffers())])


def prefill_graph_ms(model, clock: Clock, args, vocab: int, gen, checked: Dict) -> float:
    """ms of the prefill forward (1 x --prefill, no cache, last-token logits) captured in one CUDA
    graph and replayed: the device time, without the host's launch cost. ``checked["graph_rel_err"]``:
    the replay's logits against the eager forward's (a split model's graph runs the collectives on
    the copy engines, its eager forward NCCL's)."""
    import torch

    ids = torch.randint(0, vocab, (1, args.prefill), device=args.device, generator=gen)
    out = {}

    def forward():
        out["logits"] = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    g = capture_graph(forward)
    g.replay()
    replayed = out["logits"].float().clone()
    eager = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits.float()
    checked["graph_rel_err"] = ((replayed - eager).norm() / eager.norm()).item()
    ms = statistics.median(clock.ms(g.replay) for _ in range(max(args.reps, 5)))
    del g
    return ms


def decode_graph_ms(model, cfg, clock: Clock, args, batch: int, gen, world: int) -> float:
    """ms per decode step, CUDA graph (e2e_llama.time_decode_graph) with a StaticCache of this
    rank's heads."""
    import copy

    local = copy.copy(cfg)
    local.num_attention_heads = cfg.num_attention_heads // world
    local.num_key_value_heads = cfg.num_key_value_heads // world
    return time_decode_graph(model, clock, args, local, batch, gen)


def slowest(value: float, device: str) -> float:
    """The largest value over the ranks (a time is the slowest rank's)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure(model, cfg, clock: Clock, args, world: int) -> Dict:
    import torch

    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed + 1)
    row: Dict = {"prefill_tokens": args.prefill}
    notes = []
    def attempt(name, fn):
        try:
            t = fn()
        except Exception as e:  # noqa: BLE001 -- recorded; the other numbers stand
            torch.cuda.synchronize()
            t = float("nan")
            notes.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        return slowest(t, args.device)

    with torch.inference_mode():
        row["prefill_ms"] = slowest(time_prefill(model, clock, args, cfg.vocab_size, gen), args.device)
        row["prefill_tok_s"] = args.prefill / (row["prefill_ms"] / 1e3)
        if clock.cuda:
            checked = {}
            row["prefill_graph_ms"] = attempt("prefill graph", lambda: prefill_graph_ms(
                model, clock, args, cfg.vocab_size, gen, checked))
            row["graph_rel_err"] = slowest(checked.get("graph_rel_err", float("nan")), args.device)
            for b in [int(x) for x in args.batches.split(",") if x.strip()]:
                t = attempt(f"graph b={b}", lambda: decode_graph_ms(model, cfg, clock, args, b, gen, world))
                row[f"decode_b{b}_graph_ms"], row[f"decode_b{b}_graph_tok_s"] = t, b / (t / 1e3)
    # The most a rank holds (an unstructured layer's nonzeros split unevenly over the ranks).
    row["proj_weight_mib_per_gpu"] = slowest(projection_bytes(model) / 2**20, args.device)
    row["model_mib_per_gpu"] = slowest(local_bytes(list(model.parameters()) + list(model.buffers())) / 2**20,
                                       args.device)
    if notes:
        row["note"] = "; ".join(notes)
    return row


def reference(model, cfg, args):
    """Logits of a fixed input; the greedy tokens of a short generate() and the logits of each of
    its steps ([steps, batch, vocab])."""
    import torch

    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed + 2)
    ids = torch.randint(0, cfg.vocab_size, (2, 32), device=args.device, generator=gen)
    with torch.inference_mode():
        logits = model(ids, use_cache=False).logits.float()
        out = model.generate(ids, max_new_tokens=args.generate, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    return logits, (out.sequences[:, ids.shape[1]:], torch.stack(out.logits).float())


def greedy_flip(ref, got):
    """None when the greedy tokens are equal; else (margin, bound) at the first step where a
    sequence differs, after the same prefix: the reference's logit margin between its token and
    the split model's, and twice the largest logit difference of the two models at that step. A
    margin within the bound is a near-tie that rounding flips (random weights give many);
    beyond it, the split model chose differently."""
    (ref_tokens, ref_logits), (tokens, logits) = ref, got
    differs = ref_tokens != tokens
    if not bool(differs.any()):
        return None
    step = int(differs.any(0).nonzero()[0])
    rows = differs[:, step].nonzero().flatten()
    ref_step = ref_logits[step, rows]
    margin = (ref_step.gather(1, ref_tokens[rows, step, None]) - ref_step.gather(1, tokens[rows, step, None])).max()
    bound = 2 * (ref_step - logits[step, rows]).abs().max()
    return float(margin), float(bound)


def sharded_load_error(model, mesh, rank: int, dtype, ref_logits, variant: str, args) -> float:
    """Rank 0 saves the full sparse model (save_pretrained); every rank loads only its shard
    (nmspmm.parallel.from_pretrained) and compares its logits with the single-GPU ones: the
    relative error, the largest over the ranks."""
    import shutil

    import torch.distributed as dist

    import nmspmm

    path = os.path.join(args.ckpt_dir, variant.replace(":", "_"))
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)
        model.save_pretrained(path)
    dist.barrier()
    loaded = nmspmm.parallel.from_pretrained(path, mesh, dtype=dtype, device=args.device,
                                             sequence_parallel=not args.no_sequence_parallel).eval()
    logits, _ = reference(loaded, loaded.config, args)
    err = slowest(((logits - ref_logits).norm() / ref_logits.norm()).item(), args.device)
    del loaded
    dist.barrier()
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    return err


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaForCausalLM

    import nmspmm

    if "RANK" not in os.environ:
        build_parser().error("run under torchrun (torchrun --nproc-per-node 2 benchmarks/tp_llama.py ...)")
    cuda = args.device.startswith("cuda")
    if not cuda and not args.tiny:
        build_parser().error("--device cpu needs --tiny")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        args.device = f"cuda:{torch.cuda.current_device()}"
    dist.init_process_group("nccl" if cuda else "gloo")
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    tol = args.check_tol if args.check_tol is not None else (1e-4 if args.dtype == "fp32" else 3e-2)
    patterns = S.parse_patterns(args.patterns)
    model_name = S.canonical_model(args.model)
    cfg = S.make_config(model_name, num_hidden_layers=args.layers, **(TINY if args.tiny else {}))
    cfg._attn_implementation = "sdpa"
    clock = Clock(args.device)
    out = args.out or default_out_dir("tp")
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        log(f"tp_llama: {world} ranks on {args.device.split(':')[0]}; {model_name} with {args.layers} layers, "
            f"{args.dtype}; prefill 1x{args.prefill}; decode batches {args.batches} (CUDA graphs); -> {out}")
    rows: List[Dict] = []
    status = 0
    env = collect_env(args.device.split(":")[0]) if rank == 0 else None
    sparsities = [float(v) for v in args.unstructured.split(",") if v.strip()]
    variants = [("dense", None)] + [(str(q), q) for q in patterns] + [(f"csr{s:g}", s) for s in sparsities]
    for variant, p in variants:
        t0 = time.time()
        torch.manual_seed(args.seed)
        with torch.device(args.device):
            model = LlamaForCausalLM(cfg).to(dtype).eval()
        model.requires_grad_(False)
        if isinstance(p, float):
            nmspmm.sparsify_(model, sparsity=p)
        elif p is not None:
            nmspmm.sparsify_(model, p.N, p.M, p.L)
        base = {"model": model_name, "layers": args.layers, "dtype": args.dtype, "variant": variant,
                "status": "ok", "sequence_parallel": int(not args.no_sequence_parallel)}
        ref_logits, ref_tokens = reference(model, cfg, args)
        one = dict(base, tp=1, **measure(model, cfg, clock, args, 1))
        load_err = None
        if p is not None and not args.no_load_check:
            load_err = sharded_load_error(model, mesh, rank, dtype, ref_logits, variant, args)
        # The dense model's projections split the same way.
        nmspmm.parallelize_(model, mesh, sequence_parallel=not args.no_sequence_parallel)
        logits, tokens = reference(model, cfg, args)
        err = ((logits - ref_logits).norm() / ref_logits.norm()).item()
        err = slowest(err, args.device)
        flip = greedy_flip(ref_tokens, tokens)
        margin, bound = flip if flip is not None else (float("nan"), float("nan"))
        same = int(slowest(float(flip is not None), args.device) == 0.0)
        split = dict(base, tp=world, check_rel_err=err, greedy_tokens_equal=same, load_rel_err=load_err,
                     **measure(model, cfg, clock, args, world))
        if flip is not None:
            split["greedy_flip_margin"], split["greedy_flip_bound"] = margin, bound
        for key in ("prefill", "prefill_graph"):
            split[f"{key}_scaling"] = one.get(f"{key}_ms", float("nan")) / split.get(f"{key}_ms", float("nan"))
        split["proj_weight_ratio"] = split["proj_weight_mib_per_gpu"] / one["proj_weight_mib_per_gpu"]
        split["model_weight_ratio"] = split["model_mib_per_gpu"] / one["model_mib_per_gpu"]
        tie_ok = flip is None or margin <= bound
        graph_bad = any(r.get("graph_rel_err", 0.0) >= tol for r in (one, split))  # NaN: no graph (a note says why)
        if not err < tol or (load_err is not None and not load_err < tol) or graph_bad or not slowest(
                float(not tie_ok), args.device) == 0.0:
            split["status"] = "check failed"
            status = 3
        rows += [one, split]
        if rank == 0:
            log(f"  {variant}: TP=1 prefill {one['prefill_ms']:.2f} ms; TP={world} {split['prefill_ms']:.2f} ms "
                f"({split['prefill_scaling']:.2f}x; in a CUDA graph {split['prefill_graph_scaling']:.2f}x); weights per GPU {split['model_weight_ratio']:.3f}x "
                f"(projections {split['proj_weight_ratio']:.3f}x); logits error {err:.2e} (tol {tol:.0e}), "
                f"greedy tokens {'equal' if same else f'differ at a near-tie (margin {margin:.3g} <= {bound:.3g})' if tie_ok else f'DIFFER (margin {margin:.3g} > {bound:.3g})'}"
                + (f", sharded load {load_err:.2e}" if load_err is not None else "")
                + f", graph against eager {split.get('graph_rel_err', float('nan')):.1e}; "
                f"{time.time() - t0:.0f} s")
        del model
        if cuda:
            torch.cuda.empty_cache()
        if rank == 0:  # after every variant: a run cut short keeps what it measured
            write_csv(os.path.join(out, "tp_llama.csv"), rows, COLUMNS)
            write_json(os.path.join(out, "tp_llama.json"), {"env": env, "world_size": world,
                                                             "settings": vars(args), "rows": rows})
        if status:
            break
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
