// Fused causal attention on tensor cores (flash-attention style); see flash_attention.cuh.
//
// Every kernel works on one (batch, head) pair (dK/dV: one (batch, key/value head) pair) and one
// tile of 64 rows with 4 warps, each warp owning 16 rows of the tile. Matrix products are
// mma.sync.m16n8k16 (bf16 or f16 operands, fp32 accumulators) whose operands ldmatrix reads from
// shared memory; the fp32 results stay in registers in the mma's accumulator layout (lane l
// holds rows l/4 and l/4 + 8, columns 2 (l%4) + {0, 1} of every 8 columns), and probabilities
// are turned into the next mma's A operand without leaving the registers.
//   forward  a block per 64 queries; K/V tiles of 64 keys stream through shared memory
//            (double-buffered cp.async) from key 0 to the diagonal; online softmax in base 2;
//            the output is normalised once at the end and lse saved per query.
//   delta    rowsum(dctx * ctx), a warp per row.
//   dK, dV   a block per 64 keys of one key/value head; Q/dO tiles (64 queries at dh 64, 32 at
//            dh 128, to bound the registers) stream from the keys' own tile to the end of the
//            sequence, for each query head of the group in turn; S^T = K Q^T and dP^T = V dO^T
//            recompute P from lse, then dV += P^T dO and dK += dS^T Q accumulate in registers.
//   dQ       a block per 64 queries; K/V tiles stream as in the forward; S and dP are
//            recomputed and dQ += dS K.
// No atomics: each output element is written by one thread, so results are deterministic. Tiles
// wholly above the diagonal are never loaded; the causal mask is applied only on the tiles that
// cross it. Blocks with the most tiles are launched first.
//
// Documents (AttentionDesc::document_starts, [b, s], non-decreasing per sample): query i sees
// keys first(i) .. i. The forward and dQ blocks start their key stream at the tile holding the
// smallest first key of their 64 queries, and a warp skips the tiles before its own rows'
// documents; the dK/dV block ends its query stream at the first query whose document starts
// after its last key (found by binary search over the starts), and a warp skips query tiles
// whose documents all start after its keys. Inside a tile the keys outside a row's document are
// masked with the causal mask, in the same pass. The forward and dQ blocks keep their rows' first
// keys in shared memory, not registers (the dh-64 kernels have none to spare), and are
// instantiated apart with documents (kDocs), so the causal kernels are exactly what they were.
//
// Grouped-query attention: qkv is [s, b, groups, q_per_group + 2, dh] (each group's query heads,
// then its key and value head). The forward and dQ kernels still take a block per query head and
// read its group's K and V in place (the heads of a group are neighbouring blocks, so their K/V
// tiles tend to come from L2). The dK/dV kernel takes a block per key/value head and visits the
// group's query heads one after the other, in order, summing their dK and dV contributions in its
// fp32 registers: a fixed order without atomics, so still deterministic. With one query head per
// group (multi-head attention) every address and every loop is the per-head kernel's: the forward
// and dQ kernels are instantiated apart for grouped heads (kGrouped), because the run-time
// division that finds a query head's group cost the multi-head dh-64 kernels register spills
// (ptxas); their multi-head instantiations compile to the same registers as before.
//
// Shared-memory tiles are [rows, dh] of 16-bit elements whose 16-byte chunks are XOR-swizzled by
// (row mod 8) within each row, so the eight row addresses of every ldmatrix hit distinct banks.
// Per block (dh 64 / 128): forward Q, K x2, V x2 = 40 / 80 KiB; dQ Q, dO, K x2, V x2 = 48 / 96 KiB;
// dK/dV K, V, Q x2, dO x2 plus lse, delta and the queries' first keys = 49.5 / 65 KiB (forward and
// dQ add 288 static bytes for the documents of their rows). Outputs leave through shared memory
// (each warp's own rows of a tile it alone has read) as 16-byte row chunks.
//
// Dropout regenerates the unfused path's mask: probability (bi, hi, i, j) is element
// (bi, hi, i*s + j) of the DropoutDesc's [b, heads, s*s] block. Philox draws four consecutive
// global indices per block; within a warp's tile each block is drawn by one lane and the keep
// bits travel to the lanes that hold the elements by shuffles.
#include "kernels/cuda/flash_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "base/philox.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/validate.h"

namespace ptdp::cuda {

namespace {

constexpr int kRows = 64;           // queries (forward, dQ) or keys (dK/dV) per block
constexpr int kWarps = kRows / 16;  // each warp owns 16 rows
constexpr int kThreads = 32 * kWarps;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Everything a kernel needs about one call. Row i of a [s, b, heads, ...] tensor for the
/// pair bh = bi * heads + hi starts at i * ld + bh * (width of the pair's slice); in qkv, query
/// head hi = g * qpg + j of batch bi is slice j of group pair bg = bi * groups + g, whose key and
/// value are its slices qpg and qpg + 1.
struct FlashArgs {
  const void* qkv;   // [s, b, groups, qpg + 2, dh]
  const void* ctx;   // [s, b, heads, dh] (backward: the forward's output)
  const void* dctx;  // [s, b, heads, dh] (backward)
  void* out;         // forward: ctx [s, b, heads, dh]; backward: dqkv (qkv's layout)
  float* lse_out;    // [b, heads, s] (forward)
  float* max_logit;  // [b, heads] or NULL (forward): AttentionDesc::max_logit, merged by atomic max
  const float* lse;  // [b, heads, s] (backward)
  float* delta;      // [b, heads, s] (backward: written by the delta kernel, then read)
  int s = 0, heads = 0;
  int groups = 0, qpg = 1;  // key/value heads, query heads per group (heads = groups * qpg)
  int64_t ld_qkv = 0;       // b * groups * (qpg + 2) * dh: elements from position i to i + 1
  int64_t ld_ctx = 0;       // b * heads * dh
  float scale = 1.0f;       // softmax scale
  float scale_log2 = 1.0f;  // scale * log2(e): scores in base-2 units
  const int32_t* starts = nullptr;  // [b, s] first key of each query's document; NULL: causal
  // Dropout on the probabilities (read only by the kernels instantiated with dropout).
  PhiloxStream rng;
  float p = 0.0f, keep_scale = 1.0f;
  int64_t g1 = 1, g2 = 0, o0 = 0, o1 = 0, o2 = 0;  // GlobalBlock: global dims 1, 2 and offsets

