// LayerNorm over the last dimension, saving mean and 1/std (fp32) for the backward pass.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {
constexpr int64_t kColBlock = 64;
}

void CpuBackend::layernorm_forward(const void* x, const void* gamma, const void* beta, void* y,
                                   DType t, float* mean, float* rstd, int64_t rows, int64_t cols,
                                   float eps) {
  if (kcheck::check_layernorm_forward(x, gamma, beta, y, t, mean, rstd, rows, cols, eps) ==
      kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
    const S* bt = static_cast<const S*>(beta);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* xr = static_cast<const S*>(x) + r * cols;
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += St::load(xr[c]);
      const double mu = sum / static_cast<double>(cols);
      double sq = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = St::load(xr[c]) - mu;
        sq += d * d;
      }
      const float m = static_cast<float>(mu);
      const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
      mean[r] = m;
      rstd[r] = rs;
      S* yr = static_cast<S*>(y) + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        yr[c] = St::store((St::load(xr[c]) - m) * rs * St::load(g[c]) + St::load(bt[c]));
      }
    }
  });
}

void CpuBackend::layernorm_backward(const void* x, const void* gamma, const float* mean,
                                    const float* rstd, const void* dy, void* dx, DType t,
                                    float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                    bool accumulate) {
  kcheck::check_layernorm_backward(x, gamma, mean, rstd, dy, dx, t, dgamma, dbeta, rows, cols);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
    // Parameter gradients first: dx may alias dy. Each thread owns a block of columns, summed
    // over rows in order, so the result is independent of the thread count.
    const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kColBlock;
      const int64_t nc = std::min(kColBlock, cols - c0);
      double acc_g[kColBlock] = {}, acc_b[kColBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const S* xr = static_cast<const S*>(x) + r * cols + c0;
        const S* dyr = static_cast<const S*>(dy) + r * cols + c0;
        const float m = mean[r], rs = rstd[r];
        for (int64_t j = 0; j < nc; ++j) {
          const float d = St::load(dyr[j]);
          acc_g[j] += static_cast<double>(d) * ((St::load(xr[j]) - m) * rs);
          acc_b[j] += d;
        }
      }
      for (int64_t j = 0; j < nc; ++j) {
        dgamma[c0 + j] = static_cast<float>((accumulate ? dgamma[c0 + j] : 0.0) + acc_g[j]);
        dbeta[c0 + j] = static_cast<float>((accumulate ? dbeta[c0 + j] : 0.0) + acc_b[j]);
      }
    }
    // Input gradient, row by row:
    //   g = dy * gamma, xhat = (x - mean) * rstd,
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* xr = static_cast<const S*>(x) + r * cols;
      const S* dyr = static_cast<const S*>(dy) + r * cols;
      const float m = mean[r], rs = rstd[r];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double gv = static_cast<double>(St::load(dyr[c])) * St::load(g[c]);
        sum_g += gv;
        sum_gx += gv * ((St::load(xr[c]) - m) * rs);
      }
      const float mean_g = static_cast<float>(sum_g / static_cast<double>(cols));
      const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
      S* dxr = static_cast<S*>(dx) + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = (St::load(xr[c]) - m) * rs;
        dxr[c] = St::store(rs * (St::load(dyr[c]) * St::load(g[c]) - mean_g - xhat * mean_gx));
      }
    }
  });
}

}  // namespace ptdp
