"""fp16 / bf16 decode benchmark: nmspmm.spmm against cuBLAS (F.linear) in the same dtype.

Two tables, both on the six Llama layer shapes (Llama-2-7B 4096x4096, 11008x4096, 4096x11008;
Llama-3-8B 1024x4096, 14336x4096, 4096x14336, out x in), L = 32, M = 32:

* decode rows: N = 16 / 12 / 8 / 4, m = 1, 8, 16, bf16 and fp16; time per call in CUDA graphs and
  eagerly, speedup over F.linear, r = dense bytes / compressed bytes (values + indices), speedup / r,
  GB/s of each side, and the per-cell floor (speedup >= 0.7 r for dense weights of 64 MB or more,
  >= 0.5 r for 16-64 MB, >= 1.0 below);
* m-sweep (bf16, graphs, N = 12 / 8 / 4 of 32, i.e. 62.5% sparsity or more): m = 1, 2, 4, 8, 12,
  16, 24, 32, 48, 64, 96, 128, 256 with the default dispatch and, for m <= 64, measured in a child
  process with NMSPMM_HALF_DECODE_MAX_M=0, the path the call takes without the decode kernels (the
  native prefill plans); where the default is a decode kernel, both are shown, and the cells where
  the prefill plans are faster are listed (the crossover). Cells slower than cuBLAS are listed.

With --stream-ref each decode row also gets the time of a pure streaming read of the same
compressed bytes (a minimal CUDA kernel, compiled at start with torch.utils.cpp_extension: 16-byte
non-caching loads, the best of a few grid sizes, the same graphs and L2 cycling). A decode kernel
moves at least these bytes, so the stream time approximates the best it can reach and cuBLAS time /
stream time ("bound") the speedup a cell can reach.

Weights are cycled past L2: each timed sequence calls the op on as many weight copies as make up
256 MB (at least 2), captured in one CUDA graph; the time is the median over replays, per call.

Before a cell is timed, nmspmm's output on its first and last weight copy is checked against a
float64 reference built in plain torch from the values and indices (common.check_output: rtol =
finfo(dtype).eps, atol = 1e-4 max(|x| @ |W|^T)), in both dtypes, in the decode rows and in both
m-sweeps (with and without the decode kernels); a mismatch stops the run with exit status 1.

    python benchmarks/bench_decode_half.py                 # both tables -> benchmarks/results/...
    python benchmarks/bench_decode_half.py --quick         # m = 1, 16; N = 16, 4; bf16
    python benchmarks/bench_decode_half.py --no-sweep
    python benchmarks/bench_decode_half.py --render DIR    # rewrite DIR/decode_half.md from its CSVs
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SHAPES = [("Llama-2-7B", 4096, 4096), ("Llama-2-7B", 11008, 4096), ("Llama-2-7B", 4096, 11008),
          ("Llama-3-8B", 1024, 4096), ("Llama-3-8B", 14336, 4096), ("Llama-3-8B", 4096, 14336)]
SWEEP_M = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256]
DECODE_MAX_M = 64  # the decode kernels' range (kHalfDecodeMaxM)
ROTATE_BYTES = 256e6
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def random_compressed(copies, n, k, N, M, L, dtype):
    """`copies` independent [w, n] values and [w, n / L] uint8 indices (random N of M positions)."""
    G, V = k // M, n // L
    values = torch.randn(copies, G * N, n, device="cuda").to(dtype)
    pos = torch.rand(G, V, M, device="cuda").argsort(dim=-1)[..., :N].sort(dim=-1).values
    ind = pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8)
    return values, ind.unsqueeze(0).expand(copies, -1, -1).contiguous()


def reference64(x, values, indices, N, M, L):
    """float64 x @ W^T for one compressed weight (plain-torch scatter of the format, no nmspmm op),
    and the scale max(|x| @ |W|^T) of common.check_output."""
    w, n = values.shape
    cols = (torch.arange(w, device=values.device) // N * M)[:, None] + indices.long().repeat_interleave(L, dim=1)
    dense_t = torch.zeros(w // N * M, n, dtype=torch.float64, device=values.device)
    dense_t.scatter_(0, cols, values.double())
    xd = x.double()
    return xd @ dense_t, (xd.abs() @ dense_t.abs()).max().item()


def warm_up(seconds=1.0):
    """Keeps the GPU busy for `seconds` so that the first cells run at the clocks of the rest."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t_end = time.time() + seconds
    while time.time() < t_end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def time_graph(fns, reps=20):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in fns:
            f()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(fns))
    return statistics.median(times)


