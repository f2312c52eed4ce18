// The router's auxiliary losses' pieces on the device: the load-balancing scores and the
// z-loss's log-sum-exp with their backwards, one thread per token running the per-token math
// shared with the CPU backend (kernels/moe_router_math.h).
#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/moe_router_math.h"

namespace ptdp::cuda {

namespace {

__global__ void aux_scores_kernel(RouterScore score, const float* logits, int64_t tokens,
                                  int64_t experts, float* scores) {
  PTDP_GRID_STRIDE(t, tokens) {
    moe_math::aux_scores_token(score, logits + t * experts, experts, scores + t * experts);
  }
}

__global__ void aux_scores_backward_kernel(RouterScore score, const float* logits,
                                           const float* dscores, int64_t tokens, int64_t experts,
                                           float* dlogits, bool accumulate) {
  PTDP_GRID_STRIDE(t, tokens) {
    float* row = dlogits + t * experts;
    if (!accumulate) {
      for (int64_t e = 0; e < experts; ++e) row[e] = 0.0f;
    }
    moe_math::aux_scores_token_backward(score, logits + t * experts, dscores + t * experts,
                                        experts, row);
  }
}

__global__ void router_lse_kernel(const float* logits, int64_t tokens, int64_t experts,
                                  float* lse) {
  PTDP_GRID_STRIDE(t, tokens) { lse[t] = moe_math::lse_token(logits + t * experts, experts); }
}

__global__ void z_loss_backward_kernel(const float* logits, const float* lse, float scale,
                                       int64_t tokens, int64_t experts, float* dlogits,
                                       bool accumulate) {
  PTDP_GRID_STRIDE(t, tokens) {
    float* row = dlogits + t * experts;
    if (!accumulate) {
      for (int64_t e = 0; e < experts; ++e) row[e] = 0.0f;
    }
    moe_math::z_loss_token_backward(logits + t * experts, lse[t], scale, experts, row);
  }
}

}  // namespace

void CudaBackend::moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens,
                                         int64_t experts, float* scores) {
  if (kcheck::check_moe_aux_scores("moe_aux_scores_forward", score, logits, nullptr, scores,
                                   tokens, experts, false) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  aux_scores_kernel<<<grid_for(tokens), kThreads, 0, stream_>>>(score, logits, tokens, experts,
                                                                 scores);
  PTDP_CU_LAUNCHED("aux_scores_kernel");
}

void CudaBackend::moe_aux_scores_backward(RouterScore score, const float* logits,
                                          const float* dscores, int64_t tokens, int64_t experts,
                                          float* dlogits, bool accumulate) {
  if (kcheck::check_moe_aux_scores("moe_aux_scores_backward", score, logits, dscores, dlogits,
                                   tokens, experts, true) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  aux_scores_backward_kernel<<<grid_for(tokens), kThreads, 0, stream_>>>(
      score, logits, dscores, tokens, experts, dlogits, accumulate);
  PTDP_CU_LAUNCHED("aux_scores_backward_kernel");
}

void CudaBackend::moe_router_lse(const float* logits, int64_t tokens, int64_t experts,
                                 float* lse) {
  if (kcheck::check_moe_router_lse(logits, tokens, experts, lse) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  router_lse_kernel<<<grid_for(tokens), kThreads, 0, stream_>>>(logits, tokens, experts, lse);
  PTDP_CU_LAUNCHED("router_lse_kernel");
}

void CudaBackend::moe_router_z_loss_backward(const float* logits, const float* lse, float scale,
                                             int64_t tokens, int64_t experts, float* dlogits,
                                             bool accumulate) {
  if (kcheck::check_moe_router_z_loss_backward(logits, lse, scale, tokens, experts, dlogits) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  z_loss_backward_kernel<<<grid_for(tokens), kThreads, 0, stream_>>>(logits, lse, scale, tokens,
                                                                      experts, dlogits, accumulate);
  PTDP_CU_LAUNCHED("z_loss_backward_kernel");
}

}  // namespace ptdp::cuda
