// Fused causal self-attention on the CPU: the flash-attention algorithm (key tiles, online
// softmax, log-sum-exp saved per query row, the backward recomputing the probabilities), written
// as the reference the GPU kernel is tested against. One (batch, head) pair per task; within a
// task everything is fp32, and ctx and dqkv are rounded to the storage type once.
//
// Grouped-query attention (AttentionDesc::groups): all query heads of a group read its key and
// value in place (f32), or from one fp32 copy widened per group (bf16, f16); never a copy per
// query head. With several query heads per group the backward keeps each head's share of the
// group's dK and dV apart and sums them afterwards in head order, so the result does not depend
// on the thread count. With one query head per group (groups == heads, or 0) every value
// equals the multi-head kernel's, bit for bit.
//
// Documents (AttentionDesc::document_starts): query i reads keys start .. i only, and its key
// tiles begin at its document's first key, so a document's rows see exactly the tiles, sums and
// order of that document run alone (the same values, bit for bit, without dropout).
//
// Dropout on the probabilities draws the unfused path's mask: there the probabilities are
// [b * heads, s, s] with the DropoutDesc block [b, heads, s * s], so probability (i, j) of
// (batch bi, head hi) keeps or drops as element (bi, hi, i * s + j) of that block does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_math.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

using cpu_attention::axpy;
using cpu_attention::dot;
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

// One query head (bi, hi) against its group's key and value.
template <typename St>
void forward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                  const KvSource& kv, typename St::type* ctx, float* lse) {
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  const float* k = kv.keys(hv.unit);
  const float* v = kv.values(hv.unit);
  const int64_t kv_row = kv.row;
  std::vector<float> q(s * dh), acc(dh), score(kKeyTile);
  std::vector<uint8_t> keep(dropout ? s : 0);
  gather_q<St>(qkv, d, hv, q.data());
  for (int64_t i = 0; i < s; ++i) {
    const float* qi = q.data() + i * dh;
    const int64_t first = first_key(d, bi, i);
    // The mask is indexed by the query head: [b, heads, s * s], as in the unfused path;
    // keep[j - first] is key j's.
    if (dropout) {
      cpu::dropout_keep_row(d.dropout, bi, hi, i * s + first, i * s + i + 1, keep.data());
    }
    float m = kNegInf;
    double l = 0.0;  // sum of exp(score - m) over the keys seen, dropped ones included
    std::fill(acc.begin(), acc.end(), 0.0f);
    // Query i sees keys first .. i (first = 0 without documents).
    for (int64_t j0 = first; j0 <= i; j0 += kKeyTile) {
      const int64_t j1 = std::min(i + 1, j0 + kKeyTile);
      float tile_max = kNegInf;
      for (int64_t j = j0; j < j1; ++j) {
        score[j - j0] = d.scale * dot(qi, k + j * kv_row, dh);
        tile_max = std::max(tile_max, score[j - j0]);
      }
      const float m_new = std::max(m, tile_max);
      const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
      l *= alpha;
      for (int64_t e = 0; e < dh; ++e) acc[e] *= alpha;
      for (int64_t j = j0; j < j1; ++j) {
        const float p = std::exp(score[j - j0] - m_new);
        l += p;
        const float w = dropout ? (keep[j - first] ? p * keep_scale : 0.0f) : p;
        if (w != 0.0f) axpy(w, v + j * kv_row, acc.data(), dh);
      }
      m = m_new;
    }
    const float inv_l = static_cast<float>(1.0 / l);
    auto* out = ctx + i * hv.ctx_row + hv.ctx_base;
    for (int64_t e = 0; e < dh; ++e) out[e] = St::store(acc[e] * inv_l);
    lse[(bi * d.heads + hi) * s + i] = m + static_cast<float>(std::log(l));
  }
}

// dQ_i = scale sum_j dS_ij k_j, dK_j = scale sum_i dS_ij q_i, dV_j = sum_i P~_ij dO_i, where
//   P_ij = exp(scale q_i.k_j - lse_i), P~_ij = P_ij keep_ij / (1 - p) (the dropped probability),
//   dP_ij = keep_ij / (1 - p) dO_i.v_j, dS_ij = P_ij (dP_ij - delta_i),
//   delta_i = sum_j P_ij dP_ij = dO_i.ctx_i (ctx_i = sum_j P~_ij v_j, with dropout too).
// dQ is stored. With one query head per group dK and dV are too; otherwise this head's share
// of its group's dK and dV goes to shares[bi * heads + hi] ([2, s, dh] fp32, uninitialised on
// entry), which reduce_dkv sums over the group.
template <typename St>
void backward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                   const KvSource& kv, const typename St::type* ctx, const float* lse,
                   const typename St::type* dctx, typename St::type* dqkv, float* delta,
                   float* shares) {
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  const float* k = kv.keys(hv.unit);
  const float* v = kv.values(hv.unit);
  const int64_t kv_row = kv.row;
  const bool own_kv = d.q_per_group() == 1;
  std::vector<float> q(s * dh), o(s * dh), dout(s * dh), dq(s * dh, 0.0f);
  std::vector<float> own(own_kv ? 2 * s * dh : 0);
  float* dk = own_kv ? own.data() : shares + (bi * d.heads + hi) * 2 * s * dh;
  float* dv = dk + s * dh;
  std::vector<uint8_t> keep(dropout ? s : 0);
  gather_q<St>(qkv, d, hv, q.data());
  gather_ctx<St>(ctx, d, hv, o.data());
  gather_ctx<St>(dctx, d, hv, dout.data());
  std::fill(dk, dk + 2 * s * dh, 0.0f);
  const float* lse_h = lse + (bi * d.heads + hi) * s;
  float* delta_h = delta + (bi * d.heads + hi) * s;
  for (int64_t i = 0; i < s; ++i) {
    double acc = 0.0;
    for (int64_t e = 0; e < dh; ++e) acc += static_cast<double>(dout[i * dh + e]) * o[i * dh + e];
    delta_h[i] = static_cast<float>(acc);
  }
  for (int64_t i = 0; i < s; ++i) {
    const float* qi = q.data() + i * dh;
    const float* doi = dout.data() + i * dh;
    float* dqi = dq.data() + i * dh;
    const int64_t first = first_key(d, bi, i);
    if (dropout) {
      cpu::dropout_keep_row(d.dropout, bi, hi, i * s + first, i * s + i + 1, keep.data());
    }
    for (int64_t j = first; j <= i; ++j) {
      const float* kj = k + j * kv_row;
      const float* vj = v + j * kv_row;
      const float p = std::exp(d.scale * dot(qi, kj, dh) - lse_h[i]);
      const float kf = dropout ? (keep[j - first] ? keep_scale : 0.0f) : 1.0f;
      const float dp = kf * dot(doi, vj, dh);
      const float ds = d.scale * (p * (dp - delta_h[i]));
      if (kf != 0.0f) axpy(p * kf, doi, dv + j * dh, dh);
      axpy(ds, kj, dqi, dh);
      axpy(ds, qi, dk + j * dh, dh);
    }
  }
  for (int64_t i = 0; i < s; ++i) {
    auto* out = dqkv + i * hv.qkv_row + hv.qkv_base;
    for (int64_t e = 0; e < dh; ++e) out[e] = St::store(dq[i * dh + e]);
    if (own_kv) {  // the key and value slots follow the query: [s, b, heads, 3, dh]
      for (int64_t e = 0; e < dh; ++e) {
        out[dh + e] = St::store(dk[i * dh + e]);
        out[2 * dh + e] = St::store(dv[i * dh + e]);
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
