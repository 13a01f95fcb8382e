"""Summaries of a bench_spmm result set (pure Python: used by bench_spmm.py for the console and
the JSON, and by make_table.py / plot.py to recompute from a results folder).

Speedup = baseline time / nmspmm time for the same (m, n, k) (primary timing: do_bench median,
L2 flushed). "graph" speedups use the CUDA-graph timing (m <= 64 only). Statistics per group count
each unique (m, n, k) once (Llama-2-70B and Llama-3-70B share shapes).
"""
from __future__ import annotations

import math
from collections import Counter, OrderedDict
from typing import Dict, List, Optional, Sequence

from common import NOMINAL_FP32_TFLOPS_H100, fp32_peak_tflops, geomean, median

BASELINE_IMPLS = ("dense_fp32", "dense_tf32", "dense_bf16", "dense_fp16", "semi24_fp16", "semi24_bf16")
BASELINE_LABELS = {
    "dense_fp32": "fp32 (TF32 off)", "dense_tf32": "TF32", "dense_bf16": "bf16", "dense_fp16": "fp16",
    "semi24_fp16": "2:4 fp16", "semi24_bf16": "2:4 bf16",
}
DECODE_MAX_M = 64


def kernel_name(row):
    """The row's kernel: a registry name (kernel_name in CSVs written before the kernel column held it)."""
    return row.get("kernel_name") or str(row.get("kernel"))


def group_of(row: Dict) -> str:
    """nmspmm100 | llama-prefill (m > 64) | llama-decode (m <= 64) | custom."""
    suite = row.get("suite")
    if suite in ("llama", "decode"):
        return "llama-decode" if int(row["m"]) <= DECODE_MAX_M else "llama-prefill"
    return suite or "custom"


def _f(v) -> Optional[float]:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def attach_speedups(rows: List[Dict]) -> None:
    """Add speedup_vs_<baseline> (and speedup_graph_vs_<baseline>) to every nmspmm row."""
    base: Dict[tuple, Dict] = {}
    for r in rows:
        if r.get("impl") in BASELINE_IMPLS and r.get("status") == "ok":
            base[(int(r["m"]), int(r["n"]), int(r["k"]), r["impl"])] = r
    for r in rows:
        if r.get("impl") != "nmspmm":
            continue
        t, tg = _f(r.get("ms")), _f(r.get("ms_graph"))
        half = int(r.get("N") or 0) * 2 == int(r.get("M") or -1)
        for impl in BASELINE_IMPLS:
            short = impl.replace("dense_", "")
            if impl.startswith("semi24") and not half:  # 2:4 is compared at 50% only
                r[f"speedup_vs_{short}"] = r[f"speedup_graph_vs_{short}"] = None
                continue
            b = base.get((int(r["m"]), int(r["n"]), int(r["k"]), impl))
            bt = _f(b.get("ms")) if b else None
            bg = _f(b.get("ms_graph")) if b else None
            r[f"speedup_vs_{short}"] = bt / t if (bt and t and r.get("status") == "ok") else None
            r[f"speedup_graph_vs_{short}"] = bg / tg if (bg and tg and r.get("status") == "ok") else None


def _stats(vals: List[tuple]) -> Optional[Dict]:
    """vals: [(value, label)] -> geomean/min/max with the labels of the extremes."""
    vals = [(v, lab) for v, lab in vals if v is not None and v > 0]
    if not vals:
        return None
    lo = min(vals, key=lambda t: t[0])
    hi = max(vals, key=lambda t: t[0])
    return {"geomean": geomean(v for v, _ in vals), "min": lo[0], "min_at": lo[1], "max": hi[0],
            "max_at": hi[1], "n": len(vals)}


def _shape_label(r: Dict) -> str:
    return f"{r['m']}x{r['n']}x{r['k']}"


