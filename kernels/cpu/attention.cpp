// Fused causal self-attention on the CPU: the flash-attention algorithm (key tiles, online
// softmax, log-sum-exp saved per query row, the backward recomputing the probabilities), written
// as the reference the GPU kernel is tested against. One (batch, head) pair per task; within a
// task everything is fp32, and ctx and dqkv are rounded to the storage type once.
//
// Blocked into tile GEMMs: a task walks its query rows in tiles of kQueryTile rows, and each
// query tile its keys in tiles of kKeyTile. The forward computes the score tile S = scale Q K^T,
// updates each row's running max, sum and accumulator (the online softmax) and adds P V to the
// accumulator tile; the backward recomputes S, P = exp(S - lse) and dP = dO V^T, forms
// dS = scale P (dP - delta), and adds dV += P~^T dO, dQ += dS K and dK += dS^T Q. The GEMMs are
// OpenBLAS's (single-threaded inside the tasks' parallel region); the elementwise rows are
// PTDP_CPU_CLONES loops with exp_f32_fast (kernels/cpu/exp_math.h), built without contraction
// so that every instruction set computes the same bits. Only the diagonal tiles are masked
// (keys beyond a row's position get probability 0); tile pairs above the diagonal are skipped.
// Every element is accumulated over the same tiles in the same order whatever the thread
// count. For f32 storage the query, ctx and dctx rows are read, and ctx and dqkv accumulated,
// in place; 16-bit storage goes through fp32 scratch.
//
// Grouped-query attention (AttentionDesc::groups): all query heads of a group read its key and
// value in place (f32), or from one fp32 copy widened per group (bf16, f16); never a copy per
// query head. With several query heads per group the backward keeps each head's share of the
// group's dK and dV apart and sums them afterwards in head order, so the result does not depend
// on the thread count. With one query head per group (groups == heads, or 0) every value
// equals the multi-head kernel's, bit for bit.
//
// Documents (AttentionDesc::document_starts): query i reads keys start .. i only. A query tile
// never spans two documents (tiles restart at each document's first row) and its key tiles
// begin at its document's first key, so a document's rows see exactly the tiles, GEMM shapes,
// sums and order of that document run alone (the same values, bit for bit, without dropout).
//
// Dropout on the probabilities draws the unfused path's mask: there the probabilities are
// [b * heads, s, s] with the DropoutDesc block [b, heads, s * s], so probability (i, j) of
// (batch bi, head hi) keeps or drops as element (bi, hi, i * s + j) of that block does.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_math.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/exp_math.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

using cpu_attention::kKeyTile;
using cpu_attention::kNegInf;

// Where one query head and its group's key and value sit in the
// [s, b, groups, heads/groups + 2, dh] activation (groups == heads: [s, b, heads, 3, dh]).
struct HeadView {
  int64_t qkv_row;   // elements between positions i and i + 1 of qkv: b * groups * (qpg + 2) * dh
  int64_t qkv_base;  // offset of this query head at position 0
  int64_t ctx_row;   // b * heads * dh
  int64_t ctx_base;  // (bi * heads + hi) * dh
  int64_t unit;      // bi * groups + g: index of the (batch, key/value group) pair
};

HeadView head_view(const AttentionDesc& d, int64_t bi, int64_t hi) {
  const int64_t groups = d.kv_groups(), qpg = d.q_per_group();
  const int64_t g = hi / qpg, j = hi % qpg;
  const int64_t unit = bi * groups + g;
  return {d.b * groups * (qpg + 2) * d.dh, (unit * (qpg + 2) + j) * d.dh, d.b * d.heads * d.dh,
          (bi * d.heads + hi) * d.dh, unit};
}

// The fp32 keys and values the query heads of group unit = bi * groups + g read: for f32
// storage the rows of qkv itself (row stride qkv_row), for 16-bit storage a copy widened once per
// group into [units, 2, s, dh] (row stride dh).
struct KvSource {
  const float* key0 = nullptr;  // the key row of position 0 of unit 0
  int64_t row = 0;              // elements between the rows of positions i and i + 1
  int64_t unit_stride = 0;      // between the key rows of units u and u + 1
  int64_t value_offset = 0;     // from a key row to its value row
  std::unique_ptr<float[]> widened;

