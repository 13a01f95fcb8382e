"""Every kernel (and the preprocessing ops) on a few small shapes with ragged tails, for
`compute-sanitizer --tool memcheck python tools/sanitize_run.py` (and racecheck/synccheck).
NMSPMM_SANITIZE_KERNELS=15,16,17 limits the run to those kernel ids."""
import os

import torch

import nmspmm

ops = torch.ops.nmspmm
torch.manual_seed(0)
cases = [(1, 160, 96, 2, 4, 16), (2, 320, 224, 4, 32, 32), (5, 256, 192, 8, 32, 32), (17, 384, 320, 4, 32, 128),
         (67, 192, 128, 12, 32, 64), (130, 320, 256, 16, 64, 32), (33, 96, 64, 1, 4, 1),
         (9, 256, 1536, 4, 32, 32)]  # the last: several staged x chunks per block (staged decode)
# Kernels 21, 22 also on a grid of more than one round (152 tiles of 128x256 with m and n tails), where
# kernel 22 computes whole tiles and splits only the last round's (on 132 SMs: 20 tiles).
MULTI_ROUND = (1000, 4640, 512, 16, 32, 32)
for (m, n, k, N, M, L) in cases + [MULTI_ROUND]:
    multi_round = (m, n, k, N, M, L) == MULTI_ROUND
    w = torch.randn(n, k, device="cuda")
    p = nmspmm.compress(w, N, M, L)
    x = torch.randn(m, k, device="cuda")
    ref = x.double() @ nmspmm.decompress(p).double().t()
    only = os.environ.get("NMSPMM_SANITIZE_KERNELS")
    for kernel in (range(23) if not only else [int(v) for v in only.split(",")]):
        if multi_round and kernel not in (21, 22):
            continue
        if kernel == 1 and (m > 16 or L < 4):
            continue
        if 12 <= kernel <= 14 and (m > 2 or L < 4):  # cluster decode
            continue
        if 15 <= kernel <= 17 and (m > 16 or L < 4):  # staged decode
            continue
        if kernel >= 18 and L < 32:  # warp-packed, warp-specialized
            continue
        if kernel in (21, 22) and not (M <= 32 and 32 // M * N in (4, 8, 12, 16)):  # warp-specialized patterns
            continue
        if 2 <= kernel < 12 and L < 16:
            continue
        if kernel in (9, 10) and M > 32:
            continue
        # Tiled split 3 reduces in a cluster on sm_90, 16 through the workspace.
        # Cluster decode kernels 12-17 also with a non-portable cluster of 16 blocks.
        for split in ((1, 3, 8, 16) if 12 <= kernel <= 17
                      else (1, 2, 3, 16) if 2 <= kernel < 12 or kernel >= 18 else (1, 2)):
            y = ops.spmm_with_plan(x, p.values, p.indices, N, M, L, None, p.col_info,
                                   p.packed_indices, kernel, split)
            err = ((y.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-5, (m, n, k, N, M, L, kernel, split, err)
torch.cuda.synchronize()
print("sanitize_run: all kernels ran")
