// Ring attention's block-pair kernels on the CPU (AttentionBlockDesc): the fused attention of
// attention.cpp on one (query block, key block) pair at global positions, its result merged into
// the running context and log-sum-exp by the log-sum-exp rule, and the flash-attention backward
// of the pair accumulating into fp32 dq and dkv. The reference the CUDA kernels are tested
// against, as attention.cpp is.
//
// The forward runs one (sample, query head) pair per task; the backward one (sample, key/value
// group) unit per task, its query heads in head order, so a group's dK and dV are summed in a
// fixed order whatever the thread count, with no two tasks writing the same element.
#include <algorithm>
#include <cmath>
#include <limits>
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

// Where a block's operands sit.
struct BlockView {
  int64_t groups, qpg;
  int64_t q_row;    // b * groups * (qpg + 2) * dh: between query positions in q
  int64_t kv_row;   // b * groups * 2 * dh
  int64_t out_row;  // b * heads * dh: ctx, dctx, out and dq rows
};

BlockView block_view(const AttentionBlockDesc& d) {
  const int64_t groups = d.kv_groups(), qpg = d.q_per_group();
  return {groups, qpg, d.b * groups * (qpg + 2) * d.dh, d.b * groups * 2 * d.dh, d.b * d.heads * d.dh};
}

// The keys [lo, hi] (block-local, inclusive) that query row i of sample bi sees; lo > hi: none.
inline void visible_keys(const AttentionBlockDesc& d, int64_t bi, int64_t i, int64_t& lo, int64_t& hi) {
  const int64_t gq = d.q_start + i;
  int64_t first = 0;
  if (d.document_starts != nullptr) first = std::clamp<int64_t>(d.document_starts[bi * d.seq + gq], 0, gq);
  lo = std::max(first, d.k_start) - d.k_start;
  hi = std::min(gq, d.k_start + d.sk - 1) - d.k_start;
}

// The fp32 keys and values of unit u of kv: [sk, 2, dh].
template <typename St>
void widen_kv(const AttentionBlockDesc& d, const BlockView& v, const typename St::type* kv, int64_t unit,
              float* out) {
  for (int64_t j = 0; j < d.sk; ++j) {
    const auto* src = kv + j * v.kv_row + unit * 2 * d.dh;
    for (int64_t e = 0; e < 2 * d.dh; ++e) out[j * 2 * d.dh + e] = St::load(src[e]);
  }
}

template <typename St>
void block_forward_head(const AttentionBlockDesc& d, int64_t bi, int64_t hi, const typename St::type* q,
                        const typename St::type* kv, float* out, float* lse) {
  const BlockView v = block_view(d);
  const int64_t dh = d.dh, g = hi / v.qpg, jq = hi % v.qpg, unit = bi * v.groups + g;
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  std::vector<float> kvf(2 * d.sk * dh), qi(dh), acc(dh), score(kKeyTile);
  std::vector<uint8_t> keep(dropout ? d.sk : 0);
  widen_kv<St>(d, v, kv, unit, kvf.data());
  float head_max = kNegInf;  // AttentionBlockDesc::max_logit over the block pair
  for (int64_t i = 0; i < d.sq; ++i) {
    int64_t lo = 0, hi_key = -1;
    visible_keys(d, bi, i, lo, hi_key);
    if (lo > hi_key) continue;
    const auto* src = q + i * v.q_row + (unit * (v.qpg + 2) + jq) * dh;
    for (int64_t e = 0; e < dh; ++e) qi[e] = St::load(src[e]);
    const int64_t row = (d.q_start + i) * d.seq + d.k_start;  // the mask's index of key 0 of the block
    if (dropout) cpu::dropout_keep_row(d.dropout, bi, hi, row + lo, row + hi_key + 1, keep.data());
    float m = kNegInf;
    double l = 0.0;  // sum of exp(score - m) over the keys seen, dropped ones included
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j0 = lo; j0 <= hi_key; j0 += kKeyTile) {
      const int64_t j1 = std::min(hi_key + 1, j0 + kKeyTile);
      float tile_max = kNegInf;
      for (int64_t j = j0; j < j1; ++j) {
        score[j - j0] = d.scale * dot(qi.data(), kvf.data() + j * 2 * dh, dh);
        tile_max = std::max(tile_max, score[j - j0]);
      }
      const float m_new = std::max(m, tile_max);
      const float alpha = std::exp(m - m_new);
      l *= alpha;
      for (int64_t e = 0; e < dh; ++e) acc[e] *= alpha;
      for (int64_t j = j0; j < j1; ++j) {
        const float p = std::exp(score[j - j0] - m_new);
        l += p;
        const float w = dropout ? (keep[j - lo] ? p * keep_scale : 0.0f) : p;
        if (w != 0.0f) axpy(w, kvf.data() + j * 2 * dh + dh, acc.data(), dh);
      }
      m = m_new;
    }
    head_max = std::max(head_max, m);
    // Merge (o_b, lse_b) = (acc / l, m + log l) into the running (o, L):
    // L' = log(e^L + e^lse_b), o' = o e^(L - L') + o_b e^(lse_b - L').
    const float lse_b = m + static_cast<float>(std::log(l));
    float* o = out + i * v.out_row + (bi * d.heads + hi) * dh;
    float& big_l = lse[(bi * d.heads + hi) * d.sq + i];
    const float inv_l = static_cast<float>(1.0 / l);
    if (big_l == kNegInf) {
      for (int64_t e = 0; e < dh; ++e) o[e] = acc[e] * inv_l;
      big_l = lse_b;
      continue;
    }
    const float mx = std::max(big_l, lse_b);
    const float merged = mx + std::log(std::exp(big_l - mx) + std::exp(lse_b - mx));
    const float wa = std::exp(big_l - merged), wb = std::exp(lse_b - merged) * inv_l;
    for (int64_t e = 0; e < dh; ++e) o[e] = o[e] * wa + acc[e] * wb;
    big_l = merged;
  }
  // One task per (bi, hi): no other thread writes this entry.
  if (d.max_logit != nullptr) {
    float& out = d.max_logit[bi * d.heads + hi];
    out = std::max(out, head_max);
  }
}

