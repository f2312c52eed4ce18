// The MoE router's top-k selection and its backward (RouterDesc): one token per iteration, the
// per-token math shared with the CUDA backend (kernels/moe_router_math.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/moe_router_math.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::moe_router_forward(const RouterDesc& d, const float* logits,
                                    const float* expert_bias, int32_t* indices, float* probs) {
  if (kcheck::check_moe_router_forward(d, logits, expert_bias, indices, probs) ==
      kcheck::Work::none) {
    return;
  }
#pragma omp parallel
  {
    std::vector<float> group_scores(static_cast<std::size_t>(std::max<int64_t>(1, d.num_groups)));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < d.tokens; ++t) {
      moe_math::route_token(d, logits + t * d.experts, expert_bias, group_scores.data(),
                            indices + t * d.topk, probs + t * d.topk);
    }
  }
}

void CpuBackend::moe_router_backward(const RouterDesc& d, const float* logits,
                                     const int32_t* indices, const float* dprobs, float* dlogits,
                                     bool accumulate) {
  if (kcheck::check_moe_router_backward(d, logits, indices, dprobs, dlogits) ==
      kcheck::Work::none) {
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.tokens; ++t) {
    float* row = dlogits + t * d.experts;
    if (!accumulate) std::fill(row, row + d.experts, 0.0f);
    moe_math::route_token_backward(d, logits + t * d.experts, indices + t * d.topk,
                                   dprobs + t * d.topk, row);
  }
}

}  // namespace ptdp
