"""PNG plots from a results folder (run where matplotlib is installed; the GPU machine has none).

  python benchmarks/plot.py benchmarks/results/<run>

Reads bench_spmm.json (and e2e_llama.json if present) and writes, into the same folder:
  speedup_vs_m_<baseline>_<N>-<M>-<L>.png  speedup vs m per Llama model (one line per projection)
  nmspmm100_speedup.png                    the 100 NM-SpMM points vs fp32 (TF32 off), as in the paper's Fig. 9
  summary_box.png                          per-sparsity distribution of speedups per group (box plots)
  decode_speedup.png                       m <= 64: do_bench and CUDA-graph geomean speedups per m
  paths.png                                t_non-packed / t_packed per m (only with --compare-paths)
  e2e.png                                  end-to-end prefill / decode speedups (only with e2e_llama.json)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import OrderedDict, defaultdict
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import geomean  # noqa: E402
from report import attach_speedups, group_of, primary_variant  # noqa: E402

BASE_TITLES = {"fp32": "fp32 cuBLAS, TF32 off", "bf16": "bf16 cuBLAS", "tf32": "TF32 cuBLAS",
               "fp16": "fp16 cuBLAS"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str, name: str) -> str:
    """Writes the figure to out/name (110 dpi), closes it and returns the path."""
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _nm_rows(rows: List[Dict], variant: str) -> List[Dict]:
    return [r for r in rows if r.get("impl") == "nmspmm" and r.get("status") == "ok"
            and r.get("variant") == variant and r.get("dtype", "fp32") == "fp32"]


def _pat_file(pat: str) -> str:
    return pat.replace(":", "-")


def plot_speedup_vs_m(rows, out, variant, baselines=("fp32",)) -> List[str]:
    plt = _plt()
    nm = [r for r in _nm_rows(rows, variant) if r.get("suite") in ("llama", "decode")]
    written = []
    if not nm:
        return written
    models = list(OrderedDict.fromkeys(r["model"] for r in nm))
    patterns = list(OrderedDict.fromkeys(r["pattern"] for r in nm))
    for base in baselines:
        key = f"speedup_vs_{base}"
        for pat in patterns:
            sel = [r for r in nm if r["pattern"] == pat and r.get(key)]
            if not sel:
                continue
            cols = min(4, len(models))
            nrows = math.ceil(len(models) / cols)
            fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.3 * nrows), squeeze=False,
                                     sharey=True)
            ideal = float(sel[0]["ideal"])
            for ax, model in zip(axes.flat, models):
                by_layer = defaultdict(dict)
                for r in sel:
                    if r["model"] == model:
                        by_layer[r["layer"]][int(r["m"])] = float(r[key])
                for layer, pts in by_layer.items():
                    ms = sorted(pts)
                    ax.plot(ms, [pts[m] for m in ms], marker="o", ms=3, label=f"{layer}")
                ax.axhline(1.0, color="grey", lw=0.8, ls=":")
                if base == "fp32":
                    ax.axhline(ideal, color="green", lw=0.8, ls="--", label=f"ideal {ideal:g}x")
                ax.set_xscale("log", base=2)
                ax.set_title(model, fontsize=9)
                ax.set_xlabel("m (tokens)", fontsize=8)
                ax.tick_params(labelsize=7)
                ax.legend(fontsize=6, loc="best")
            for ax in list(axes.flat)[len(models):]:
                ax.axis("off")
            axes[0][0].set_ylabel(f"speedup vs {base}", fontsize=8)
            fig.suptitle(f"nmspmm {pat} (fp32, {variant}) vs {BASE_TITLES.get(base, base)}: "
                         f"baseline time / nmspmm time", fontsize=10)
            written.append(_save(fig, out, f"speedup_vs_m_{base}_{_pat_file(pat)}.png"))
    return written


def plot_nmspmm100(rows, out, variant) -> List[str]:
    from shapes import NMSPMM100_M, NMSPMM100_NK

    plt = _plt()
    nm = [r for r in _nm_rows(rows, variant) if r.get("suite") == "nmspmm100" and r.get("speedup_vs_fp32")]
    if not nm:
        return []
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for pat in OrderedDict.fromkeys(r["pattern"] for r in nm):
        pts = []
        for r in nm:
            if r["pattern"] != pat:
                continue
            nk = (int(r["n"]), int(r["k"]))
            if int(r["m"]) in NMSPMM100_M and nk in NMSPMM100_NK:
                pts.append((20 * NMSPMM100_M.index(int(r["m"])) + NMSPMM100_NK.index(nk), float(r["speedup_vs_fp32"])))
        pts.sort()
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", lw=0.8,
                        label=f"{pat} (geomean {geomean(p[1] for p in pts):.2f}x)")
        ax.axhline(float(nm[[r["pattern"] for r in nm].index(pat)]["ideal"]), color=line.get_color(),
                   ls="--", lw=0.7)
    ax.axhline(1.0, color="purple", ls="--", lw=0.8, label="cuBLAS fp32 (TF32 off)")
    ax.set_ylim(bottom=0)
    for i, m in enumerate(NMSPMM100_M):
        ax.axvline(20 * i - 0.5, color="grey", lw=0.5, ls=":")
        ax.text(20 * i + 10, 0.3, f"m={m}", ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("data point (m-major, then the 20 (n,k) pairs)")
    ax.set_ylabel("speedup vs cuBLAS fp32")
    ax.set_title("NM-SpMM's 100 Llama points: nmspmm speedup over cuBLAS FP32 (dashed: ideal M/N)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=5)
    return [_save(fig, out, "nmspmm100_speedup.png")]


def plot_summary_box(rows, out, variant) -> List[str]:
    plt = _plt()
    nm = _nm_rows(rows, variant)
    if not nm:
        return []
    groups = [g for g in ("nmspmm100", "llama-prefill", "llama-decode", "custom")
              if any(group_of(r) == g for r in nm)]
    patterns = list(OrderedDict.fromkeys(r["pattern"] for r in nm))
    bases = [b for b in ("fp32", "bf16") if any(r.get(f"speedup_vs_{b}") for r in nm)]
    fig, axes = plt.subplots(1, len(bases), figsize=(6.5 * len(bases), 4.2), squeeze=False)
    width = 0.8 / max(1, len(groups))
    for ax, base in zip(axes[0], bases):
        for gi, g in enumerate(groups):
            data, pos = [], []
            for pi, pat in enumerate(patterns):
                seen, vals = set(), []
                for r in nm:
                    key = (r["m"], r["n"], r["k"])
                    if r["pattern"] == pat and group_of(r) == g and r.get(f"speedup_vs_{base}") and key not in seen:
                        seen.add(key)
                        vals.append(float(r[f"speedup_vs_{base}"]))
                if vals:
                    data.append(vals)
                    pos.append(pi + (gi - (len(groups) - 1) / 2) * width)
            if data:
                bp = ax.boxplot(data, positions=pos, widths=width * 0.9, patch_artist=True, showfliers=True,
                                flierprops={"markersize": 2})
                color = f"C{gi}"
                for b in bp["boxes"]:
                    b.set_facecolor(color)
                    b.set_alpha(0.5)
                ax.plot([], [], color=color, lw=6, alpha=0.5, label=g)
        if base == "fp32":
            for pi, pat in enumerate(patterns):
                ideal = next(float(r["ideal"]) for r in nm if r["pattern"] == pat)
                ax.plot([pi - 0.45, pi + 0.45], [ideal, ideal], color="green", ls="--", lw=1)
            ax.plot([], [], color="green", ls="--", label="ideal M/N")
        ax.axhline(1.0, color="grey", ls=":", lw=0.8)
        ax.set_xticks(range(len(patterns)))
        ax.set_xticklabels(patterns)
        ax.set_yscale("log", base=2)
        ax.set_ylabel(f"speedup vs {BASE_TITLES.get(base, base)}")
        ax.legend(fontsize=7)
        ax.set_title(f"nmspmm (fp32, {variant}) vs {BASE_TITLES.get(base, base)}", fontsize=10)
    return [_save(fig, out, "summary_box.png")]


def plot_decode(rows, out, variant) -> List[str]:
    plt = _plt()
    nm = [r for r in _nm_rows(rows, variant) if int(r["m"]) <= 64]
    if not nm:
        return []
    patterns = list(OrderedDict.fromkeys(r["pattern"] for r in nm))
    ms = sorted({int(r["m"]) for r in nm})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), squeeze=False)
    for ax, base in zip(axes[0], ("fp32", "bf16")):
        for pi, pat in enumerate(patterns):
            for kind, key, ls in (("do_bench", f"speedup_vs_{base}", "-"),
                                  ("CUDA graph", f"speedup_graph_vs_{base}", "--")):
                ys = []
                for m in ms:
                    seen, vals = set(), []
                    for r in nm:
                        sk = (r["n"], r["k"])
                        if r["pattern"] == pat and int(r["m"]) == m and r.get(key) and sk not in seen:
                            seen.add(sk)
                            vals.append(float(r[key]))
                    ys.append(geomean(vals) if vals else float("nan"))
                if any(not math.isnan(y) for y in ys):
                    ax.plot(ms, ys, ls=ls, marker="o", ms=3, color=f"C{pi}", label=f"{pat} {kind}")
        ax.axhline(1.0, color="grey", ls=":", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("m (tokens)")
        ax.set_ylabel(f"geomean speedup vs {base}")
        ax.set_title(f"decode shapes: nmspmm vs {BASE_TITLES.get(base, base)}", fontsize=10)
        ax.legend(fontsize=6, ncol=2)
    return [_save(fig, out, "decode_speedup.png")]


def plot_paths(rows, out) -> List[str]:
    plt = _plt()
    idx = {}
    for r in rows:
        if r.get("impl") == "nmspmm" and r.get("variant") in ("tiled", "packed") and r.get("status") == "ok":
            idx[(r["variant"], r["pattern"], int(r["m"]), int(r["n"]), int(r["k"]))] = float(r["ms"])
    if not idx:
        return []
    fig, ax = plt.subplots(figsize=(7, 4))
    patterns = list(OrderedDict.fromkeys(k[1] for k in idx))
    for pat in patterns:
        by_m = defaultdict(list)
        for (v, p, m, n, k), t in idx.items():
            if v == "tiled" and p == pat and ("packed", p, m, n, k) in idx:
                by_m[m].append(t / idx[("packed", p, m, n, k)])
        ms = sorted(by_m)
        ax.plot(ms, [geomean(by_m[m]) for m in ms], marker="o", ms=3, label=pat)
    ax.axhline(1.0, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("m (tokens)")
    ax.set_ylabel("geomean t_non-packed / t_packed")
    ax.set_title(">1: the packing path is faster", fontsize=10)
    ax.legend(fontsize=7)
    return [_save(fig, out, "paths.png")]


def plot_e2e(data: Dict, out: str) -> List[str]:
    plt = _plt()
    rows = data.get("rows", [])
    if not rows:
        return []
    metrics = [("prefill_speedup", "prefill speedup"), ("decode_b1_graph_speedup", "decode b=1 speedup (graph)"),
               ("decode_b16_graph_speedup", "decode b=16 speedup (graph)"),
               ("decode_b1_speedup", "decode b=1 speedup (eager)")]
    metrics = [m for m in metrics if any(r.get(m[0]) for r in rows)]
    if not metrics:
        return []
    keys = list(OrderedDict.fromkeys((r["model"], r["dtype"]) for r in rows))
    variants = [v for v in OrderedDict.fromkeys(r["variant"] for r in rows) if v != "dense"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4), squeeze=False)
    width = 0.8 / max(1, len(variants))
    for ax, (key, title) in zip(axes[0], metrics):
        for vi, v in enumerate(variants):
            ys = []
            for mk in keys:
                r = next((r for r in rows if (r["model"], r["dtype"]) == mk and r["variant"] == v), None)
                ys.append(float(r[key]) if r and r.get(key) else 0.0)
            ax.bar([i + (vi - (len(variants) - 1) / 2) * width for i in range(len(keys))], ys, width * 0.9,
                   label=v)
        ax.axhline(1.0, color="grey", ls=":", lw=0.8)
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([f"{m}\n{d}" for m, d in keys], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6)
    st = data.get("settings", {})
    fig.suptitle(f"end to end, {st.get('layers')} decoder layers, speedup over the dense model of the same dtype",
                 fontsize=10)
    return [_save(fig, out, "e2e.png")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results folder holding bench_spmm.json and/or e2e_llama.json")
    ap.add_argument("--variant", default=None, help="nmspmm variant to plot (default: auto)")
    args = ap.parse_args(argv)
    out = args.results
    written: List[str] = []
    spmm = os.path.join(out, "bench_spmm.json")
    if os.path.exists(spmm):
        with open(spmm) as f:
            data = json.load(f)
        rows = data["rows"]
        attach_speedups(rows)
        variant = args.variant or primary_variant(rows)
        written += plot_speedup_vs_m(rows, out, variant)
        written += plot_nmspmm100(rows, out, variant)
        written += plot_summary_box(rows, out, variant)
        written += plot_decode(rows, out, variant)
        written += plot_paths(rows, out)
    e2e = os.path.join(out, "e2e_llama.json")
    if os.path.exists(e2e):
        with open(e2e) as f:
            written += plot_e2e(json.load(f), out)
    if not written:
        print(f"nothing to plot in {out}", file=sys.stderr)
        return 1
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
