// Preprocessing kernels: prune (magnitude N:M mask), compress (mask -> values + indices),
// decompress (values + indices -> dense) and col_info (packing metadata). Each result is equal,
// bit for bit, to the CPU reference in csrc/cpu/ops_cpu.cpp.
//
// Layout of the work (kThreads = 256 threads per block, every kernel a grid-stride loop over
// "tasks" so that any size runs with a bounded grid; all offsets are int64):
//  * prune and the first compress kernel: one thread per (vector v, input column c), task =
//    256 consecutive (v, c) pairs in v-major order. A thread walks the L rows of its column
//    (coalesced across the warp, each weight / mask element read once); M consecutive threads
//    form one (window, vector) pair (256 % M == 0 and in % M == 0, so windows never straddle a
//    task) and exchange their per-column results through shared memory.
//      prune: column norm = fp64 sum over r = 0..L-1 of x*x (x the float32 value widened to
//      double; x*x is exact in double, the adds are rounded in the CPU's order), then position p
//      is kept iff #{q : norm[q] > norm[p] or (norm[q] == norm[p] and q < p)} < N; the thread
//      writes its keep bit to its L mask rows.
//      compress, step 1: the thread checks that its column is kept or pruned in all L rows; the
//      window counts its kept positions, each kept position p of rank s < N writes
//      indices[g*N+s, v] = p, and a window that is not exactly N-of-M lowers the error word to
//      v*windows+g (atomic min: the first bad pair in the CPU's scan order).
//  * compress step 2 and decompress: 64x64 tiles of the dense [out, in] weight (64 outputs j x
//    64 inputs = 64/M windows), transposed through shared memory so that the dense side is read
//    / written along `in` and the compressed side along `out`, both coalesced.
//      compress: load the dense tile, then one thread per (compressed row u, output j) writes
//      values[u, j] = tile[j][window(u)*M + indices[u, j/L]].
//      decompress: zero the tile, one thread per (window, output j) scatters its N rows in
//      increasing u (so a repeated index resolves like the CPU loop: the last row wins), then
//      the tile is stored. Every dense element is written (pruned ones +0), no memset needed.
//  * col_info: one task per (column tile t of 128 outputs, k-block b of 64 inputs): the block
//    ORs the used in-block offsets (window*M + index) of its (u, v) entries into a 64-bit set
//    in shared memory, ranks them with popcount, writes the 64 cols bytes (used offsets in
//    increasing order, then 0xFF) and packed[u, v] = rank of the entry's offset.
//
// Values are moved as raw bits (compress, decompress) and converted with integer arithmetic
// (prune: fp16 / bf16 -> float32 -> float64), so the results do not depend on the compiler's
// floating-point modes (-ftz, fast math) and every conversion is exact.
//
// The per-thread work of each kernel is written as __host__ __device__ "phase" functions
// separated by the kernel's __syncthreads(); phases communicate only through shared memory.
// Outside nvcc the __global__ kernels and launchers are hidden, so a host compiler can run the
// phases block by block, thread by thread, against the CPU reference ops.
#include "preprocess.h"

#include <cstdint>
#include <cstring>

#include "pattern.h"

#if defined(__CUDACC__)
#define NMSPMM_HD __host__ __device__ __forceinline__
#define NMSPMM_UNROLL4 _Pragma("unroll 4")
#else
#define NMSPMM_HD inline
#define NMSPMM_UNROLL4
#endif

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kThreads = 256;           // threads per block, every kernel
constexpr int kTile = 64;               // compress / decompress tiles: 64 outputs x 64 inputs
constexpr int kColTile = static_cast<int>(kPackTileN);    // col_info column tile (128)
constexpr int kColKBlock = static_cast<int>(kPackKBlock);  // col_info k-block (64)
constexpr int64_t kMaxGrid = int64_t(1) << 20;  // blocks per launch; more work loops in-kernel
static_assert(kThreads % kMaxM == 0, "a (window, vector) group must not straddle a task");
static_assert(kTile % kMaxM == 0 && kColKBlock % kMaxM == 0, "tiles hold whole windows");
static_assert(kColKBlock == 64, "col_info keeps the used set of a k-block in 64 bits");

// ---------------------------------------------------------------------------------------------
// Portable (host + device) helpers.

NMSPMM_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