  const float* keys(int64_t unit) const { return key0 + unit * unit_stride; }
  const float* values(int64_t unit) const { return keys(unit) + value_offset; }
};

template <typename St>
KvSource kv_source(const typename St::type* qkv, const AttentionDesc& d) {
  const int64_t s = d.s, dh = d.dh, groups = d.kv_groups(), qpg = d.q_per_group();
  const int64_t units = d.b * groups, row = d.b * groups * (qpg + 2) * dh;
  KvSource kv;
  if constexpr (std::is_same_v<St, cpu::F32Storage>) {
    kv.key0 = qkv + qpg * dh;
    kv.row = row;
    kv.unit_stride = (qpg + 2) * dh;
    kv.value_offset = dh;
  } else {
    kv.widened.reset(new float[static_cast<std::size_t>(units * 2 * s * dh)]);
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; ++u) {
      for (int64_t part = 0; part < 2; ++part) {
        float* out = kv.widened.get() + (u * 2 + part) * s * dh;
        const auto* src = qkv + (u * (qpg + 2) + qpg + part) * dh;
        for (int64_t i = 0; i < s; ++i)
          for (int64_t e = 0; e < dh; ++e) out[i * dh + e] = St::load(src[i * row + e]);
      }
    }
    kv.key0 = kv.widened.get();
    kv.row = dh;
    kv.unit_stride = 2 * s * dh;
    kv.value_offset = s * dh;
  }
  return kv;
}

// The first key query i of sample bi sees: its document's first position (clamped into
// [0, i]), or 0 without documents.
inline int64_t first_key(const AttentionDesc& d, int64_t bi, int64_t i) {
  if (d.document_starts == nullptr) return 0;
  return std::clamp<int64_t>(d.document_starts[bi * d.s + i], 0, i);
}

// Widens one query head into packed fp32 [s, dh].
template <typename St>
void gather_q(const typename St::type* qkv, const AttentionDesc& d, const HeadView& hv,
              float* out) {
  for (int64_t i = 0; i < d.s; ++i) {
    const auto* src = qkv + i * hv.qkv_row + hv.qkv_base;
    for (int64_t e = 0; e < d.dh; ++e) out[i * d.dh + e] = St::load(src[e]);
  }
}

template <typename St>
void gather_ctx(const typename St::type* ctx, const AttentionDesc& d, const HeadView& hv,
                float* out) {
  for (int64_t i = 0; i < d.s; ++i) {
    const auto* src = ctx + i * hv.ctx_row + hv.ctx_base;
    for (int64_t e = 0; e < d.dh; ++e) out[i * d.dh + e] = St::load(src[e]);
  }
}

// Query rows per tile. Row i of a diagonal tile pair sees keys up to i only, so short query
// tiles waste little on the masked corner: at s = 64 the tiles of 16 rows compute 5/8 of the
// 64 x 64 square that the unfused path computes whole (32 rows: 3/4), which more than pays for
// the smaller GEMMs (at s = 1024, 16 and 32 rows run equally fast). With kKeyTile keys and
// dh = 64 a tile pair's operands (16 x 64 rows of Q, dO and the accumulator, 64 x 64 of K and
// V, 16 x 64 scores) take about 48 KB: L2, mostly L1.
constexpr int64_t kQueryTile = 16;
// Independent partial sums per row of a tile, so the vector lanes do not wait on each other;
// element j goes to lane j % kLanes and the lanes are added in order, whatever the vector width.
constexpr int kLanes = 8;

// Uninitialised fp32 scratch of n elements (the kernels write before they read).
std::unique_ptr<float[]> scratch(int64_t n) {
  return std::unique_ptr<float[]>(new float[static_cast<std::size_t>(n)]);
}