def _unique(rows: List[Dict]) -> List[Dict]:
    seen, out = set(), []
    for r in rows:
        key = (int(r["m"]), int(r["n"]), int(r["k"]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def primary_variant(rows: List[Dict]) -> str:
    variants = Counter(r.get("variant") for r in rows if r.get("impl") == "nmspmm")
    if "auto" in variants:
        return "auto"
    return variants.most_common(1)[0][0] if variants else "auto"


def summarize(rows: List[Dict], env: Dict, variant: Optional[str] = None,
              nominal_peak_tflops: float = NOMINAL_FP32_TFLOPS_H100) -> Dict:
    attach_speedups(rows)
    variant = variant or primary_variant(rows)
    clock = (env.get("clock_under_load") or {}).get("sm_clock_mhz_median") or env.get("sm_clock_mhz_max")
    peak = fp32_peak_tflops(env, clock)
    out: Dict = {"variant": variant, "peak_fp32_tflops_at_clock": peak, "clock_mhz_used": clock,
                 "nominal_peak_fp32_tflops": nominal_peak_tflops, "groups": OrderedDict(), "point_4096": OrderedDict()}
    nm = [r for r in rows if r.get("impl") == "nmspmm" and r.get("status") == "ok"
          and r.get("variant") == variant and r.get("dtype", "fp32") == "fp32"]
    patterns = list(OrderedDict.fromkeys(r["pattern"] for r in nm))
    order = ("nmspmm100", "llama-prefill", "llama-decode")
    present = set(group_of(r) for r in nm)
    groups = [g for g in order if g in present] + sorted(present - set(order))
    for g in groups:
        gsum = OrderedDict()
        for pat in patterns:
            sel = _unique([r for r in nm if group_of(r) == g and r["pattern"] == pat])
            if not sel:
                continue
            ideal = _f(sel[0].get("ideal"))
            s: Dict = {"n_points": len(sel), "ideal": ideal, "vs": OrderedDict(), "vs_graph": OrderedDict()}
            for impl in BASELINE_IMPLS:
                short = impl.replace("dense_", "")
                st = _stats([(_f(r.get(f"speedup_vs_{short}")), _shape_label(r)) for r in sel])
                if st:
                    s["vs"][short] = st
                stg = _stats([(_f(r.get(f"speedup_graph_vs_{short}")), _shape_label(r)) for r in sel])
                if stg:
                    s["vs_graph"][short] = stg
            fp32 = s["vs"].get("fp32")
            s["pct_of_ideal"] = 100 * fp32["geomean"] / ideal if (fp32 and ideal) else None
            s["tflops_eff_mean"] = _mean([_f(r.get("tflops_eff")) for r in sel])
            s["tflops_exec_mean"] = _mean([_f(r.get("tflops_exec")) for r in sel])
            s["tflops_exec_max"] = max((_f(r.get("tflops_exec")) or 0) for r in sel)
            small = [r for r in sel if int(r["m"]) <= 16]
            if small:
                s["gbps_median_m_le_16"] = median([_f(r.get("gbps")) for r in small])
                gg = [_f(r.get("gbps_graph")) for r in small if _f(r.get("gbps_graph"))]
                s["gbps_graph_median_m_le_16"] = median(gg) if gg else None
            s["kernels"] = dict(Counter(kernel_name(r) for r in sel if r.get("kernel") not in (None, "")))
            gsum[pat] = s
        out["groups"][g] = gsum
    # The 4096^3 point: % of the FP32 peak on executed FLOPs.
    for pat in patterns:
        pts = [r for r in nm if r["pattern"] == pat and (int(r["m"]), int(r["n"]), int(r["k"])) == (4096,) * 3]
        if pts:
            r = pts[0]
            te = _f(r.get("tflops_exec"))
            out["point_4096"][pat] = {
                "ms": _f(r.get("ms")), "tflops_eff": _f(r.get("tflops_eff")), "tflops_exec": te,
                "pct_peak_at_clock": 100 * te / peak if (te and peak) else None,
                "pct_peak_nominal": 100 * te / nominal_peak_tflops if te else None,
                "speedup_vs_fp32": _f(r.get("speedup_vs_fp32")), "kernel": kernel_name(r),
            }
    dense = [r for r in rows if r.get("impl") == "dense_fp32" and r.get("status") == "ok"
             and (int(r["m"]), int(r["n"]), int(r["k"])) == (4096,) * 3]
    if dense:
        te = _f(dense[0].get("tflops_eff"))
        out["point_4096"]["dense_fp32"] = {
            "ms": _f(dense[0].get("ms")), "tflops_eff": te, "tflops_exec": te,
            "pct_peak_at_clock": 100 * te / peak if (te and peak) else None,
            "pct_peak_nominal": 100 * te / nominal_peak_tflops if te else None}
    # Packed vs non-packed paths (--compare-paths).
    paths = OrderedDict()
    tiled = {(r["pattern"], int(r["m"]), int(r["n"]), int(r["k"])): r for r in rows
             if r.get("impl") == "nmspmm" and r.get("variant") == "tiled" and r.get("status") == "ok"}
    packed = {(r["pattern"], int(r["m"]), int(r["n"]), int(r["k"])): r for r in rows
              if r.get("impl") == "nmspmm" and r.get("variant") == "packed" and r.get("status") == "ok"}
    for pat in OrderedDict.fromkeys(k[0] for k in tiled):
        ratios = [_f(tiled[key]["ms"]) / _f(packed[key]["ms"]) for key in tiled
                  if key[0] == pat and key in packed and _f(packed[key]["ms"])]
        if ratios:
            paths[pat] = {"n": len(ratios), "geomean_tiled_over_packed": geomean(ratios),
                          "packed_faster_frac": sum(x > 1 for x in ratios) / len(ratios)}
    out["paths"] = paths
    out["families_vs_auto"] = families_vs_auto(rows)
    return out


def families_vs_auto(rows: List[Dict]) -> "OrderedDict[str, Dict]":
    """For kernels forced with --kernel NAME:best (e.g. family=packed), per (family, dtype, pattern):
    the best of the family's kernels at each point against the heuristic's plan (variant auto) at the
    same point. ratio = t_auto / t_best_of_family (> 1: the family is faster than the plan taken)."""
    auto = {(r.get("dtype", "fp32"), r["pattern"], int(r["m"]), int(r["n"]), int(r["k"])): _f(r.get("ms"))
            for r in rows if r.get("impl") == "nmspmm" and r.get("variant") == "auto" and r.get("status") == "ok"}
    best: Dict = {}
    for r in rows:
        v = r.get("variant") or ""
        if r.get("impl") != "nmspmm" or not v.endswith(":best") or r.get("status") != "ok" or not _f(r.get("ms")):
            continue
        fam = _family_of(v[:-len(":best")])
        key = (fam, r.get("dtype", "fp32"), r["pattern"], int(r["m"]), int(r["n"]), int(r["k"]))
        if key not in best or _f(r["ms"]) < best[key][0]:
            best[key] = (_f(r["ms"]), v[:-len(":best")])
    out: "OrderedDict[str, Dict]" = OrderedDict()
    for (fam, d, pat, m, n, k), (ms, kernel) in best.items():
        t_auto = auto.get((d, pat, m, n, k))
        if not t_auto:
            continue
        s = out.setdefault(f"{fam} {d} {pat}", {"family": fam, "dtype": d, "pattern": pat, "ratios": [],
                                                "faster": []})
        s["ratios"].append(t_auto / ms)
        if t_auto / ms > 1:
            s["faster"].append(f"{m}x{n}x{k} ({kernel}, {t_auto / ms:.2f}x)")
    for s in out.values():
        r = s.pop("ratios")
        s.update(n=len(r), geomean_auto_over_family=geomean(r), min=min(r), max=max(r))
    return out


def _family_of(kernel: str) -> str:
    try:
        import nmspmm

        return nmspmm.kernel_info(kernel).family
    except Exception:  # noqa: BLE001  (nmspmm not importable: the name's first part)
        return kernel.split("_")[0]


def _mean(xs: Sequence[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(x, spec=".2f", suffix="") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def format_summary(summary: Dict) -> str:
    lines: List[str] = []
    peak = summary.get("peak_fp32_tflops_at_clock")
    lines.append(f"nmspmm variant summarized: {summary['variant']}; FP32 peak at measured clock "
                 f"{_fmt(summary.get('clock_mhz_used'), '.0f')} MHz = {_fmt(peak, '.1f')} TFLOP/s "
                 f"(nominal {summary['nominal_peak_fp32_tflops']} TFLOP/s)")
    for g, gsum in summary["groups"].items():
        lines.append("")
        lines.append(f"== {g} ==")
        hdr_bases = []
        for s in gsum.values():
            for b in s["vs"]:
                if b not in hdr_bases:
                    hdr_bases.append(b)
        lines.append(f"{'pattern':<10} {'pts':>4} {'ideal':>5} {'%ideal':>6} "
                     + " ".join(f"{'vs ' + b + ' geo/min/max':>24}" for b in hdr_bases)
                     + f" {'effTF':>7} {'execTF':>7}")
        for pat, s in gsum.items():
            cells = []
            for b in hdr_bases:
                st = s["vs"].get(b)
                cells.append(f"{(_fmt(st['geomean']) + '/' + _fmt(st['min']) + '/' + _fmt(st['max'])) if st else '-':>24}")
            lines.append(f"{pat:<10} {s['n_points']:>4} {_fmt(s['ideal'], '.2f'):>5} "
                         f"{_fmt(s['pct_of_ideal'], '.0f'):>6} " + " ".join(cells)
                         + f" {_fmt(s['tflops_eff_mean'], '.1f'):>7} {_fmt(s['tflops_exec_mean'], '.1f'):>7}")
        for pat, s in gsum.items():
            extra = []
            fp32 = s["vs"].get("fp32")
            if fp32:
                extra.append(f"min vs fp32 at {fp32['min_at']}")
            if s["vs_graph"]:
                extra.append("CUDA-graph geomean: " + ", ".join(
                    f"vs {b} {_fmt(st['geomean'])}x" for b, st in s["vs_graph"].items()))
            if s.get("gbps_median_m_le_16") is not None:
                extra.append(f"m<=16 GB/s median {_fmt(s['gbps_median_m_le_16'], '.0f')}"
                             + (f" (graph {_fmt(s.get('gbps_graph_median_m_le_16'), '.0f')})"
                                if s.get("gbps_graph_median_m_le_16") else ""))
            if s.get("kernels"):
                extra.append("kernels " + ", ".join(f"{k}:{v}" for k, v in sorted(s["kernels"].items())))
            lines.append(f"  {pat}: " + "; ".join(extra))
    if summary["point_4096"]:
        lines.append("")
        lines.append("== 4096^3 (executed TFLOP/s = 2mnk*N/M/t) ==")
        for pat, p in summary["point_4096"].items():
            lines.append(f"{pat:<12} {_fmt(p['ms'], '.3f')} ms  eff {_fmt(p['tflops_eff'], '.1f')}  "
                         f"exec {_fmt(p['tflops_exec'], '.1f')} TFLOP/s = "
                         f"{_fmt(p['pct_peak_at_clock'], '.0f')}% of peak at clock, "
                         f"{_fmt(p['pct_peak_nominal'], '.0f')}% of nominal"
                         + (f"  speedup vs fp32 {_fmt(p.get('speedup_vs_fp32'))}x [{p.get('kernel')}]"
                            if "speedup_vs_fp32" in p else ""))
    if summary.get("families_vs_auto"):
        lines.append("")
        lines.append("== forced kernel families (best kernel and split-K of the family) vs the heuristic's plan ==")
        for key, p in summary["families_vs_auto"].items():
            lines.append(f"{key:<28} {p['n']} points: t_auto / t_family geomean {p['geomean_auto_over_family']:.3f} "
                         f"({p['min']:.3f}-{p['max']:.3f}); family faster at {len(p['faster'])}"
                         + (f": {', '.join(p['faster'][:10])}" if p["faster"] else ""))
    if summary.get("paths"):
        lines.append("")
        lines.append("== packed vs non-packed (--compare-paths) ==")
        for pat, p in summary["paths"].items():
            lines.append(f"{pat:<10} geomean t_tiled/t_packed = {p['geomean_tiled_over_packed']:.3f} "
                         f"over {p['n']} points; packed faster on {100 * p['packed_faster_frac']:.0f}%")
    return "\n".join(lines)