NMSPMM_HD int clz32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(x));
#else
  return __builtin_clz(x);
#endif
}

NMSPMM_HD int popc64(unsigned long long x) {
#if defined(__CUDA_ARCH__)
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

NMSPMM_HD double bits_to_double(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, sizeof(d));
  return d;
#endif
}

// IEEE double add / multiply, round to nearest, never contracted into an FMA.
NMSPMM_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
NMSPMM_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Lower *p to v (device: atomic; host emulation: sequential). The plain read first skips the
// atomic once a smaller error has been recorded (only the error path gets here).
NMSPMM_HD void atomic_min_error(int64_t* p, int64_t v) {
#if defined(__CUDA_ARCH__)
  if (v < *reinterpret_cast<volatile int64_t*>(p))
    atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  if (v < *p) *p = v;
#endif
}

NMSPMM_HD void set_flag(int32_t* p) {
#if defined(__CUDA_ARCH__)
  atomicExch(reinterpret_cast<int*>(p), 1);
#else
  *p = 1;
#endif
}

NMSPMM_HD void shared_or(unsigned long long* p, unsigned long long v) {
#if defined(__CUDA_ARCH__)
  atomicOr(p, v);
#else
  *p |= v;
#endif
}

// IEEE binary16 bits -> binary32 bits, exact (subnormals normalized; Inf / NaN kept as such).
NMSPMM_HD uint32_t half_to_float_bits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1Fu) return sign | 0x7F800000u | (man << 13);
  if (exp != 0) return sign | ((exp + 112u) << 23) | (man << 13);
  if (man == 0) return sign;
  const int k = 31 - clz32(man);  // highest set bit (0..9): value = 1.f * 2^(k - 24)
  return sign | (static_cast<uint32_t>(k + 103) << 23) | ((man << (23 - k)) & 0x7FFFFFu);
}

// Finite binary32 bits -> the same value as a double, exact (subnormals included, independent
// of flush-to-zero modes). Inf / NaN inputs give some finite value; callers flag them apart.
NMSPMM_HD double float_bits_to_double(uint32_t b) {
  const uint32_t e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
  double mag;
  if (e == 0)
    mag = dmul(static_cast<double>(m), 0x1p-149);  // m * 2^-149, both factors exact
  else
    mag = bits_to_double((static_cast<uint64_t>(e + 896u) << 52) | (static_cast<uint64_t>(m) << 29));
  return (b >> 31) ? -mag : mag;
}

NMSPMM_HD bool float_bits_finite(uint32_t b) { return (b & 0x7F800000u) != 0x7F800000u; }

// Element i of a weight of storage type kType, as binary32 bits.
template <int kType>
NMSPMM_HD uint32_t load_float_bits(const void* w, int64_t i) {
  if constexpr (kType == static_cast<int>(WeightType::kFloat32)) {
    return static_cast<const uint32_t*>(w)[i];
  } else if constexpr (kType == static_cast<int>(WeightType::kFloat16)) {
    return half_to_float_bits(static_cast<const uint16_t*>(w)[i]);
  } else {
    return static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16;  // bf16: top half
  }
}

// ---------------------------------------------------------------------------------------------
// prune. Task = 256 consecutive (v, c) pairs, linear t = v*in + c.

struct PruneParams {
  const void* weight;  // [out, in]
  uint8_t* mask;       // [out, in]
  int32_t* nonfinite;
  int64_t in;
  int64_t total;  // (out / L) * in
  int N, M, L;
};

template <int kType>
NMSPMM_HD void prune_norms(const PruneParams& p, int64_t base, int tid, double* s_norm) {
  const int64_t t = base + tid;
  double s = 0.0;
  if (t < p.total) {
    const int64_t v = t / p.in, c = t - v * p.in;
    const int64_t start = v * p.L * p.in + c;
    bool finite = true;
    NMSPMM_UNROLL4
    for (int r = 0; r < p.L; ++r) {
      const uint32_t b = load_float_bits<kType>(p.weight, start + r * p.in);
      finite = finite && float_bits_finite(b);
      const double x = float_bits_to_double(b);
      s = dadd(s, dmul(x, x));  // same value and order as the CPU's  s += x * x
    }
    if (!finite) set_flag(p.nonfinite);
  }
  s_norm[tid] = s;
}

