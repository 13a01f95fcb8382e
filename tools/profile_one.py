"""Run one SpMM configuration a few times, for ncu:  python tools/profile_one.py m n k N M L kernel split"""
import sys

import torch

import nmspmm

m, n, k, N, M, L, kernel, split = map(int, sys.argv[1:9])
w = torch.randn(n, k)
p = nmspmm.compress(w, N, M, L).to("cuda")
x = torch.randn(m, k, device="cuda")
for _ in range(4):
    y = torch.ops.nmspmm.spmm_with_plan(x, p.values, p.indices, N, M, L, None, p.col_info,
                                        p.packed_indices, kernel, split)
torch.cuda.synchronize()
print("ok", y.shape)
