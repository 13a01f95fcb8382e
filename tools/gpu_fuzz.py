"""GPU fuzz of nmspmm: random problems against fp64 references, and corrupted weights.

    python tools/gpu_fuzz.py                      # 10,000 random configurations (and as many 2:4
                                                  # sparse tensor-core ones on sm_90) + corruption cases
    python tools/gpu_fuzz.py --cases 300 --small  # for compute-sanitizer (below)
    python tools/gpu_fuzz.py --only csr           # one family (nm, sparse_tc, csr)
    python tools/gpu_fuzz.py --jobs 8             # the cases split over 8 processes on the GPU
                                                  # (seeds seed .. seed + 7), their tallies merged
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \\
        python tools/gpu_fuzz.py --cases 300 --small

Each configuration draws a pattern (N:M with M in 2..64, L in 1..128), a shape (m, n, k), a dtype
(float32 / float16 / bfloat16), a layout of x (contiguous, transposed leading dims, a column slice,
an expanded row), a bias or none, with or without the packing metadata, and runs it twice: through
the heuristic (nmspmm.spmm) and through one forced plan drawn from the kernels that support it
(spmm_with_plan, random split-K). Both are compared elementwise with an fp64 reference (dense
matmul of the weight scattered in plain torch), within a tolerance relative to |x| @ |W|.T.

Corruption cases (docs/format.md, "Validation" and "Masking guarantee"):
  * indices with out-of-range bytes (M .. 255), repeats or descending positions: NMWeight and
    NMLinear.load_state_dict must refuse them (and the refused load must leave the layer as it was);
    the raw op on every gathering plan must give the product with each byte read as b & (M - 1)
    (duplicates added);
  * col_info / packed_indices with random bytes: NMWeight must refuse them; the raw op on every
    packing plan must run without a fault (its result is unspecified);
  * a 2:4 tc_meta that does not describe the indices (stale, or random bits): the sparse_tc plans
    give the product with the weight it describes wherever its pairs are defined (the other
    vectors' outputs are unspecified and only checked to be finite);
  * NaN / Inf at random positions of x: every plan gives the product over the kept positions only;
  * unstructured CSR weights: random ones (uniform, heavy-tailed, empty and dense rows) against the
    fp64 product; corrupted row pointers or columns refused by CSRWeight and CSRLinear's load, and
    the raw csr_spmm equal to the CPU reference's masked product.
Under compute-sanitizer memcheck with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor its own
allocation) a clean run means no access outside any input; the value checks above cover the reads
that stay inside shared memory or another live allocation, which memcheck cannot see.

Prints a summary table; exits 1 if any check failed.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import nmspmm  # noqa: E402
from nmspmm.nn import NMLinear  # noqa: E402

ops = torch.ops.nmspmm
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Elementwise tolerance relative to the largest partial sum (|x| @ |W|.T): accumulation in fp32 and
# the output's rounding (x and the weight are rounded to the dtype before the reference sees them).
DEVICE = "cuda"  # --device cpu checks the harness itself against the CPU ops
SMS = 132  # the GPU's SM count (set in main), for spmm_heuristic
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# ------------------------------------------------------------------------------------------ plans
def plan_names():
    """Every kernel of the registry, by name."""
    return list(ops.kernels())


def supports(kernel, m, N, M, L, has_col_info, cc, dtype=torch.float32):
    """The registry's kernel_supports, and the dtype: the fp32 kernels take any (16-bit inputs are
    upcast), a native fp16 / bf16 kernel only its own."""
    kd = nmspmm.kernel_info(kernel).dtype
    if kd != "float32" and kd != str(dtype).replace("torch.", ""):
        return False
    return bool(ops.kernel_supports(kernel, m, N, M, L, has_col_info, cc))


def is_packing(kernel):
    return bool(nmspmm.kernel_info(kernel).needs_col_info)


# ----------------------------------------------------------------------------------- references
def columns(indices, N, M, L):
    w = indices.shape[0]
    base = (torch.arange(w, device=indices.device) // N * M)[:, None]
    return base + indices.long().repeat_interleave(L, dim=1)


def dense_of(values, indices, N, M, L, in_features, add_duplicates=True):
    """fp64 W[out, in] from (values, indices), plain torch. add_duplicates: a repeated position adds
    (the gathering kernels' reading of corrupted data); the format itself has none."""
    w, out = values.shape
    dt = torch.zeros(in_features, out, dtype=torch.float64, device=values.device)
    if w:
        dt.scatter_add_(0, columns(indices, N, M, L), values.double())
    return dt.t()


def reference(x, dense, bias):
    x2 = x.double().reshape(-1, x.shape[-1])
    y = x2 @ dense.t()
    scale = x2.abs() @ dense.abs().t()
    if bias is not None:
        y = y + bias.double()
        scale = scale + bias.double().abs()
    return y, scale


def check_close(y, ref, scale, dtype):
    """(ok, worst |err| / tolerance)."""
    y2 = y.double().reshape(ref.shape)
    if y2.numel() == 0:
        return True, 0.0
    tol = TOL[dtype] * scale + TOL[dtype] * 1e-3
    if dtype != torch.float32:
        tol = tol + ref.abs() * (2 ** -8 if dtype == torch.bfloat16 else 2 ** -11)
    err = (y2 - ref).abs()
    bad = ~(err <= tol)  # NaN fails
    ratio = float((err / tol).max()) if torch.isfinite(err).all() else math.inf
    return not bool(bad.any()), ratio


# ----------------------------------------------------------------------------------- random draws
def draw_pattern(rnd, small):
    M = 2 ** rnd.randint(1, 6)
    N = rnd.randint(1, M)
    if rnd.random() < 0.5:  # the production patterns more often
        N, M = rnd.choice([(2, 4), (1, 4), (4, 8), (2, 8), (4, 32), (8, 32), (16, 32), (16, 64), (8, 64)])
    L = 2 ** rnd.randint(0, 7)
    if rnd.random() < 0.5:
        L = rnd.choice([16, 32, 64, 128])
    return N, M, L


def draw_shape(rnd, M, L, small):
    max_k = 512 if small else 2048
    max_n = 512 if small else 2048
    k = M * rnd.randint(1, max(1, max_k // M))
    n = L * rnd.randint(1, max(1, max_n // L))
    r = rnd.random()
    if r < 0.35:
        m = rnd.randint(1, 16)
    elif r < 0.7:
        m = rnd.randint(17, 300)
    elif r < 0.95:
        m = rnd.randint(1, 256 if small else 2048)
    else:
        m = 0
    # keep each case small enough for 10,000 of them
    budget = 2e6 if small else 3e7
    while m * n * k > budget and m > 1:
        m //= 2
    return m, n, k


def draw_x(rnd, m, k, dtype, gen):
    layout = rnd.choice(["contiguous", "transposed", "sliced", "expanded", "3d"])
    dev = DEVICE
    if layout == "transposed" and m % 2 == 0 and m > 0:
        return torch.randn(2, m // 2, k, device=dev, generator=gen).to(dtype).transpose(0, 1), layout
    if layout == "sliced":
        return torch.randn(m, k + 4, device=dev, generator=gen).to(dtype)[:, 4:], layout
    if layout == "expanded" and m > 0:
        return torch.randn(1, k, device=dev, generator=gen).to(dtype).expand(m, k), layout
    if layout == "3d" and m % 3 == 0:
        return torch.randn(3, m // 3, k, device=dev, generator=gen).to(dtype), layout
    return torch.randn(m, k, device=dev, generator=gen).to(dtype), "contiguous"


def random_indices(rnd_gen, G, V, N, M, device):
    pos = torch.rand(G, V, M, device=device, generator=rnd_gen).argsort(dim=-1)[..., :N].sort(dim=-1).values
    return pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8).contiguous()


# ------------------------------------------------------------------------------------ bookkeeping
class Tally:
    def __init__(self):
        self.rows = {}

    def add(self, cat, outcome, ratio=0.0, note=None):
        r = self.rows.setdefault(cat, {"run": 0, "pass": 0, "refused": 0, "fail": 0, "worst": 0.0, "notes": []})
        r["run"] += 1
        r[outcome] += 1
        if ratio == ratio:  # not NaN
            r["worst"] = max(r["worst"], ratio)
        if note and outcome == "fail" and len(r["notes"]) < 8:
            r["notes"].append(note)

    def table(self):
        lines = [f"{'category':34s} {'run':>7s} {'pass':>7s} {'refused':>8s} {'fail':>6s} {'worst err/tol':>14s}"]
        for cat, r in self.rows.items():
            lines.append(f"{cat:34s} {r['run']:7d} {r['pass']:7d} {r['refused']:8d} {r['fail']:6d} {r['worst']:14.3g}")
        fails = [(cat, n) for cat, r in self.rows.items() for n in r["notes"]]
        for cat, n in fails:
            lines.append(f"  FAIL {cat}: {n}")
        return "\n".join(lines)

    @property
    def failed(self):
        return sum(r["fail"] for r in self.rows.values())

    def merge(self, rows):
        """Adds another process's rows (Tally.rows as JSON) to these."""
        for cat, o in rows.items():
            r = self.rows.setdefault(cat, {"run": 0, "pass": 0, "refused": 0, "fail": 0, "worst": 0.0, "notes": []})
            for key in ("run", "pass", "refused", "fail"):
                r[key] += o[key]
            r["worst"] = max(r["worst"], o["worst"])
            r["notes"] = (r["notes"] + o["notes"])[:8]


def run_jobs(a):
    """--jobs N: N child processes of this script on the same device, each with its share of the
    cases and its own seed (a.seed + j), their tallies merged; returns the exit status."""
    import json
    import subprocess
    import tempfile

    corrupt = a.corrupt_cases if a.corrupt_cases is not None else max(20, a.cases // 20)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for j in range(a.jobs):
            cases = a.cases // a.jobs + (1 if j < a.cases % a.jobs else 0)
            cc = corrupt // a.jobs + (1 if j < corrupt % a.jobs else 0)
            cmd = [sys.executable, os.path.abspath(__file__), "--cases", str(cases), "--corrupt-cases", str(cc),
                   "--seed", str(a.seed + j), "--only", a.only, "--device", a.device,
                   "--tally-json", os.path.join(tmp, f"tally{j}.json")] + (["--small"] if a.small else [])
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        tally, crashed = Tally(), []
        for j, p in enumerate(procs):
            _, err = p.communicate()
            path = os.path.join(tmp, f"tally{j}.json")
            if p.returncode not in (0, 1) or not os.path.exists(path):
                crashed.append(f"job {j} (seed {a.seed + j}): exit {p.returncode}: {err[-600:]}")
                continue
            with open(path) as f:
                tally.merge(json.load(f))
    for c in crashed:
        tally.add("jobs: harness", "fail", note=c)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    report(a, tally, f"{name}, torch {torch.__version__}, seeds {a.seed}..{a.seed + a.jobs - 1} over {a.jobs} processes",
           corrupt, t0)
    return 1 if tally.failed else 0


def report(a, tally, who, corrupt, t0):
    """Prints the summary table (and writes it to --out)."""
    head = (f"gpu_fuzz: {who}, {a.cases} random cases (+ as many CSR) + {corrupt} x 5 corruption / non-finite "
            f"cases{' (small shapes)' if a.small else ''}, {time.time() - t0:.0f} s")
    text = head + "\n" + tally.table() + f"\nfailures: {tally.failed}"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


def sync_or_die(what):
    if DEVICE == "cpu":
        return
    try:
        torch.cuda.synchronize()
    except RuntimeError as e:  # a device fault poisons the context: stop here
        print(f"gpu_fuzz: CUDA error after {what}: {e}", flush=True)
        raise SystemExit(2)


# -------------------------------------------------------------------------- unstructured CSR cases
def draw_csr(rnd, gen, out, inp, dtype):
    """A random CSR weight: uniform, heavy-tailed rows, or rows that are empty or dense."""
    kind = rnd.choice(["uniform", "heavy", "empty-and-dense"])
    density = rnd.choice([0.0, 0.001, 0.01, 0.1, 0.5, 1.0])
    if kind == "uniform":
        mask = torch.rand(out, inp, device=DEVICE, generator=gen) < density
    elif kind == "heavy":
        frac = torch.rand(out, 1, device=DEVICE, generator=gen) ** 6
        mask = torch.rand(out, inp, device=DEVICE, generator=gen) < frac
    else:
        rows = torch.rand(out, 1, device=DEVICE, generator=gen)
        mask = (rows < 0.1).expand(out, inp) | ((rows > 0.3) & (torch.rand(out, inp, device=DEVICE, generator=gen) < density))
    weight = torch.randn(out, inp, device=DEVICE, generator=gen).to(dtype)
    return nmspmm.CSRWeight.from_dense(weight, mask=mask), kind


def run_csr_case(i, rnd, gen, tally, small):
    """Unstructured CSR: a random weight and x (layouts as above, bias or none) through
    nmspmm.spmm, against the fp64 product with the weight scattered entry by entry."""
    out = rnd.randint(1, 300 if small else 1500)
    inp = rnd.randint(1, 400 if small else 3000)
    dtype = rnd.choice(DTYPES)
    m = rnd.choice([0, 1, 2, 3, 5, 8, 9, 16, 17, 128, 129, 257, rnd.randint(1, 64 if small else 600)])
    w, kind = draw_csr(rnd, gen, out, inp, dtype)
    x, layout = draw_x(rnd, m, inp, dtype, gen)
    bias = torch.randn(out, device=DEVICE, generator=gen).to(dtype) if rnd.random() < 0.5 else None
    crow, col = w.crow_indices.long(), w.col_indices.long()
    rows = torch.repeat_interleave(torch.arange(out, device=DEVICE), crow[1:] - crow[:-1])
    dense = torch.zeros(out, inp, dtype=torch.float64, device=DEVICE)
    dense.index_put_((rows, col), w.values.double(), accumulate=True)
    ref, scale = reference(x, dense, bias)
    desc = f"csr case {i}: m={m} out={out} in={inp} nnz={w.nnz} {kind} {str(dtype)[6:]} {layout} bias={bias is not None}"
    try:
        y = nmspmm.spmm(x, w, bias)
        sync_or_die(desc)
        ok, ratio = check_close(y, ref, scale, dtype)
        tally.add("csr: random", "pass" if ok else "fail", ratio, f"{desc} err/tol={ratio:.3g}")
    except RuntimeError as e:
        tally.add("csr: random", "fail", note=f"{desc}: raised {str(e)[:200]}")


def run_corrupt_csr_case(i, rnd, gen, tally, small):
    """Corrupted CSR index data: CSRWeight and CSRLinear.load_state_dict refuse it; the raw op
    reads nothing outside its inputs and gives the masked product the CPU reference defines (a
    row's range clamped to [0, nnz], columns outside [0, in) skipped)."""
    out, inp = rnd.randint(1, 200), rnd.randint(1, 300)
    dtype = rnd.choice(DTYPES)
    w, _ = draw_csr(rnd, gen, out, inp, dtype)
    crow, col, vals = w.crow_indices.clone(), w.col_indices.clone(), w.values
    what = rnd.choice(["crow-random", "crow-past-nnz", "crow-decreasing", "col-out-of-range", "col-negative",
                       "col-unsorted"])
    lengths = (crow[1:] - crow[:-1]).cpu()
    multi = (lengths >= 2).nonzero().flatten().tolist()
    if what == "col-unsorted" and multi:
        # A row's last column set to its first: a repeat, out of order, whose two copies may fall in
        # different groups' partial sums.
        j = rnd.choice(multi)
        col[int(crow[j + 1]) - 1] = col[int(crow[j])]
    elif what == "col-unsorted" or what == "crow-random" or w.nnz == 0 and what.startswith("col"):
        crow = torch.randint(-50, w.nnz + 50, crow.shape, device=DEVICE, generator=gen, dtype=torch.int32)
        crow[0] = 1  # never a valid CSR, whatever the rest
        what = "crow-random"
    elif what == "crow-past-nnz":
        crow[rnd.randint(1, out):] += rnd.randint(1, 1000)
    elif what == "crow-decreasing":
        j = rnd.randint(1, out)
        crow[j] = crow[j - 1] - rnd.randint(1, 20)
    else:
        p = rnd.randrange(w.nnz)
        col[p] = rnd.randint(inp, 2**31 - 1) if what == "col-out-of-range" else -rnd.randint(1, 2**31)
    desc = f"corrupt csr case {i}: {what} out={out} in={inp} nnz={w.nnz} {str(dtype)[6:]}"
    try:
        nmspmm.CSRWeight(crow, col, vals, (out, inp))
        tally.add("corrupt csr: CSRWeight", "fail", note=f"{desc}: accepted")
    except ValueError:
        tally.add("corrupt csr: CSRWeight", "pass")
    layer = nmspmm.CSRLinear(inp, out, bias=False, device=DEVICE, dtype=dtype)
    try:
        layer.load_state_dict({"crow_indices": crow, "col_indices": col, "values": vals})
        tally.add("corrupt csr: load_state_dict", "fail", note=f"{desc}: accepted")
    except RuntimeError:
        ok = layer.values.numel() == 0 and bool((layer.crow_indices == 0).all())
        tally.add("corrupt csr: load_state_dict", "pass" if ok else "fail", note=None if ok else f"{desc}: layer changed")
    m = rnd.choice([1, 3, 8, 9, 40, 150, 300])
    x = torch.randn(m, inp, device=DEVICE, generator=gen).to(dtype)
    cpu = [t.cpu() for t in (crow, col)]
    ref = ops.csr_spmm(x.float().cpu(), *cpu, vals.float().cpu(), inp).double()
    scale = ops.csr_spmm(x.float().abs().cpu(), *cpu, vals.float().abs().cpu(), inp).double()
    try:
        y = ops.csr_spmm(x, crow, col, vals, inp)
        sync_or_die(desc)
        ok, ratio = check_close(y.cpu(), ref, scale, dtype)
        tally.add("corrupt csr: raw op masked", "pass" if ok else "fail", ratio, f"{desc} err/tol={ratio:.3g}")
    except RuntimeError as e:
        tally.add("corrupt csr: raw op masked", "fail", note=f"{desc}: raised {str(e)[:200]}")


# ---------------------------------------------------------------------------------- random cases
def run_random_case(i, rnd, gen, tally, kernels, cc, small):
    N, M, L = draw_pattern(rnd, small)
    m, n, k = draw_shape(rnd, M, L, small)
    dtype = rnd.choice(DTYPES)
    G, V = k // M, n // L
    indices = random_indices(gen, G, V, N, M, DEVICE)
    values = torch.randn(G * N, n, device=DEVICE, generator=gen).to(dtype)
    bias = torch.randn(n, device=DEVICE, generator=gen).to(dtype) if rnd.random() < 0.5 else None
    x, layout = draw_x(rnd, m, k, dtype, gen)
    with_meta = rnd.random() < 0.6
    meta = ops.col_info(indices, N, M, L) if with_meta else (None, None)
    dense = dense_of(values, indices, N, M, L, k)
    ref, scale = reference(x, dense, bias)
    desc = f"case {i}: m={m} n={n} k={k} {N}:{M} L={L} {str(dtype)[6:]} {layout} bias={bias is not None} meta={with_meta}"

    # 1. the heuristic's plan
    try:
        y = ops.spmm(x, values, indices, N, M, L, bias, *meta)
        sync_or_die(desc)
        ok, ratio = check_close(y, ref, scale, dtype)
        tally.add("random: heuristic", "pass" if ok else "fail", ratio, f"{desc} err/tol={ratio:.3g}")
    except RuntimeError as e:
        tally.add("random: heuristic", "fail", note=f"{desc}: raised {str(e)[:200]}")

    # 2. one forced plan among the kernels that support the problem
    rows = x.numel() // k if k else 0
    cands = [kn for kn in kernels if supports(kn, max(rows, 1), N, M, L, with_meta, cc, dtype)]
    if not cands:
        tally.add("random: forced plan", "refused")
        return
    kernel = rnd.choice(cands)
    split_k = rnd.choice([1, 1, 2, 3, 4, 8])
    try:
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, *meta, kernel, split_k)
    except RuntimeError as e:
        msg = str(e)
        if msg.startswith("nmspmm.spmm_with_plan:"):  # a plan refused with a clear message
            tally.add("random: forced plan", "refused")
        else:
            tally.add("random: forced plan", "fail", note=f"{desc} kernel={kernel} split_k={split_k}: {msg[:200]}")
        return
    sync_or_die(f"{desc} kernel={kernel}")
    ok, ratio = check_close(y, ref, scale, dtype)
    tally.add("random: forced plan", "pass" if ok else "fail", ratio,
              f"{desc} kernel={kernel} split_k={split_k} err/tol={ratio:.3g}")


def sparse_tc_plan(rnd, kernels, m, dtype):
    """A random 2:4 plan on the sparse tensor cores for m tokens in dtype: a sparse_tc kernel and
    split (1, 2, 4, 8), or for m <= 64 as often a decode_sparse_tc kernel and cluster (1-16)."""
    bf16 = dtype == torch.bfloat16
    stc = [kn for kn in kernels if kn.startswith("sparse_tc_") and ("_bf16_" in kn) == bf16]
    dec = [kn for kn in kernels if kn.startswith("decode_sparse_tc_") and ("_bf16_" in kn) == bf16]
    if m <= 64 and dec and rnd.random() < 0.5:
        return rnd.choice(dec), rnd.choice([1, 2, 3, 5, 8, 16])
    return rnd.choice(stc), rnd.choice([1, 1, 2, 4, 8])


def run_sparse_tc_case(i, rnd, gen, tally, kernels, cc, small):
    """2:4 on the sparse tensor cores (sm_90a): a random problem with in and out multiples of 8,
    any L, a random sparse_tc kernel and split (1, 2, 4, 8) or, for m <= 64, decode_sparse_tc kernel
    and cluster (1-16), with or without the weight's tc_meta (without it the call builds it), and
    the heuristic's plan on the same problem."""
    stc = [kn for kn in kernels if kn.startswith("sparse_tc_")]
    if DEVICE != "cuda" or cc != 90 or not stc:
        return
    L = rnd.choice([1, 1, 2, 4, 8, 16, 32, 64, 128])
    m = rnd.choice([1, 2, 5, 16, 17, 33, 64, 100, 255, 256, 300] + ([] if small else [513, 1024, 2047]))
    n = rnd.randint(1, 6 if small else 24) * max(8, L)
    k = rnd.randint(2, 20 if small else 200) * 8
    dtype = rnd.choice([torch.float16, torch.bfloat16])
    indices = random_indices(gen, k // 4, n // L, 2, 4, DEVICE)
    values = torch.randn(k // 2, n, device=DEVICE, generator=gen).to(dtype)
    bias = torch.randn(n, device=DEVICE, generator=gen).to(dtype) if rnd.random() < 0.5 else None
    x, layout = draw_x(rnd, m, k, dtype, gen)
    tc_meta = ops.sparse_tc_meta(indices, 2, 4, L, k) if rnd.random() < 0.7 else None
    ref, scale = reference(x, dense_of(values, indices, 2, 4, L, k), bias)
    # Half the calls with tc_meta pass the compact 2:4 form (indices [0, out/L], positions in tc_meta).
    compact = tc_meta is not None and rnd.random() < 0.5
    idx = indices[:0] if compact else indices
    kernel, split_k = sparse_tc_plan(rnd, kernels, m, dtype)
    desc = (f"case {i}: m={m} n={n} k={k} 2:4 L={L} {str(dtype)[6:]} {layout} bias={bias is not None} "
            f"tc_meta={tc_meta is not None} compact={compact} kernel={kernel} split_k={split_k}")
    form = ", compact" if compact else ""
    for cat, run in ((f"sparse_tc: forced plan{form}", lambda: ops.spmm_with_plan(x, values, idx, 2, 4, L, bias, None,
                                                                                    None, kernel, split_k, tc_meta)),
                     (f"sparse_tc: heuristic{form}", lambda: ops.spmm(x, values, idx, 2, 4, L, bias, None, None, tc_meta))):
        try:
            y = run()
        except RuntimeError as e:
            tally.add(cat, "fail", note=f"{desc}: raised {str(e)[:200]}")
            continue
        sync_or_die(desc)
        ok, ratio = check_close(y, ref, scale, dtype)
        tally.add(cat, "pass" if ok else "fail", ratio, f"{desc} err/tol={ratio:.3g}")


# ------------------------------------------------------------------------------ corruption cases
def corrupt_indices(rnd, indices, N, M):
    """(corrupted copy, kind). "range": bytes >= M whose low bits keep the position (read as
    b & (M - 1) they give the clean product on every path); "arbitrary": random bytes (a repeated
    position adds its values on every path); "repeat" / "descending": in range, out of order."""
    bad = indices.clone()
    kind = rnd.choice(["range", "range", "arbitrary", "repeat", "descending"] if N > 1 else ["range", "arbitrary"])
    flat = bad.view(-1)
    if kind == "range":
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(flat.numel())
            b = int(flat[i])
            if (255 - b) // M >= 1:  # (a byte corrupted earlier in this loop may leave no room)
                flat[i] = b + M * rnd.randint(1, (255 - b) // M)
    elif kind == "arbitrary":
        flat[rnd.randrange(flat.numel())] = rnd.randint(M, 255)  # at least one out of range
        for _ in range(rnd.randint(0, 7)):
            flat[rnd.randrange(flat.numel())] = rnd.randint(0, 255)
    else:
        w, V = bad.shape
        g, v = rnd.randrange(w // N), rnd.randrange(V)
        u = g * N + rnd.randrange(N - 1)
        if kind == "repeat":
            bad[u + 1, v] = bad[u, v]
        else:
            bad[u, v], bad[u + 1, v] = indices[u + 1, v], indices[u, v]
    return bad, kind


def draw_weight(rnd, gen, small):
    """A pattern, a shape with m >= 1, a dtype and a random compressed weight in it."""
    N, M, L = draw_pattern(rnd, small)
    m, n, k = draw_shape(rnd, M, L, True)
    G, V = k // M, n // L
    dtype = rnd.choice(DTYPES)
    indices = random_indices(gen, G, V, N, M, DEVICE)
    values = torch.randn(G * N, n, device=DEVICE, generator=gen).to(dtype)
    return N, M, L, max(m, 1), n, k, dtype, indices, values


def run_corrupt_indices_case(i, rnd, gen, tally, kernels, cc, small):
    N, M, L, m, n, k, dtype, indices, values = draw_weight(rnd, gen, small)
    bad, kind = corrupt_indices(rnd, indices, N, M)
    desc = f"case {i}: {kind} m={m} n={n} k={k} {N}:{M} L={L} {str(dtype)[6:]}"

    # Where weights enter: refused.
    try:
        nmspmm.NMWeight(values, bad, N, M, L, (n, k))
        tally.add("corrupt indices: NMWeight", "fail", note=f"{desc}: accepted")
    except (RuntimeError, ValueError):
        tally.add("corrupt indices: NMWeight", "pass")
    sync_or_die(desc)
    layer = NMLinear(k, n, N, M, L, device=DEVICE, dtype=dtype)
    before = {name: t.clone() for name, t in layer.state_dict().items()}
    def meta(layer):  # the opt-in packing metadata (None unless enabled)
        return tuple(None if t is None else t.clone() for t in (layer.col_info, layer.packed_indices))

    def same_meta(a, b):
        return all((u is None and v is None) or (u is not None and v is not None and torch.equal(u, v))
                   for u, v in zip(a, b))

    meta_before = meta(layer)
    sd = {"values": values, "indices": bad, "bias": torch.zeros(n, device=DEVICE, dtype=dtype),
          "_extra_state": layer.get_extra_state()}
    try:
        layer.load_state_dict(sd)
        tally.add("corrupt indices: load_state_dict", "fail", note=f"{desc}: accepted")
    except RuntimeError:
        after = layer.state_dict()
        same = all(torch.equal(before[k2], after[k2]) for k2 in before) and same_meta(meta(layer), meta_before)
        tally.add("corrupt indices: load_state_dict", "pass" if same else "fail",
                  note=None if same else f"{desc}: refused load changed the layer")
    sync_or_die(desc)

    # The raw op: every gathering plan reads byte b as b & (M - 1).
    x = torch.randn(m, k, device=DEVICE, generator=gen).to(dtype)
    dense = dense_of(values, bad & (M - 1), N, M, L, k)
    ref, scale = reference(x, dense, None)
    for kernel in kernels:
        if is_packing(kernel) or not supports(kernel, m, N, M, L, False, cc, dtype):
            continue
        try:
            y = ops.spmm_with_plan(x, values, bad, N, M, L, None, None, None, kernel, 1)
        except RuntimeError as e:
            if DEVICE == "cpu" and "indices" in str(e):
                tally.add("corrupt indices: raw op (masked)", "pass")  # the CPU checks per call
                continue
            if str(e).startswith("nmspmm.spmm_with_plan:"):
                continue  # a plan refused for this problem (dtype, split-K, device)
            tally.add("corrupt indices: raw op (masked)", "fail", note=f"{desc} kernel={kernel}: {str(e)[:200]}")
            continue
        sync_or_die(f"{desc} kernel={kernel}")
        ok, ratio = check_close(y, ref, scale, dtype)
        tally.add("corrupt indices: raw op (masked)", "pass" if ok else "fail", ratio,
                  f"{desc} kernel={kernel} err/tol={ratio:.3g}")
    if DEVICE == "cpu":
        return
    y = ops.spmm(x, values, bad, N, M, L)  # the heuristic's plan
    sync_or_die(desc)
    ok, ratio = check_close(y, ref, scale, dtype)
    tally.add("corrupt indices: raw op (masked)", "pass" if ok else "fail", ratio, f"{desc} heuristic err/tol={ratio:.3g}")


def run_non_finite_x_case(i, rnd, gen, tally, kernels, cc, small):
    """NaN / +-Inf at random positions of x: on every plan (and the heuristic's), y must equal the
    product over the kept positions only (docs/format.md, "NaN and Inf in x")."""
    N, M, L, m, n, k, dtype, indices, values = draw_weight(rnd, gen, small)
    x = torch.randn(m, k, device=DEVICE, generator=gen).to(dtype)
    # One value per position (a position drawn twice holds its last value, as x does).
    bad = list({(rnd.randrange(m), rnd.randrange(k)): rnd.choice([math.nan, math.inf, -math.inf])
                for _ in range(rnd.randint(1, 4))}.items())
    bad = [(r, c, b) for (r, c), b in bad]
    dense = dense_of(values, indices, N, M, L, k)
    kept = dense_of(torch.ones_like(values), indices, N, M, L, k) != 0
    clean = x.clone()
    for r, c, _ in bad:
        clean[r, c] = 0
    ref, scale = reference(clean, dense, None)
    for r, c, b in bad:  # what the kept terms of a poisoned column add (pruned ones add nothing)
        ref[r] += torch.where(kept[:, c], dense[:, c] * b, torch.zeros_like(ref[r]))
        x[r, c] = b
    fin = torch.isfinite(ref)
    desc = f"case {i}: m={m} n={n} k={k} {N}:{M} L={L} {str(dtype)[6:]} {len(bad)} non-finite"

    def check(y, what, kernel):
        y = y.double()
        same = torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.equal(torch.isinf(y), torch.isinf(ref))
        ok, ratio = check_close(y[fin], ref[fin], scale[fin], dtype)
        tally.add("non-finite x", "pass" if ok and same else "fail", ratio,
                  f"{desc} {what}: " + ("err/tol=%.3g" % ratio if same else "non-finite pattern differs"))

    for kernel in kernels:
        if is_packing(kernel) or not supports(kernel, m, N, M, L, False, cc, dtype):
            continue
        try:
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 1)
        except RuntimeError as e:
            if str(e).startswith("nmspmm.spmm_with_plan:"):
                continue  # a plan refused for this problem (dtype, split-K, device)
            tally.add("non-finite x", "fail", note=f"{desc} kernel={kernel}: {str(e)[:200]}")
            continue
        sync_or_die(f"{desc} kernel={kernel}")
        check(y, f"kernel={kernel}", kernel)
    y = ops.spmm(x, values, indices, N, M, L)  # the heuristic's plan
    sync_or_die(desc)
    plan = ops.spmm_heuristic(m, n, k, N, M, L, dtype, cc, SMS, 16)[0] if DEVICE == "cuda" else "cpu"
    check(y, f"heuristic ({plan})", plan)


def tc_meta_positions(meta, windows, vectors):
    """(p0, p1) [windows, vectors] int64: the position pair each tc_meta nibble selects (window g in
    word g / 8 of its vector, nibble g % 8: p0 in bits 0-1, p1 in bits 2-3)."""
    g = torch.arange(windows, device=meta.device)
    words = meta[g // 8, :vectors].to(torch.int64) & 0xFFFFFFFF
    nib = (words >> (4 * (g % 8)).unsqueeze(1)) & 0xF
    return nib & 3, nib >> 2


def run_corrupt_tc_meta_case(i, rnd, gen, tally, kernels, cc, small):
    """A tc_meta that does not describe the indices (only the raw op takes one: NMWeight and NMLinear
    build it from the indices). The sparse_tc and decode_sparse_tc plans read positions from tc_meta alone, as 2-bit
    selectors inside each group of four inputs, so no word can make them read outside the operands
    (fuzzmem checks that). Where a nibble holds an ascending pair, the output is the product with
    the weight that tc_meta describes; a vector with a repeated or descending pair (outside the six
    pairs the PTX ISA defines) has unspecified outputs, checked only for being finite."""
    stc = [kn for kn in kernels if kn.startswith("sparse_tc_")]
    if DEVICE != "cuda" or cc != 90 or not stc:
        return
    L = rnd.choice([1, 2, 4, 16, 32, 128])
    m = rnd.choice([1, 5, 17, 64, 130, 300])
    n = rnd.randint(1, 6 if small else 16) * max(8, L)
    k = rnd.randint(2, 20 if small else 100) * 8
    dtype = rnd.choice([torch.float16, torch.bfloat16])
    windows, vectors = k // 4, n // L
    indices = random_indices(gen, windows, vectors, 2, 4, DEVICE)
    values = torch.randn(k // 2, n, device=DEVICE, generator=gen).to(dtype)
    kind = rnd.choice(["stale", "bits"])
    if kind == "stale":  # valid metadata of other positions (another weight's, or an old copy)
        meta = ops.sparse_tc_meta(random_indices(gen, windows, vectors, 2, 4, DEVICE), 2, 4, L, k)
    else:  # random bits in a few words, padding words included
        meta = ops.sparse_tc_meta(indices, 2, 4, L, k).clone()
        flat = meta.view(-1)
        for _ in range(rnd.randint(1, 8)):
            j = rnd.randrange(flat.numel())
            flat[j] = int(flat[j]) ^ (rnd.getrandbits(32) - (1 << 31))
    p0, p1 = tc_meta_positions(meta, windows, vectors)
    described = torch.stack([p0, p1], 1).reshape(2 * windows, vectors).to(torch.uint8)
    x = torch.randn(m, k, device=DEVICE, generator=gen).to(dtype)
    ref, scale = reference(x, dense_of(values, described, 2, 4, L, k), None)
    good = (p0 < p1).all(0).repeat_interleave(L)  # outputs of vectors whose pairs are all defined
    desc = f"case {i}: {kind} m={m} n={n} k={k} 2:4 L={L} {str(dtype)[6:]}, {int((~good).sum())} outputs unspecified"
    kernel, split_k = sparse_tc_plan(rnd, kernels, m, dtype)
    compact = rnd.random() < 0.5  # the compact 2:4 form: the kernels read the same words
    desc += f", compact={compact}"
    try:
        y = ops.spmm_with_plan(x, values, indices[:0] if compact else indices, 2, 4, L, None, None, None, kernel,
                               split_k, meta)
    except RuntimeError as e:
        tally.add("corrupt tc_meta: raw op", "fail", note=f"{desc} kernel={kernel}: raised {str(e)[:200]}")
        return
    sync_or_die(f"{desc} kernel={kernel}")
    ok, ratio = check_close(y[:, good], ref[:, good], scale[:, good], dtype)
    tally.add("corrupt tc_meta: raw op", "pass" if ok else "fail", ratio,
              f"{desc} kernel={kernel} split_k={split_k} err/tol={ratio:.3g}")
    finite = bool(torch.isfinite(y).all())
    tally.add("corrupt tc_meta: finite", "pass" if finite else "fail",
              note=None if finite else f"{desc} kernel={kernel} split_k={split_k}: non-finite output")


def run_corrupt_col_info_case(i, rnd, gen, tally, kernels, cc, small):
    N, M, L = draw_pattern(rnd, small)
    L = max(L, 16)  # the packing kernels' range
    m, n, k = draw_shape(rnd, M, L, True)
    m = max(m, 1)
    G, V = k // M, n // L
    indices = random_indices(gen, G, V, N, M, DEVICE)
    values = torch.randn(G * N, n, device=DEVICE, generator=gen)
    cols, packed = ops.col_info(indices, N, M, L)
    bcols, bpacked = cols.clone(), packed.clone()
    what = rnd.choice(["col_info", "packed_indices", "both"])
    if what in ("col_info", "both"):
        f = bcols.view(-1)
        for _ in range(rnd.randint(1, 16)):
            f[rnd.randrange(f.numel())] = rnd.randint(0, 255)
    if what in ("packed_indices", "both"):
        f = bpacked.view(-1)
        for _ in range(rnd.randint(1, 16)):
            f[rnd.randrange(f.numel())] = rnd.randint(0, 255)
    desc = f"case {i}: {what} m={m} n={n} k={k} {N}:{M} L={L}"
    changed = not (torch.equal(bcols, cols) and torch.equal(bpacked, packed))
    try:
        nmspmm.NMWeight(values, indices, N, M, L, (n, k), bcols, bpacked)
        tally.add("corrupt col_info: NMWeight", "fail" if changed else "pass",
                  note=f"{desc}: accepted" if changed else None)
    except (RuntimeError, ValueError):
        tally.add("corrupt col_info: NMWeight", "pass" if changed else "fail",
                  note=None if changed else f"{desc}: refused valid metadata")
    sync_or_die(desc)
    x = torch.randn(m, k, device=DEVICE, generator=gen)
    for kernel in kernels:
        if not is_packing(kernel) or not supports(kernel, m, N, M, L, True, cc):
            continue
        try:
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, bcols, bpacked, kernel, rnd.choice([1, 2]))
        except RuntimeError as e:
            if DEVICE == "cpu" and changed and "does not match indices" in str(e):
                tally.add("corrupt col_info: raw op (no fault)", "pass")  # the CPU checks per call
                continue
            if str(e).startswith("nmspmm.spmm_with_plan:"):
                continue  # a plan refused for this problem (dtype, split-K, device)
            tally.add("corrupt col_info: raw op (no fault)", "fail", note=f"{desc} kernel={kernel}: {str(e)[:200]}")
            continue
        sync_or_die(f"{desc} kernel={kernel}")  # no fault; the value is unspecified
        tally.add("corrupt col_info: raw op (no fault)", "pass" if y.shape == (m, n) else "fail",
                  note=f"{desc} kernel={kernel}: shape {tuple(y.shape)}")


# ------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000, help="random configurations")
    ap.add_argument("--corrupt-cases", type=int, default=None,
                    help="corrupted-index, -col_info and -tc_meta cases each (default: cases / 20, >= 20)")
    ap.add_argument("--small", action="store_true", help="smaller shapes (for compute-sanitizer)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="nm,sparse_tc,csr",
                    help="comma list of the families to fuzz: nm (every registry plan), sparse_tc, csr")
    ap.add_argument("--out", default=None, help="also write the summary table to this file")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: run the harness against the CPU ops (which check index data per call)")
    ap.add_argument("--jobs", type=int, default=1, help="split the cases over this many processes")
    ap.add_argument("--tally-json", default=None, help=argparse.SUPPRESS)  # a --jobs child's tally
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and (not torch.cuda.is_available() or not nmspmm.cuda_kernels_built()):
        sys.exit("gpu_fuzz: needs a CUDA GPU and nmspmm built with its CUDA kernels")
    if a.jobs < 1:
        sys.exit(f"gpu_fuzz: --jobs must be at least 1, got {a.jobs}")
    if a.jobs > 1:
        sys.exit(run_jobs(a))
    corrupt = a.corrupt_cases if a.corrupt_cases is not None else max(20, a.cases // 20)
    rnd = random.Random(a.seed)
    gen = torch.Generator(device=DEVICE).manual_seed(a.seed)
    major, minor = torch.cuda.get_device_capability() if DEVICE == "cuda" else (9, 0)
    cc = major * 10 + minor
    global SMS
    if DEVICE == "cuda":
        SMS = torch.cuda.get_device_properties(0).multi_processor_count
    kernels = plan_names()
    tally = Tally()
    t0 = time.time()
    only = set(a.only.split(","))
    if not only or not only <= {"nm", "sparse_tc", "csr"}:
        sys.exit(f"gpu_fuzz: --only takes a comma list of nm, sparse_tc, csr; got {a.only!r}")
    for i in range(a.cases):
        try:
            if "nm" in only:
                run_random_case(i, rnd, gen, tally, kernels, cc, a.small)
            if "sparse_tc" in only:
                run_sparse_tc_case(i, rnd, gen, tally, kernels, cc, a.small)
            if "csr" in only:
                run_csr_case(i, rnd, gen, tally, a.small)
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001 (a Python error is a failed case, not a crash)
            tally.add("random: harness", "fail", note=f"case {i}: {type(e).__name__}: {e}\n{traceback.format_exc()[-600:]}")
        if (i + 1) % 1000 == 0:
            print(f"gpu_fuzz: {i + 1}/{a.cases} random cases, {time.time() - t0:.0f} s, {tally.failed} failures", flush=True)
    for i in range(corrupt):
        for fn, cat, family in ((run_corrupt_indices_case, "corrupt indices: harness", "nm"),
                                (run_corrupt_col_info_case, "corrupt col_info: harness", "nm"),
                                (run_corrupt_tc_meta_case, "corrupt tc_meta: harness", "sparse_tc"),
                                (run_non_finite_x_case, "non-finite x: harness", "nm"),
                                (lambda i, rnd, gen, tally, kernels, cc, small: run_corrupt_csr_case(i, rnd, gen, tally, small),
                                 "corrupt csr: harness", "csr")):
            if family not in only:
                continue
            try:
                fn(i, rnd, gen, tally, kernels, cc, a.small)
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001
                tally.add(cat, "fail", note=f"case {i}: {type(e).__name__}: {e}\n{traceback.format_exc()[-600:]}")
    sync_or_die("the last case")
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    report(a, tally, f"{name} (cc {cc}), torch {torch.__version__}, seed {a.seed}", corrupt, t0)
    if a.tally_json:
        import json

        with open(a.tally_json, "w") as f:
            json.dump(tally.rows, f)
    sys.exit(1 if tally.failed else 0)


if __name__ == "__main__":
    main()
