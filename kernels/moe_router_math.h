// The router's per-token math (RouterDesc in kernels/backend.h), written once for the CPU
// (kernels/cpu/moe_router.cpp) and CUDA (kernels/cuda/moe_router.cu) backends: both run these
// functions on one token's row, so both select the same experts from the same values and sum in
// the same order; only exp differs (the host's expf against the device's, both within a few ulp).
//
// Plain C++ that nvcc also compiles as host-device code; no CUDA header.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"

#if defined(__CUDACC__)
#define PTDP_HD __host__ __device__ __forceinline__
#else
#define PTDP_HD inline
#endif

namespace ptdp::moe_math {

/// The ordering key of a selection value: NaN ranks as -inf, so the order stays total (and every
/// round of the selection finds an expert) whatever the logits hold.
PTDP_HD float order_key(float v) { return v != v ? -INFINITY : v; }

/// Whether (va, a) ranks before (vb, b): larger value first, equal values by lower index.
PTDP_HD bool ranks_before(float va, int64_t a, float vb, int64_t b) {
  const float ka = order_key(va), kb = order_key(vb);
  return ka > kb || (ka == kb && a < b);
}

PTDP_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// Max and sum of exp(l - max) over a row of n logits, summed in index order.
struct SoftmaxStats {
  float max, sum;
};

PTDP_HD SoftmaxStats softmax_stats(const float* l, int64_t n) {
  float mx = -INFINITY;
  for (int64_t e = 0; e < n; ++e) mx = l[e] > mx ? l[e] : mx;
  float sum = 0.0f;
  for (int64_t e = 0; e < n; ++e) sum += expf(l[e] - mx);
  return {mx, sum};
}

PTDP_HD float softmax_at(const float* l, int64_t e, SoftmaxStats st) {
  return expf(l[e] - st.max) / st.sum;
}

/// One token's selection values: the logits, the softmax over all experts (pre_softmax), or
/// sigmoid plus the expert bias.
struct Selection {
  const float* logits;  // [experts]
  const float* bias;    // [experts] or NULL
  RouterScore score;
  bool pre_softmax;
  SoftmaxStats stats;  // pre_softmax only

  PTDP_HD float value(int64_t e) const {
    if (score == RouterScore::Sigmoid) {
      const float s = sigmoid(logits[e]);
      return bias != nullptr ? s + bias[e] : s;
    }
    return pre_softmax ? softmax_at(logits, e, stats) : logits[e];
  }
};

/// Writes to out[0, count) the count best experts of [first, last) that `allowed` admits, best
/// first (each round takes the best expert ranking after the previous round's, so no scratch is
/// needed), and returns the sum of their values in that order.
template <typename Allowed>
PTDP_HD float select_best(const Selection& sel, int64_t first, int64_t last, int64_t count,
                          Allowed allowed, int32_t* out) {
  float prev_v = 0.0f, total = 0.0f;
  int64_t prev = -1;
  for (int64_t r = 0; r < count; ++r) {
    int64_t best = -1;
    float best_v = 0.0f;
    for (int64_t e = first; e < last; ++e) {
      if (!allowed(e)) continue;
      const float v = sel.value(e);
      if (prev >= 0 && !ranks_before(prev_v, prev, v, e)) continue;
      if (best < 0 || ranks_before(v, e, best_v, best)) {
        best = e;
        best_v = v;
      }
    }
    if (out != nullptr) out[r] = static_cast<int32_t>(best);
    total += best_v;
    prev = best;
    prev_v = best_v;
  }
  return total;
}

/// The forward of one token: indices[topk] and probs[topk]. group_scores is scratch of
/// d.num_groups floats (unused without groups).
PTDP_HD void route_token(const RouterDesc& d, const float* logits, const float* bias,
                         float* group_scores, int32_t* indices, float* probs) {
  const int64_t E = d.experts, k = d.topk;
  Selection sel{logits, bias, d.score, d.pre_softmax, SoftmaxStats{0.0f, 1.0f}};
  if (d.score == RouterScore::Softmax && d.pre_softmax) sel.stats = softmax_stats(logits, E);
  const auto any = [](int64_t) { return true; };
  if (d.num_groups > 0) {
    const int64_t per = E / d.num_groups;
    const int64_t best_of = d.group_score_topk > 0 ? d.group_score_topk : k / d.group_topk;
    for (int64_t g = 0; g < d.num_groups; ++g) {
      group_scores[g] = select_best(sel, g * per, (g + 1) * per, best_of, any, nullptr);
    }
    // The group_topk best groups are exactly those ranking at or before the last one chosen.
    float last_v = 0.0f;
    int64_t last = -1;
    for (int64_t r = 0; r < d.group_topk; ++r) {
      int64_t best = -1;
      for (int64_t g = 0; g < d.num_groups; ++g) {
        if (last >= 0 && !ranks_before(last_v, last, group_scores[g], g)) continue;
        if (best < 0 || ranks_before(group_scores[g], g, group_scores[best], best)) best = g;
      }
      last = best;
      last_v = group_scores[best];
    }
    const auto in_kept_group = [&](int64_t e) {
      const int64_t g = e / per;
      return g == last || ranks_before(group_scores[g], g, last_v, last);
    };
    select_best(sel, 0, E, k, in_kept_group, indices);
  } else {
    select_best(sel, 0, E, k, any, indices);
  }
  const float scale = d.scaling_factor != 0.0f ? d.scaling_factor : 1.0f;
  if (d.score == RouterScore::Softmax && !d.pre_softmax) {
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) mx = logits[indices[j]] > mx ? logits[indices[j]] : mx;
    for (int64_t j = 0; j < k; ++j) sum += expf(logits[indices[j]] - mx);
    for (int64_t j = 0; j < k; ++j) probs[j] = expf(logits[indices[j]] - mx) / sum * scale;
  } else if (d.score == RouterScore::Softmax) {
    for (int64_t j = 0; j < k; ++j) probs[j] = softmax_at(logits, indices[j], sel.stats) * scale;
  } else {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += sigmoid(logits[indices[j]]);
    const float denom = k > 1 ? sum + 1e-20f : 1.0f;
    for (int64_t j = 0; j < k; ++j) probs[j] = sigmoid(logits[indices[j]]) / denom * scale;
  }
}