  /// The first key query `query` of sample bi sees: its document's start clamped into
  /// [0, query], or 0 without documents. Padded rows (query >= s) take row s - 1's, so they
  /// still see a key (their results are never stored).
  __device__ int first_key(int bi, int query) const {
    if (starts == nullptr) return 0;
    const int i = query < s ? query : s - 1;
    const int v = starts[static_cast<int64_t>(bi) * s + i];
    return v < 0 ? 0 : (v > i ? i : v);
  }

  /// Global dropout index of probability (pair bh, query 0, key 0); (i, j) adds i * s + j.
  __device__ uint64_t dropout_base(int bh) const {
    const int64_t bi = bh / heads, hi = bh % heads;
    return static_cast<uint64_t>(((bi + o0) * g1 + (hi + o1)) * g2 + o2);
  }

  // Query pair bh = bi * heads + g * qpg + j is bg * qpg + j with bg = bi * groups + g.
  /// Element offset in a qkv row of query pair bh's query slice. Multi-head attention (not
  /// kGrouped) keeps the compile-time offsets bh * 3 * kD (the key and value slices follow at
  /// + kD and + 2 kD), so its kernels are the per-head kernels to the instruction.
  template <int kD, bool kGrouped>
  __device__ int64_t q_offset(int bh) const {
    if constexpr (kGrouped) {
      const int bg = bh / qpg;
      return (static_cast<int64_t>(bg) * (qpg + 2) + (bh - bg * qpg)) * kD;
    } else {
      return static_cast<int64_t>(bh) * 3 * kD;
    }
  }
  /// Element offset in a qkv row of the key slice that query pair bh reads (value follows).
  template <int kD, bool kGrouped>
  __device__ int64_t k_offset_for(int bh) const {
    if constexpr (kGrouped) {
      return k_offset<kD>(bh / qpg);
    } else {
      return static_cast<int64_t>(bh) * 3 * kD + kD;
    }
  }
  /// Element offset in a qkv row of group pair bg's key slice (its value slice follows).
  template <int kD>
  __device__ int64_t k_offset(int bg) const {
    return (static_cast<int64_t>(bg) * (qpg + 2) + qpg) * kD;
  }
};

// ---- tensor-core and async-copy primitives (PTX) ------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared without passing through registers; zeros when !valid (src is then
/// not read, but must still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/// Four 8x8 matrices of 16-bit elements; lanes 8m .. 8m+7 give the row addresses of matrix m,
/// and lane l receives row l/4, elements 2 (l%4) and 2 (l%4) + 1 of each in r[m].
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

/// As ldsm_x4, transposed: lane l receives column l/4, rows 2 (l%4) and 2 (l%4) + 1.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

/// 2^x in one MUFU instruction (results below 2^-126 flush to 0; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// The 16-bit storage types: packing fp32 pairs and the m16n8k16 mma (c += a b).
template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<const __half2*>(&u));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- shared-memory tiles and warp-level products ------------------------------------------

/// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, kD] tile.
template <int kD>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * kD + ((chunk ^ (row & 7)) << 3);
}

/// Starts copying rows row0 .. row0 + kTileRows - 1 of a [s, ...] tensor (row i at src + i * ld,
/// kD elements) into a swizzled tile; rows at or past s become zeros, so padded rows add
/// nothing and hold no NaN.
template <typename T, int kD, int kTileRows>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t ld, int row0, int s) {
  constexpr int kChunks = kD / 8;
  static_assert((kTileRows * kChunks) % kThreads == 0, "tile chunks must spread evenly");
#pragma unroll
  for (int k = 0; k < kTileRows * kChunks / kThreads; ++k) {
    const int idx = static_cast<int>(threadIdx.x) + k * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = row0 + r < s;
    const T* from = src + (valid ? static_cast<int64_t>(row0 + r) * ld : 0) + c * 8;
    cp_async_16(smem_addr(tile + swz<kD>(r, c)), from, valid);
  }
}

/// Copies a warp's 16 rows (tile rows trow0 ..) of a swizzled tile to rows row0 .. of a
/// [s, ...] tensor (row i at dst + i * ld), skipping rows at or past s.
template <typename T, int kD>
__device__ __forceinline__ void store_rows(T* dst, int64_t ld, const T* tile, int trow0, int row0,
                                           int s, int lane) {
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int k = 0; k < 16 * kChunks / 32; ++k) {
    const int idx = lane + 32 * k;
    const int r = idx / kChunks, c = idx % kChunks;
    if (row0 + r < s) {
      *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(row0 + r) * ld + c * 8) =
          *reinterpret_cast<const uint4*>(tile + swz<kD>(trow0 + r, c));
    }
  }
}

/// Writes a warp's [16, kD] fp32 accumulators, times row_scale[0] (rows l/4) and row_scale[1]
/// (rows l/4 + 8), into rows trow0 .. trow0 + 15 of a swizzled tile.
template <typename T, int kD>
__device__ __forceinline__ void stage_rows(T* tile, int trow0, const float (&acc)[kD / 8][4],
                                           const float (&row_scale)[2], int lane) {
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = trow0 + lane / 4 + 8 * r;
      *reinterpret_cast<uint32_t*>(tile + swz<kD>(row, dn) + 2 * (lane % 4)) =
          Elem<T>::pack(acc[dn][2 * r] * row_scale[r], acc[dn][2 * r + 1] * row_scale[r]);
    }
  }
}

