// Scale + optional causal mask + softmax over the last dimension of [batch, sq, sk] scores.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::softmax_forward(const float* x, float* y, int64_t batch, int64_t sq, int64_t sk,
                                 float scale, bool causal) {
  if (kcheck::check_softmax_forward(x, y, batch, sq, sk, scale, causal) == kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * sq;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % sq;
    const int64_t valid = causal ? std::min(sk, i + (sk - sq) + 1) : sk;
    const float* xr = x + r * sk;
    float* yr = y + r * sk;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, scale * xr[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < valid; ++j) {
      const float e = std::exp(scale * xr[j] - mx);
      yr[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < valid; ++j) yr[j] *= inv;
    for (int64_t j = valid; j < sk; ++j) yr[j] = 0.0f;
  }
}

void CpuBackend::softmax_backward(const float* y, const float* dy, float* dx, int64_t batch,
                                  int64_t sq, int64_t sk, float scale) {
  if (kcheck::check_softmax_backward(y, dy, dx, batch, sq, sk) == kcheck::Work::none) return;
  const int64_t rows = batch * sq;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * sk;
    const float* dyr = dy + r * sk;
    double dot = 0.0;
    for (int64_t j = 0; j < sk; ++j) dot += static_cast<double>(dyr[j]) * yr[j];
    const float d = static_cast<float>(dot);
    float* dxr = dx + r * sk;
#pragma omp simd
    for (int64_t j = 0; j < sk; ++j) dxr[j] = scale * yr[j] * (dyr[j] - d);
  }
}

}  // namespace ptdp
