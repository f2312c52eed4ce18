// GeLU, tanh approximation (as GPT-2 and Megatron use it).
#include <cmath>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;
}  // namespace

void CpuBackend::gelu_forward(const float* x, float* y, int64_t n) {
  kcheck::nonneg("gelu_forward", "n", n);
  kcheck::not_null("gelu_forward", "x", x, n);
  kcheck::not_null("gelu_forward", "y", y, n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v)));
  }
}

void CpuBackend::gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  kcheck::nonneg("gelu_backward", "n", n);
  kcheck::not_null("gelu_backward", "x", x, n);
  kcheck::not_null("gelu_backward", "dy", dy, n);
  kcheck::not_null("gelu_backward", "dx", dx, n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v));
    const float dt = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v) * (1.0f - t * t);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

}  // namespace ptdp