def time_eager(fns, reps=7):
    for f in fns:
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for f in fns:
            f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(fns))
    return statistics.median(times)


_dense_cache = {}


def dense_times(dtype, n, k, m, eager):
    key = (dtype, n, k, m, eager)
    if key not in _dense_cache:
        copies = max(2, math.ceil(ROTATE_BYTES / (n * k * 2)))
        w = torch.randn(copies, n, k, device="cuda").to(dtype)
        x = torch.randn(m, k, device="cuda").to(dtype)
        fns = [lambda i=i: F.linear(x, w[i]) for i in range(copies)]
        _dense_cache[key] = (time_graph(fns), time_eager(fns) if eager else float("nan"))
        del w
    return _dense_cache[key]


def sparse_times(dtype, n, k, N, M, L, m, eager):
    w = k // M * N
    comp = w * n * 2 + w * (n // L)
    copies = max(2, min(400, math.ceil(ROTATE_BYTES / comp)))
    values, ind = random_compressed(copies, n, k, N, M, L, dtype)
    x = torch.randn(m, k, device="cuda").to(dtype)
    ops = torch.ops.nmspmm
    for i in (0, copies - 1):
        ref, scale = reference64(x, values[i], ind[i], N, M, L)
        common.check_output(ops.spmm(x, values[i], ind[i], N, M, L), ref, scale,
                            f"{dtype} {n}x{k} {N}:{M} L={L} m={m} (weight copy {i})")
        del ref
    fns = [lambda i=i: ops.spmm(x, values[i], ind[i], N, M, L) for i in range(copies)]
    out = (time_graph(fns), time_eager(fns) if eager else float("nan"), comp)
    del values, ind
    return out


STREAM_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
// Reads n16 16-byte words, 4 independent loads in flight per thread; the xor keeps the loads.
__global__ void stream_read_kernel(const uint4* __restrict__ p, int64_t n16, unsigned* sink) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  unsigned acc = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t j = i + u * stride;
      v[u] = make_uint4(0, 0, 0, 0);
      if (j < n16)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
void stream_read(torch::Tensor t, torch::Tensor sink, int64_t blocks) {
  stream_read_kernel<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const uint4*>(t.data_ptr()), t.numel() / 16, reinterpret_cast<unsigned*>(sink.data_ptr()));
}
"""
_stream_mod = None


def stream_time(nbytes):
    """Graph time (us) of the fastest pure read of nbytes (cycled past L2) over a few grid sizes."""
    global _stream_mod
    if _stream_mod is None:
        from torch.utils.cpp_extension import load_inline
        _stream_mod = load_inline("nmspmm_stream_read", cpp_sources="void stream_read(torch::Tensor t, "
                                  "torch::Tensor sink, int64_t blocks);", cuda_sources=STREAM_SRC,
                                  functions=["stream_read"], extra_cuda_cflags=["-O3"], verbose=False)
    nbytes = (nbytes + 15) // 16 * 16
    copies = max(2, min(400, math.ceil(ROTATE_BYTES / nbytes)))
    buf = torch.empty(copies, nbytes, dtype=torch.uint8, device="cuda").random_()
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    best = math.inf
    for blocks in (sms, 2 * sms, 4 * sms, 8 * sms, 16 * sms):
        fns = [lambda i=i: _stream_mod.stream_read(buf[i], sink, blocks) for i in range(copies)]
        best = min(best, time_graph(fns))
    del buf
    return best


def floor_of(dense_bytes, r):
    if dense_bytes >= 64e6:
        return 0.7 * r
    if dense_bytes >= 16e6:
        return 0.5 * r
    return 1.0


def decode_rows(dtypes, Ns, ms, M=32, L=32, stream_ref=False):
    rows = []
    for dname in dtypes:
        dtype = DTYPES[dname]
        for model, n, k in SHAPES:
            for N in Ns:
                for m in ms:
                    us, us_eager, comp = sparse_times(dtype, n, k, N, M, L, m, eager=True)
                    dus, dus_eager = dense_times(dtype, n, k, m, eager=True)
                    dense_bytes = n * k * 2
                    r = dense_bytes / comp
                    sp = dus / us
                    fl = floor_of(dense_bytes, r)
                    st = stream_time(comp) if stream_ref else float("nan")
                    rows.append(dict(dtype=dname, model=model, out=n, inp=k, pattern=f"{N}:{M}", L=L, m=m,
                                     us_stream=st, bound_speedup=dus / st,
                                     us_graph=us, us_dense_graph=dus, speedup_graph=sp,
                                     us_eager=us_eager, us_dense_eager=dus_eager, speedup_eager=dus_eager / us_eager,
                                     r=r, speedup_over_r=sp / r, floor=fl, floor_met=sp >= fl,
                                     gbps=comp / us / 1e3, gbps_dense=dense_bytes / dus / 1e3))
                    common.log(f"{dname} {model} {n}x{k} {N}:{M} m={m}: {us:.2f} us vs {dus:.2f} us dense, "
                               f"{sp:.2f}x (r={r:.2f}, floor {fl:.2f}) {comp / us / 1e3:.0f} GB/s")
    return rows


def sweep_rows(Ns, ms, M=32, L=32, dtype_name="bf16"):
    dtype = DTYPES[dtype_name]
    rows = []
    for model, n, k in SHAPES:
        for N in Ns:
            for m in ms:
                us, _, comp = sparse_times(dtype, n, k, N, M, L, m, eager=False)
                dus, _ = dense_times(dtype, n, k, m, eager=False)
                rows.append(dict(dtype=dtype_name, model=model, out=n, inp=k, pattern=f"{N}:{M}", m=m, us=us,
                                 us_dense=dus, speedup=dus / us))
    return rows


def default_is_decode(row, cc=90, num_sms=132):
    """Whether the heuristic sends a sweep cell to the decode kernels (the device's cc and SMs)."""
    N, M = (int(v) for v in row["pattern"].split(":"))
    kernel, _ = torch.ops.nmspmm.spmm_heuristic(int(row["m"]), int(row["out"]), int(row["inp"]), N, M, 32,
                                                DTYPES[row["dtype"]], cc, num_sms, 16)
    return kernel.startswith("decode_tc")


def render(rows, sweep, title, sweep_m, sweep_Ns, cc=90, num_sms=132):
    """decode_half.md from the decode rows and the m-sweep rows (as written to the CSVs)."""
    f = lambda r, key: float(r[key])
    lines = [f"# fp16 / bf16 decode ({title})", "",
             "| dtype | layer (out x in) | N:M | m | graph us | cuBLAS us | speedup | r | speedup / r | floor | "
             "GB/s | cuBLAS GB/s | eager us | cuBLAS eager us | stream us | bound |", "|" + "---|" * 16]
    for r in rows:
        met = str(r["floor_met"]) == "True"
        lines.append(f"| {r['dtype']} | {r['model']} {r['out']}x{r['inp']} | {r['pattern']} | {r['m']} | "
                     f"{f(r, 'us_graph'):.2f} | {f(r, 'us_dense_graph'):.2f} | {f(r, 'speedup_graph'):.2f} | "
                     f"{f(r, 'r'):.2f} | {f(r, 'speedup_over_r'):.2f} | {f(r, 'floor'):.2f} {'ok' if met else 'MISSED'} | "
                     f"{f(r, 'gbps'):.0f} | {f(r, 'gbps_dense'):.0f} | {f(r, 'us_eager'):.2f} | "
                     f"{f(r, 'us_dense_eager'):.2f} | {f(r, 'us_stream'):.2f} | {f(r, 'bound_speedup'):.2f} |")
    met = sum(str(r["floor_met"]) == "True" for r in rows)
    lines += ["", f"floors met: {met} / {len(rows)}"]
    if not sweep:
        return "\n".join(lines)
    lines += ["", "## m-sweep (bf16, graphs): speedup over cuBLAS with the default plans; where they are the "
              "decode kernels, / the speedup without them (the prefill plans)", "",
              "| layer | N:M | " + " | ".join(f"m={m}" for m in sweep_m) + " |", "|" + "---|" * (len(sweep_m) + 2)]
    decode = {id(r): default_is_decode(r, cc, num_sms) for r in sweep}
    for model, n, k in SHAPES:
        for N in sweep_Ns:
            cells = []
            for m in sweep_m:
                r = next(x for x in sweep if int(x["out"]) == n and int(x["inp"]) == k and x["pattern"] == f"{N}:32"
                         and int(x["m"]) == m)
                cells.append(f"{f(r, 'speedup'):.2f} / {f(r, 'us_dense') / f(r, 'us_without_decode'):.2f}"
                             if decode[id(r)] else f"{f(r, 'speedup'):.2f}")
            lines.append(f"| {model} {n}x{k} | {N}:32 | " + " | ".join(cells) + " |")
    slower = [r for r in sweep if decode[id(r)] and f(r, "us") > f(r, "us_without_decode")]
    lines += ["", "decode kernels slower than the prefill plans (their time / the prefill plans' time) at: " +
              (", ".join(f"{r['out']}x{r['inp']} {r['pattern']} m={r['m']} "
                         f"({f(r, 'us') / f(r, 'us_without_decode'):.2f})" for r in slower) or "none")]
    below = [r for r in sweep if f(r, "speedup") < 1.0]
    lines += ["", f"slower than cuBLAS ({len(below)} of {len(sweep)} cells): " +
              (", ".join(f"{r['out']}x{r['inp']} {r['pattern']} m={r['m']} ({f(r, 'speedup'):.2f}x)" for r in below)
               or "none")]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="output directory (default: benchmarks/results/<gpu>/...)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="skip the m-sweep")
    ap.add_argument("--stream-ref", action="store_true",
                    help="also time a pure streaming read of each row's compressed bytes (compiles a kernel)")
    ap.add_argument("--render", default=None, metavar="DIR",
                    help="rewrite DIR/decode_half.md from DIR's CSVs (no GPU; H100's 132 SMs, compute capability 9.0)")
    ap.add_argument("--sweep-json", default=None, help=argparse.SUPPRESS)  # child: write the sweep here
    args = ap.parse_args(argv)
    import nmspmm  # noqa: F401  (loads the ops)

    Ns = [16, 4] if args.quick else [16, 12, 8, 4]
    sweep_Ns = [12, 4] if args.quick else [12, 8, 4]
    ms = [1, 16] if args.quick else [1, 8, 16]
    sweep_m = [1, 16, 32, 64, 128] if args.quick else SWEEP_M
    if args.render:
        import csv
        rows = list(csv.DictReader(open(os.path.join(args.render, "decode_half.csv"))))
        sweep_path = os.path.join(args.render, "msweep.csv")
        sweep = list(csv.DictReader(open(sweep_path))) if os.path.exists(sweep_path) else []
        sweep_m = sorted({int(r["m"]) for r in sweep})
        sweep_Ns = sorted({int(r["pattern"].split(":")[0]) for r in sweep}, reverse=True)
        with open(os.path.join(args.render, "env.json")) as f:
            env = json.load(f)
        title = f"{env.get('gpu_name', 'GPU')}, torch {env.get('torch', '')}"
        with open(os.path.join(args.render, "decode_half.md"), "w") as f:
            f.write(render(rows, sweep, title, sweep_m, sweep_Ns) + "\n")
        return
    if not torch.cuda.is_available():
        sys.exit("bench_decode_half: needs a CUDA GPU")
    if args.sweep_json:  # child process of the m-sweep (environment set by the parent)
        with open(args.sweep_json, "w") as f:
            json.dump(sweep_rows(sweep_Ns, [m for m in sweep_m if m <= DECODE_MAX_M]), f)
        return

    out_dir = args.out or common.default_out_dir("decode_half")
    os.makedirs(out_dir, exist_ok=True)
    env = common.collect_env()
    t0 = time.time()
    warm_up()
    rows = decode_rows(["bf16"] if args.quick else ["bf16", "fp16"], Ns, ms, stream_ref=args.stream_ref)
    common.write_csv(os.path.join(out_dir, "decode_half.csv"), rows)
    sweep = []
    if not args.no_sweep:
        sweep = sweep_rows(sweep_Ns, sweep_m)
        child_json = os.path.join(out_dir, "msweep_without_decode.json")
        child_env = dict(os.environ, NMSPMM_HALF_DECODE_MAX_M="0")
        cmd = [sys.executable, os.path.abspath(__file__), "--sweep-json", child_json] + (["--quick"] if args.quick else [])
        subprocess.run(cmd, env=child_env, check=True)
        with open(child_json) as f:
            other = {(r["out"], r["inp"], r["pattern"], r["m"]): r for r in json.load(f)}
        for r in sweep:
            o = other.get((r["out"], r["inp"], r["pattern"], r["m"]))
            r["us_without_decode"] = o["us"] if o else r["us"]
        common.write_csv(os.path.join(out_dir, "msweep.csv"), sweep)
    props = torch.cuda.get_device_properties(0)
    cc = props.major * 10 + props.minor
    text = render(rows, sweep, f"{torch.cuda.get_device_name()}, torch {torch.__version__}", sweep_m, sweep_Ns,
                  cc, props.multi_processor_count)
    with open(os.path.join(out_dir, "decode_half.md"), "w") as f:
        f.write(text + "\n")
    common.write_json(os.path.join(out_dir, "env.json"), env)
    print(text)
    common.log(f"done in {time.time() - t0:.0f} s -> {out_dir}")


if __name__ == "__main__":
    main()
