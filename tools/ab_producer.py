"""A/B of the heuristic with and without the warp-specialized kernel (21) as a candidate, timed as
the benchmark times a call (L2 flushed before each call, median; tools/sweep_flushed.Flushed):

    python tools/ab_producer.py --grid nmspmm100 --ms 256,512,1024,2048,4096 --Ns 16,12,8 --out DIR
    python tools/ab_producer.py --grid llama --ms 128,256,512,1024 --Ns 16,12,8 --out DIR

For every shape whose plan changes, the old plan (a child process with NMSPMM_NO_PRODUCER=1 asks
spmm_heuristic) and the new one are timed back to back, and kernel 21 with splits 1, 2, 4 (each
keeping >= 4 k-blocks) besides, for refitting; each output is checked against the old plan's. Prints
per pattern and m the geomean of old / new time; writes ab_producer.csv."""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK, llama_shapes  # noqa: E402
from sweep_flushed import PRODUCER_KB, Flushed  # noqa: E402

ops = torch.ops.nmspmm

_CHILD = r"""
import json, sys, torch, nmspmm
cells = json.loads(sys.stdin.read())
print(json.dumps([list(torch.ops.nmspmm.spmm_heuristic(m, n, k, N, 32, 32, False, sms)) for m, n, k, N, sms in cells]))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="nmspmm100", choices=("nmspmm100", "llama"))
    ap.add_argument("--ms", default="256,512,1024,2048,4096")
    ap.add_argument("--Ns", default="16,12,8")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--name", default="ab_producer.csv")
    ap.add_argument("--extra", action="store_true", help="also time kernel 21 at splits 1, 2, 4")
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    Ns = [int(v) for v in a.Ns.split(",")]
    nks = list(NMSPMM100_NK) if a.grid == "nmspmm100" else sorted({(s.n, s.k) for s in llama_shapes(None, [ms[0]])})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cells = [(m, n, k, N, sms) for n, k in nks for m in ms for N in Ns]
    env = dict(os.environ, NMSPMM_NO_PRODUCER="1")
    old = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(cells), env=env, capture_output=True,
                         text=True, check=True).stdout
    old_plans = {tuple(c[:4]): tuple(p) for c, p in zip(cells, json.loads(old))}
    timer = Flushed()
    torch.manual_seed(0)
    rows = []
    os.makedirs(a.out, exist_ok=True)
    for n, k in nks:
        weights = None
        for m in ms:
            for N in Ns:
                new = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, False, sms))
                before = old_plans[(m, n, k, N)]
                if new == before:
                    continue
                if weights is None:
                    weights = {NN: nmspmm.compress(torch.randn(n, k, device="cuda"), NN, 32, 32) for NN in Ns}
                p = weights[N]
                x = torch.randn(m, k, device="cuda")
                plans = [before, new]
                if a.extra:
                    kblocks = math.ceil(k / PRODUCER_KB[N])
                    plans += [(21, s) for s in (1, 2, 4) if (s == 1 or kblocks // s >= 4) and (21, s) not in plans]
                times = {}
                for (c, s), t, diff in timer.time_plans(x, p, N, 32, 32, plans, f"{m}x{n}x{k} {N}:32"):
                    times[(c, s)] = t
                    rows.append(dict(m=m, n=n, k=k, N=N, kernel=c, split=s, ms=f"{t:.6f}", role=
                                     "old" if (c, s) == before else "new" if (c, s) == new else "extra",
                                     diff=f"{diff:.2e}"))
                print(f"{m:5d}x{n:5d}x{k:5d} {N:2d}:32 old {before[0]}/{before[1]} {times[before]*1e3:8.1f} us  "
                      f"new {new[0]}/{new[1]} {times[new]*1e3:8.1f} us  old/new {times[before]/times[new]:.3f}  " +
                      " ".join(f"{c}/{s} {t*1e3:.1f}" for (c, s), t in times.items() if (c, s) not in (before, new)),
                      flush=True)
    with open(os.path.join(a.out, a.name), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["m", "n", "k", "N", "kernel", "split", "ms", "role", "diff"])
        w.writeheader()
        w.writerows(rows)
    cell = defaultdict(dict)
    for r in rows:
        cell[(r["N"], r["m"], r["n"], r["k"])][r["role"]] = float(r["ms"])
    print("\nold / new time (heuristic with kernel 21), geomean (min-max) over the changed shapes")
    for N in Ns:
        for m in ms:
            rs = [v["old"] / v["new"] for (NN, mm, _, _), v in cell.items() if NN == N and mm == m]
            if rs:
                g = math.exp(sum(map(math.log, rs)) / len(rs))
                print(f"{N:2d}:32 m={m:5d} {len(rs):3d} shapes  {g:.3f} ({min(rs):.2f}-{max(rs):.2f})")


if __name__ == "__main__":
    main()