NMSPMM_HD void prune_select(const PruneParams& p, int64_t base, int tid, const double* s_norm) {
  const int64_t t = base + tid;
  if (t >= p.total) return;  // whole windows are out of range together (total % M == 0)
  const int pos = tid & (p.M - 1);
  const int first = tid - pos;
  const double mine = s_norm[tid];
  int better = 0;
  for (int q = 0; q < p.M; ++q) {
    const double other = s_norm[first + q];
    better += (other > mine) || (other == mine && q < pos);
  }
  const uint8_t keep = better < p.N ? 1 : 0;
  const int64_t v = t / p.in, c = t - v * p.in;
  uint8_t* dst = p.mask + v * p.L * p.in + c;
  NMSPMM_UNROLL4
  for (int r = 0; r < p.L; ++r) dst[r * p.in] = keep;
}

// ---------------------------------------------------------------------------------------------
// compress, step 1: indices and mask validation. Same tasks as prune.

struct CompressIdxParams {
  const uint8_t* mask;  // [out, in]
  uint8_t* indices;     // [windows*N, vectors]
  int64_t* bad_window;
  int64_t in, total, vectors, windows;
  int N, M, L;
};

NMSPMM_HD void compress_scan(const CompressIdxParams& p, int64_t base, int tid, uint8_t* s_keep,
                             uint8_t* s_mixed) {
  const int64_t t = base + tid;
  uint8_t keep = 0, mixed = 0;
  if (t < p.total) {
    const int64_t v = t / p.in, c = t - v * p.in;
    const uint8_t* src = p.mask + v * p.L * p.in + c;
    keep = src[0] != 0;
    NMSPMM_UNROLL4
    for (int r = 1; r < p.L; ++r) mixed |= static_cast<uint8_t>((src[r * p.in] != 0) != (keep != 0));
  }
  s_keep[tid] = keep;
  s_mixed[tid] = mixed;
}

NMSPMM_HD void compress_index(const CompressIdxParams& p, int64_t base, int tid,
                              const uint8_t* s_keep, const uint8_t* s_mixed) {
  const int64_t t = base + tid;
  if (t >= p.total) return;
  const int pos = tid & (p.M - 1);
  const int first = tid - pos;
  int rank = 0, kept = 0, mixed = 0;
  for (int q = 0; q < p.M; ++q) {
    const int k = s_keep[first + q];
    kept += k;
    rank += (q < pos) ? k : 0;
    mixed |= s_mixed[first + q];
  }
  const int64_t v = t / p.in, c = t - v * p.in;
  const int64_t g = c / p.M;
  if (s_keep[tid] && rank < p.N)
    p.indices[(g * p.N + rank) * p.vectors + v] = static_cast<uint8_t>(pos);
  if (pos == 0 && (mixed || kept != p.N)) atomic_min_error(p.bad_window, v * p.windows + g);
}

// ---------------------------------------------------------------------------------------------
// compress step 2 and decompress: 64 x 64 tiles of the dense weight, E = the element's bits.

template <typename E>
struct TileShape {
  // Row pitch of the shared tile in elements: one extra 32-bit word per row, so that the
  // column-wise accesses of the 32 lanes (rows jj .. jj+31, same column) hit distinct banks.
  static constexpr int kPitch = kTile + static_cast<int>(4 / sizeof(E));
};

struct TileParams {
  const void* src;         // compress: weight [out, in]; decompress: values [w_rows, out]
  void* dst;               // compress: values [w_rows, out]; decompress: dense [out, in]
  const uint8_t* indices;  // [w_rows, vectors]
  int64_t* bad_index;      // decompress only
  int64_t out, in, w_rows, vectors, windows;
  int64_t k_tiles;         // ceil(in / 64)
  int64_t tasks;           // ceil(out / 64) * k_tiles
  int N, M, L;
};

// Tile `task` covers outputs j0 .. j0+63 and inputs k0 .. k0+63 (windows g0 .. g0+64/M-1).
struct TileCoords {
  int64_t j0, k0, g0;
};
NMSPMM_HD TileCoords tile_coords(const TileParams& p, int64_t task) {
  const int64_t jt = task / p.k_tiles, kt = task - jt * p.k_tiles;
  return {jt * kTile, kt * kTile, kt * (kTile / p.M)};
}