/// The backward of one token (RouterDesc's formulas): adds d probs / d logits applied to dprobs
/// into dlogits[experts], which the caller has cleared or holds the gradient to accumulate onto.
/// Indices outside [0, experts) are skipped (never dereferenced).
PTDP_HD void route_token_backward(const RouterDesc& d, const float* logits, const int32_t* indices,
                                  const float* dprobs, float* dlogits) {
  const int64_t E = d.experts, k = d.topk;
  const float f = d.scaling_factor != 0.0f ? d.scaling_factor : 1.0f;
  const auto valid = [E](int32_t e) { return e >= 0 && e < E; };
  if (d.score == RouterScore::Softmax && !d.pre_softmax) {
    float mx = -INFINITY, sum = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (valid(indices[j])) mx = logits[indices[j]] > mx ? logits[indices[j]] : mx;
    }
    for (int64_t j = 0; j < k; ++j) {
      if (valid(indices[j])) sum += expf(logits[indices[j]] - mx);
    }
    for (int64_t j = 0; j < k; ++j) {
      if (valid(indices[j])) dot += expf(logits[indices[j]] - mx) / sum * dprobs[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      if (!valid(indices[j])) continue;
      const float q = expf(logits[indices[j]] - mx) / sum;
      dlogits[indices[j]] += f * q * (dprobs[j] - dot);
    }
  } else if (d.score == RouterScore::Softmax) {
    const SoftmaxStats st = softmax_stats(logits, E);
    float dot = 0.0f;  // <s, ds> with ds = f dprobs at the selected experts
    for (int64_t j = 0; j < k; ++j) {
      if (valid(indices[j])) dot += softmax_at(logits, indices[j], st) * (f * dprobs[j]);
    }
    for (int64_t e = 0; e < E; ++e) dlogits[e] -= softmax_at(logits, e, st) * dot;
    for (int64_t j = 0; j < k; ++j) {
      if (valid(indices[j])) dlogits[indices[j]] += softmax_at(logits, indices[j], st) * (f * dprobs[j]);
    }
  } else {
    float sum = 0.0f, dot = 0.0f;  // S - 1e-20 and <dp, c>
    for (int64_t j = 0; j < k; ++j) {
      if (!valid(indices[j])) continue;
      const float c = sigmoid(logits[indices[j]]);
      sum += c;
      dot += dprobs[j] * c;
    }
    const float S = sum + 1e-20f;
    for (int64_t j = 0; j < k; ++j) {
      if (!valid(indices[j])) continue;
      const float c = sigmoid(logits[indices[j]]);
      const float dc = k > 1 ? f * (dprobs[j] / S - dot / (S * S)) : f * dprobs[j];
      dlogits[indices[j]] += dc * c * (1.0f - c);
    }
  }
}

/// The load-balancing scores of one token: softmax, or sigmoid normalised by its sum + 1e-20.
PTDP_HD void aux_scores_token(RouterScore score, const float* logits, int64_t E, float* scores) {
  if (score == RouterScore::Softmax) {
    const SoftmaxStats st = softmax_stats(logits, E);
    for (int64_t e = 0; e < E; ++e) scores[e] = softmax_at(logits, e, st);
    return;
  }
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) sum += sigmoid(logits[e]);
  const float S = sum + 1e-20f;
  for (int64_t e = 0; e < E; ++e) scores[e] = sigmoid(logits[e]) / S;
}

/// Adds the backward of aux_scores_token applied to dscores into dlogits.
PTDP_HD void aux_scores_token_backward(RouterScore score, const float* logits,
                                      const float* dscores, int64_t E, float* dlogits) {
  if (score == RouterScore::Softmax) {
    const SoftmaxStats st = softmax_stats(logits, E);
    float dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) dot += softmax_at(logits, e, st) * dscores[e];
    for (int64_t e = 0; e < E; ++e) dlogits[e] += softmax_at(logits, e, st) * (dscores[e] - dot);
    return;
  }
  float sum = 0.0f, dot = 0.0f;
  for (int64_t e = 0; e < E; ++e) {
    const float s = sigmoid(logits[e]);
    sum += s;
    dot += dscores[e] * s;
  }
  const float S = sum + 1e-20f;
  for (int64_t e = 0; e < E; ++e) {
    const float s = sigmoid(logits[e]);
    dlogits[e] += (dscores[e] / S - dot / (S * S)) * s * (1.0f - s);
  }
}

/// log sum_e exp(l_e): max + log(sum), -inf for a row of -inf.
PTDP_HD float lse_token(const float* logits, int64_t E) {
  const SoftmaxStats st = softmax_stats(logits, E);
  return st.max == -INFINITY ? -INFINITY : st.max + logf(st.sum);
}

/// Adds scale * 2 lse softmax(l) into dlogits (the z-loss's gradient).
PTDP_HD void z_loss_token_backward(const float* logits, float lse, float scale, int64_t E,
                                   float* dlogits) {
  const SoftmaxStats st = softmax_stats(logits, E);
  const float c = scale * 2.0f * lse;
  for (int64_t e = 0; e < E; ++e) dlogits[e] += c * softmax_at(logits, e, st);
}

}  // namespace ptdp::moe_math
