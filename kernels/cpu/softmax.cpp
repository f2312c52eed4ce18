// Scale + optional causal mask + softmax over the last dimension of [batch, sq, sk] scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {

void check_dims(const char* op, int64_t batch, int64_t sq, int64_t sk) {
  kcheck::nonneg(op, "batch", batch);
  kcheck::nonneg(op, "sq", sq);
  kcheck::nonneg(op, "sk", sk);
}

}  // namespace

void CpuBackend::softmax_forward(const float* x, float* y, int64_t batch, int64_t sq, int64_t sk,
                                 float scale, bool causal) {
  check_dims("softmax_forward", batch, sq, sk);
  PTDP_CHECK_ARG(!causal || sq <= sk,
                 "softmax_forward: a causal mask needs sq <= sk, got sq = " + std::to_string(sq) +
                     ", sk = " + std::to_string(sk));
  PTDP_CHECK_ARG(std::isfinite(scale), "softmax_forward: scale must be finite");
  const int64_t rows = batch * sq;
  if (rows == 0 || sk == 0) return;
  kcheck::not_null("softmax_forward", "x", x);
  kcheck::not_null("softmax_forward", "y", y);
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
  check_dims("softmax_backward", batch, sq, sk);
  const int64_t rows = batch * sq;
  if (rows == 0 || sk == 0) return;
  kcheck::not_null("softmax_backward", "y", y);
  kcheck::not_null("softmax_backward", "dy", dy);
  kcheck::not_null("softmax_backward", "dx", dx);
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
