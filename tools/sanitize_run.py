"""Every kernel (and the preprocessing ops) on a few small shapes with ragged tails, for
`compute-sanitizer --tool memcheck python tools/sanitize_run.py` (and racecheck/synccheck).
NMSPMM_SANITIZE_KERNELS=decode_f32_staged_128,... limits the run to those registry kernels ("csr": the
unstructured CSR kernels)."""
import os

import torch

import nmspmm

ops = torch.ops.nmspmm
torch.manual_seed(0)
cases = [(1, 160, 96, 2, 4, 16), (2, 320, 224, 4, 32, 32), (5, 256, 192, 8, 32, 32), (17, 384, 320, 4, 32, 128),
         (67, 192, 128, 12, 32, 64), (130, 320, 256, 16, 64, 32), (33, 96, 64, 1, 4, 1),
         (9, 256, 1536, 4, 32, 32),  # several staged x chunks per block (staged decode)
         # the split-K decode family at L < 4: n % 4 != 0 (scalar loads), several x chunks, m < MR
         (3, 37, 96, 2, 4, 1), (13, 38, 1536, 3, 8, 2), (5, 1000, 256, 4, 32, 8),
         # ... and its shuffle lookup at M = 64 (two register sets of 32 inputs), n % 4 != 0
         (11, 70, 320, 5, 64, 1),
         # 2:4 on the sparse tensor cores: every token tile with m, n and k tails, and L = 1, 2, 128
         (70, 200, 136, 2, 4, 1), (300, 264, 520, 2, 4, 2), (4, 384, 1032, 2, 4, 128),
         # 2:4 decode: k not a multiple of the 32-input step or of 8, two token tiles
         (13, 200, 1036, 2, 4, 1),
         # the fused expansion: L = 1, 2, 4, 8 with n and k tails and a partial 64-input stage
         (37, 136, 224, 8, 32, 1), (3, 72, 96, 3, 8, 2), (130, 144, 416, 16, 32, 4), (17, 96, 160, 5, 16, 8),
         # the Hopper fused expansion at L = 64: the index copy starts before the block's vector
         (66, 512, 320, 8, 32, 64),
         # the Hopper gathered operand: more stages than its ring holds, token tails of both tiles
         (300, 256, 2048, 16, 32, 64),
         # the decode kernels' short vectors (L = 4; L = 8 above): an output tail, two token tiles
         (9, 200, 544, 4, 32, 4)]
# The warp-specialized kernels also on a grid of more than one round (152 tiles of 128x256 with m and n
# tails), where the tail variant computes whole tiles and splits only the last round's (on 132 SMs: 20).
MULTI_ROUND = (1000, 4640, 512, 16, 32, 32)
major, minor = torch.cuda.get_device_capability()
cc = major * 10 + minor
only = os.environ.get("NMSPMM_SANITIZE_KERNELS")
kernels = only.split(",") if only else nmspmm.kernels()
registry_kernels = [kn for kn in kernels if kn != "csr"]
for (m, n, k, N, M, L) in cases + [MULTI_ROUND]:
    multi_round = (m, n, k, N, M, L) == MULTI_ROUND
    w = torch.randn(n, k, device="cuda")
    p = nmspmm.compress(w, N, M, L).with_col_info()
    x = torch.randn(m, k, device="cuda")
    ref = x.double() @ nmspmm.decompress(p).double().t()
    for kernel in registry_kernels:
        family = nmspmm.kernel_info(kernel).family
        if multi_round and not family.startswith("producer"):
            continue
        if not nmspmm.kernel_supports(kernel, m, N, M, L, True, cc):
            continue
        if family == "sparse_tc" and (n % 8 or k % 8):  # its tensor copies' alignment
            continue
        if family == "decode_sparse_tc" and n % 8:  # its 16-byte rows of values
            continue
        if family == "expand_mma" and (n % 8 or k % 8 or n % (4 * L)):  # 16-byte rows, 4-byte index copies
            continue
        if family == "expand_wgmma" and (n % 8 or k % 8 or n % (4 * L)):  # the same, and tensor copies of x
            continue
        # Tiled split 3 reduces in a cluster on sm_90, 16 through the workspace; the cluster decode
        # kernels also with a non-portable cluster of 16 blocks.
        splits = ((1,) if family == "generic" else (1, 2, 3) if family == "decode_splitk"
                  else (1, 3, 8, 16) if family.startswith("decode_") else (1, 2, 4, 8) if family in ("sparse_tc", "expand_wgmma", "gather_wgmma")
                  else (1, 2, 3, 16))
        info = nmspmm.kernel_info(kernel)
        dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[info.dtype]
        xk, vk, rk, tol = x, p.values, ref, 1e-5
        if dt != torch.float32:  # a native 16-bit kernel: inputs in its dtype, reference from them
            xk, vk, tol = x.to(dt), p.values.to(dt), 1e-2
            rk = xk.double() @ ops.decompress(vk, p.indices, N, M, L).double().t()
        for split in (s for s in splits if s <= info.max_split_k):
            y = ops.spmm_with_plan(xk, vk, p.indices, N, M, L, None, p.col_info,
                                   p.packed_indices, kernel, split)
            err = ((y.double() - rk).norm() / rk.norm()).item()
            assert err < tol, (m, n, k, N, M, L, kernel, split, err)
            if family in ("sparse_tc", "decode_sparse_tc"):  # the compact 2:4 form: no indices at all
                yc = ops.spmm_with_plan(xk, vk, p.indices[:0], N, M, L, None, None, None, kernel, split, p.tc_meta)
                assert torch.equal(yc, y), (m, n, k, N, M, L, kernel, split, "compact")
# The unstructured CSR kernel (outside the registry): "csr" in NMSPMM_SANITIZE_KERNELS, or a full run.
if only is None or "csr" in kernels:
    for (m, n, k, density) in [(1, 37, 300, 0.1), (8, 64, 1000, 0.02), (9, 130, 96, 0.5), (70, 33, 2000, 1.0),
                                 (150, 40, 700, 0.1), (300, 70, 300, 0.3), (8, 3000, 1000, 0.05),
                                 (4, 5000, 200, 0.01), (8, 40, 14000, 0.01)]:
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            mask = torch.rand(n, k, device="cuda") < density
            mask[::7] = False  # empty rows
            # One dense row: uneven rows, csr_spmm_x_shared for m <= 8 where x fits (not at 14000 x 8 in
            # 16 bits), csr_spmm_xt_gather with blocks balanced by nonzeros otherwise.
            mask[3] = True
            w = nmspmm.CSRWeight.from_dense(torch.randn(n, k, device="cuda").to(dt), mask=mask)
            x = torch.randn(m, k, device="cuda").to(dt)
            y = nmspmm.spmm(x, w)
            ref = x.double() @ w.to_dense().double().t()
            err = ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
            assert err < (1e-5 if dt == torch.float32 else 1e-2), (m, n, k, density, dt, err)
    # Row pointers of random values (the balanced kernels' blocks split the rows by a search of them):
    # the masked product reads nothing outside the inputs.
    g = torch.Generator().manual_seed(1)
    crow = torch.randint(-50, 20050, (3001,), generator=g).int().cuda()
    col = torch.randint(-5, 70, (20000,), generator=g).int().cuda()
    for m in (1, 7, 16):
        for hint in (-1, 2**31 - 1):  # max_row_nnz: unknown, or large (the balanced kernels)
            ops.csr_spmm(torch.randn(m, 64, device="cuda"), crow, col, torch.randn(20000, device="cuda"), 64, None,
                         hint)
torch.cuda.synchronize()
print("sanitize_run: all kernels ran")