// C = alpha op(A) op(B) + beta C, row major, fp32.
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// The largest of x[0, n), n >= 1.
PTDP_CPU_CLONES float row_max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// p[j] = exp(p[j] - m) over [0, n) in place; returns their sum (in double, by lanes).
PTDP_CPU_CLONES double exp_row(float* p, int64_t n, float m) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) p[j] = cpu::exp_f32_fast(p[j] - m);
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(p[j + k]);
  }
  for (int k = 0; j < n; ++j, ++k) lane[k] += static_cast<double>(p[j]);
  double sum = 0.0;
  for (double l : lane) sum += l;
  return sum;
}

// The dropped probabilities: p[j] = keep[j] ? p[j] keep_scale : 0 over [0, n).
PTDP_CPU_CLONES void drop_row(float* p, const uint8_t* keep, int64_t n, float keep_scale) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) p[j] = keep[j] ? p[j] * keep_scale : 0.0f;
}

// One row of the backward's tiles over its n visible keys: on entry sp holds the scores
// scale q_i.k_j and dp the products dO_i.v_j; on exit sp holds P~_ij = P_ij keep_ij / (1 - p)
// and dp holds dS_ij = scale P_ij (dP_ij - delta_i). keep is null without dropout.
PTDP_CPU_CLONES void backward_row(float* sp, float* dp, const uint8_t* keep, int64_t n,
                                  float lse, float delta, float scale, float keep_scale) {
  if (keep == nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float p = cpu::exp_f32_fast(sp[j] - lse);
      sp[j] = p;
      dp[j] = scale * (p * (dp[j] - delta));
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float p = cpu::exp_f32_fast(sp[j] - lse);
      const float kf = keep[j] ? keep_scale : 0.0f;
      sp[j] = p * kf;
      dp[j] = scale * (p * (kf * dp[j] - delta));
    }
  }
}

// The next query tile from row i0: at most kQueryTile rows, all with the first key of row i0,
// so a tile never spans two documents. Returns its end; first_of holds each row's first key.
int64_t query_tile_end(const std::vector<int64_t>& first_of, int64_t i0) {
  const int64_t s = static_cast<int64_t>(first_of.size());
  int64_t i1 = i0 + 1;
  while (i1 < s && i1 - i0 < kQueryTile && first_of[i1] == first_of[i0]) ++i1;
  return i1;
}

std::vector<int64_t> first_keys(const AttentionDesc& d, int64_t bi) {
  std::vector<int64_t> first(static_cast<std::size_t>(d.s));
  for (int64_t i = 0; i < d.s; ++i) first[i] = first_key(d, bi, i);
  return first;
}

// Asks for rows [i0, i1) of n floats, ld apart, to be brought into cache. A head's rows sit
// b * heads * dh floats or more apart in the activations, too far for the hardware prefetcher,
// so without this a tile's rows arrive one cache miss after another.
void prefetch_rows(const float* x, int64_t ld, int64_t i0, int64_t i1, int64_t n) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t e = 0; e < n; e += 16) __builtin_prefetch(x + i * ld + e);
  }
}

// Each row's keep flags of a query tile: row r (query i0 + r) at keep + r * s, key j at
// j - first, for its keys first .. i0 + r (the mask is indexed by the query head: [b, heads,
// s * s], as in the unfused path).
void tile_keep(const AttentionDesc& d, int64_t bi, int64_t hi, int64_t i0, int64_t i1,
               int64_t first, uint8_t* keep) {
  for (int64_t i = i0; i < i1; ++i) {
    cpu::dropout_keep_row(d.dropout, bi, hi, i * d.s + first, i * d.s + i + 1,
                          keep + (i - i0) * d.s);
  }
}

// Where a task's fp32 rows live: for f32 storage in the activations themselves (row stride
// ld), for 16-bit storage in fp32 scratch (ld = dh), widened before and rounded once after.
template <typename T>
struct RowsOf {
  T* p;
  int64_t ld;
  T* row(int64_t i) const { return p + i * ld; }
};
using Rows = RowsOf<float>;
using ConstRows = RowsOf<const float>;