/// acc[16, kN] += A B^T over kD columns: A is tile rows a_row0 .. a_row0 + 15 of sa, B is rows
/// 0 .. kN - 1 of sb (both swizzled [*, kD] tiles). acc[n] holds columns 8n .. 8n + 7.
template <typename T, int kD, int kN>
__device__ __forceinline__ void mma_abt(float (&acc)[kN / 8][4], const T* sa, int a_row0,
                                        const T* sb, int lane) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    // A fragment: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), ...
    uint32_t a[4];
    ldsm_x4(a, smem_addr(sa + swz<kD>(a_row0 + (lane & 15), 2 * kk + (lane >> 4))));
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      // B fragments of columns 16 np .. +7 and +8 .. +15: matrices (n 0-7, k 0-7),
      // (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
      uint32_t b[4];
      ldsm_x4(b, smem_addr(sb + swz<kD>(16 * np + (lane & 7) + ((lane >> 4) << 3),
                                        2 * kk + ((lane >> 3) & 1))));
      Elem<T>::mma(acc[2 * np], a, b[0], b[1]);
      Elem<T>::mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

/// acc[16, kD] += P B: P[16, kK] is given as mma A fragments (see to_a_frags), B is rows
/// 0 .. kK - 1 of the swizzled [*, kD] tile sb (contraction over its rows).
template <typename T, int kD, int kK>
__device__ __forceinline__ void mma_pb(float (&acc)[kD / 8][4], const uint32_t (&pa)[kK / 16][4],
                                       const T* sb, int lane) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      // Transposed matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
      // of columns 16 dp .. 16 dp + 15.
      uint32_t b[4];
      ldsm_x4_trans(b, smem_addr(sb + swz<kD>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3),
                                              2 * dp + (lane >> 4))));
      Elem<T>::mma(acc[2 * dp], pa[kk], b[0], b[1]);
      Elem<T>::mma(acc[2 * dp + 1], pa[kk], b[2], b[3]);
    }
  }
}

/// The accumulators of a [16, kN] product as the A fragments of a product over those kN
/// columns: k-step kk takes column tiles 2 kk (k 0-7) and 2 kk + 1 (k 8-15).
template <typename T, int kN>
__device__ __forceinline__ void to_a_frags(const float (&c)[kN / 8][4], uint32_t (&a)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    a[kk][0] = Elem<T>::pack(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = Elem<T>::pack(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = Elem<T>::pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = Elem<T>::pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

/// Sets the elements of a warp's [16 queries, kN keys] tile (queries qw + l/4 and + 8, keys
/// k0 + 8n + 2 (l%4) + {0, 1}) whose key is after the query, or (documents) before the query's
/// first key, to `masked`. `first` is NULL (causal only) or the warp's 16 rows' first keys in
/// shared memory.
template <int kN>
__device__ __forceinline__ void causal_mask(float (&sc)[kN / 8][4], int qw, int k0, int lane,
                                            const int* first, float masked) {
  const int f[2] = {first ? first[lane / 4] : 0, first ? first[lane / 4 + 8] : 0};
#pragma unroll
  for (int n = 0; n < kN / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = k0 + 8 * n + 2 * (lane % 4) + (i & 1);
      const int query = qw + lane / 4 + 8 * (i >> 1);
      if (key > query || key < f[i >> 1]) sc[n][i] = masked;
    }
  }
}

/// The documents of a query block (forward and dQ), in shared memory so that the dh-64 kernels
/// keep their registers: the first key of each of the 64 rows, and the smallest and largest
/// over each warp's 16 rows.
struct QueryDocs {
  int first[kRows];
  int lo[kWarps], hi[kWarps];
};

/// Fills `qd` for the block of queries q0 .. q0 + 63 of pair bh and returns the first key tile
/// the block must load: the one holding the smallest first key of its rows. Called by every
/// thread of the block when a.starts is set (it synchronises the block once).
__device__ __forceinline__ int query_docs(const FlashArgs& a, int bh, int q0, int warp, int lane,
                                          QueryDocs& qd) {
  const int row = 16 * warp + (lane & 15);  // lanes l and l + 16 hold the same row
  const int f = a.first_key(bh / a.heads, q0 + row);
  qd.first[row] = f;
  const int lo = __reduce_min_sync(kFullMask, f), hi = __reduce_max_sync(kFullMask, f);
  if (lane == 0) {
    qd.lo[warp] = lo;
    qd.hi[warp] = hi;
  }
  __syncthreads();
  int block_lo = qd.lo[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) block_lo = min(block_lo, qd.lo[w]);
  return block_lo / kRows;
}

// ---- dropout masks --------------------------------------------------------------------------

/// Keep bits of a warp's [16 queries, 64 keys] tile (queries qw .., keys k0 ..), whose global
/// indices are base + i * s + j: lanes 2r and 2r + 1 draw the Philox blocks of row r
/// alternately, then each lane gets the masks of its rows l/4 (mask[0]) and l/4 + 8 (mask[1]);
/// bit j is key k0 + j.
__device__ __forceinline__ void keep_rows(PhiloxStream rng, float p, uint64_t base, int s, int qw,
                                          int k0, int lane, uint64_t (&mask)[2]) {
  const uint64_t first = base + static_cast<uint64_t>(qw + lane / 2) * static_cast<uint64_t>(s) +
                         static_cast<uint64_t>(k0);
  const uint64_t last_block = (first + 63) >> 2;
  uint64_t bits = 0;
  for (uint64_t blk = (first >> 2) + (lane & 1); blk <= last_block; blk += 2) {
    const Philox4x32 w = philox_block(rng, blk);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const auto j = static_cast<int64_t>(blk * 4 + static_cast<uint64_t>(e) - first);
      if (j >= 0 && j < 64 && philox_bits_to_uniform(w.v[e]) >= p) bits |= 1ull << j;
    }
  }
  bits |= __shfl_xor_sync(kFullMask, bits, 1);
  mask[0] = __shfl_sync(kFullMask, bits, 2 * (lane / 4));
  mask[1] = __shfl_sync(kFullMask, bits, 2 * (lane / 4 + 8));
}

/// Keep bits of a warp's tile in the dK/dV kernel: keys kw .. kw + 15 (rows of S^T) and queries
/// qa .. qa + kQ - 1 (columns). Lane l draws the 16-key masks of queries l and l + 32; then
/// word[j][e] holds those of query 8j + 2 (l%4) + e in bits 0-15 and of that query + 32 in bits
/// 16-31 (bit k: key kw + k).
template <int kQ>
__device__ __forceinline__ void keep_cols(PhiloxStream rng, float p, uint64_t base, int s, int qa,
                                          int kw, int lane, uint32_t (&word)[4][2]) {
  static_assert(kQ == 32 || kQ == 64, "query tiles of 32 or 64");
  uint32_t mine = 0;
#pragma unroll
  for (int half = 0; half < kQ / 32; ++half) {
    const uint64_t first = base +
                           static_cast<uint64_t>(qa + lane + 32 * half) * static_cast<uint64_t>(s) +
                           static_cast<uint64_t>(kw);
    const uint64_t last_block = (first + 15) >> 2;
    uint32_t bits = 0;
    for (uint64_t blk = first >> 2; blk <= last_block; ++blk) {
      const Philox4x32 w = philox_block(rng, blk);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const auto k = static_cast<int64_t>(blk * 4 + static_cast<uint64_t>(e) - first);
        if (k >= 0 && k < 16 && philox_bits_to_uniform(w.v[e]) >= p) bits |= 1u << k;
      }
    }
    mine |= bits << (16 * half);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      word[j][e] = __shfl_sync(kFullMask, mine, 8 * j + 2 * (lane % 4) + e);
  }
}

