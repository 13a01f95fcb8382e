"""CPU-side self-check of the CUDA preprocessing kernels (csrc/cuda/kernels/preprocess.cu), for
machines without a GPU.

The kernels are written as __host__ __device__ "phase" functions separated by __syncthreads(),
communicating only through shared memory. This script compiles preprocess.cu with the host C++
compiler (the __global__ kernels and launchers are hidden outside nvcc) and runs each kernel's
phases block by block and thread by thread, exactly as the grid-stride loops of the kernels
order them, with outputs and shared memory poisoned beforehand (so an element the kernel fails
to write, or a stale shared-memory read, shows up). The results are compared bit for bit with
the CPU reference ops (torch.ops.nmspmm.*, csrc/cpu/ops_cpu.cpp), including the error words.

What this does not check: the device-only code (atomics, __clz/__popcll, __dadd_rn, the
launch configuration itself, races between threads). Run the CUDA tests on a GPU for that.

    python tools/preprocess_selfcheck.py           # needs nmspmm built (CPU is enough)
"""
from __future__ import annotations

import itertools
import os
import random
import re
import sys
import tempfile

import torch
from torch.utils.cpp_extension import load_inline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import nmspmm  # noqa: E402,F401

ops = torch.ops.nmspmm


def _cuda_include():
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if d and os.path.exists(os.path.join(d, "include", "cuda_runtime.h")):
            return os.path.join(d, "include")
    raise SystemExit("preprocess_selfcheck: cuda_runtime.h not found (set CUDA_HOME)")


