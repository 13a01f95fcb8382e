"""Where does the ~30 us floor of small-m tiled calls go? Kernel durations from torch.profiler."""
import sys, torch, triton.testing as tt
sys.path.insert(0, "tools")
from kernel_check import make, run
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
pts = [(256,2048,2048,4,4,1),(256,2048,2048,4,None,None),(256,2048,2048,16,None,None),(256,5632,2048,4,None,None),
       (512,2048,2048,4,None,None),(1024,2048,2048,4,None,None),(4096,2048,2048,4,None,None)]
for m,n,k,N,kern,s in pts:
    p,_ = make(n,k,N,32,32); x = torch.randn(m,k,device="cuda")
    if kern is None:
        fn = lambda: torch.ops.nmspmm.spmm(x, p.values, p.indices, p.N, p.M, p.L, None, None, None)
    else:
        fn = lambda: run(x,p,kern,s)
    t_flush = tt.do_bench(fn, warmup=10, rep=40, return_mode="median")
    # warm L2, no flush: events around 20 back-to-back calls
    fn(); torch.cuda.synchronize()
    e0,e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20): fn()
    e1.record(); torch.cuda.synchronize(); t_warm = e0.elapsed_time(e1)/20
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            cache.zero_(); fn()
        torch.cuda.synchronize()
    ev = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            ev.setdefault(e.name[:60], []).append(e.device_time)
    print(f"{m}x{n}x{k} {N}:32 plan={kern}/{s} do_bench={t_flush*1e3:.1f}us warm_b2b={t_warm*1e3:.1f}us", flush=True)
    for name, ts in ev.items():
        ts = sorted(ts); print(f"   {name:60s} n={len(ts)} med={ts[len(ts)//2]:.1f}us")
