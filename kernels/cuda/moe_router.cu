// The MoE router's top-k selection and its backward on the device: one thread per token runs
// the per-token math shared with the CPU backend (kernels/moe_router_math.h), so both devices
// select the same experts from the same values and sum in the same order. A router row is a few
// dozen to a few hundred logits, and the layer's GEMMs dwarf this op; what matters is that the
// selection is the CPU's, tie for tie.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/moe_router_math.h"

namespace ptdp::cuda {

namespace {

// Group-limited routing keeps num_groups scores per token in shared memory.
constexpr std::size_t kSharedBytes = 48 * 1024;

// Threads per block such that each keeps its group scores in shared memory.
int router_threads(int64_t num_groups) {
  const auto per_thread = static_cast<std::size_t>(std::max<int64_t>(1, num_groups)) * sizeof(float);
  return static_cast<int>(std::min<std::size_t>(kThreads, std::max<std::size_t>(1, kSharedBytes / per_thread)));
}

__global__ void router_forward_kernel(RouterDesc d, const float* logits, const float* bias,
                                      int32_t* indices, float* probs) {
  extern __shared__ float group_scores[];  // [blockDim.x, max(1, num_groups)]
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= d.tokens) return;
  const int64_t groups = d.num_groups > 0 ? d.num_groups : 1;
  moe_math::route_token(d, logits + t * d.experts, bias, group_scores + threadIdx.x * groups,
                        indices + t * d.topk, probs + t * d.topk);
}

__global__ void router_backward_kernel(RouterDesc d, const float* logits, const int32_t* indices,
                                       const float* dprobs, float* dlogits, bool accumulate) {
  PTDP_GRID_STRIDE(t, d.tokens) {
    float* row = dlogits + t * d.experts;
    if (!accumulate) {
      for (int64_t e = 0; e < d.experts; ++e) row[e] = 0.0f;
    }
    moe_math::route_token_backward(d, logits + t * d.experts, indices + t * d.topk,
                                   dprobs + t * d.topk, row);
  }
}

}  // namespace

void CudaBackend::moe_router_forward(const RouterDesc& d, const float* logits,
                                     const float* expert_bias, int32_t* indices, float* probs) {
  if (kcheck::check_moe_router_forward(d, logits, expert_bias, indices, probs) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  const int threads = router_threads(d.num_groups);
  const std::size_t shared = static_cast<std::size_t>(threads) *
                             static_cast<std::size_t>(std::max<int64_t>(1, d.num_groups)) * sizeof(float);
  const auto blocks = static_cast<unsigned>((d.tokens + threads - 1) / threads);
  router_forward_kernel<<<blocks, threads, shared, stream_>>>(d, logits, expert_bias, indices,
                                                               probs);
  PTDP_CU_LAUNCHED("router_forward_kernel");
}

void CudaBackend::moe_router_backward(const RouterDesc& d, const float* logits,
                                      const int32_t* indices, const float* dprobs,
                                      float* dlogits, bool accumulate) {
  if (kcheck::check_moe_router_backward(d, logits, indices, dprobs, dlogits) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  router_backward_kernel<<<grid_for(d.tokens), kThreads, 0, stream_>>>(d, logits, indices, dprobs,
                                                                        dlogits, accumulate);
  PTDP_CU_LAUNCHED("router_backward_kernel");
}

}  // namespace ptdp::cuda
