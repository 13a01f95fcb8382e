// The tiled FP32 SpMM kernel (NM-SpMM's design on CUDA cores), one template for the
// non-packing (moderate sparsity) and packing (high sparsity) paths.
//
//   C[m0:m0+BM, n0:n0+BN] = sum over k-blocks of  A_s (gathered k-slab of x)  (*)  (B_s, D_s)
//
// Per k-block of KB dense inputs (KB/M windows, wb = KB*N/M compressed rows):
//   A_s [KB][BM+4]  x[m0.., k0 + col] transposed to k-major by 4-byte cp.async. Non-packing loads
//                   every column of the slab; packing loads only the columns col_info lists for
//                   this column tile (row r of A_s = r-th listed column), the list fetched into
//                   registers one stage ahead of the A tile that needs it.
//   B_s [wb][BN]    compressed values, 16-byte cp.async.
//   D_s [wb][QT]    per (compressed row, vector) the A_s row offset, prefetched into registers a
//                   stage ahead and stored after the current stage's math.
// A STAGES-deep cp.async pipeline overlaps loads with the FMAs. Warps cover 32 output columns,
// so for L >= 32 a warp's gather index is uniform (UNIFORM) and the A_s read is a broadcast;
// for L = 16 each thread's two 4-column groups use their own index.
// Thread tile TM x 8: rows {ti + 32f .. ti + 32f + 3} for f < TM/4, columns {tj..tj+3} and
// {tj+16..tj+19}; LDS.128 fragments that are free of bank conflicts.
// Split-K: gridDim.z splits the k-blocks; each split writes its partial tile to the workspace
// (no atomics), reduced in fixed order by reduce_splits (deterministic).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../../pattern.h"
#include "cp_async.cuh"
#include "spmm.h"

namespace nmspmm {
namespace kernels {

template <int BM_, int BN_, int TM_, int KB_, bool PACKED_, bool UNIFORM_>
struct TiledConfig {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, KB = KB_;
  static constexpr bool PACKED = PACKED_, UNIFORM = UNIFORM_;
  static constexpr int TN = 8;
  static constexpr int WARPS_M = BM / (8 * TM);
  static constexpr int WARPS_N = BN / 32;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int STAGES = 3;
  static constexpr int AS = BM + 4;              // A_s row stride (floats): conflict-free stores
  static constexpr int QT_MAX = BN / 16;         // vectors per column tile for L >= 16
  static constexpr int A_ROWS_PER_PASS = THREADS / 8;
  static constexpr int A_PASSES_M = BM / A_ROWS_PER_PASS;
  static constexpr int A_PASSES_K = KB / 8;
  static constexpr int D_PER_THREAD = (KB * QT_MAX + THREADS - 1) / THREADS;
  static constexpr int MIN_BLOCKS = THREADS >= 256 ? 1 : 2;
  static_assert(WARPS_M >= 1 && WARPS_N >= 1, "tile too small for the warp layout");
  static_assert(TM == 4 || TM == 8 || TM == 16, "TM must be 4, 8 or 16");
  static_assert(A_PASSES_M >= 1 && BM % A_ROWS_PER_PASS == 0, "bad A load mapping");
  static_assert(!PACKED || (KB == kPackKBlock && BN == kPackTileN), "packing metadata shape");

