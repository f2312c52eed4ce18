// The router's auxiliary losses' pieces: the load-balancing scores (softmax, or sigmoid
// normalised over the experts) and the z-loss's log-sum-exp, with their backwards. One token per
// iteration, the per-token math shared with the CUDA backend (kernels/moe_router_math.h).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/moe_router_math.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens,
                                        int64_t experts, float* scores) {
  if (kcheck::check_moe_aux_scores("moe_aux_scores_forward", score, logits, nullptr, scores,
                                   tokens, experts, false) == kcheck::Work::none) {
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    moe_math::aux_scores_token(score, logits + t * experts, experts, scores + t * experts);
  }
}

void CpuBackend::moe_aux_scores_backward(RouterScore score, const float* logits,
                                         const float* dscores, int64_t tokens, int64_t experts,
                                         float* dlogits, bool accumulate) {
  if (kcheck::check_moe_aux_scores("moe_aux_scores_backward", score, logits, dscores, dlogits,
                                   tokens, experts, true) == kcheck::Work::none) {
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = dlogits + t * experts;
    if (!accumulate) std::fill(row, row + experts, 0.0f);
    moe_math::aux_scores_token_backward(score, logits + t * experts, dscores + t * experts,
                                        experts, row);
  }
}

void CpuBackend::moe_router_lse(const float* logits, int64_t tokens, int64_t experts, float* lse) {
  if (kcheck::check_moe_router_lse(logits, tokens, experts, lse) == kcheck::Work::none) return;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) lse[t] = moe_math::lse_token(logits + t * experts, experts);
}

void CpuBackend::moe_router_z_loss_backward(const float* logits, const float* lse, float scale,
                                            int64_t tokens, int64_t experts, float* dlogits,
                                            bool accumulate) {
  if (kcheck::check_moe_router_z_loss_backward(logits, lse, scale, tokens, experts, dlogits) ==
      kcheck::Work::none) {
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = dlogits + t * experts;
    if (!accumulate) std::fill(row, row + experts, 0.0f);
    moe_math::z_loss_token_backward(logits + t * experts, lse[t], scale, experts, row);
  }
}

}  // namespace ptdp