// ---- kernels ----------------------------------------------------------------------------------

template <typename T, int kD>
constexpr int forward_smem_bytes() {
  return 5 * kRows * kD * static_cast<int>(sizeof(T));  // Q, K x2, V x2
}

/// Grid (b * heads, ceil(s / 64)); blockIdx.y counts down the query tiles (longest first).
/// kGrouped: more than one query head per key/value head. kDocs: a.starts is set (documents);
/// the causal kernels are compiled without a trace of them.
template <typename T, int kD, bool kDropout, bool kGrouped, bool kDocs>
__global__ void __launch_bounds__(kThreads, kD == 64 ? (kDropout ? 3 : 4) : 2)
    flash_forward_kernel(const FlashArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);  // [64, kD]; at the end each warp's output rows
  T* sk = sq + kRows * kD;             // [2][64, kD]
  T* sv = sk + 2 * kRows * kD;         // [2][64, kD]

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int s = a.s;
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int qw = q0 + 16 * warp;  // this warp's first query
  const T* qkv = static_cast<const T*>(a.qkv);
  const T* q = qkv + a.q_offset<kD, kGrouped>(bh);  // row i at + i ld
  const T* k = qkv + a.k_offset_for<kD, kGrouped>(bh);
  const T* v = k + kD;
  const int n_tiles = ((q0 + kRows < s ? q0 + kRows : s) + kRows - 1) / kRows;
  const uint64_t drop_base = kDropout ? a.dropout_base(bh) : 0;
  __shared__ QueryDocs docs;  // with documents: where each row's keys start
  int kt0 = 0;
  if constexpr (kDocs) kt0 = query_docs(a, bh, q0, warp, lane, docs);

  load_tile<T, kD, kRows>(sq, q, a.ld_qkv, q0, s);
  load_tile<T, kD, kRows>(sk + (kt0 & 1) * kRows * kD, k, a.ld_qkv, kt0 * kRows, s);
  load_tile<T, kD, kRows>(sv + (kt0 & 1) * kRows * kD, v, a.ld_qkv, kt0 * kRows, s);
  cp_async_commit();

  float o[kD / 8][4] = {};              // [16, kD] unnormalised output
  float m[2] = {-INFINITY, -INFINITY};  // running max of base-2 scores, rows l/4 and +8
  float l[2] = {0.0f, 0.0f};            // this lane's part of the running sums
  for (int kt = kt0; kt < n_tiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();  // tile kt has landed, and every warp is done with tile kt - 1's buffers
    if (kt + 1 < n_tiles) {
      const int nb = (kt + 1) & 1;
      load_tile<T, kD, kRows>(sk + nb * kRows * kD, k, a.ld_qkv, (kt + 1) * kRows, s);
      load_tile<T, kD, kRows>(sv + nb * kRows * kD, v, a.ld_qkv, (kt + 1) * kRows, s);
      cp_async_commit();
    }
    const int k0 = kt * kRows;
    if (k0 > qw + 15) continue;  // every key of the tile is after this warp's queries
    // Every key of the tile is before this warp's documents.
    if (kDocs && k0 + kRows <= docs.lo[warp]) continue;
    const T* skt = sk + (kt & 1) * kRows * kD;
    const T* svt = sv + (kt & 1) * kRows * kD;

    float sc[kRows / 8][4] = {};  // [16, 64] scores
    mma_abt<T, kD, kRows>(sc, sq, 16 * warp, skt, lane);
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[n][i] *= a.scale_log2;
    }
    const bool in_docs = kDocs && k0 < docs.hi[warp];  // some key before a document
    if (k0 + kRows - 1 > qw || in_docs) {
      causal_mask<kRows>(sc, qw, k0, lane, in_docs ? docs.first + 16 * warp : nullptr, -INFINITY);
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], sc[n][i]);
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with no key yet stays all zero
      const float corr = fast_exp2(m[r] - base[r]);
      m[r] = mx[r];
      l[r] *= corr;