  // Floats of shared memory per stage for wb compressed rows per k-block.
  static __host__ __device__ int stage_floats(int wb) {
    const int d = (wb * QT_MAX + 3) / 4 * 4;
    return KB * AS + wb * BN + d;
  }
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS)
    spmm_tiled_kernel(const SpmmParams p, const int wb, const int qt, const int stage_floats) {
  extern __shared__ float4 smem_f4[];
  float* const smem = reinterpret_cast<float*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const int ml = lane & 7, nl = lane >> 3;
  const int ti = wm * (8 * C::TM) + ml * 4;
  const int tj = wn * 32 + nl * 4;

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * C::BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * C::BN;
  const int64_t M_ = p.m, N_ = p.n, K_ = p.k;
  const int L = p.L;
  const int64_t q = N_ / L;
  const int64_t w = K_ / p.M * p.N;
  const int64_t vec0 = n0 / L;              // global vector of tile slot 0
  const int tile_off = static_cast<int>(n0 % L);
  const int t0 = (tile_off + tj) / L;
  const int t1 = (tile_off + tj + 16) / L;

  // This split's k-blocks.
  const int64_t kblocks = (K_ + C::KB - 1) / C::KB;
  const int64_t kb_begin = kblocks * blockIdx.z / p.split_k;
  const int64_t kb_end = kblocks * (blockIdx.z + 1) / p.split_k;
  const int nk = static_cast<int>(kb_end - kb_begin);

  // A loader: thread owns rows m_lo + A_ROWS_PER_PASS*i and slab rows r_lo + 8*j.
  const int r_lo = tid & 7, m_lo = tid >> 3;
  const float* a_row[C::A_PASSES_M];
  bool a_ok[C::A_PASSES_M];
#pragma unroll
  for (int i = 0; i < C::A_PASSES_M; ++i) {
    const int64_t row = m0 + m_lo + C::A_ROWS_PER_PASS * i;
    a_ok[i] = row < M_;
    a_row[i] = p.x + (a_ok[i] ? row : 0) * p.ldx;
  }

  uint32_t cols[C::PACKED ? C::A_PASSES_K : 1];  // packing: this thread's col_info entries
  const uint8_t* col_base = nullptr;
  if constexpr (C::PACKED) {
    col_base = p.col_info + static_cast<int64_t>(blockIdx.y) * kblocks * C::KB;
  }
  auto fetch_cols = [&](int s) {
    if constexpr (C::PACKED) {
      if (s < nk) {
        const uint8_t* c = col_base + (kb_begin + s) * C::KB + r_lo;
#pragma unroll
        for (int j = 0; j < C::A_PASSES_K; ++j) cols[j] = __ldg(c + 8 * j);
      }
    }
  };

  auto stage_ptr = [&](int s) { return smem + (s % C::STAGES) * stage_floats; };

  auto load_ab = [&](int s) {
    float* As = stage_ptr(s);
    float* Bs = As + C::KB * C::AS;
    const int64_t kb = kb_begin + s;
    const int64_t k0 = kb * C::KB;
#pragma unroll
    for (int j = 0; j < C::A_PASSES_K; ++j) {
      const int r = r_lo + 8 * j;
      int col = r;
      if constexpr (C::PACKED) {
        if (cols[j] == kUnusedCol) continue;
        col = static_cast<int>(cols[j]);
      }
      const int64_t gk = k0 + col;
      const bool k_ok = gk < K_;
#pragma unroll
      for (int i = 0; i < C::A_PASSES_M; ++i) {
        const bool ok = k_ok && a_ok[i];
        cp_async_4(As + r * C::AS + m_lo + C::A_ROWS_PER_PASS * i, ok ? a_row[i] + gk : p.x, ok);
      }
    }
    const int64_t u0 = kb * wb;
    const int chunks = wb * (C::BN / 4);
    for (int c = tid; c < chunks; c += C::THREADS) {
      const int r = c / (C::BN / 4), cc = (c % (C::BN / 4)) * 4;
      const int64_t u = u0 + r;
      const bool ok = u < w && n0 + cc < N_;
      cp_async_16(Bs + r * C::BN + cc, ok ? p.values + u * N_ + n0 + cc : p.values, ok);
    }
  };

  // Gather offsets: this thread's D entries e = tid + d*THREADS map to the same (row, vector)
  // slot in every stage, so the divisions happen once here, not per stage.
  int dreg[C::D_PER_THREAD];
  int d_row[C::D_PER_THREAD], d_vec[C::D_PER_THREAD], d_base[C::D_PER_THREAD];
#pragma unroll
  for (int d = 0; d < C::D_PER_THREAD; ++d) {
    const int e = tid + d * C::THREADS;
    d_row[d] = e < wb * qt ? e / qt : -1;
    d_vec[d] = e % qt;
    d_base[d] = d_row[d] >= 0 ? (d_row[d] / p.N) * p.M : 0;
  }
  auto fetch_d = [&](int s) {
    const int64_t u0 = (kb_begin + s) * wb;
#pragma unroll
    for (int d = 0; d < C::D_PER_THREAD; ++d) {
      const int64_t u = u0 + d_row[d], v = vec0 + d_vec[d];
      int off = 0;
      if (d_row[d] >= 0 && u < w && v < q) {
        const int raw = __ldg(p.indices + u * q + v);
        off = (C::PACKED ? raw : d_base[d] + raw) * C::AS;
      }
      dreg[d] = off;
    }
  };
  auto store_d = [&](int s) {
    int* Ds = reinterpret_cast<int*>(stage_ptr(s) + C::KB * C::AS + wb * C::BN);
#pragma unroll
    for (int d = 0; d < C::D_PER_THREAD; ++d) {
      const int e = tid + d * C::THREADS;
      if (e < wb * qt) Ds[e] = dreg[d];
    }
  };

  float acc[C::TM][8];
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  // Prologue: the first STAGES-1 stages.
  fetch_cols(0);
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < nk) {
      load_ab(s);
      fetch_d(s);
      store_d(s);
      fetch_cols(s + 1);
    }
    cp_async_commit();
  }