// compress: dense tile -> shared.
template <typename E>
NMSPMM_HD void compress_load(const TileParams& p, int64_t task, int tid, E* s_tile) {
  constexpr int P = TileShape<E>::kPitch;
  const TileCoords tc = tile_coords(p, task);
  const E* w = static_cast<const E*>(p.src);
  for (int e = tid; e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, cc = e % kTile;
    const int64_t j = tc.j0 + r, k = tc.k0 + cc;
    if (j < p.out && k < p.in) s_tile[r * P + cc] = w[j * p.in + k];
  }
}

// compress: values[u, j] for the tile's compressed rows u and outputs j.
template <typename E>
NMSPMM_HD void compress_gather(const TileParams& p, int64_t task, int tid, const E* s_tile) {
  constexpr int P = TileShape<E>::kPitch;
  const TileCoords tc = tile_coords(p, task);
  const int64_t u0 = tc.g0 * p.N;
  const int64_t rows64 = static_cast<int64_t>(kTile / p.M) * p.N;
  const int rows = static_cast<int>(p.w_rows - u0 < rows64 ? p.w_rows - u0 : rows64);
  E* values = static_cast<E*>(p.dst);
  for (int e = tid; e < rows * kTile; e += kThreads) {
    const int ul = e / kTile, jj = e % kTile;
    const int64_t j = tc.j0 + jj;
    if (j >= p.out) continue;
    const int64_t u = u0 + ul;
    // & (M-1): indices are only meaningful if the mask was valid (checked by the caller
    // afterwards); the mask keeps a bad mask from reading outside the tile.
    const int col = (ul / p.N) * p.M + (p.indices[u * p.vectors + j / p.L] & (p.M - 1));
    values[u * p.out + j] = s_tile[jj * P + col];
  }
}

// decompress: zero the shared tile.
template <typename E>
NMSPMM_HD void decompress_zero(int tid, E* s_tile) {
  constexpr int P = TileShape<E>::kPitch;
  for (int e = tid; e < kTile * P; e += kThreads) s_tile[e] = E(0);
}

// decompress: one thread per (window, output j) scatters the window's N rows into the tile.
template <typename E>
NMSPMM_HD void decompress_scatter(const TileParams& p, int64_t task, int tid, E* s_tile) {
  constexpr int P = TileShape<E>::kPitch;
  const TileCoords tc = tile_coords(p, task);
  const int64_t wins64 = kTile / p.M;
  const int wins = static_cast<int>(p.windows - tc.g0 < wins64 ? p.windows - tc.g0 : wins64);
  const E* values = static_cast<const E*>(p.src);
  for (int e = tid; e < wins * kTile; e += kThreads) {
    const int wl = e / kTile, jj = e % kTile;
    const int64_t j = tc.j0 + jj;
    if (j >= p.out) continue;
    const int64_t v = j / p.L;
    const bool reporter = j == v * p.L;  // one report per bad index, from the vector's first column
    int prev = -1;
    for (int s = 0; s < p.N; ++s) {
      const int64_t u = (tc.g0 + wl) * p.N + s;
      const int64_t i = u * p.vectors + v;
      const int idx = p.indices[i];
      if (idx < p.M)
        s_tile[jj * P + wl * p.M + idx] = values[u * p.out + j];
      // idx >= M: out of range; idx < M (in the low byte) but not above the window's previous
      // index: not strictly ascending.
      if ((idx >= p.M || idx <= prev) && reporter) atomic_min_error(p.bad_index, (i << 8) | idx);
      prev = idx;
    }
  }
}

// decompress: shared tile -> dense.
template <typename E>
NMSPMM_HD void decompress_store(const TileParams& p, int64_t task, int tid, const E* s_tile) {
  constexpr int P = TileShape<E>::kPitch;
  const TileCoords tc = tile_coords(p, task);
  E* dense = static_cast<E*>(p.dst);
  for (int e = tid; e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, cc = e % kTile;
    const int64_t j = tc.j0 + r, k = tc.k0 + cc;
    if (j < p.out && k < p.in) dense[j * p.in + k] = s_tile[r * P + cc];
  }
}

// ---------------------------------------------------------------------------------------------
// col_info. Task = (column tile t, k-block b), task = t * k_blocks + b.