// dot(x, y) over [0, n) in double, element e into lane e % kLanes, the lanes added in order.
PTDP_CPU_CLONES double dot_double(const float* x, const float* y, int64_t n) {
  double lane[kLanes] = {};
  int64_t e = 0;
  for (; e + kLanes <= n; e += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[e + k]) * y[e + k];
  }
  for (int k = 0; e < n; ++e, ++k) lane[k] += static_cast<double>(x[e]) * y[e];
  double sum = 0.0;
  for (double l : lane) sum += l;
  return sum;
}

// One query head (bi, hi) against its group's key and value.
template <typename St>
void forward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                  const KvSource& kv, typename St::type* ctx, float* lse) {
  constexpr bool kInPlace = std::is_same_v<St, cpu::F32Storage>;
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  const float* k = kv.keys(hv.unit);
  const float* v = kv.values(hv.unit);
  const int64_t kv_row = kv.row;
  // The query rows [s, dh] and the context rows [s, dh], which accumulate a tile's unnormalised
  // ctx before they are divided by the row's sum.
  const auto q_buf = scratch(kInPlace ? 0 : s * dh), ctx_buf = scratch(kInPlace ? 0 : s * dh);
  ConstRows q{q_buf.get(), dh};
  Rows acc{ctx_buf.get(), dh};
  if constexpr (kInPlace) {
    q = {qkv + hv.qkv_base, hv.qkv_row};
    acc = {ctx + hv.ctx_base, hv.ctx_row};
  } else {
    gather_q<St>(qkv, d, hv, q_buf.get());
  }
  const auto p = scratch(kQueryTile * kKeyTile);  // [kQueryTile, kKeyTile]: scores, then P~
  float m[kQueryTile];                            // running max per row
  double l[kQueryTile];  // sum of exp(score - m) over the keys seen, dropped ones included
  std::vector<uint8_t> keep(dropout ? kQueryTile * s : 0);
  const std::vector<int64_t> first_of = first_keys(d, bi);
  float head_max = kNegInf;  // AttentionDesc::max_logit: the largest of the rows' running maxima
  for (int64_t i0 = 0, i1; i0 < s; i0 = i1) {
    i1 = query_tile_end(first_of, i0);
    const int64_t rows = i1 - i0, first = first_of[i0];
    prefetch_rows(q.p, q.ld, i0, i1, dh);
    prefetch_rows(k, kv_row, first, std::min(i1, first + kKeyTile), dh);
    if (dropout) tile_keep(d, bi, hi, i0, i1, first, keep.data());
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0);
    // The tile's rows see keys first .. i1 - 1; row i only first .. i. Every row sees the first
    // key tile, whose P V initialises the accumulator (beta 0).
    for (int64_t j0 = first; j0 < i1; j0 += kKeyTile) {
      const int64_t cols = std::min(i1, j0 + kKeyTile) - j0;
      prefetch_rows(v, kv_row, j0, j0 + cols, dh);
      prefetch_rows(k, kv_row, j0 + cols, std::min(i1, j0 + cols + kKeyTile), dh);
      tile_gemm(false, true, rows, cols, dh, d.scale, q.row(i0), q.ld, k + j0 * kv_row, kv_row,
                0.0f, p.get(), kKeyTile);
      for (int64_t r = 0; r < rows; ++r) {
        float* pr = p.get() + r * kKeyTile;
        const int64_t seen = std::min(cols, i0 + r - j0 + 1);  // keys j0 .. i of row i
        if (seen <= 0) {  // the whole key tile lies beyond row i
          std::fill(pr, pr + cols, 0.0f);
          continue;
        }
        if (seen < cols) std::fill(pr + seen, pr + cols, 0.0f);
        const float m_new = std::max(m[r], row_max(pr, seen));
        const float alpha = cpu::exp_f32(m[r] - m_new);  // 0 on the first tile (m = -inf)
        if (j0 != first && alpha != 1.0f) {
          l[r] *= alpha;
          float* ar = acc.row(i0 + r);
          for (int64_t e = 0; e < dh; ++e) ar[e] *= alpha;
        }
        l[r] += exp_row(pr, seen, m_new);
        if (dropout) drop_row(pr, keep.data() + r * s + (j0 - first), seen, keep_scale);
        m[r] = m_new;
      }
      tile_gemm(false, false, rows, dh, cols, 1.0f, p.get(), kKeyTile, v + j0 * kv_row, kv_row,
                j0 == first ? 0.0f : 1.0f, acc.row(i0), acc.ld);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const float inv_l = static_cast<float>(1.0 / l[r]);
      const float* ar = acc.row(i);
      auto* out = ctx + i * hv.ctx_row + hv.ctx_base;
      for (int64_t e = 0; e < dh; ++e) out[e] = St::store(ar[e] * inv_l);
      lse[(bi * d.heads + hi) * s + i] = m[r] + static_cast<float>(std::log(l[r]));
      head_max = std::max(head_max, m[r]);
    }
  }
  // One task per (bi, hi): no other thread writes this entry.
  if (d.max_logit != nullptr) {
    float& out = d.max_logit[bi * d.heads + hi];
    out = std::max(out, head_max);
  }
}