#pragma unroll
      for (int dn = 0; dn < kD / 8; ++dn) {
        o[dn][2 * r] *= corr;
        o[dn][2 * r + 1] *= corr;
      }
    }
    uint64_t keep[2] = {~0ull, ~0ull};
    if constexpr (kDropout) keep_rows(a.rng, a.p, drop_base, s, qw, k0, lane, keep);
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pr = fast_exp2(sc[n][i] - base[i >> 1]);
        l[i >> 1] += pr;  // the softmax sums every probability, dropped or not
        const int j = 8 * n + 2 * (lane % 4) + (i & 1);
        sc[n][i] = (keep[i >> 1] >> j) & 1 ? pr : 0.0f;
      }
    }
    uint32_t pa[kRows / 16][4];
    to_a_frags<T, kRows>(sc, pa);
    mma_pb<T, kD, kRows>(o, pa, svt, lane);
  }

  // Normalise, save lse, and write the output rows through this warp's rows of sq (read only
  // by this warp, at its first tile).
  float row_scale[2];
  float warp_max = -INFINITY;  // the largest running max of this warp's real rows (base 2)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
    row_scale[r] = (kDropout ? a.keep_scale : 1.0f) / l[r];
    const int query = qw + lane / 4 + 8 * r;
    if (lane % 4 == 0 && query < s) {
      a.lse_out[static_cast<int64_t>(bh) * s + query] = (m[r] + log2f(l[r])) * kLn2;
    }
    if (query < s) warp_max = fmaxf(warp_max, m[r]);  // padded rows are no query's
  }
  if (a.max_logit != nullptr) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) warp_max = fmaxf(warp_max, __shfl_xor_sync(kFullMask, warp_max, off));
    if (lane == 0 && warp_max != -INFINITY) atomic_max_float(a.max_logit + bh, warp_max * kLn2);
  }
  stage_rows<T, kD>(sq, 16 * warp, o, row_scale, lane);
  __syncwarp();
  store_rows<T, kD>(static_cast<T*>(a.out) + static_cast<int64_t>(bh) * kD, a.ld_ctx, sq, 16 * warp,
                    qw, s, lane);
}

/// delta[bh, i] = sum_d dctx[i, bh, d] * ctx[i, bh, d]: a warp per row of ctx ([s * b * heads]
/// rows of kD), 8 warps per block, grid-stride.
template <typename T, int kD>
__global__ void __launch_bounds__(256) flash_delta_kernel(const FlashArgs a, int64_t rows) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t pairs = a.ld_ctx / kD;  // b * heads; row = i * pairs + bh
  constexpr int kPerLane = kD / 32;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * 8) {
    const T* c = static_cast<const T*>(a.ctx) + row * kD + lane * kPerLane;
    const T* dc = static_cast<const T*>(a.dctx) + row * kD + lane * kPerLane;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; k += 2) {
      const float2 x = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(c + k));
      const float2 y = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(dc + k));
      acc += x.x * y.x + x.y * y.y;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(kFullMask, acc, off);
    if (lane == 0) a.delta[(row % pairs) * a.s + row / pairs] = acc;
  }
}

template <typename T, int kD>
constexpr int dq_smem_bytes() {
  return 6 * kRows * kD * static_cast<int>(sizeof(T));  // Q, dO, K x2, V x2
}

/// Grid (b * heads, ceil(s / 64)); blockIdx.y counts down the query tiles. kGrouped and kDocs as
/// in the forward.
template <typename T, int kD, bool kDropout, bool kGrouped, bool kDocs>
__global__ void __launch_bounds__(kThreads, kD == 64 ? 3 : 2) flash_dq_kernel(const FlashArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);  // [64, kD]; at the end each warp's dQ rows
  T* sdo = sq + kRows * kD;            // [64, kD]
  T* sk = sdo + kRows * kD;            // [2][64, kD]
  T* sv = sk + 2 * kRows * kD;         // [2][64, kD]

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int s = a.s;
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int qw = q0 + 16 * warp;
  const T* qkv = static_cast<const T*>(a.qkv);
  const int64_t q_off = a.q_offset<kD, kGrouped>(bh);
  const T* q = qkv + q_off;
  const T* k = qkv + a.k_offset_for<kD, kGrouped>(bh);
  const T* v = k + kD;
  const T* dout = static_cast<const T*>(a.dctx) + static_cast<int64_t>(bh) * kD;
  const int n_tiles = ((q0 + kRows < s ? q0 + kRows : s) + kRows - 1) / kRows;
  const uint64_t drop_base = kDropout ? a.dropout_base(bh) : 0;
  __shared__ QueryDocs docs;
  int kt0 = 0;
  if constexpr (kDocs) kt0 = query_docs(a, bh, q0, warp, lane, docs);

  load_tile<T, kD, kRows>(sq, q, a.ld_qkv, q0, s);
  load_tile<T, kD, kRows>(sdo, dout, a.ld_ctx, q0, s);
  load_tile<T, kD, kRows>(sk + (kt0 & 1) * kRows * kD, k, a.ld_qkv, kt0 * kRows, s);
  load_tile<T, kD, kRows>(sv + (kt0 & 1) * kRows * kD, v, a.ld_qkv, kt0 * kRows, s);
  cp_async_commit();

  // Rows l/4 and l/4 + 8: lse in base 2 and delta; padded rows get P = 0.
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = qw + lane / 4 + 8 * r;
    const int64_t at = static_cast<int64_t>(bh) * s + query;
    lse2[r] = query < s ? a.lse[at] * kLog2e : INFINITY;
    dl[r] = query < s ? a.delta[at] : 0.0f;
  }

  float dq[kD / 8][4] = {};  // [16, kD]
  for (int kt = kt0; kt < n_tiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();
    if (kt + 1 < n_tiles) {
      const int nb = (kt + 1) & 1;
      load_tile<T, kD, kRows>(sk + nb * kRows * kD, k, a.ld_qkv, (kt + 1) * kRows, s);
      load_tile<T, kD, kRows>(sv + nb * kRows * kD, v, a.ld_qkv, (kt + 1) * kRows, s);
      cp_async_commit();
    }
    const int k0 = kt * kRows;
    if (k0 > qw + 15) continue;
    if (kDocs && k0 + kRows <= docs.lo[warp]) continue;
    const T* skt = sk + (kt & 1) * kRows * kD;
    const T* svt = sv + (kt & 1) * kRows * kD;

    float sc[kRows / 8][4] = {};  // [16, 64] scores, then dS
    float dp[kRows / 8][4] = {};  // [16, 64] dO V^T
    mma_abt<T, kD, kRows>(sc, sq, 16 * warp, skt, lane);
    mma_abt<T, kD, kRows>(dp, sdo, 16 * warp, svt, lane);
    uint64_t keep[2] = {~0ull, ~0ull};
    if constexpr (kDropout) keep_rows(a.rng, a.p, drop_base, s, qw, k0, lane, keep);
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[n][i] = fast_exp2(sc[n][i] * a.scale_log2 - lse2[i >> 1]);
    }
    const bool in_docs = kDocs && k0 < docs.hi[warp];
    if (k0 + kRows - 1 > qw || in_docs) {
      causal_mask<kRows>(sc, qw, k0, lane, in_docs ? docs.first + 16 * warp : nullptr, 0.0f);
    }
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1, j = 8 * n + 2 * (lane % 4) + (i & 1);
        const float pr = sc[n][i];
        float dpv = dp[n][i];
        if constexpr (kDropout) dpv = (keep[r] >> j) & 1 ? dpv * a.keep_scale : 0.0f;
        sc[n][i] = pr * (dpv - dl[r]);
      }
    }
    uint32_t ds[kRows / 16][4];
    to_a_frags<T, kRows>(sc, ds);
    mma_pb<T, kD, kRows>(dq, ds, skt, lane);
  }

  const float row_scale[2] = {a.scale, a.scale};
  stage_rows<T, kD>(sq, 16 * warp, dq, row_scale, lane);
  __syncwarp();
  store_rows<T, kD>(static_cast<T*>(a.out) + q_off, a.ld_qkv, sq, 16 * warp, qw, s, lane);
}

