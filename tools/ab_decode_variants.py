"""A/B of decode kernel variants that an experiment build selects per call through an environment
variable (e.g. NMSPMM_DECODE_LEAN), timed as the benchmark times decode: one CUDA graph of
back-to-back calls rotating through weight copies (>= 4x L2), per-call microseconds.

    python tools/ab_decode_variants.py --env NMSPMM_DECODE_LEAN --variants 0,1 --ms 3,4,8,16 \
        --plans auto,15/5,15/7,15/8,16/9 --out DIR

For every Llama decode shape (the benchmark's six (n, k)), pattern, m and plan, the variants are
timed back to back in --rounds rounds (min per variant), each output checked against fp64 (relative
error < 1e-5) and against variant 0's output (bitwise equality counted; a variant that reorders the
sums may differ in rounding, and fails only above 1e-5 relative). Prints per (m, pattern) the geomean of variant-0 time over variant-v
time on the heuristic's plan and on the best listed plan, then the benchmark's decode target cells;
writes ab_decode.csv."""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(__file__))
from decode_sweep import dense_copies, graph_us, weight_copies  # noqa: E402
from kernel_check import NAMES, make  # noqa: E402

ops = torch.ops.nmspmm
SHAPES = [(4096, 4096), (1024, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="NMSPMM_DECODE_LEAN")
    ap.add_argument("--variants", default="0,1")
    ap.add_argument("--ms", default="3,4,8,16")
    ap.add_argument("--patterns", default="16:32,12:32,8:32,4:32")
    ap.add_argument("--plans", default="auto", help="auto and/or kernel/split pairs")
    ap.add_argument("--shape-list", default="", help="comma-separated NxK shapes instead of the six")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    variants = a.variants.split(",")
    shapes = SHAPES
    if a.shape_list:
        shapes = [tuple(int(v) for v in sh.split("x")) for sh in a.shape_list.split(",")]
    rows, bad, differ = [], 0, 0
    for n, k in shapes:
        dense = dense_copies(n, k, l2)
        dcopies = len(dense)
        for pat in a.patterns.split(","):
            N, M = map(int, pat.split(":"))
            p, wdn = make(n, k, N, M, 32)
            ps, wbytes, ncalls = weight_copies(p, l2)
            for m in [int(v) for v in a.ms.split(",")]:
                x = torch.randn(m, k, device="cuda")
                ref = x.double() @ wdn.double().t()
                t_dense = graph_us([lambda w=dense[i % dcopies]: torch.nn.functional.linear(x, w)
                                    for i in range(ncalls)])
                heur = tuple(ops.spmm_heuristic(m, n, k, N, M, 32, True, sms))
                plans = []
                for s in a.plans.split(","):
                    pl = heur if s == "auto" else tuple(int(v) for v in s.split("/"))
                    if pl not in plans:
                        plans.append(pl)
                for kern, split in plans:
                    def call(q, kern=kern, split=split):
                        return ops.spmm_with_plan(x, q.values, q.indices, N, M, 32, None, None, None, kern, split)
                    best = {}
                    y0 = None
                    try:
                        for _ in range(a.rounds):
                            for v in variants:
                                os.environ[a.env] = v
                                y = call(p)
                                err = ((y.double() - ref).norm() / ref.norm()).item()
                                if not err < 1e-5:
                                    bad += 1
                                    print(f"FAIL {n}x{k} {pat} m={m} {NAMES[kern]}/{split} v{v} err {err:.2e}")
                                if y0 is None:
                                    y0 = y
                                elif not torch.equal(y, y0):
                                    # A variant that reorders the sums differs in rounding only.
                                    differ += 1
                                    rel = ((y.double() - y0.double()).norm() / y0.double().norm()).item()
                                    if not rel < 1e-5:
                                        bad += 1
                                        print(f"MISMATCH {n}x{k} {pat} m={m} {NAMES[kern]}/{split} v{v} rel {rel:.2e}")
                                t = graph_us([lambda q=ps[i % len(ps)]: call(q) for i in range(ncalls)])
                                best[v] = min(best.get(v, float("inf")), t)
                    except RuntimeError as e:
                        print(f"SKIP {n}x{k} {pat} m={m} {kern}/{split}: {str(e).splitlines()[0]}")
                        continue
                    finally:
                        os.environ[a.env] = variants[0]
                    for v in variants:
                        rows.append(dict(n=n, k=k, N=N, M=M, m=m, kernel=kern, split=split, variant=v,
                                         heuristic=int((kern, split) == heur), us=best[v], dense_us=t_dense))
                    print(f"{n:5d}x{k:5d} {pat:>5s} m={m:2d} {NAMES[kern]}/{split}{' (auto)' if (kern, split) == heur else ''}"
                          f" dense {t_dense:6.2f} | " + " ".join(f"v{v} {best[v]:6.2f} ({t_dense / best[v]:.2f}x)"
                                                              for v in variants), flush=True)
            del ps
        del dense
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ab_decode.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    # Summary: variant-0 time over variant-v time, geomean per (m, pattern).
    t = {(r["n"], r["k"], r["N"], r["m"], r["kernel"], r["split"], r["variant"]): r["us"] for r in rows}
    heur = {(r["n"], r["k"], r["N"], r["m"]): (r["kernel"], r["split"]) for r in rows if r["heuristic"]}
    for v in variants[1:]:
        for what in ("auto", "best"):
            g = defaultdict(list)
            for (n, k, N, m), hp in heur.items():
                if what == "auto":
                    b0, b1 = t[(n, k, N, m) + hp + (variants[0],)], t[(n, k, N, m) + hp + (v,)]
                else:
                    b0 = min(us for key, us in t.items() if key[:4] == (n, k, N, m) and key[6] == variants[0])
                    b1 = min(us for key, us in t.items() if key[:4] == (n, k, N, m) and key[6] == v)
                g[(m, N)].append(math.log(b0 / b1))
            for (m, N), vals in sorted(g.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
                print(f"v{v} {what:4s} m={m:2d} {N:2d}:{M}  v{variants[0]}/v{v} {math.exp(sum(vals) / len(vals)):.3f}"
                      f" over {len(vals)} shapes")
    print("target cells (0.7 M/N), heuristic plan:")
    for (n, k, N, m), hp in sorted(heur.items()):
        if m not in (1, 8, 16):
            continue
        target = 0.7 * 32 / N
        dense_us = next(r["dense_us"] for r in rows if (r["n"], r["k"], r["N"], r["m"]) == (n, k, N, m))
        cells = " ".join(f"v{v} {dense_us / t[(n, k, N, m) + hp + (v,)]:.2f}" for v in variants)
        print(f"  {m}x{n}x{k} {N}:32 target {target:.2f}: {cells}")
    print(f"outputs not bitwise equal to variant {variants[0]}'s: {differ}")
    print(f"correctness failures: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