// dQ_i = scale sum_j dS_ij k_j, dK_j = scale sum_i dS_ij q_i, dV_j = sum_i P~_ij dO_i, where
//   P_ij = exp(scale q_i.k_j - lse_i), P~_ij = P_ij keep_ij / (1 - p) (the dropped probability),
//   dP_ij = keep_ij / (1 - p) dO_i.v_j, dS_ij = P_ij (dP_ij - delta_i),
//   delta_i = sum_j P_ij dP_ij = dO_i.ctx_i (ctx_i = sum_j P~_ij v_j, with dropout too).
// Per tile pair: S = scale Q K^T and dO V^T, the rows turned into P~ and scale dS, then
// dV += P~^T dO, dQ += dS K, dK += dS^T Q, the first sum into each row of dQ, dK and dV with
// beta 0 (nothing is zeroed beforehand). dQ is stored. With one query head per group dK and
// dV are too; otherwise this head's share of its group's dK and dV goes to
// shares[bi * heads + hi] ([2, s, dh] fp32, uninitialised on entry), which reduce_dkv sums over
// the group.
template <typename St>
void backward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                   const KvSource& kv, const typename St::type* ctx, const float* lse,
                   const typename St::type* dctx, typename St::type* dqkv, float* delta,
                   float* shares) {
  constexpr bool kInPlace = std::is_same_v<St, cpu::F32Storage>;
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  const float* k = kv.keys(hv.unit);
  const float* v = kv.values(hv.unit);
  const int64_t kv_row = kv.row;
  const bool own_kv = d.q_per_group() == 1;
  // q, ctx, dctx and dq rows [s, dh], and dk, dv [s, dh]: this head's own in dqkv (f32) or in
  // scratch (16-bit), or its share of the group's.
  const int64_t widened = kInPlace ? 0 : s * dh;
  const auto q_buf = scratch(widened), o_buf = scratch(widened), do_buf = scratch(widened);
  const auto dq_buf = scratch(widened);
  const auto kv_buf = scratch(own_kv && !kInPlace ? 2 * s * dh : 0);
  ConstRows q{q_buf.get(), dh}, o{o_buf.get(), dh}, dout{do_buf.get(), dh};
  Rows dq{dq_buf.get(), dh};
  Rows dk{own_kv ? kv_buf.get() : shares + (bi * d.heads + hi) * 2 * s * dh, dh};
  Rows dv{dk.p + s * dh, dh};
  if constexpr (kInPlace) {
    q = {qkv + hv.qkv_base, hv.qkv_row};
    o = {ctx + hv.ctx_base, hv.ctx_row};
    dout = {dctx + hv.ctx_base, hv.ctx_row};
    dq = {dqkv + hv.qkv_base, hv.qkv_row};
    // The key and value slots follow the query: [s, b, heads, 3, dh].
    if (own_kv) dk = {dq.p + dh, hv.qkv_row}, dv = {dq.p + 2 * dh, hv.qkv_row};
  } else {
    gather_q<St>(qkv, d, hv, q_buf.get());
    gather_ctx<St>(ctx, d, hv, o_buf.get());
    gather_ctx<St>(dctx, d, hv, do_buf.get());
  }
  const auto sp = scratch(kQueryTile * kKeyTile), dp = scratch(kQueryTile * kKeyTile);
  std::vector<uint8_t> keep(dropout ? kQueryTile * s : 0);
  const float* lse_h = lse + (bi * d.heads + hi) * s;
  float* delta_h = delta + (bi * d.heads + hi) * s;
  const std::vector<int64_t> first_of = first_keys(d, bi);
  for (int64_t i0 = 0, i1; i0 < s; i0 = i1) {
    i1 = query_tile_end(first_of, i0);
    const int64_t rows = i1 - i0, first = first_of[i0];
    prefetch_rows(q.p, q.ld, i0, i1, dh);
    prefetch_rows(dout.p, dout.ld, i0, i1, dh);
    prefetch_rows(o.p, o.ld, i0, i1, dh);
    prefetch_rows(k, kv_row, first, std::min(i1, first + kKeyTile), dh);
    prefetch_rows(v, kv_row, first, std::min(i1, first + kKeyTile), dh);
    for (int64_t i = i0; i < i1; ++i) {
      delta_h[i] = static_cast<float>(dot_double(dout.row(i), o.row(i), dh));
    }
    if (dropout) tile_keep(d, bi, hi, i0, i1, first, keep.data());
    // Every row of the tile sees its first key tile, whose dS K initialises dQ (beta 0).
    for (int64_t j0 = first; j0 < i1; j0 += kKeyTile) {
      const int64_t cols = std::min(i1, j0 + kKeyTile) - j0;
      const float* kt = k + j0 * kv_row;
      prefetch_rows(k, kv_row, j0 + cols, std::min(i1, j0 + cols + kKeyTile), dh);
      prefetch_rows(v, kv_row, j0 + cols, std::min(i1, j0 + cols + kKeyTile), dh);
      tile_gemm(false, true, rows, cols, dh, d.scale, q.row(i0), q.ld, kt, kv_row, 0.0f,
                sp.get(), kKeyTile);
      tile_gemm(false, true, rows, cols, dh, 1.0f, dout.row(i0), dout.ld, v + j0 * kv_row,
                kv_row, 0.0f, dp.get(), kKeyTile);
      for (int64_t r = 0; r < rows; ++r) {
        float* spr = sp.get() + r * kKeyTile;
        float* dpr = dp.get() + r * kKeyTile;
        const int64_t seen = std::max<int64_t>(0, std::min(cols, i0 + r - j0 + 1));
        backward_row(spr, dpr, dropout ? keep.data() + r * s + (j0 - first) : nullptr, seen,
                     lse_h[i0 + r], delta_h[i0 + r], d.scale, keep_scale);
        if (seen < cols) {  // keys beyond row i: no probability
          std::fill(spr + seen, spr + cols, 0.0f);
          std::fill(dpr + seen, dpr + cols, 0.0f);
        }
      }
      tile_gemm(false, false, rows, dh, cols, 1.0f, dp.get(), kKeyTile, kt, kv_row,
                j0 == first ? 0.0f : 1.0f, dq.row(i0), dq.ld);
      // Keys before i0 already hold the earlier query tiles' sums (each key j was first reached
      // by the tile of query row j); keys from i0 on are reached here first (beta 0).
      for (int64_t c0 = 0, c1; c0 < cols; c0 = c1) {
        const bool seen_before = j0 + c0 < i0;
        c1 = seen_before ? std::min(cols, i0 - j0) : cols;
        const float beta = seen_before ? 1.0f : 0.0f;
        tile_gemm(true, false, c1 - c0, dh, rows, 1.0f, sp.get() + c0, kKeyTile, dout.row(i0),
                  dout.ld, beta, dv.row(j0 + c0), dv.ld);
        tile_gemm(true, false, c1 - c0, dh, rows, 1.0f, dp.get() + c0, kKeyTile, q.row(i0),
                  q.ld, beta, dk.row(j0 + c0), dk.ld);
      }
    }
  }
  if constexpr (!kInPlace) {
    for (int64_t i = 0; i < s; ++i) {
      auto* out = dqkv + i * hv.qkv_row + hv.qkv_base;
      for (int64_t e = 0; e < dh; ++e) out[e] = St::store(dq.row(i)[e]);
      if (own_kv) {  // the key and value slots follow the query: [s, b, heads, 3, dh]
        for (int64_t e = 0; e < dh; ++e) {
          out[dh + e] = St::store(dk.row(i)[e]);
          out[2 * dh + e] = St::store(dv.row(i)[e]);
        }
      }
    }
  }
}

