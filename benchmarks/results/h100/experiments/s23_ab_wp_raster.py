"""Session-23 A/B: the warp-packed kernels' block order. NMSPMM_WP_GROUP_M (read per call by the
experiment build) = 0: 2-D grid (row tiles fastest); G > 0: groups of G row tiles, column tiles
swept inside a group. Heuristic plans, NM-SpMM's 20 (n, k) pairs at m = 1024, 4096, 8:32 and 4:32,
plus 4096^3; median of 3 CUDA-event timings of back-to-back calls, order of variants rotated."""
import os, statistics, sys, math
import torch
import nmspmm
ops = torch.ops.nmspmm
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "benchmarks"))
from shapes import NMSPMM100_NK
GROUPS = [0, 4, 8, 16]

def t_ms(fn, reps):
    fn(); fn()
    out = []
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record(); e.synchronize()
        out.append(s.elapsed_time(e) / reps)
    return statistics.median(out)

torch.manual_seed(0)
shapes = [(4096, 4096, 4096)] + [(m, n, k) for m in (1024, 4096) for n, k in NMSPMM100_NK]
ratios = {g: {} for g in GROUPS}
for N in (8, 4):
    for m, n, k in shapes:
        p = nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32)
        x = torch.randn(m, k, device="cuda")
        f = lambda: ops.spmm(x, p.values, p.indices, N, 32, 32)
        y0 = f()
        ts = {}
        for g in GROUPS:
            os.environ["NMSPMM_WP_GROUP_M"] = str(g)
            assert torch.equal(f(), y0)
            ts[g] = t_ms(f, 3 if m * n * k > 2**36 else 10)
        plan = ops.spmm_heuristic(m, n, k, N, 32, 32, False, 132)
        print(f"{m:5d}x{n:5d}x{k:5d} {N}:32 plan {plan} " + " ".join(f"G{g} {ts[g]*1e3:8.1f}" for g in GROUPS), flush=True)
        for g in GROUPS:
            ratios[g].setdefault((N, m), []).append(ts[0] / ts[g])
for g in GROUPS[1:]:
    print(f"G={g}: " + "  ".join(f"{N}:32 m={m} {math.exp(sum(map(math.log, v)) / len(v)):.3f} ({min(v):.3f}-{max(v):.3f})"
                           for (N, m), v in sorted(ratios[g].items())))
