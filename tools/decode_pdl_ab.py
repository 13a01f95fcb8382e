"""A/B of programmatic dependent launch (PDL) for the sm_90 decode kernels, for the GPU machine.

The heuristic's plan on 6 Llama-2-7B / Llama-3-8B layers x 4 sparsities x m (default 1, 8, 16), timed
(per call, us) from one CUDA graph of back-to-back calls that rotate through >= 4x L2 of weight copies
(as tools/decode_sweep.py and the benchmark do), and again with an unrelated 4-element add before
every call ("sep": breaks any overlap between calls; the add's own time is recorded as us_dummy).
cuBLAS FP32 (TF32 off) is timed the same way. Every plan is checked against fp64 first.

    python tools/decode_pdl_ab.py OUT_DIR TAG                        # PDL as the binding decides
    NMSPMM_NO_OVERLAP=1 python tools/decode_pdl_ab.py OUT_DIR plain  # plain stream order
    python tools/decode_pdl_ab.py --compare OUT_DIR/pdl_plain.csv OUT_DIR/pdl_<TAG>.csv
    MS=1,2,4 python tools/decode_pdl_ab.py ...                       # other m

Not a test and not the benchmark; the record of session 12's A/B (experiments/s12_pdl_ab.txt).
"""
import csv
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmspmm  # noqa: E402
from decode_sweep import graph_us, weight_copies  # noqa: E402

ops = torch.ops.nmspmm
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (14336, 4096), (4096, 14336)]
PATTERNS = [(16, 32), (12, 32), (8, 32), (4, 32)]


def make(n, k, N, M, L):
    """A random vector-wise N:M weight, compressed on the GPU, and its dense form."""
    w = torch.randn(n, k, device="cuda")
    mask = torch.rand(n // L, k // M, M, device="cuda").argsort(-1).argsort(-1) < N
    p = nmspmm.compress(w, N, M, L, mask=mask.repeat_interleave(L, 0).reshape(n, k))
    return p, nmspmm.decompress(p)


def run(out_dir, tag, ms):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    dummy = torch.zeros(4, device="cuda")
    rows = []
    for n, k in SHAPES:
        wd = torch.randn(n, k, device="cuda")
        dcopies = max(2, math.ceil(4 * l2 / (n * k * 4)))
        dense = [wd] + [wd.clone() for _ in range(dcopies - 1)]
        for N, M in PATTERNS:
            p, wdn = make(n, k, N, M, 32)
            ps, _, ncalls = weight_copies(p, l2)
            copies = len(ps)
            for m in ms:
                x = torch.randn(m, k, device="cuda")
                ref = x.double() @ wdn.double().t()
                y = ops.spmm(x, p.values, p.indices, N, M, 32)
                err = ((y.double() - ref).norm() / ref.norm()).item()
                if not err < 1e-5:
                    raise SystemExit(f"FAIL {n}x{k} {N}:{M} m={m}: relative error {err:.2e}")

                def call(q):
                    return ops.spmm(x, q.values, q.indices, N, M, 32)

                def sep_call(q):
                    dummy.add_(1.0)
                    return call(q)

                t_dense = graph_us([lambda w=dense[i % dcopies]: torch.nn.functional.linear(x, w)
                                    for i in range(ncalls)])
                t = graph_us([lambda q=ps[i % copies]: call(q) for i in range(ncalls)])
                t_sep = graph_us([lambda q=ps[i % copies]: sep_call(q) for i in range(ncalls)])
                t_dummy = graph_us([lambda: dummy.add_(1.0) for _ in range(ncalls)])
                kern, split = ops.spmm_heuristic(m, n, k, N, M, 32, True, sms)
                rows.append(dict(tag=tag, n=n, k=k, N=N, m=m, kernel=kern, split=split, us=t, us_sep=t_sep,
                                 us_dummy=t_dummy, dense_us=t_dense))
                print(f"{tag} {n:5d}x{k:5d} {N}:{M} m={m:2d} k{kern}/{split} {t:7.2f} us sep {t_sep:7.2f} "
                      f"(dummy {t_dummy:5.2f}) dense {t_dense:7.2f} -> {t_dense / t:.2f}x tgt {0.7 * M / N:.2f}",
                      flush=True)
            del ps
        del dense
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"pdl_{tag}.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)


def compare(path_a, path_b):
    """Per cell A and B (us, speedup over cuBLAS), the isolated times, and the A / B time ratio per m."""
    def load(path):
        return {(r["n"], r["k"], r["N"], r["m"]): r for r in csv.DictReader(open(path))}
    a, b = load(path_a), load(path_b)
    hit = {"A": 0, "B": 0}
    ratios = {}
    for key in a:
        ra, rb = a[key], b[key]
        tgt = 0.7 * 32 / int(key[2])
        ta, tb = float(ra["us"]), float(rb["us"])
        hit["A"] += float(ra["dense_us"]) / ta >= tgt
        hit["B"] += float(rb["dense_us"]) / tb >= tgt
        ratios.setdefault(int(key[3]), []).append(ta / tb)
        sep_a = float(ra["us_sep"]) - float(ra["us_dummy"])
        sep_b = float(rb["us_sep"]) - float(rb["us_dummy"])
        print(f"{key[0]:>5}x{key[1]:>5} {key[2]:>2}:32 m={key[3]:>2} A {ta:7.2f} ({float(ra['dense_us']) / ta:.2f}x) "
              f"B {tb:7.2f} ({float(rb['dense_us']) / tb:.2f}x) sepA {sep_a:7.2f} sepB {sep_b:7.2f} tgt {tgt:.2f}")
    for m, v in sorted(ratios.items()):
        g = math.exp(sum(map(math.log, v)) / len(v))
        print(f"m={m}: A/B time ratio geomean {g:.3f} min {min(v):.3f} max {max(v):.3f}")
    print("cells at target:", hit, "of", len(a))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    run(sys.argv[1], sys.argv[2], [int(v) for v in os.environ.get("MS", "1,8,16").split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
