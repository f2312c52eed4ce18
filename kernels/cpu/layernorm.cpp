// LayerNorm over the last dimension, saving mean and 1/std for the backward pass.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {
constexpr int64_t kColBlock = 64;
}

void CpuBackend::layernorm_forward(const float* x, const float* gamma, const float* beta,
                                   float* y, float* mean, float* rstd, int64_t rows,
                                   int64_t cols, float eps) {
  if (kcheck::check_layernorm_forward(x, gamma, beta, y, mean, rstd, rows, cols, eps) ==
      kcheck::Work::none) {
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const double mu = sum / static_cast<double>(cols);
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = xr[c] - mu;
      sq += d * d;
    }
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
    mean[r] = m;
    rstd[r] = rs;
    float* yr = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
  }
}

void CpuBackend::layernorm_backward(const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dy, float* dx,
                                    float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                    bool accumulate) {
  kcheck::check_layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
  // Input gradient, row by row:
  //   g = dy * gamma, xhat = (x - mean) * rstd,
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const float m = mean[r], rs = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - m) * rs);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(cols));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
    float* dxr = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - m) * rs;
      dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
  // Parameter gradients: each thread owns a block of columns, summed over rows in order, so
  // the result is independent of the thread count.
  const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock;
    const int64_t nc = std::min(kColBlock, cols - c0);
    double acc_g[kColBlock] = {}, acc_b[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols + c0;
      const float* dyr = dy + r * cols + c0;
      const float m = mean[r], rs = rstd[r];
      for (int64_t j = 0; j < nc; ++j) {
        acc_g[j] += static_cast<double>(dyr[j]) * ((xr[j] - m) * rs);
        acc_b[j] += dyr[j];
      }
    }
    for (int64_t j = 0; j < nc; ++j) {
      dgamma[c0 + j] = static_cast<float>((accumulate ? dgamma[c0 + j] : 0.0) + acc_g[j]);
      dbeta[c0 + j] = static_cast<float>((accumulate ? dbeta[c0 + j] : 0.0) + acc_b[j]);
    }
  }
}

}  // namespace ptdp