template <typename T, int kD, int kQ>
constexpr int dkdv_smem_bytes() {
  // K, V, Q x2, dO x2, then lse, delta and the queries' first keys x2.
  return (2 * kRows + 4 * kQ) * kD * static_cast<int>(sizeof(T)) + 6 * kQ * 4;
}

/// Query rows per tile of the dK/dV kernel: 64, or 32 at dh 128 to bound the registers.
template <int kD>
constexpr int dkdv_query_rows() {
  return kD == 64 ? 64 : 32;
}

/// Grid (b * groups, ceil(s / 64)): a block per 64 keys of one key/value head; blockIdx.y counts
/// up the key tiles (the first ones see the most queries). The block visits its group's query
/// heads j = 0 .. qpg - 1 in order, each over its query tiles, as one stream of (head, tile)
/// steps, and sums their dK and dV in registers.
template <typename T, int kD, int kQ, bool kDropout>
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(const FlashArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);  // [64, kD]; at the end each warp's dK rows
  T* sv = sk + kRows * kD;             // [64, kD]; at the end each warp's dV rows
  T* sq = sv + kRows * kD;             // [2][kQ, kD]
  T* sdo = sq + 2 * kQ * kD;           // [2][kQ, kD]
  float* slse = reinterpret_cast<float*>(sdo + 2 * kQ * kD);  // [2][kQ] base-2 lse
  float* sdl = slse + 2 * kQ;                                 // [2][kQ] delta
  int* sfirst = reinterpret_cast<int*>(sdl + 2 * kQ);         // [2][kQ] first keys (documents)

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int bg = static_cast<int>(blockIdx.x);  // bi * groups + g
  const int bh0 = bg * a.qpg;  // query head j of the group is pair bh0 + j
  const int s = a.s;
  const int k0 = static_cast<int>(blockIdx.y) * kRows;
  const int kw = k0 + 16 * warp;  // this warp's first key
  // The group's slices of a qkv row: query heads 0 .. qpg - 1, then the key, then the value.
  const T* qg = static_cast<const T*>(a.qkv) + static_cast<int64_t>(bg) * (a.qpg + 2) * kD;
  const T* k = qg + static_cast<int64_t>(a.qpg) * kD;
  const T* v = k + kD;
  const T* dout0 = static_cast<const T*>(a.dctx) + static_cast<int64_t>(bh0) * kD;
  const int bi = bg / a.groups;
  // With documents, the queries that see any of these keys end before the first query after
  // them whose document starts after the last of them (the starts do not decrease).
  int q_end = s;
  if (a.starts != nullptr) {
    const int last_key = k0 + kRows - 1;
    int lo = k0 + kRows, hi = s;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (a.first_key(bi, mid) > last_key) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    q_end = lo < s ? lo : s;
  }
  const int first_tile = k0 / kQ, n_tiles = (q_end + kQ - 1) / kQ;
  const int steps = a.qpg * (n_tiles - first_tile);  // (query head, query tile) pairs

  // Q and dO of query head j's tile qt into buffer b (not committed).
  const auto load_q_do = [&](int j, int qt, int b) {
    load_tile<T, kD, kQ>(sq + b * kQ * kD, qg + static_cast<int64_t>(j) * kD, a.ld_qkv, qt * kQ, s);
    load_tile<T, kD, kQ>(sdo + b * kQ * kD, dout0 + static_cast<int64_t>(j) * kD, a.ld_ctx,
                         qt * kQ, s);
  };
  // lse (base 2), delta and first key of query head j's tile qt into buffer b; padded rows get
  // P = 0.
  const auto load_stats = [&](int j, int qt, int b) {
    const int t = static_cast<int>(threadIdx.x);
    if (t < kQ) {
      const int query = qt * kQ + t;
      const int64_t at = static_cast<int64_t>(bh0 + j) * s + query;
      slse[b * kQ + t] = query < s ? a.lse[at] * kLog2e : INFINITY;
      sdl[b * kQ + t] = query < s ? a.delta[at] : 0.0f;
      sfirst[b * kQ + t] = a.first_key(bi, query);
    }
  };

  load_tile<T, kD, kRows>(sk, k, a.ld_qkv, k0, s);
  load_tile<T, kD, kRows>(sv, v, a.ld_qkv, k0, s);
  load_q_do(0, first_tile, 0);
  cp_async_commit();
  load_stats(0, first_tile, 0);

  float dk[kD / 8][4] = {};  // [16, kD]
  float dv[kD / 8][4] = {};  // [16, kD]
  int j = 0, qt = first_tile;    // this step's query head and tile
  int nj = 0, nqt = first_tile;  // the next step's
  for (int step = 0; step < steps; ++step, j = nj, qt = nqt) {
    const int b = step & 1;
    cp_async_wait_all();
    __syncthreads();  // step's tiles have landed, and every warp is done with the other buffers
    nj = j;
    nqt = qt + 1;
    if (nqt == n_tiles) {
      ++nj;
      nqt = first_tile;
    }
    if (step + 1 < steps) {
      load_q_do(nj, nqt, b ^ 1);
      cp_async_commit();
      load_stats(nj, nqt, b ^ 1);
    }
    const int qa = qt * kQ;
    if (qa + kQ - 1 < kw) continue;  // every query of the tile is before this warp's keys
    const int* first_t = sfirst + b * kQ;
    bool documents = false;  // some query of the tile starts its document after some key here
    if (a.starts != nullptr) {
      int lo = first_t[lane], hi = lo;
#pragma unroll
      for (int c = lane + 32; c < kQ; c += 32) {
        lo = min(lo, first_t[c]);
        hi = max(hi, first_t[c]);
      }
      lo = __reduce_min_sync(kFullMask, lo);
      hi = __reduce_max_sync(kFullMask, hi);
      if (lo > kw + 15) continue;  // every query's document starts after this warp's keys
      documents = hi > kw;
    }
    const T* sqt = sq + b * kQ * kD;
    const T* sdot = sdo + b * kQ * kD;
    const float* lse_t = slse + b * kQ;
    const float* dl_t = sdl + b * kQ;

    float st[kQ / 8][4] = {};   // [16 keys, kQ queries] scores, then P (dropped and scaled)
    float dpt[kQ / 8][4] = {};  // [16, kQ] V dO^T, then dS^T
    mma_abt<T, kD, kQ>(st, sk, 16 * warp, sqt, lane);
    mma_abt<T, kD, kQ>(dpt, sv, 16 * warp, sdot, lane);
    uint32_t keep[4][2] = {};
    if constexpr (kDropout) {
      keep_cols<kQ>(a.rng, a.p, a.dropout_base(bh0 + j), s, qa, kw, lane, keep);
    }
#pragma unroll
    for (int n = 0; n < kQ / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 8 * n + 2 * (lane % 4) + (i & 1);
        st[n][i] = fast_exp2(st[n][i] * a.scale_log2 - lse_t[c]);
      }
    }
    // Some query of the tile is before some key of this warp, or starts its document after it.
    if (qa < kw + 15 || documents) {
#pragma unroll
      for (int n = 0; n < kQ / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = kw + lane / 4 + 8 * (i >> 1);
          const int c = 8 * n + 2 * (lane % 4) + (i & 1);
          if (key > qa + c || (documents && key < first_t[c])) st[n][i] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int n = 0; n < kQ / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1, c = 8 * n + 2 * (lane % 4) + (i & 1);
        const float pr = st[n][i];
        float pd = pr, dpv = dpt[n][i];
        if constexpr (kDropout) {
          const bool kept = (keep[n % 4][i & 1] >> (16 * (n / 4) + lane / 4 + 8 * r)) & 1;
          pd = kept ? pr * a.keep_scale : 0.0f;
          dpv = kept ? dpv * a.keep_scale : 0.0f;
        }
        st[n][i] = pd;
        dpt[n][i] = pr * (dpv - dl_t[c]);
      }
    }
    uint32_t frag[kQ / 16][4];
    to_a_frags<T, kQ>(st, frag);
    mma_pb<T, kD, kQ>(dv, frag, sdot, lane);
    to_a_frags<T, kQ>(dpt, frag);
    mma_pb<T, kD, kQ>(dk, frag, sqt, lane);
  }

  // This warp's rows of sk and sv were read only by this warp.
  const float k_scale[2] = {a.scale, a.scale}, v_scale[2] = {1.0f, 1.0f};
  stage_rows<T, kD>(sk, 16 * warp, dk, k_scale, lane);
  stage_rows<T, kD>(sv, 16 * warp, dv, v_scale, lane);
  __syncwarp();
  T* dk_out = static_cast<T*>(a.out) + a.k_offset<kD>(bg);
  store_rows<T, kD>(dk_out, a.ld_qkv, sk, 16 * warp, kw, s, lane);
  store_rows<T, kD>(dk_out + kD, a.ld_qkv, sv, 16 * warp, kw, s, lane);
}