CPP = r"""
#include <torch/extension.h>
#include <cmath>
#include <cstring>
#include <random>
#include "cuda/kernels/preprocess.cu"

using namespace nmspmm::kernels;

namespace {
std::mt19937_64 rng(12345);

template <typename T>
void poison(T* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = rng();
    std::memcpy(&p[i], &r, sizeof(T));
  }
}

// Emulates the kernel's grid-stride loop: blocks 0..grid-1, task = block, block + grid, ...
template <typename Body>
void run_grid(int64_t tasks, int64_t grid, Body body) {
  for (int64_t b = 0; b < grid; ++b)
    for (int64_t task = b; task < tasks; task += grid) body(task);
}
int64_t pick_grid(int64_t tasks, int64_t cap) { return std::min<int64_t>(grid_for(tasks), cap); }
}  // namespace

std::vector<at::Tensor> emu_prune(at::Tensor w, int64_t N, int64_t M, int64_t L, int64_t cap) {
  w = w.contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  auto mask = at::full({out, in}, 0xAB, w.options().dtype(at::kByte));
  auto flag = at::zeros({1}, w.options().dtype(at::kInt));
  PruneParams p = make_prune_params(w.data_ptr(), mask.data_ptr<uint8_t>(), flag.data_ptr<int32_t>(),
                                    out, in, N, M, L);
  const int type = w.scalar_type() == at::kFloat ? 0 : w.scalar_type() == at::kHalf ? 1 : 2;
  double s_norm[kThreads];
  const int64_t tasks = ceil_div(p.total, kThreads);
  if (p.total > 0)
    run_grid(tasks, pick_grid(tasks, cap), [&](int64_t task) {
      const int64_t base = task * kThreads;
      poison(s_norm, kThreads);
      for (int t = 0; t < kThreads; ++t) {
        if (type == 0) prune_norms<0>(p, base, t, s_norm);
        else if (type == 1) prune_norms<1>(p, base, t, s_norm);
        else prune_norms<2>(p, base, t, s_norm);
      }
      for (int t = 0; t < kThreads; ++t) prune_select(p, base, t, s_norm);
    });
  return {mask, flag};
}

template <typename E>
void emu_compress_values(const TileParams& p, int64_t cap) {
  E s_tile[kTile * TileShape<E>::kPitch];
  run_grid(p.tasks, pick_grid(p.tasks, cap), [&](int64_t task) {
    poison(s_tile, kTile * TileShape<E>::kPitch);
    for (int t = 0; t < kThreads; ++t) compress_load<E>(p, task, t, s_tile);
    for (int t = 0; t < kThreads; ++t) compress_gather<E>(p, task, t, s_tile);
  });
}

std::vector<at::Tensor> emu_compress(at::Tensor w, at::Tensor mask, int64_t N, int64_t M, int64_t L,
                                     int64_t cap) {
  w = w.contiguous();
  mask = mask.contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  const int64_t windows = in / M, vectors = out / L, w_rows = windows * N;
  const int es = w.element_size();
  auto values = at::empty({w_rows, out}, w.options());
  auto indices = at::empty({w_rows, vectors}, w.options().dtype(at::kByte));
  poison(static_cast<uint8_t*>(values.data_ptr()), values.numel() * es);
  poison(indices.data_ptr<uint8_t>(), indices.numel());
  auto bad = at::full({1}, kNoError, w.options().dtype(at::kLong));
  CompressIdxParams pi = make_compress_idx_params(reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()),
                                                  indices.data_ptr<uint8_t>(), bad.data_ptr<int64_t>(),
                                                  out, in, N, M, L);
  if (pi.total > 0) {
    uint8_t s_keep[kThreads], s_mixed[kThreads];
    const int64_t tasks = ceil_div(pi.total, kThreads);
    run_grid(tasks, pick_grid(tasks, cap), [&](int64_t task) {
      const int64_t base = task * kThreads;
      poison(s_keep, kThreads);
      poison(s_mixed, kThreads);
      for (int t = 0; t < kThreads; ++t) compress_scan(pi, base, t, s_keep, s_mixed);
      for (int t = 0; t < kThreads; ++t) compress_index(pi, base, t, s_keep, s_mixed);
    });
    TileParams pv = make_tile_params(w.data_ptr(), values.data_ptr(), indices.data_ptr<uint8_t>(),
                                     nullptr, out, in, N, M, L);
    if (es == 4) emu_compress_values<uint32_t>(pv, cap);
    else emu_compress_values<uint16_t>(pv, cap);
  }
  return {values, indices, bad};
}

template <typename E>
void emu_decompress_t(const TileParams& p, int64_t cap) {
  E s_tile[kTile * TileShape<E>::kPitch];
  run_grid(p.tasks, pick_grid(p.tasks, cap), [&](int64_t task) {
    poison(s_tile, kTile * TileShape<E>::kPitch);
    for (int t = 0; t < kThreads; ++t) decompress_zero<E>(t, s_tile);
    for (int t = 0; t < kThreads; ++t) decompress_scatter<E>(p, task, t, s_tile);
    for (int t = 0; t < kThreads; ++t) decompress_store<E>(p, task, t, s_tile);
  });
}

std::vector<at::Tensor> emu_decompress(at::Tensor values, at::Tensor indices, int64_t N, int64_t M,
                                       int64_t L, int64_t cap) {
  values = values.contiguous();
  indices = indices.contiguous();
  const int64_t w_rows = values.size(0), out = values.size(1), in = w_rows / N * M;
  const int es = values.element_size();
  auto dense = at::empty({out, in}, values.options());
  poison(static_cast<uint8_t*>(dense.data_ptr()), dense.numel() * es);
  auto bad = at::full({1}, kNoError, values.options().dtype(at::kLong));
  TileParams p = make_tile_params(values.data_ptr(), dense.data_ptr(), indices.data_ptr<uint8_t>(),
                                  bad.data_ptr<int64_t>(), out, in, N, M, L);
  if (p.tasks > 0) {
    if (es == 4) emu_decompress_t<uint32_t>(p, cap);
    else emu_decompress_t<uint16_t>(p, cap);
  }
  return {dense, bad};
}

std::vector<at::Tensor> emu_col_info(at::Tensor indices, int64_t N, int64_t M, int64_t L, int64_t cap) {
  indices = indices.contiguous();
  const int64_t w_rows = indices.size(0), vectors = indices.size(1);
  const int64_t out = vectors * L, in = w_rows / N * M;
  auto cols = at::empty({ceil_div(out, 128), ceil_div(in, 64), 64}, indices.options());
  auto packed = at::empty({w_rows, vectors}, indices.options());
  poison(cols.data_ptr<uint8_t>(), cols.numel());
  poison(packed.data_ptr<uint8_t>(), packed.numel());
  auto bad = at::full({1}, kNoError, indices.options().dtype(at::kLong));
  ColInfoParams p = make_col_info_params(indices.data_ptr<uint8_t>(), cols.data_ptr<uint8_t>(),
                                         packed.data_ptr<uint8_t>(), bad.data_ptr<int64_t>(),
                                         w_rows, vectors, N, M, L);
  unsigned long long s_used;
  uint8_t s_slot[64];
  if (p.tasks > 0)
    run_grid(p.tasks, pick_grid(p.tasks, cap), [&](int64_t task) {
      poison(&s_used, 1);
      poison(s_slot, 64);
      for (int t = 0; t < kThreads; ++t) col_info_init(t, &s_used);
      for (int t = 0; t < kThreads; ++t) col_info_mark(p, task, t, &s_used);
      for (int t = 0; t < kThreads; ++t) col_info_rank(p, task, t, &s_used, s_slot);
      for (int t = 0; t < kThreads; ++t) col_info_pack(p, task, t, s_slot);
    });
  return {cols, packed, bad};
}

// Exhaustive check of the fp16 -> fp32 conversion against c10::Half, and of fp32 -> fp64
// against the hardware conversion, for every binary32 pattern in steps of `stride`, plus all
// subnormals. Returns the number of mismatches.
int64_t check_conversions(int64_t stride) {
  int64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ref = static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    uint32_t rb;
    std::memcpy(&rb, &ref, 4);
    const uint32_t mine = half_to_float_bits(h);
    const bool nan = std::isnan(ref);
    if (nan ? !((mine & 0x7F800000u) == 0x7F800000u && (mine & 0x7FFFFFu)) : mine != rb) ++bad;
  }
  auto one = [&](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isfinite(f)) {
      if (float_bits_finite(b)) ++bad;
      return;
    }
    if (!float_bits_finite(b)) ++bad;
    const double ref = static_cast<double>(f), mine = float_bits_to_double(b);
    if (std::memcmp(&ref, &mine, 8) != 0) ++bad;
  };
  for (uint64_t b = 0; b < (1ull << 32); b += stride) one(static_cast<uint32_t>(b));
  for (uint32_t m = 0; m < (1u << 23); m += 1) { one(m); one(m | 0x80000000u); }
  return bad;
}
"""