struct ColInfoParams {
  const uint8_t* indices;  // [w_rows, vectors]
  uint8_t* cols;           // [n_tiles, k_blocks, 64]
  uint8_t* packed;         // [w_rows, vectors]
  int64_t* bad_index;
  int64_t w_rows, vectors, k_blocks, tasks;
  int N, M, L;
  int rows_per_block;  // 64 / M * N compressed rows per k-block
  int vec_per_tile;    // max(1, 128 / L) vectors per column tile
};

// The (u, v) entries of a task: rows u0 .. u0+nu-1, vectors v0 .. v0+nv-1 (as col_info_cpu).
struct ColTask {
  int64_t u0, v0;
  int nu, nv;
};
NMSPMM_HD ColTask col_task(const ColInfoParams& p, int64_t task) {
  const int64_t t = task / p.k_blocks, b = task - t * p.k_blocks;
  const int64_t u0 = b * p.rows_per_block;
  const int64_t v0 = t * kColTile / p.L;
  const int64_t nu = p.w_rows - u0 < p.rows_per_block ? p.w_rows - u0 : p.rows_per_block;
  const int64_t nv = p.vectors - v0 < p.vec_per_tile ? p.vectors - v0 : p.vec_per_tile;
  return {u0, v0, static_cast<int>(nu), static_cast<int>(nv)};
}

NMSPMM_HD void col_info_init(int tid, unsigned long long* s_used) {
  if (tid == 0) *s_used = 0;
}

NMSPMM_HD void col_info_mark(const ColInfoParams& p, int64_t task, int tid,
                             unsigned long long* s_used) {
  const ColTask ct = col_task(p, task);
  unsigned long long used = 0;
  for (int e = tid; e < ct.nu * ct.nv; e += kThreads) {
    const int ul = e / ct.nv, vl = e - ul * ct.nv;
    const int64_t i = (ct.u0 + ul) * p.vectors + ct.v0 + vl;
    const int idx = p.indices[i];
    if (idx < p.M)
      used |= 1ull << ((ul / p.N) * p.M + idx);
    // Out of range, or not above the previous index of its (window, vector) (u0 is a multiple
    // of N, so ul % N is the row's position in its window); encoded as in decompress.
    if (idx >= p.M || (ul % p.N != 0 && idx <= p.indices[i - p.vectors]))
      atomic_min_error(p.bad_index, (i << 8) | idx);
  }
  if (used) shared_or(s_used, used);  // one shared atomic per thread
}

NMSPMM_HD void col_info_rank(const ColInfoParams& p, int64_t task, int tid,
                             const unsigned long long* s_used, uint8_t* s_slot) {
  if (tid >= kColKBlock) return;
  const unsigned long long used = *s_used;
  const int c = tid;
  const int count = popc64(used);
  const int rank = popc64(used & ((1ull << c) - 1));  // c <= 63
  uint8_t* cols = p.cols + task * kColKBlock;
  if ((used >> c) & 1ull) {
    cols[rank] = static_cast<uint8_t>(c);
    s_slot[c] = static_cast<uint8_t>(rank);
  }
  if (c >= count) cols[c] = kUnusedCol;
}

NMSPMM_HD void col_info_pack(const ColInfoParams& p, int64_t task, int tid, const uint8_t* s_slot) {
  const ColTask ct = col_task(p, task);
  for (int e = tid; e < ct.nu * ct.nv; e += kThreads) {
    const int ul = e / ct.nv, vl = e - ul * ct.nv;
    const int64_t i = (ct.u0 + ul) * p.vectors + ct.v0 + vl;
    const int idx = p.indices[i];
    if (idx < p.M) p.packed[i] = s_slot[(ul / p.N) * p.M + idx];
  }
}

// ---------------------------------------------------------------------------------------------
// Host-side setup shared by the launchers and the host emulation.

inline bool valid_pattern(int N, int M, int L) {
  return supported_M(M) && supported_L(L) && N >= 1 && N <= M;
}

inline unsigned grid_for(int64_t tasks) {
  return static_cast<unsigned>(tasks < kMaxGrid ? tasks : kMaxGrid);
}

inline PruneParams make_prune_params(const void* weight, uint8_t* mask, int32_t* nonfinite,
                                     int64_t out, int64_t in, int N, int M, int L) {
  return {weight, mask, nonfinite, in, out / L * in, N, M, L};
}