// A group's dK and dV: its query heads' shares summed in head order (in double, rounded once),
// so the result depends neither on the thread count nor on which thread ran which head.
template <typename St>
void reduce_dkv(const AttentionDesc& d, const float* shares, typename St::type* dqkv) {
  const int64_t s = d.s, dh = d.dh, groups = d.kv_groups(), qpg = d.q_per_group();
  const int64_t units = d.b * groups, row = d.b * groups * (qpg + 2) * dh;
#pragma omp parallel for schedule(static)
  for (int64_t ui = 0; ui < units * s; ++ui) {
    const int64_t u = ui / s, i = ui % s;
    const int64_t bi = u / groups, g = u % groups;
    // Shares of query heads bi * heads + g * qpg + j, j = 0 .. qpg - 1, are consecutive.
    const float* share = shares + (bi * d.heads + g * qpg) * 2 * s * dh + i * dh;
    auto* out = dqkv + i * row + (u * (qpg + 2) + qpg) * dh;
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t e = 0; e < dh; ++e) {
        double sum = 0.0;
        for (int64_t j = 0; j < qpg; ++j) sum += share[(j * 2 + part) * s * dh + e];
        out[part * dh + e] = St::store(static_cast<float>(sum));
      }
    }
  }
}

}  // namespace

bool CpuBackend::fused_attention_supported(DType t, int64_t dh) const {
  return dtype_valid(static_cast<int>(t)) && dtype_is_float(t) && dh > 0;
}

