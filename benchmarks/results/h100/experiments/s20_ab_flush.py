"""Heuristic plan (ops.spmm) on the 100 NM-SpMM points, weights cold (L2 flushed before every call),
timed from CUDA graphs so host time cannot leak in: (graph of R x [flush; call]) - (graph of R x flush).
One line per (m, n, k, N): tag m n k N plan ms.  argv: tag ms_list [Ns]"""
import sys, torch
sys.path.insert(0, "benchmarks")
from shapes import NMSPMM100_NK
import nmspmm
ops = torch.ops.nmspmm
tag = sys.argv[1]
ms_list = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "256,512,1024,2048,4096").split(",")]
Ns = [int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "16,12,8,4").split(",")]
print("# pkg", nmspmm.__file__, file=sys.stderr)
cache = torch.empty(128 * 2**20, dtype=torch.int8, device="cuda")
def graph_of(body, reps):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(reps): body()
    return g
def replay_ms(g):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b)
g0 = None
def gpu_ms(fn, reps=8, rounds=5):
    global g0
    if g0 is None: g0 = graph_of(lambda: cache.zero_(), reps)
    g = graph_of(lambda: (cache.zero_(), fn()), reps)
    t, t0 = [], []
    for _ in range(rounds):
        t.append(replay_ms(g)); t0.append(replay_ms(g0))
    del g
    return (min(t) - min(t0)) / reps
torch.manual_seed(0)
for N in Ns:
    for (n, k) in NMSPMM100_NK:
        w = torch.randn(n, k, device="cuda")
        mask = torch.rand(n // 32, k // 32, 32, device="cuda").argsort(-1).argsort(-1) < N
        mask = mask.repeat_interleave(32, 0).reshape(n, k)
        p = nmspmm.compress(w, N, 32, 32, mask=mask)
        del w, mask
        for m in ms_list:
            x = torch.randn(m, k, device="cuda")
            plan = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, False, 132))
            t = gpu_ms(lambda: ops.spmm(x, p.values, p.indices, N, 32, 32, None, None, None))
            print(f"{tag} {m} {n} {k} {N} {plan[0]},{plan[1]} {t:.5f}", flush=True)
        del p
        torch.cuda.empty_cache()