inline CompressIdxParams make_compress_idx_params(const uint8_t* mask, uint8_t* indices,
                                                  int64_t* bad_window, int64_t out, int64_t in,
                                                  int N, int M, int L) {
  return {mask, indices, bad_window, in, out / L * in, out / L, in / M, N, M, L};
}

inline TileParams make_tile_params(const void* src, void* dst, const uint8_t* indices,
                                   int64_t* bad_index, int64_t out, int64_t in, int N, int M,
                                   int L) {
  TileParams p{};
  p.src = src;
  p.dst = dst;
  p.indices = indices;
  p.bad_index = bad_index;
  p.out = out;
  p.in = in;
  p.windows = in / M;
  p.w_rows = p.windows * N;
  p.vectors = out / L;
  p.k_tiles = ceil_div(in, kTile);
  p.tasks = ceil_div(out, kTile) * p.k_tiles;
  p.N = N;
  p.M = M;
  p.L = L;
  return p;
}

inline ColInfoParams make_col_info_params(const uint8_t* indices, uint8_t* cols, uint8_t* packed,
                                          int64_t* bad_index, int64_t w_rows, int64_t vectors,
                                          int N, int M, int L) {
  ColInfoParams p{};
  p.indices = indices;
  p.cols = cols;
  p.packed = packed;
  p.bad_index = bad_index;
  p.w_rows = w_rows;
  p.vectors = vectors;
  const int64_t out = vectors * L, in = w_rows / N * M;
  p.k_blocks = ceil_div(in, kColKBlock);
  p.tasks = ceil_div(out, kColTile) * p.k_blocks;
  p.N = N;
  p.M = M;
  p.L = L;
  p.rows_per_block = kColKBlock / M * N;
  p.vec_per_tile = kColTile / L > 1 ? kColTile / L : 1;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Kernels: grid-stride loops over tasks (the loop bound is uniform across the block, so every
// thread reaches every __syncthreads()).

#if defined(__CUDACC__)

template <int kType>
__global__ void __launch_bounds__(kThreads) prune_kernel(const PruneParams p) {
  __shared__ double s_norm[kThreads];
  const int64_t tasks = ceil_div(p.total, kThreads);
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t base = task * kThreads;
    prune_norms<kType>(p, base, threadIdx.x, s_norm);
    __syncthreads();
    prune_select(p, base, threadIdx.x, s_norm);
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) compress_indices_kernel(const CompressIdxParams p) {
  __shared__ uint8_t s_keep[kThreads];
  __shared__ uint8_t s_mixed[kThreads];
  const int64_t tasks = ceil_div(p.total, kThreads);
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t base = task * kThreads;
    compress_scan(p, base, threadIdx.x, s_keep, s_mixed);
    __syncthreads();
    compress_index(p, base, threadIdx.x, s_keep, s_mixed);
    __syncthreads();
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads) compress_values_kernel(const TileParams p) {
  __shared__ E s_tile[kTile * TileShape<E>::kPitch];
  for (int64_t task = blockIdx.x; task < p.tasks; task += gridDim.x) {
    compress_load<E>(p, task, threadIdx.x, s_tile);
    __syncthreads();
    compress_gather<E>(p, task, threadIdx.x, s_tile);
    __syncthreads();
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads) decompress_kernel(const TileParams p) {
  __shared__ E s_tile[kTile * TileShape<E>::kPitch];
  for (int64_t task = blockIdx.x; task < p.tasks; task += gridDim.x) {
    decompress_zero<E>(threadIdx.x, s_tile);
    __syncthreads();
    decompress_scatter<E>(p, task, threadIdx.x, s_tile);
    __syncthreads();
    decompress_store<E>(p, task, threadIdx.x, s_tile);
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) col_info_kernel(const ColInfoParams p) {
  __shared__ unsigned long long s_used;
  __shared__ uint8_t s_slot[kColKBlock];
  for (int64_t task = blockIdx.x; task < p.tasks; task += gridDim.x) {
    col_info_init(threadIdx.x, &s_used);
    __syncthreads();
    col_info_mark(p, task, threadIdx.x, &s_used);
    __syncthreads();
    col_info_rank(p, task, threadIdx.x, &s_used, s_slot);
    __syncthreads();
    col_info_pack(p, task, threadIdx.x, s_slot);
    __syncthreads();
  }
}

#endif  // __CUDACC__

}  // namespace

#if defined(__CUDACC__)

cudaError_t launch_prune(const void* weight, WeightType type, uint8_t* mask, int32_t* nonfinite,
                         int64_t out, int64_t in, int N, int M, int L, cudaStream_t stream) {
  if (!valid_pattern(N, M, L) || out < 0 || in < 0 || out % L != 0 || in % M != 0)
    return cudaErrorInvalidValue;
  const PruneParams p = make_prune_params(weight, mask, nonfinite, out, in, N, M, L);
  if (p.total == 0) return cudaSuccess;
  if (weight == nullptr || mask == nullptr || nonfinite == nullptr) return cudaErrorInvalidValue;
  const unsigned grid = grid_for(ceil_div(p.total, kThreads));
  switch (type) {
    case WeightType::kFloat32:
      prune_kernel<0><<<grid, kThreads, 0, stream>>>(p);
      break;
    case WeightType::kFloat16:
      prune_kernel<1><<<grid, kThreads, 0, stream>>>(p);
      break;
    case WeightType::kBFloat16:
      prune_kernel<2><<<grid, kThreads, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_compress(const void* weight, int elem_size, const uint8_t* mask, void* values,
                            uint8_t* indices, int64_t* bad_window, int64_t out, int64_t in, int N,
                            int M, int L, cudaStream_t stream) {
  if (!valid_pattern(N, M, L) || out < 0 || in < 0 || out % L != 0 || in % M != 0 ||
      (elem_size != 4 && elem_size != 2))
    return cudaErrorInvalidValue;
  const CompressIdxParams pi = make_compress_idx_params(mask, indices, bad_window, out, in, N, M, L);
  if (pi.total == 0) return cudaSuccess;  // no (window, vector) pair: nothing to do
  if (weight == nullptr || mask == nullptr || values == nullptr || indices == nullptr ||
      bad_window == nullptr)
    return cudaErrorInvalidValue;
  compress_indices_kernel<<<grid_for(ceil_div(pi.total, kThreads)), kThreads, 0, stream>>>(pi);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const TileParams pv = make_tile_params(weight, values, indices, nullptr, out, in, N, M, L);
  if (elem_size == 4)
    compress_values_kernel<uint32_t><<<grid_for(pv.tasks), kThreads, 0, stream>>>(pv);
  else
    compress_values_kernel<uint16_t><<<grid_for(pv.tasks), kThreads, 0, stream>>>(pv);
  return cudaGetLastError();
}

cudaError_t launch_decompress(const void* values, int elem_size, const uint8_t* indices,
                              void* dense, int64_t* bad_index, int64_t out, int64_t in, int N,
                              int M, int L, cudaStream_t stream) {
  if (!valid_pattern(N, M, L) || out < 0 || in < 0 || out % L != 0 || in % M != 0 ||
      (elem_size != 4 && elem_size != 2))
    return cudaErrorInvalidValue;
  const TileParams p = make_tile_params(values, dense, indices, bad_index, out, in, N, M, L);
  if (p.tasks == 0) return cudaSuccess;  // out == 0 or in == 0: no element, no index
  if (values == nullptr || indices == nullptr || dense == nullptr || bad_index == nullptr)
    return cudaErrorInvalidValue;
  if (elem_size == 4)
    decompress_kernel<uint32_t><<<grid_for(p.tasks), kThreads, 0, stream>>>(p);
  else
    decompress_kernel<uint16_t><<<grid_for(p.tasks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_col_info(const uint8_t* indices, uint8_t* cols, uint8_t* packed,
                            int64_t* bad_index, int64_t w_rows, int64_t vectors, int N, int M,
                            int L, cudaStream_t stream) {
  if (!valid_pattern(N, M, L) || w_rows < 0 || vectors < 0 || w_rows % N != 0)
    return cudaErrorInvalidValue;
  const ColInfoParams p =
      make_col_info_params(indices, cols, packed, bad_index, w_rows, vectors, N, M, L);
  if (p.tasks == 0) return cudaSuccess;  // w_rows == 0 or vectors == 0
  if (indices == nullptr || cols == nullptr || packed == nullptr || bad_index == nullptr)
    return cudaErrorInvalidValue;
  col_info_kernel<<<grid_for(p.tasks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

#endif  // __CUDACC__

}  // namespace kernels
}  // namespace nmspmm
