"""Sweep split-K counts that are not powers of two (the heuristic tries 1, 2, 4, ..., 16) for the
prefill kernels, timed as the benchmark times a call (L2 flushed, median; tools/sweep_flushed.Flushed):

    python tools/sweep_splits.py --ms 256,512,1024,2048 --Ns 16,12,8,4 --out DIR
    python tools/sweep_splits.py --grid llama --ms 32,64,128 --out DIR

Per shape of the 100 NM-SpMM points (or of the llama suite's (n, k)): the heuristic's plan, and
kernels 21 (warp-specialized), 22 (21 with split-K on the last round's tiles; splits 2..16 whose
tail grid stays within 2 rounds), 18-20 (warp-packed) and 5, 3, 2 (tiled) at every split 1..8, 10, 12,
16 that keeps >= 4 k-blocks (stages) per split and whose grid stays within --waves waves
(--kernels narrows the set). Every output is
checked against the heuristic plan's. Writes sweep_splits.csv (m, n, k, N, kernel, split, ms,
heur_kernel, heur_split, diff) one shape at a time, and prints per shape the heuristic's time and
the best plan's."""
import argparse
import csv
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK, llama_shapes  # noqa: E402
from sweep_flushed import PRODUCER_KB, Flushed  # noqa: E402

ops = torch.ops.nmspmm
# kernel -> (BM, BN, blocks per SM)
TILE = {21: (128, 256, 1), 22: (128, 256, 1), 18: (128, 128, 2), 19: (64, 128, 3), 20: (32, 128, 4), 2: (128, 128, 2),
        3: (64, 128, 2), 5: (64, 64, 4)}
WP_WB = {18: 12, 19: 16, 20: 16}
SPLITS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)


def units(c, k, N, M):
    if c in WP_WB:
        return math.ceil(k // M * N / WP_WB[c])
    if c in (21, 22):
        return math.ceil(k / PRODUCER_KB[32 // M * N])
    return math.ceil(k / (32 if M <= 32 else 64))


def candidates(m, n, k, N, M, sms, kernels, waves):
    out = []
    for c in kernels:
        bm, bn, bps = TILE[c]
        if c in (21, 22) and m <= 16:
            continue
        u = units(c, k, N, M)
        ctas1 = math.ceil(m / bm) * math.ceil(n / bn)
        if c == 22:  # split-K on the last round's tiles only: grids of more than one round, a partial last one
            tail = ctas1 % sms
            if ctas1 > sms and tail:
                out += [(c, s) for s in SPLITS[1:] if u // s >= 4 and tail * s <= 2 * sms]
            continue
        for s in SPLITS:
            if s > 1 and (u // s < 4 or ctas1 * s > waves * sms * bps):
                break
            out.append((c, s))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="nmspmm100", choices=("nmspmm100", "llama"))
    ap.add_argument("--ms", default="256,512,1024,2048")
    ap.add_argument("--waves", type=float, default=4.5, help="largest grid, in waves of the kernel's blocks")
    ap.add_argument("--Ns", default="16,12,8,4")
    ap.add_argument("--kernels", default="21,22,18,19,20,5,3,2")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--name", default="sweep_splits.csv")
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    Ns = [int(v) for v in a.Ns.split(",")]
    kernels = [int(v) for v in a.kernels.split(",")]
    M = L = 32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    timer = Flushed()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, a.name)
    fields = ["m", "n", "k", "N", "kernel", "split", "ms", "heur_kernel", "heur_split", "diff"]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        nks = list(NMSPMM100_NK) if a.grid == "nmspmm100" else sorted({(s.n, s.k) for s in llama_shapes(None, [ms[0]])})
        for n, k in nks:
            weights = {N: nmspmm.compress(torch.randn(n, k, device="cuda"), N, M, L) for N in Ns}
            for m in ms:
                x = torch.randn(m, k, device="cuda")
                for N in Ns:
                    p = weights[N]
                    heur = tuple(ops.spmm_heuristic(m, n, k, N, M, L, False, sms))
                    plans = [heur] + [c for c in candidates(m, n, k, N, M, sms, kernels, a.waves) if c != heur]
                    times = {}
                    for (c, s), t, diff in timer.time_plans(x, p, N, M, L, plans, f"{m}x{n}x{k} {N}:{M}"):
                        times[(c, s)] = t
                        w.writerow(dict(m=m, n=n, k=k, N=N, kernel=c, split=s, ms=f"{t:.6f}", heur_kernel=heur[0],
                                        heur_split=heur[1], diff=f"{diff:.2e}"))
                    fh.flush()
                    best = min(times, key=times.get)
                    print(f"{m:5d}x{n:5d}x{k:5d} {N:2d}:32 heur {heur[0]}/{heur[1]} {times[heur]*1e3:8.1f} us  "
                          f"best {best[0]}/{best[1]} {times[best]*1e3:8.1f} us  heur/best {times[heur]/times[best]:.3f}",
                          flush=True)


if __name__ == "__main__":
    main()