void CpuBackend::attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                                   DType t) {
  kcheck::check_attention_forward(d, qkv, ctx, lse, t);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const KvSource kv = kv_source<St>(static_cast<const S*>(qkv), d);
    const int64_t pairs = d.b * d.heads;
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      forward_head<St>(d, bh / d.heads, bh % d.heads, static_cast<const S*>(qkv), kv,
                       static_cast<S*>(ctx), lse);
    }
  });
}

void CpuBackend::attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                                    const float* lse, const void* dctx, void* dqkv, float* delta,
                                    DType t) {
  kcheck::check_attention_backward(d, qkv, ctx, lse, dctx, dqkv, delta, t);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const KvSource kv = kv_source<St>(static_cast<const S*>(qkv), d);
    // With several query heads per group, each one's share of the group's dK and dV:
    // [b, heads, 2, s, dh] fp32.
    const bool grouped = d.q_per_group() > 1;
    std::unique_ptr<float[]> shares;
    if (grouped) shares.reset(new float[static_cast<std::size_t>(d.b * d.heads * 2 * d.s * d.dh)]);
    const int64_t pairs = d.b * d.heads;
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      backward_head<St>(d, bh / d.heads, bh % d.heads, static_cast<const S*>(qkv), kv,
                        static_cast<const S*>(ctx), lse, static_cast<const S*>(dctx),
                        static_cast<S*>(dqkv), delta, shares.get());
    }
    if (grouped) reduce_dkv<St>(d, shares.get(), static_cast<S*>(dqkv));
  });
}

}  // namespace ptdp
