"""A/B of kernel variants that an experiment build selects per call through an environment variable
(e.g. NMSPMM_WP_VARIANT), timed as the benchmark times a call (L2 flushed before each call, median):

    python tools/ab_variants_flushed.py --env NMSPMM_WP_VARIANT --variants 0,1,2,3 \
        --ms 256,512,1024 --Ns 8,4 --plans auto,20/1,20/2,19/1,19/2,18/1,18/2 --out DIR

For every shape (NM-SpMM's 20 (n, k) pairs at the given m; --cube adds 4096^3) and plan, the variants
are timed back to back (so drift hits them alike) and each output is compared with variant 0's.
Prints, per pattern and m, the geomean of variant-0 time over variant-v time for the heuristic's plan
("auto") and for the best listed plan of each variant; writes ab_variants.csv."""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK, model_projections  # noqa: E402
from sweep_flushed import Flushed  # noqa: E402

ops = torch.ops.nmspmm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="NMSPMM_WP_VARIANT")
    ap.add_argument("--variants", default="0,1")
    ap.add_argument("--ms", default="256,512,1024")
    ap.add_argument("--Ns", default="8,4")
    ap.add_argument("--plans", default="auto,20/1,20/2,19/1,19/2,18/1,18/2")
    ap.add_argument("--large-plans", default="auto,18/1", help="plans at m >= 2048")
    ap.add_argument("--cube", action="store_true")
    ap.add_argument("--nk", default="nmspmm100", help="nmspmm100, or llama (the (n, k) of Llama-2-7B and Llama-3-8B)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    variants = a.variants.split(",")
    ms = [int(v) for v in a.ms.split(",")]
    Ns = [int(v) for v in a.Ns.split(",")]
    nks = NMSPMM100_NK
    if a.nk == "llama":
        nks = list(dict.fromkeys((n, k) for model in ("llama-2-7b", "llama-3-8b") for _, n, k in model_projections(model)))
    shapes = ([(4096, 4096, 4096)] if a.cube else []) + [(m, n, k) for m in ms for n, k in nks]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    timer = Flushed()
    torch.manual_seed(0)
    rows = []
    for N in Ns:
        for n, k in dict.fromkeys((n, k) for _, n, k in shapes):
            p = nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32)
            for m in sorted({m for m, n2, k2 in shapes if (n2, k2) == (n, k)}):
                x = torch.randn(m, k, device="cuda")
                heur = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, False, sms))
                plans = []
                for spec in (a.large_plans if m >= 2048 else a.plans).split(","):
                    plan = heur if spec == "auto" else tuple(int(v) for v in spec.split("/"))
                    if plan not in plans:
                        plans.append(plan)
                for kern, split in plans:
                    f = lambda: ops.spmm_with_plan(x, p.values, p.indices, N, 32, 32, None, None, None, kern, split)  # noqa: E731
                    ref = None
                    for v in variants:
                        os.environ[a.env] = v
                        y = f()
                        if ref is None:
                            ref = y
                        diff = ((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
                        if diff > 1e-5:
                            print(f"MISMATCH {m}x{n}x{k} {N}:32 {kern}/{split} variant {v}: {diff:.2e}", flush=True)
                        t, _ = timer.time_ms(f)
                        rows.append(dict(m=m, n=n, k=k, N=N, kernel=kern, split=split, auto=int((kern, split) == heur),
                                         variant=v, ms=t, diff=diff))
                os.environ.pop(a.env, None)
                line = " ".join(f"{r['kernel']}/{r['split']}/v{r['variant']} {r['ms']*1e3:.1f}" for r in rows
                                if (r["m"], r["n"], r["k"], r["N"]) == (m, n, k, N) and r["auto"])
                print(f"{m:5d}x{n:5d}x{k:5d} {N}:32 auto {line}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ab_variants.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cell = defaultdict(dict)
    for r in rows:
        cell[(r["N"], r["m"], r["n"], r["k"])][(r["kernel"], r["split"], r["variant"], r["auto"])] = r["ms"]
    print(f"\nvariant-0 time / variant-v time, geomean (min-max): auto plan | best listed plan")
    for N in Ns:
        for m in sorted({key[1] for key in cell}):
            keys = [key for key in cell if key[0] == N and key[1] == m]
            if not keys:
                continue
            parts = []
            for v in variants[1:]:
                ra, rb = [], []
                for key in keys:
                    t = cell[key]
                    a0 = [ms for (kk, ss, vv, au), ms in t.items() if vv == variants[0] and au]
                    av = [ms for (kk, ss, vv, au), ms in t.items() if vv == v and au]
                    ra.append(a0[0] / av[0])
                    b0 = min(ms for (kk, ss, vv, au), ms in t.items() if vv == variants[0])
                    bv = min(ms for (kk, ss, vv, au), ms in t.items() if vv == v)
                    rb.append(b0 / bv)
                g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
                parts.append(f"v{v}: auto {g(ra):.3f} ({min(ra):.2f}-{max(ra):.2f}) best {g(rb):.3f}")
            print(f"{N}:32 m={m:5d} ({len(keys)} shapes)  " + "  |  ".join(parts))


if __name__ == "__main__":
    main()