// ---- host ---------------------------------------------------------------------------------

template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>, integral_constant<kD>, bool_constant<dropout>, bool_constant<grouped>,
/// bool_constant<docs>) for the instantiation that covers (t, dh, dropout, grouped, docs); the
/// caller has checked flash_attention_supported.
template <class F>
void dispatch(DType t, int64_t dh, bool dropout, bool grouped, bool docs, F&& f) {
  const auto with_docs = [&](auto type, auto head_dim, auto drop, auto group) {
    if (docs) {
      f(type, head_dim, drop, group, std::true_type{});
    } else {
      f(type, head_dim, drop, group, std::false_type{});
    }
  };
  const auto with_grouped = [&](auto type, auto head_dim, auto drop) {
    if (grouped) {
      with_docs(type, head_dim, drop, std::true_type{});
    } else {
      with_docs(type, head_dim, drop, std::false_type{});
    }
  };
  const auto with_dropout = [&](auto type, auto head_dim) {
    if (dropout) {
      with_grouped(type, head_dim, std::true_type{});
    } else {
      with_grouped(type, head_dim, std::false_type{});
    }
  };
  const auto with_dh = [&](auto type) {
    if (dh == 64) {
      with_dropout(type, std::integral_constant<int, 64>{});
    } else {
      with_dropout(type, std::integral_constant<int, 128>{});
    }
  };
  if (t == DType::BF16) {
    with_dh(TypeTag<__nv_bfloat16>{});
  } else {
    with_dh(TypeTag<__half>{});
  }
}