FUNCS = ["emu_prune", "emu_compress", "emu_decompress", "emu_col_info", "check_conversions"]


def build():
    build_dir = os.path.join(tempfile.gettempdir(), "nmspmm_preprocess_selfcheck")
    os.makedirs(build_dir, exist_ok=True)
    return load_inline(
        name="nmspmm_preprocess_emu", cpp_sources=[CPP], functions=FUNCS,
        extra_include_paths=[os.path.join(ROOT, "csrc"), _cuda_include()],
        extra_cflags=["-O2", "-std=c++20", "-fno-strict-aliasing"], build_directory=build_dir,
        verbose=False)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.view(INT_VIEW[a.dtype]), b.view(INT_VIEW[b.dtype]))
    return torch.equal(a, b)


def cpu_error(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e).split("\n")[0]
    return None


class Checker:
    def __init__(self, emu):
        self.emu = emu
        self.count = 0
        self.fail = 0

    def expect(self, ok, what):
        self.count += 1
        if not ok:
            self.fail += 1
            if self.fail <= 30:
                print("FAIL:", what)

    # ---- prune -------------------------------------------------------------------------------
    def prune(self, w, N, M, L, cap, tag):
        mask, flag = self.emu.emu_prune(w, N, M, L, cap)
        err = cpu_error(lambda: ops.prune(w, N, M, L))
        if err is not None:
            self.expect("NaN or Inf" in err and int(flag) != 0, f"prune error {tag}: {err} flag={int(flag)}")
            return None
        ref = ops.prune(w, N, M, L)
        self.expect(int(flag) == 0, f"prune flag {tag}")
        self.expect(torch.equal(mask, ref.to(torch.uint8)), f"prune mask {tag}")
        return ref

    # ---- compress ----------------------------------------------------------------------------
    def compress(self, w, mask, N, M, L, cap, tag):
        values, indices, bad = self.emu.emu_compress(w, mask, N, M, L, cap)
        err = cpu_error(lambda: ops.compress(w, mask, N, M, L))
        if err is not None:
            m = re.search(r"\(window (\d+), vector (\d+)\)", err)
            windows = w.shape[1] // M
            got = int(bad)
            self.expect(m is not None and got != 2**63 - 1 and
                        (got % windows, got // windows) == (int(m.group(1)), int(m.group(2))),
                        f"compress error {tag}: cpu={err} emu={got}")
            return None
        rv, ri = ops.compress(w, mask, N, M, L)
        self.expect(int(bad) == 2**63 - 1, f"compress bad word {tag}: {int(bad)}")
        self.expect(torch.equal(indices, ri), f"compress indices {tag}")
        self.expect(same_bits(values, rv), f"compress values {tag}")
        return rv, ri

    # ---- decompress --------------------------------------------------------------------------
    def decompress(self, values, indices, N, M, L, cap, tag):
        dense, bad = self.emu.emu_decompress(values, indices, N, M, L, cap)
        err = cpu_error(lambda: ops.decompress(values, indices, N, M, L))
        if err is not None:
            m = re.search(r"indices holds (\d+) >= M", err)
            got = int(bad)
            self.expect(m is not None and got != 2**63 - 1 and (got & 0xFF) == int(m.group(1)),
                        f"decompress error {tag}: cpu={err} emu={got}")
            # The first bad position must be the CPU's (first in linear order).
            flat = indices.contiguous().view(-1)
            first = int((flat >= M).nonzero()[0])
            self.expect(got >> 8 == first, f"decompress first bad {tag}: {got >> 8} vs {first}")
            return
        ref = ops.decompress(values, indices, N, M, L)
        self.expect(int(bad) == 2**63 - 1, f"decompress bad word {tag}")
        self.expect(same_bits(dense, ref), f"decompress dense {tag}")

    # ---- col_info ----------------------------------------------------------------------------
    def col_info(self, indices, N, M, L, cap, tag):
        cols, packed, bad = self.emu.emu_col_info(indices, N, M, L, cap)
        err = cpu_error(lambda: ops.col_info(indices, N, M, L))
        if err is not None:
            m = re.search(r"indices holds (\d+) >= M", err)
            got = int(bad)
            flat = indices.contiguous().view(-1)
            first = int((flat >= M).nonzero()[0])
            self.expect(m is not None and (got & 0xFF) == int(m.group(1)) and got >> 8 == first,
                        f"col_info error {tag}: cpu={err} emu={got}")
            return
        rc, rp = ops.col_info(indices, N, M, L)
        self.expect(int(bad) == 2**63 - 1, f"col_info bad word {tag}")
        self.expect(torch.equal(cols, rc), f"col_info cols {tag}")
        self.expect(torch.equal(packed, rp), f"col_info packed {tag}")


def make_weight(out, inp, dtype, kind, gen):
    if kind == "randn":
        w = torch.randn(out, inp, generator=gen)
    elif kind == "ties":  # few distinct magnitudes: many equal norms
        w = torch.randint(-2, 3, (out, inp), generator=gen).float()
    elif kind == "zeros":
        w = torch.zeros(out, inp)
    elif kind == "tiny":  # subnormal in the target dtype (and fp32 subnormals for fp32)
        base = {torch.float32: 1e-40, torch.float16: 1e-6, torch.bfloat16: 1e-39}[dtype]
        w = torch.randint(-3, 4, (out, inp), generator=gen).float() * base
    elif kind == "wide":  # wide dynamic range, rounding-sensitive fp64 sums
        w = torch.randn(out, inp, generator=gen) * torch.exp2(torch.randint(-30, 30, (out, inp), generator=gen).float())
    else:
        raise ValueError(kind)
    return w.to(dtype)


def main():
    emu = build()
    ck = Checker(emu)
    gen = torch.Generator().manual_seed(0)
    rnd = random.Random(0)

    bad_conv = emu.check_conversions(4093)
    ck.expect(bad_conv == 0, f"conversions: {bad_conv} mismatches")
    print(f"conversions: {bad_conv} mismatches")

    patterns = [(N, M, L) for M in (2, 4, 8, 16, 32, 64) for L in (1, 2, 4, 8, 16, 32, 64, 128)
                for N in sorted({1, M // 2, M - 1 if M > 2 else 1, M}) if N >= 1]
    for (N, M, L) in patterns:
        # shapes with tails: out % 64 / 128 != 0, in % 64 != 0 (when M allows)
        outs = sorted({L, 3 * L, max(L, 192 // L * L), 2 * 128 + L if L < 128 else 384})
        ins = sorted({M, 3 * M, max(M, (200 // M) * M), 64 + M})
        shapes = rnd.sample(list(itertools.product(outs, ins)), k=min(3, len(outs) * len(ins)))
        for (out, inp) in shapes:
            dtype = rnd.choice(DTYPES)
            kind = rnd.choice(["randn", "randn", "ties", "zeros", "tiny", "wide"])
            cap = rnd.choice([1 << 20, 1, 3])
            tag = f"N={N} M={M} L={L} out={out} in={inp} {dtype} {kind} cap={cap}"
            w = make_weight(out, inp, dtype, kind, gen)
            mask = ck.prune(w, N, M, L, cap, tag)
            if mask is None:
                continue
            r = ck.compress(w, mask, N, M, L, cap, tag)
            if r is None:
                continue
            values, indices = r
            ck.decompress(values, indices, N, M, L, cap, tag)
            ck.col_info(indices, N, M, L, cap, tag)
            # arbitrary in-range indices (repeats inside a window, unsorted)
            ri = torch.randint(0, M, indices.shape, generator=gen, dtype=torch.uint8)
            ck.decompress(values, ri, N, M, L, cap, tag + " random-indices")
            ck.col_info(ri, N, M, L, cap, tag + " random-indices")
            if indices.numel() > 0:
                # out-of-range indices
                bi = ri.clone().view(-1)
                for _ in range(rnd.choice([1, 3])):
                    bi[rnd.randrange(bi.numel())] = rnd.choice([M, M + 1, 255])
                bi = bi.view(indices.shape)
                ck.decompress(values, bi, N, M, L, cap, tag + " bad-indices")
                ck.col_info(bi, N, M, L, cap, tag + " bad-indices")
                # invalid masks: flip one element; flip a whole column of a vector
                m1 = mask.clone()
                i, j = rnd.randrange(out), rnd.randrange(inp)
                m1[i, j] = ~m1[i, j]
                ck.compress(w, m1, N, M, L, cap, tag + " flip-one")
                m2 = mask.clone()
                v = rnd.randrange(out // L)
                m2[v * L:(v + 1) * L, j] = ~m2[v * L:(v + 1) * L, j]
                ck.compress(w, m2, N, M, L, cap, tag + " flip-column")
        # NaN / Inf rejection
        w = make_weight(2 * L, 2 * M, torch.float32, "randn", gen)
        w[rnd.randrange(2 * L), rnd.randrange(2 * M)] = rnd.choice([float("nan"), float("inf"), -float("inf")])
        for dt in DTYPES:
            ck.prune(w.to(dt), N, M, L, 1 << 20, f"nonfinite N={N} M={M} L={L} {dt}")

    # empty tensors
    for dt in DTYPES:
        for (out, inp) in [(0, 8), (8, 0), (0, 0)]:
            w = torch.zeros(out, inp, dtype=dt)
            mask = ck.prune(w, 2, 4, 2 if out else 1, 1 << 20, f"empty {out}x{inp}")
            if mask is not None:
                r = ck.compress(w, mask, 2, 4, 2 if out else 1, 1 << 20, f"empty {out}x{inp}")
                if r is not None:
                    ck.decompress(r[0], r[1], 2, 4, 2 if out else 1, 1 << 20, f"empty {out}x{inp}")
                    ck.col_info(r[1], 2, 4, 2 if out else 1, 1 << 20, f"empty {out}x{inp}")

    print(f"{ck.count} checks, {ck.fail} failures")
    return 1 if ck.fail else 0


if __name__ == "__main__":
    sys.exit(main())