  for (int it = 0; it < nk; ++it) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    const int nxt = it + C::STAGES - 1;
    if (nxt < nk) {
      load_ab(nxt);
      fetch_d(nxt);
      fetch_cols(nxt + 1);
    }
    cp_async_commit();

    const float* As = stage_ptr(it);
    const float* Bs = As + C::KB * C::AS;
    const int* Ds = reinterpret_cast<const int*>(Bs + wb * C::BN);
#pragma unroll 2
    for (int r = 0; r < wb; ++r) {
      const int o0 = Ds[r * qt + t0];
      const int o1 = C::UNIFORM ? o0 : Ds[r * qt + t1];
      float a0[C::TM], a1[C::TM];
#pragma unroll
      for (int f = 0; f < C::TM / 4; ++f) {
        const float4 v = *reinterpret_cast<const float4*>(As + o0 + ti + 32 * f);
        a0[4 * f] = v.x; a0[4 * f + 1] = v.y; a0[4 * f + 2] = v.z; a0[4 * f + 3] = v.w;
        if constexpr (!C::UNIFORM) {
          const float4 v1 = *reinterpret_cast<const float4*>(As + o1 + ti + 32 * f);
          a1[4 * f] = v1.x; a1[4 * f + 1] = v1.y; a1[4 * f + 2] = v1.z; a1[4 * f + 3] = v1.w;
        } else {
          a1[4 * f] = v.x; a1[4 * f + 1] = v.y; a1[4 * f + 2] = v.z; a1[4 * f + 3] = v.w;
        }
      }
      const float4 b0 = *reinterpret_cast<const float4*>(Bs + r * C::BN + tj);
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + r * C::BN + tj + 16);
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < C::TM; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a0[i], b[j], acc[i][j]);
#pragma unroll
        for (int j = 4; j < 8; ++j) acc[i][j] = fmaf(a1[i], b[j], acc[i][j]);
      }
    }
    if (nxt < nk) store_d(nxt);
  }
  cp_async_wait<0>();

  // Epilogue: rows ti+{0..3} (+32), columns tj+{0..3} and tj+16+{0..3}.
  const bool split = p.split_k > 1;
  float* out = split ? p.workspace + static_cast<int64_t>(blockIdx.z) * M_ * N_ : p.y;
#pragma unroll
  for (int i = 0; i < C::TM; ++i) {
    const int64_t row = m0 + ti + 32 * (i / 4) + (i % 4);
    if (row >= M_) continue;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int64_t col = n0 + tj + 16 * g;
      if (col >= N_) continue;
      float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
      if (!split && p.bias != nullptr) {
        const float4 bb = *reinterpret_cast<const float4*>(p.bias + col);
        v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
      }
      *reinterpret_cast<float4*>(out + row * N_ + col) = v;
    }
  }
}

// Shared memory needed for the largest stage this configuration can see (wb <= KB).
template <class C>
inline size_t tiled_max_smem_bytes() {
  return static_cast<size_t>(C::STAGES) * C::stage_floats(C::KB) * sizeof(float);
}

template <class C>
cudaError_t launch_tiled(const SpmmParams& p, cudaStream_t stream) {
  // Raise the dynamic shared-memory limit once per device, never on the hot path.
  constexpr int kMaxDevices = 64;
  static bool configured[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    err = cudaFuncSetAttribute(spmm_tiled_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(tiled_max_smem_bytes<C>()));
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  const int wb = C::KB / p.M * p.N;
  const int qt = p.L >= C::BN ? 1 : C::BN / p.L;
  const int stage = C::stage_floats(wb);
  const size_t smem = static_cast<size_t>(C::STAGES) * stage * sizeof(float);
  const int64_t mt = (p.m + C::BM - 1) / C::BM, ntl = (p.n + C::BN - 1) / C::BN;
  if (mt > 0x7fffffff || ntl > 65535 || p.split_k > 65535) return cudaErrorInvalidConfiguration;
  dim3 grid(static_cast<unsigned>(mt), static_cast<unsigned>(ntl), static_cast<unsigned>(p.split_k));
  spmm_tiled_kernel<C><<<grid, C::THREADS, smem, stream>>>(p, wb, qt, stage);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