void require_supported(const char* op, const AttentionDesc& d, DType t) {
  if (!flash_attention_supported(t, d.dh)) {
    throw_error(
        ErrorCode::Unsupported,
        str_cat(op, ": no fused attention kernel for dtype ", dtype_name(t), " with head dim ",
                d.dh, " (the CUDA kernels cover bf16 and f16 with head dim 64 or 128)"));
  }
  // Grid y counts tiles of 64 positions; block indices and row numbers are ints.
  if (d.s > 65535LL * kRows || d.b * d.heads > (1LL << 30)) {
    throw_error(ErrorCode::Unsupported,
                str_cat(op, ": s = ", d.s, " with b * heads = ", d.b * d.heads,
                        " is beyond the fused attention kernels (s <= ", 65535LL * kRows,
                        ", b * heads <= 2^30)"));
  }
}

/// 16-byte copies need every row to start on a 16-byte boundary.
void require_aligned(const char* op, const char* what, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    throw_error(
        ErrorCode::Unsupported,
        str_cat(op, ": ", what, " must be 16-byte aligned for the fused attention kernels"));
  }
}

FlashArgs make_args(const AttentionDesc& d) {
  FlashArgs a{};
  a.s = static_cast<int>(d.s);
  a.heads = static_cast<int>(d.heads);
  a.groups = static_cast<int>(d.kv_groups());
  a.qpg = static_cast<int>(d.q_per_group());
  a.ld_qkv = d.b * d.kv_groups() * (d.q_per_group() + 2) * d.dh;
  a.ld_ctx = d.b * d.heads * d.dh;
  a.scale = d.scale;
  a.scale_log2 = d.scale * kLog2e;
  a.starts = d.document_starts;
  a.max_logit = d.max_logit;
  a.rng = d.dropout.rng;
  a.p = d.dropout.p;
  a.keep_scale = d.dropout.p > 0.0f ? kcheck::dropout_keep_scale(d.dropout.p) : 1.0f;
  a.g1 = d.dropout.block.global_shape[1];
  a.g2 = d.dropout.block.global_shape[2];
  a.o0 = d.dropout.block.offset[0];
  a.o1 = d.dropout.block.offset[1];
  a.o2 = d.dropout.block.offset[2];
  return a;
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, int threads, int smem_bytes, cudaStream_t stream,
            const Args&... args) {
  // Above 48 KiB a kernel must opt in; the attribute is per device, so it is set every time.
  PTDP_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  kernel<<<grid, threads, smem_bytes, stream>>>(args...);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool flash_attention_supported(DType t, int64_t dh) {
  return (t == DType::BF16 || t == DType::F16) && (dh == 64 || dh == 128);
}

void flash_attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                             DType t, cudaStream_t stream) {
  require_supported("attention_forward", d, t);
  if (d.s == 0 || d.b == 0 || d.heads == 0) return;
  require_aligned("attention_forward", "qkv", qkv);
  require_aligned("attention_forward", "ctx", ctx);
  FlashArgs a = make_args(d);
  a.qkv = qkv;
  a.out = ctx;
  a.lse_out = lse;
  const dim3 grid(static_cast<unsigned>(d.b * d.heads),
                  static_cast<unsigned>((d.s + kRows - 1) / kRows));
  const bool grouped = d.q_per_group() > 1;
  const auto run = [&](auto type, auto head_dim, auto dropout, auto grouped_heads, auto docs) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(head_dim)::value;
    constexpr bool kDropout = decltype(dropout)::value;
    constexpr bool kGrouped = decltype(grouped_heads)::value;
    constexpr bool kDocs = decltype(docs)::value;
    launch(flash_forward_kernel<T, kD, kDropout, kGrouped, kDocs>, grid, kThreads,
           forward_smem_bytes<T, kD>(), stream, a);
  };
  dispatch(t, d.dh, d.dropout.p > 0.0f, grouped, d.document_starts != nullptr, run);
}

void flash_attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                              const float* lse, const void* dctx, void* dqkv, float* delta, DType t,
                              cudaStream_t stream) {
  require_supported("attention_backward", d, t);
  if (d.s == 0 || d.b == 0 || d.heads == 0) return;
  require_aligned("attention_backward", "qkv", qkv);
  require_aligned("attention_backward", "ctx", ctx);
  require_aligned("attention_backward", "dctx", dctx);
  require_aligned("attention_backward", "dqkv", dqkv);
  FlashArgs a = make_args(d);
  a.qkv = qkv;
  a.ctx = ctx;
  a.dctx = dctx;
  a.out = dqkv;
  a.lse = lse;
  a.delta = delta;
  const int64_t rows = d.s * d.b * d.heads;
  const auto row_tiles = static_cast<unsigned>((d.s + kRows - 1) / kRows);
  const dim3 tiles(static_cast<unsigned>(d.b * d.heads), row_tiles);  // per query head
  const dim3 kv_tiles(static_cast<unsigned>(d.b * d.kv_groups()), row_tiles);  // per K/V head
  const bool grouped = d.q_per_group() > 1;
  const auto run = [&](auto type, auto head_dim, auto dropout, auto grouped_heads, auto docs) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(head_dim)::value;
    constexpr bool kDropout = decltype(dropout)::value;
    constexpr bool kGrouped = decltype(grouped_heads)::value;
    constexpr bool kDocs = decltype(docs)::value;
    constexpr int kQ = dkdv_query_rows<kD>();
    const int64_t delta_blocks = (rows + 7) / 8 < 65535 * 8 ? (rows + 7) / 8 : 65535 * 8;
    launch(flash_delta_kernel<T, kD>, dim3(static_cast<unsigned>(delta_blocks)), 256, 0, stream, a,
           rows);
    launch(flash_dkdv_kernel<T, kD, kQ, kDropout>, kv_tiles, kThreads,
           dkdv_smem_bytes<T, kD, kQ>(), stream, a);
    launch(flash_dq_kernel<T, kD, kDropout, kGrouped, kDocs>, tiles, kThreads,
           dq_smem_bytes<T, kD>(), stream, a);
  };
  dispatch(t, d.dh, d.dropout.p > 0.0f, grouped, d.document_starts != nullptr, run);
}

}  // namespace ptdp::cuda
