"""Where the time of a decode call goes, for the GPU machine: the heuristic plan and a few others at
m = 1..16 on three 4:32 layers, hot (one weight, L2-resident) vs cold (weights rotated through
>= 4x L2), per call from a CUDA graph of back-to-back calls. TAG=... labels the lines; run once as is and once with NMSPMM_NO_OVERLAP=1.

    TAG=pdl python tools/decode_hot_cold_probe.py

Record: benchmarks/results/h100/experiments/s13_decode_hot_cold_probe.txt. Not a test."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_check import make, NAMES  # noqa: E402
from decode_sweep import graph_us, weight_copies  # noqa: E402
ops = torch.ops.nmspmm
torch.backends.cuda.matmul.allow_tf32 = False
l2 = torch.cuda.get_device_properties(0).L2_cache_size
sms = torch.cuda.get_device_properties(0).multi_processor_count
tag = os.environ.get("TAG", "")
cells = [(4096, 4096, 4, [(15, 7), (15, 4), (15, 2), (16, 4), (12, 8)]), (4096, 11008, 4, [(15, 7), (15, 4)]),
         (1024, 4096, 4, [(15, 8), (15, 4)])]
for n, k, N, plans in cells:
    p, wd = make(n, k, N, 32, 32)
    ps, wbytes, ncalls = weight_copies(p, l2)
    for m in (1, 2, 4, 8, 16):
        x = torch.randn(m, k, device="cuda")
        heur = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, False, sms))
        for kern, s in [heur] + [pl for pl in plans if pl != heur]:
            if kern in (12, 13, 14) and m > 2:
                continue
            call = lambda q: ops.spmm_with_plan(x, q.values, q.indices, N, 32, 32, None, None, None, kern, s)
            cold = graph_us([lambda q=ps[i % len(ps)]: call(q) for i in range(ncalls)])
            hot = graph_us([lambda: call(p) for _ in range(ncalls)])
            print(f"{tag} {n}x{k} {N}:32 m={m:2d} {NAMES[kern]}/{s}{' heur' if (kern, s) == heur else '     '} "
                  f"cold {cold:6.2f} us hot {hot:6.2f} us  ({wbytes / cold / 1e3:5.0f} GB/s cold)", flush=True)
