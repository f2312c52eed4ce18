// LayerNorm over the last dimension, saving mean and 1/std (fp32) for the backward pass.
//
// The row loops are PTDP_CPU_CLONES (kernels/cpu/simd_clones.h) built without contraction, and
// every sum over a row runs in kLanes double lanes (element c into lane c % kLanes, combined in
// lane order): one dependent chain of double adds per row, four lanes wide in the baseline
// build, made both passes compute-bound at 6-7 GB/s. The lanes are the same on every instruction
// set and thread count, so are the bits.
#include <algorithm>
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int kLanes = 8;
constexpr int64_t kColBlock = 64;  // columns of dgamma and dbeta per task of the final sum
constexpr int64_t kRowChunk = 32;  // rows per partial of dgamma and dbeta

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void forward_row(const typename St::type* xr, const typename St::type* g,
                                          const typename St::type* bt, typename St::type* yr,
                                          int64_t cols, float eps, float* mean, float* rstd) {
  double lane[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += St::load(xr[c + k]);
  }
  for (int k = 0; c < cols; ++c, ++k) lane[k] += St::load(xr[c]);
  double sum = 0.0;
  for (int k = 0; k < kLanes; ++k) sum += lane[k];
  const double mu = sum / static_cast<double>(cols);
  double sq_lane[kLanes] = {};
  c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const double d = St::load(xr[c + k]) - mu;
      sq_lane[k] += d * d;
    }
  }
  for (int k = 0; c < cols; ++c, ++k) {
    const double d = St::load(xr[c]) - mu;
    sq_lane[k] += d * d;
  }
  double sq = 0.0;
  for (int k = 0; k < kLanes; ++k) sq += sq_lane[k];
  const float m = static_cast<float>(mu);
  const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
  *mean = m;
  *rstd = rs;
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) {
    yr[j] = St::store((St::load(xr[j]) - m) * rs * St::load(g[j]) + St::load(bt[j]));
  }
}

// One row of the backward pass: g = dy * gamma, xhat = (x - mean) * rstd,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); adds dy * xhat and dy to the row chunk's
// double partials of dgamma and dbeta. dy[c] is read before dx[c] is written, so dx may alias dy.
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void backward_row(const typename St::type* xr,
                                           const typename St::type* g,
                                           const typename St::type* dyr, typename St::type* dxr,
                                           int64_t cols, float m, float rs, double* acc_g,
                                           double* acc_b) {
  double lane_g[kLanes] = {}, lane_gx[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const double gv = static_cast<double>(St::load(dyr[c + k])) * St::load(g[c + k]);
      lane_g[k] += gv;
      lane_gx[k] += gv * ((St::load(xr[c + k]) - m) * rs);
    }
  }
  for (int k = 0; c < cols; ++c, ++k) {
    const double gv = static_cast<double>(St::load(dyr[c])) * St::load(g[c]);
    lane_g[k] += gv;
    lane_gx[k] += gv * ((St::load(xr[c]) - m) * rs);
  }
  double sum_g = 0.0, sum_gx = 0.0;
  for (int k = 0; k < kLanes; ++k) {
    sum_g += lane_g[k];
    sum_gx += lane_gx[k];
  }
  const float mean_g = static_cast<float>(sum_g / static_cast<double>(cols));
  const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) {
    const float xhat = (St::load(xr[j]) - m) * rs;
    const float d = St::load(dyr[j]);
    acc_g[j] += static_cast<double>(d) * xhat;
    acc_b[j] += d;
    dxr[j] = St::store(rs * (d * St::load(g[j]) - mean_g - xhat * mean_gx));
  }
}

}  // namespace

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
      forward_row<St>(static_cast<const S*>(x) + r * cols, g, bt, static_cast<S*>(y) + r * cols,
                      cols, eps, mean + r, rstd + r);
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
    // One pass over x and dy: each chunk of kRowChunk rows adds its rows' dy * xhat and dy to
    // its own double partials, and a second, small pass sums the partials in chunk order; the
    // chunks do not depend on the thread count, so neither do dgamma and dbeta.
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    std::unique_ptr<double[]> partial(new double[static_cast<std::size_t>(2 * chunks * cols)]);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double* acc_g = partial.get() + 2 * k * cols;
      double* acc_b = acc_g + cols;
      std::fill(acc_g, acc_g + 2 * cols, 0.0);
      for (int64_t r = k * kRowChunk; r < std::min(rows, (k + 1) * kRowChunk); ++r) {
        backward_row<St>(static_cast<const S*>(x) + r * cols, g,
                         static_cast<const S*>(dy) + r * cols, static_cast<S*>(dx) + r * cols,
                         cols, mean[r], rstd[r], acc_g, acc_b);
      }
    }
    // rows == 0: no chunks, dgamma and dbeta cleared (or kept, accumulating).
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < cols; c0 += kColBlock) {
      const int64_t c1 = std::min(cols, c0 + kColBlock);
      for (int64_t c = c0; c < c1; ++c) {
        double sum_g = accumulate ? dgamma[c] : 0.0, sum_b = accumulate ? dbeta[c] : 0.0;
        for (int64_t k = 0; k < chunks; ++k) {
          sum_g += partial[static_cast<std::size_t>(2 * k * cols + c)];
          sum_b += partial[static_cast<std::size_t>((2 * k + 1) * cols + c)];
        }
        dgamma[c] = static_cast<float>(sum_g);
        dbeta[c] = static_cast<float>(sum_b);
      }
    }
  });
}

}  // namespace ptdp