// The pair's share of dQ, dK and dV for unit (bi, g): for each of its query heads, in order,
//   P_ij = exp(scale q_i.k_j - lse_i), keep_ij / (1 - p) the dropout factor,
//   dP_ij = factor dO_i.v_j, dS_ij = P_ij (dP_ij - delta_i), delta_i = dO_i.ctx_i,
//   dQ_i += scale sum_j dS_ij k_j, dK_j += scale sum_i dS_ij q_i, dV_j += sum_i P_ij factor dO_i.
template <typename St>
void block_backward_unit(const AttentionBlockDesc& d, int64_t bi, int64_t g, const typename St::type* q,
                         const typename St::type* kv, const typename St::type* ctx, const float* lse,
                         const typename St::type* dctx, float* dq, float* dkv) {
  const BlockView v = block_view(d);
  const int64_t dh = d.dh, unit = bi * v.groups + g;
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  std::vector<float> kvf(2 * d.sk * dh), qi(dh), doi(dh);
  std::vector<uint8_t> keep(dropout ? d.sk : 0);
  widen_kv<St>(d, v, kv, unit, kvf.data());
  float* dkv_unit = dkv + unit * 2 * dh;  // row j at j * kv_row
  for (int64_t jq = 0; jq < v.qpg; ++jq) {
    const int64_t hi = g * v.qpg + jq;
    for (int64_t i = 0; i < d.sq; ++i) {
      int64_t lo = 0, hi_key = -1;
      visible_keys(d, bi, i, lo, hi_key);
      if (lo > hi_key) continue;
      const auto* qs = q + i * v.q_row + (unit * (v.qpg + 2) + jq) * dh;
      const int64_t at = i * v.out_row + (bi * d.heads + hi) * dh;
      double delta = 0.0;
      for (int64_t e = 0; e < dh; ++e) {
        qi[e] = St::load(qs[e]);
        doi[e] = St::load(dctx[at + e]);
        delta += static_cast<double>(doi[e]) * St::load(ctx[at + e]);
      }
      const float delta_i = static_cast<float>(delta), lse_i = lse[(bi * d.heads + hi) * d.sq + i];
      const int64_t row = (d.q_start + i) * d.seq + d.k_start;
      if (dropout) cpu::dropout_keep_row(d.dropout, bi, hi, row + lo, row + hi_key + 1, keep.data());
      float* dqi = dq + at;
      for (int64_t j = lo; j <= hi_key; ++j) {
        const float* kj = kvf.data() + j * 2 * dh;
        const float* vj = kj + dh;
        const float p = std::exp(d.scale * dot(qi.data(), kj, dh) - lse_i);
        const float kf = dropout ? (keep[j - lo] ? keep_scale : 0.0f) : 1.0f;
        const float dp = kf * dot(doi.data(), vj, dh);
        const float ds = d.scale * (p * (dp - delta_i));
        float* dkj = dkv_unit + j * v.kv_row;
        if (kf != 0.0f) axpy(p * kf, doi.data(), dkj + dh, dh);
        axpy(ds, kj, dqi, dh);
        axpy(ds, qi.data(), dkj, dh);
      }
    }
  }
}

}  // namespace

bool CpuBackend::attention_block_supported(DType t, int64_t dh) const {
  return fused_attention_supported(t, dh);
}

void CpuBackend::attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv, float* out,
                                         float* lse, DType t) {
  kcheck::check_attention_block_forward(d, q, kv, out, lse, t);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const int64_t pairs = d.b * d.heads;
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      block_forward_head<St>(d, bh / d.heads, bh % d.heads, static_cast<const S*>(q), static_cast<const S*>(kv), out,
                             lse);
    }
  });
}

void CpuBackend::attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv, const void* ctx,
                                          const float* lse, const void* dctx, float* dq, float* dkv, DType t) {
  kcheck::check_attention_block_backward(d, q, kv, ctx, lse, dctx, dq, dkv, t);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const int64_t groups = d.kv_groups(), units = d.b * groups;
#pragma omp parallel for schedule(dynamic)
    for (int64_t u = 0; u < units; ++u) {
      block_backward_unit<St>(d, u / groups, u % groups, static_cast<const S*>(q), static_cast<const S*>(kv),
                              static_cast<const S*>(ctx), lse, static_cast<const S*>(dctx), dq, dkv);
    }
  });
}

}  // namespace ptdp
