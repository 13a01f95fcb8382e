"""Time a fixed list of forced plans three times each (do_bench median, L2 flushed), for A/B runs of
two builds on one GPU machine (build A, run, build B, run, paste the outputs side by side):
    python tools/ab_plans.py > ab.txt      # edit `pts`: (m, n, k, N, registry kernel, split_k), M = L = 32"""
import sys, torch, triton.testing as tt
sys.path.insert(0, __import__("os").path.dirname(__file__))
from kernel_check import make, run
torch.manual_seed(0)
pts = [(1024,6656,17920,16,"tiled_f32_64x64",4),(256,17920,6656,16,"tiled_f32_64x64",4),(256,19968,6656,16,"tiled_f32_64x64",2),(256,5632,2048,4,"tiled_f32_64x128",1),(512,5632,2048,4,"tiled_f32_64x128",1),
       (4096,24576,8192,4,"tiled_f32_128x128",1),(4096,19968,6656,4,"tiled_f32_128x128",1),(512,19968,6656,12,"tiled_f32_64x64",1),(256,5120,5120,8,"tiled_f32_64x128",4),(2048,6656,6656,8,"tiled_f32_64x128",1),
       (4096,4096,4096,16,"tiled_f32_128x128",1),(4096,4096,4096,12,"tiled_f32_128x128",1),(4096,4096,4096,8,"tiled_f32_128x128",1),(4096,4096,4096,4,"tiled_f32_128x128",1),(512,5632,2048,16,"tiled_f32_64x64",2),(512,5632,2048,16,"tiled_f32_128x128_w8",1)]
for m,n,k,N,kern,s in pts:
    p,_ = make(n,k,N,32,32); x = torch.randn(m,k,device="cuda")
    ts = [tt.do_bench(lambda: run(x,p,kern,s), warmup=10, rep=30, return_mode="median") for _ in range(3)]
    print(f"{m}x{n}x{k} {N}:32 {kern}/{s} " + " ".join(f"{t:.4f}" for t in ts), flush=True)
