"""2:4 prefill under the card's power limit: nmspmm against cuSPARSELt (PyTorch's 2:4,
``to_sparse_semi_structured``) and cuBLAS, bf16, all three timed the same way in CUDA graphs.

Two parts, one CSV (``power_24.csv``):

* ``burst``: the 100 NM-SpMM points (20 (n, k) pairs x m = 256 .. 4096), each implementation as a
  CUDA graph of 10 calls, the least of 3 replays: kernel time without host overhead, the way a
  graph-captured model runs PyTorch's 2:4 path.
* ``sustained``: a few large shapes, each implementation replayed for about 5 s while
  ``nvidia-smi`` samples power, SM clock and throttle reasons every 100 ms; the mean over the last
  two thirds of the run. Long GEMMs hold the card at its power limit, so time per call is then
  energy per call over that limit: a sparse kernel's speedup over dense is their energy ratio.

    python benchmarks/power_24.py                  # both parts -> stdout + power_24.csv
    python benchmarks/power_24.py --parts sustained --out DIR
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F
import nmspmm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes as S  # noqa: E402

SUSTAINED = [(4096, 22016, 8192), (4096, 15360, 5120), (2048, 8192, 8192), (1024, 4096, 4096)]
FIELDS = ["device", "part", "m", "n", "k", "impl", "us_per_call", "speedup_vs_cublas", "watts", "sm_mhz",
          "throttle_reasons", "mj_per_call", "samples"]


def prune24(w: torch.Tensor) -> torch.Tensor:
    """Keeps the two largest magnitudes of every group of four inputs."""
    g = w.reshape(w.shape[0], -1, 4)
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, g.abs().topk(2, dim=-1).indices, True)
    return (g * keep).reshape(w.shape)


def capture(fn, calls: int = 10) -> torch.cuda.CUDAGraph:
    fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_us(g: torch.cuda.CUDAGraph, replays: int, calls: int = 10) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(replays):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / (replays * calls)


class Sampler:
    """nvidia-smi every 100 ms in the background: (time, watts, SM MHz, throttle reasons)."""

    def __init__(self):
        self.rows = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", str(torch.cuda.current_device()),
             "--query-gpu=power.draw,clocks.sm,clocks_throttle_reasons.active", "--format=csv,noheader,nounits",
             "-lms", "100"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.rows.append((time.time(), float(parts[0]), float(parts[1]), parts[2]))
            except (ValueError, IndexError):
                pass

    def window(self, t0: float, t1: float):
        return [r for r in self.rows if t0 <= r[0] <= t1]

    def close(self):
        self.proc.terminate()


def impls(m: int, n: int, k: int):
    from torch.sparse import to_sparse_semi_structured
    w = prune24(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    packed = nmspmm.compress(w, N=2, M=4, L=1)
    ws = to_sparse_semi_structured(w)
    ref = F.linear(x.double(), w.double())
    for name, y in (("nmspmm", nmspmm.spmm(x, packed)), ("cusparselt", F.linear(x, ws))):
        err = ((y.double() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            raise RuntimeError(f"{name} {m}x{n}x{k}: relative error {err:.2e}")
    return {"cublas": lambda: F.linear(x, w), "cusparselt": lambda: F.linear(x, ws),
            "nmspmm": lambda: nmspmm.spmm(x, packed)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="burst,sustained")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each sustained run")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "h200"))
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not torch.cuda.is_available():
        sys.exit("power_24.py needs a CUDA GPU")
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    rows = []

    if "burst" in parts:
        for m in S.NMSPMM100_M:
            for n, k in S.NMSPMM100_NK:
                fns = impls(m, n, k)
                us = {}
                for name, fn in fns.items():
                    g = capture(fn)
                    us[name] = min(replay_us(g, 1) for _ in range(3))
                for name, t in us.items():
                    rows.append(dict(device=dev, part="burst", m=m, n=n, k=k, impl=name, us_per_call=round(t, 2),
                                     speedup_vs_cublas=round(us["cublas"] / t, 4)))
                print(f"burst {m}x{n}x{k}: " + " ".join(f"{a} {b:.1f} us" for a, b in us.items()), flush=True)
                del fns
        for m in S.NMSPMM100_M:
            line = []
            for name in ("cusparselt", "nmspmm"):
                r = [x["speedup_vs_cublas"] for x in rows if x["part"] == "burst" and x["m"] == m and x["impl"] == name]
                line.append(f"{name} {math.exp(sum(map(math.log, r)) / len(r)):.3f}x")
            print(f"burst m = {m}: geomean over cuBLAS " + ", ".join(line), flush=True)

    if "sustained" in parts:
        sampler = Sampler()
        time.sleep(1.0)
        for m, n, k in SUSTAINED:
            fns = impls(m, n, k)
            res = {}
            for name, fn in fns.items():
                g = capture(fn)
                per_replay = replay_us(g, 1) * 10 * 1e-6
                t0 = time.time()
                us = replay_us(g, max(1, int(args.seconds / per_replay)))
                t1 = time.time()
                win = sampler.window(t0 + (t1 - t0) / 3, t1)
                watts = sum(r[1] for r in win) / max(1, len(win))
                mhz = sum(r[2] for r in win) / max(1, len(win))
                res[name] = us
                rows.append(dict(device=dev, part="sustained", m=m, n=n, k=k, impl=name, us_per_call=round(us, 2),
                                 watts=round(watts, 1), sm_mhz=round(mhz), mj_per_call=round(watts * us * 1e-3, 2),
                                 throttle_reasons=" ".join(sorted({r[3] for r in win})), samples=len(win)))
                print(f"sustained {m}x{n}x{k} {name}: {us:.1f} us/call, {watts:.0f} W, {mhz:.0f} MHz, "
                      f"{watts * us * 1e-3:.1f} mJ/call", flush=True)
                time.sleep(1.5)
            for r in rows[-3:]:
                r["speedup_vs_cublas"] = round(res["cublas"] / r["us_per_call"], 4)
            del fns
        sampler.close()

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "power_24.csv")
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=FIELDS)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: r.get(k, "") for k in FIELDS})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
