"""Tensor-parallel Llama benchmark: a sparsified Llama split over the GPUs of one host against the
same model on one GPU, with the dense model under the same split for comparison.

  torchrun --nproc-per-node 2 benchmarks/tp_llama.py                     # Llama-2-7B shapes, 8 layers
  torchrun --nproc-per-node 2 benchmarks/tp_llama.py --device cpu --tiny # gloo smoke test, no GPU

Every rank builds the same model (same seed, random weights, --dtype) on its own device, and per
variant (dense, then nmspmm.sparsify_ at each of --patterns, then unstructured CSR at each of
--unstructured):
  1. TP = 1 on every rank at once (no communication): reference logits of a fixed input, the
     greedy tokens of a short generate(), prefill 1 x --prefill (no cache, last-token logits), decode
     at each batch with one step captured in a CUDA graph (StaticCache), projection weight bytes;
  2. the model split over all ranks, Megatron-style: nmspmm.parallelize_ for the sparse variants,
     torch's parallelize_module with ColwiseParallel (q, k, v, gate, up) and RowwiseParallel (o, down)
     for the dense one. Its logits are checked against step 1's (relative Frobenius error below
     --check-tol, else the run stops with status 3) and its greedy tokens compared; then the same
     timings. Times are the slowest rank's (all-reduce MAX).
  For the sparse variants, before the split: rank 0 saves the model (save_pretrained), every rank
  loads only its shard (nmspmm.parallel.from_pretrained) and checks its logits the same way.
Rank 0 writes <out>/tp_llama.csv and tp_llama.json: per variant and TP, the times, the prefill
throughput over TP = 1 (`prefill_scaling`), the projection weight bytes per GPU and their ratio to
TP = 1 (`proj_weight_ratio`), the check's error and whether the greedy tokens matched.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes as S  # noqa: E402
from common import collect_env, default_out_dir, log, write_csv, write_json  # noqa: E402
from e2e_llama import TINY, Clock, time_decode_graph, time_prefill  # noqa: E402

COLUMNS = ["model", "layers", "dtype", "variant", "tp", "status", "prefill_tokens", "prefill_ms", "prefill_tok_s",
           "prefill_scaling", "decode_b1_graph_ms", "decode_b1_graph_tok_s", "decode_b16_graph_ms",
           "decode_b16_graph_tok_s", "proj_weight_mib_per_gpu", "proj_weight_ratio", "model_mib_per_gpu",
           "check_rel_err", "greedy_tokens_equal", "load_rel_err", "note"]
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


def dense_parallelize(model, mesh) -> None:
    """The dense model's standard split: torch's own ColwiseParallel / RowwiseParallel styles."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {f"model.layers.*.self_attn.{n}": ColwiseParallel() for n in ATTN_COLUMN}
    plan[f"model.layers.*.self_attn.{ATTN_ROW}"] = RowwiseParallel()
    plan.update({f"model.layers.*.mlp.{n}": ColwiseParallel() for n in MLP_COLUMN})
    plan[f"model.layers.*.mlp.{MLP_ROW}"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)


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
    with torch.inference_mode():
        row["prefill_ms"] = slowest(time_prefill(model, clock, args, cfg.vocab_size, gen), args.device)
        row["prefill_tok_s"] = args.prefill / (row["prefill_ms"] / 1e3)
        if clock.cuda:
            for b in [int(x) for x in args.batches.split(",") if x.strip()]:
                try:
                    t = decode_graph_ms(model, cfg, clock, args, b, gen, world)
                except Exception as e:  # noqa: BLE001 -- recorded; the other numbers stand
                    torch.cuda.synchronize()
                    t = float("nan")
                    notes.append(f"graph b={b}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                t = slowest(t, args.device)
                row[f"decode_b{b}_graph_ms"], row[f"decode_b{b}_graph_tok_s"] = t, b / (t / 1e3)
    # The most a rank holds (an unstructured layer's nonzeros split unevenly over the ranks).
    row["proj_weight_mib_per_gpu"] = slowest(projection_bytes(model) / 2**20, args.device)
    row["model_mib_per_gpu"] = local_bytes(list(model.parameters()) + list(model.buffers())) / 2**20
    if notes:
        row["note"] = "; ".join(notes)
    return row


def reference(model, cfg, args):
    """Logits of a fixed input and the greedy tokens of a short generate()."""
    import torch

    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed + 2)
    ids = torch.randint(0, cfg.vocab_size, (2, 32), device=args.device, generator=gen)
    with torch.inference_mode():
        logits = model(ids, use_cache=False).logits.float()
        tokens = model.generate(ids, max_new_tokens=args.generate, do_sample=False, pad_token_id=0)[:, ids.shape[1]:]
    return logits, tokens


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
    loaded = nmspmm.parallel.from_pretrained(path, mesh, dtype=dtype, device=args.device).eval()
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
                "status": "ok"}
        ref_logits, ref_tokens = reference(model, cfg, args)
        one = dict(base, tp=1, **measure(model, cfg, clock, args, 1))
        load_err = None
        if p is not None and not args.no_load_check:
            load_err = sharded_load_error(model, mesh, rank, dtype, ref_logits, variant, args)
        if p is None:
            dense_parallelize(model, mesh)
        else:
            nmspmm.parallelize_(model, mesh)
        logits, tokens = reference(model, cfg, args)
        err = ((logits - ref_logits).norm() / ref_logits.norm()).item()
        err = slowest(err, args.device)
        same = int(slowest(float(not torch.equal(tokens, ref_tokens)), args.device) == 0.0)
        split = dict(base, tp=world, check_rel_err=err, greedy_tokens_equal=same, load_rel_err=load_err,
                     **measure(model, cfg, clock, args, world))
        split["prefill_scaling"] = split["prefill_tok_s"] / one["prefill_tok_s"]
        split["proj_weight_ratio"] = split["proj_weight_mib_per_gpu"] / one["proj_weight_mib_per_gpu"]
        if not err < tol or (load_err is not None and not load_err < tol):
            split["status"] = "check failed"
            status = 3
        rows += [one, split]
        if rank == 0:
            log(f"  {variant}: TP=1 prefill {one['prefill_ms']:.2f} ms; TP={world} {split['prefill_ms']:.2f} ms "
                f"({split['prefill_scaling']:.2f}x); projection weights per GPU {split['proj_weight_ratio']:.3f}x; "
                f"logits error {err:.2e} (tol {tol:.0e}), greedy tokens {'equal' if same else 'DIFFER'}"
                + (f", sharded load {load_err:.2e}" if load_err is not None else "") + "; "
                f"{time.time() - t0:.0f} s")
        del model
        if cuda:
            torch.cuda.empty_cache()
        if status:
            break
    if rank == 0:
        write_csv(os.path.join(out, "tp_llama.csv"), rows, COLUMNS)
        env = collect_env(args.device.split(":")[0])
        write_json(os.path.join(out, "tp_llama.json"), {"env": env, "world_size": world, "settings": vars(args),
                                                         "rows": rows})
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
