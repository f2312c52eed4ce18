// Fused causal self-attention on the CPU: the flash-attention algorithm (key tiles, online
// softmax, log-sum-exp saved per query row, the backward recomputing the probabilities), written
// as the reference the GPU kernel is tested against. One (batch, head) pair per task; within a
// task everything is fp32, and ctx and dqkv are rounded to the storage type once.
//
// Dropout on the probabilities draws the unfused path's mask: there the probabilities are
// [b * heads, s, s] with the DropoutDesc block [b, heads, s * s], so probability (i, j) of
// (batch bi, head hi) keeps or drops as element (bi, hi, i * s + j) of that block does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int64_t kKeyTile = 64;  // keys scored per online-softmax step
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t d = 0; d < n; ++d) acc += x[d] * y[d];
  return acc;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

// Where the rows of one (batch, head) pair sit in the [s, b, heads, ...] activations.
struct HeadView {
  int64_t qkv_row;   // elements between positions i and i + 1 of qkv: b * heads * 3 * dh
  int64_t qkv_base;  // offset of q at position 0: (bi * heads + hi) * 3 * dh
  int64_t ctx_row;   // b * heads * dh
  int64_t ctx_base;  // (bi * heads + hi) * dh
};

HeadView head_view(const AttentionDesc& d, int64_t bi, int64_t hi) {
  const int64_t bh = bi * d.heads + hi;
  return {d.b * d.heads * 3 * d.dh, bh * 3 * d.dh, d.b * d.heads * d.dh, bh * d.dh};
}

// Widens q, k or v (part 0, 1, 2) of one head into packed fp32 [s, dh].
template <typename St>
void gather_qkv(const typename St::type* qkv, const AttentionDesc& d, const HeadView& hv,
                int part, float* out) {
  for (int64_t i = 0; i < d.s; ++i) {
    const auto* src = qkv + i * hv.qkv_row + hv.qkv_base + part * d.dh;
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

template <typename St>
void forward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                  typename St::type* ctx, float* lse) {
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  std::vector<float> q(s * dh), k(s * dh), v(s * dh), acc(dh), score(kKeyTile);
  std::vector<uint8_t> keep(dropout ? s : 0);
  gather_qkv<St>(qkv, d, hv, 0, q.data());
  gather_qkv<St>(qkv, d, hv, 1, k.data());
  gather_qkv<St>(qkv, d, hv, 2, v.data());
  for (int64_t i = 0; i < s; ++i) {
    const float* qi = q.data() + i * dh;
    if (dropout) cpu::dropout_keep_row(d.dropout, bi, hi, i * s, i * s + i + 1, keep.data());
    float m = kNegInf;
    double l = 0.0;  // sum of exp(score - m) over the keys seen, dropped ones included
    std::fill(acc.begin(), acc.end(), 0.0f);
    // Query i sees keys 0 .. i.
    for (int64_t j0 = 0; j0 <= i; j0 += kKeyTile) {
      const int64_t j1 = std::min(i + 1, j0 + kKeyTile);
      float tile_max = kNegInf;
      for (int64_t j = j0; j < j1; ++j) {
        score[j - j0] = d.scale * dot(qi, k.data() + j * dh, dh);
        tile_max = std::max(tile_max, score[j - j0]);
      }
      const float m_new = std::max(m, tile_max);
      const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
      l *= alpha;
      for (int64_t e = 0; e < dh; ++e) acc[e] *= alpha;
      for (int64_t j = j0; j < j1; ++j) {
        const float p = std::exp(score[j - j0] - m_new);
        l += p;
        const float w = dropout ? (keep[j] ? p * keep_scale : 0.0f) : p;
        if (w != 0.0f) axpy(w, v.data() + j * dh, acc.data(), dh);
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
template <typename St>
void backward_head(const AttentionDesc& d, int64_t bi, int64_t hi, const typename St::type* qkv,
                   const typename St::type* ctx, const float* lse, const typename St::type* dctx,
                   typename St::type* dqkv, float* delta) {
  const int64_t s = d.s, dh = d.dh;
  const HeadView hv = head_view(d, bi, hi);
  const bool dropout = d.dropout.p > 0.0f;
  const float keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  std::vector<float> q(s * dh), k(s * dh), v(s * dh), o(s * dh), dout(s * dh);
  std::vector<float> dq(s * dh, 0.0f), dk(s * dh, 0.0f), dv(s * dh, 0.0f);
  std::vector<uint8_t> keep(dropout ? s : 0);
  gather_qkv<St>(qkv, d, hv, 0, q.data());
  gather_qkv<St>(qkv, d, hv, 1, k.data());
  gather_qkv<St>(qkv, d, hv, 2, v.data());
  gather_ctx<St>(ctx, d, hv, o.data());
  gather_ctx<St>(dctx, d, hv, dout.data());
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
    if (dropout) cpu::dropout_keep_row(d.dropout, bi, hi, i * s, i * s + i + 1, keep.data());
    for (int64_t j = 0; j <= i; ++j) {
      const float* kj = k.data() + j * dh;
      const float* vj = v.data() + j * dh;
      const float p = std::exp(d.scale * dot(qi, kj, dh) - lse_h[i]);
      const float kf = dropout ? (keep[j] ? keep_scale : 0.0f) : 1.0f;
      const float dp = kf * dot(doi, vj, dh);
      const float ds = d.scale * (p * (dp - delta_h[i]));
      if (kf != 0.0f) axpy(p * kf, doi, dv.data() + j * dh, dh);
      axpy(ds, kj, dqi, dh);
      axpy(ds, qi, dk.data() + j * dh, dh);
    }
  }
  for (int64_t i = 0; i < s; ++i) {
    auto* out = dqkv + i * hv.qkv_row + hv.qkv_base;
    for (int64_t e = 0; e < dh; ++e) {
      out[e] = St::store(dq[i * dh + e]);
      out[dh + e] = St::store(dk[i * dh + e]);
      out[2 * dh + e] = St::store(dv[i * dh + e]);
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
    const int64_t pairs = d.b * d.heads;
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      forward_head<St>(d, bh / d.heads, bh % d.heads, static_cast<const S*>(qkv),
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
    const int64_t pairs = d.b * d.heads;
#pragma omp parallel for schedule(dynamic)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      backward_head<St>(d, bh / d.heads, bh % d.heads, static_cast<const S*>(qkv),
                        static_cast<const S*>(ctx), lse, static_cast<const S*>(dctx),
                        static_cast<S*>(dqkv), delta);
    }
  });
}

}  // namespace ptdp
