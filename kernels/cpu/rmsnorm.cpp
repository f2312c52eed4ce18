// RMSNorm over the last dimension (no mean, no bias), saving 1/rms (fp32) for the backward pass;
// and the split RMSNorm, whose rows span several devices (Backend::rmsnorm_split_forward).
// The row loops are PTDP_CPU_CLONES (kernels/cpu/simd_clones.h), built without contraction:
// every copy computes the bits of the baseline build.
#include <algorithm>
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int64_t kColBlock = 64;  // columns of dgamma per task of the final sum
constexpr int64_t kRowChunk = 32;  // rows per partial of dgamma

/// sum_c f(c) over [0, n) in double, in four interleaved partial sums: one dependent chain of
/// double adds per row made the op compute-bound. The order is fixed, so the result does not
/// depend on the thread count.
template <typename F>
double row_sum(int64_t n, F&& f) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int k = 0; k < 4; ++k) acc[k] += f(c + k);
  }
  for (; c < n; ++c) acc[0] += f(c);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// y = x * rstd * gamma over one row.
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void scale_row(const typename St::type* xr, const typename St::type* g,
                                        typename St::type* yr, int64_t cols, float rs) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) yr[c] = St::store(St::load(xr[c]) * rs * St::load(g[c]));
}

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void forward_row(const typename St::type* xr, const typename St::type* g,
                                          typename St::type* yr, int64_t cols, float eps,
                                          float* rstd) {
  const double sq = row_sum(cols, [&](int64_t c) {
    const double v = St::load(xr[c]);
    return v * v;
  });
  const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
  *rstd = rs;
  scale_row<St>(xr, g, yr, cols, rs);
}

// g = dy * gamma, xhat = x * rstd, dx = rstd * (g - xhat * mean_gx) with mean_gx the row's
// mean(g * xhat); adds dy * xhat to the row chunk's double partial of dgamma. dy[c] is read
// before dx[c] is written, so dx may alias dy.
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void backward_row_given(const typename St::type* xr,
                                                 const typename St::type* g,
                                                 const typename St::type* dyr,
                                                 typename St::type* dxr, int64_t cols, float rs,
                                                 float mean_gx, double* acc) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const float xhat = St::load(xr[c]) * rs;
    const float d = St::load(dyr[c]);
    acc[c] += static_cast<double>(d) * xhat;
    dxr[c] = St::store(rs * (d * St::load(g[c]) - xhat * mean_gx));
  }
}

// The same with mean(g * xhat) computed over this row.
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void backward_row(const typename St::type* xr,
                                           const typename St::type* g,
                                           const typename St::type* dyr, typename St::type* dxr,
                                           int64_t cols, float rs, double* acc) {
  const double sum_gx = row_sum(cols, [&](int64_t c) {
    return static_cast<double>(St::load(dyr[c])) * St::load(g[c]) * (St::load(xr[c]) * rs);
  });
  backward_row_given<St>(xr, g, dyr, dxr, cols, rs, static_cast<float>(sum_gx / static_cast<double>(cols)), acc);
}

// One row of the split RMSNorm's backward (rmsnorm_split_backward): mean(g * xhat) over the
// whole row is rstd * dot / width, dot being the row's sum of dy * gamma * x over every device.
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void split_backward_row(const typename St::type* xr,
                                                 const typename St::type* g,
                                                 const typename St::type* dyr,
                                                 typename St::type* dxr, int64_t cols, float rs,
                                                 float dot, int64_t width, double* acc) {
  const float mean_gx = static_cast<float>(static_cast<double>(dot) * rs / static_cast<double>(width));
  backward_row_given<St>(xr, g, dyr, dxr, cols, rs, mean_gx, acc);
}

// Every row of a backward, `row(r, acc)` computing row r's dx and adding its dy * xhat to acc:
// each chunk of kRowChunk rows adds its rows to its own double partial of dgamma, and a second,
// small pass sums the partials in chunk order; the chunks do not depend on the thread count, so
// neither does dgamma. rows == 0: no chunks, dgamma cleared (or kept, accumulating).
template <typename Row>
void backward_rows(int64_t rows, int64_t cols, float* dgamma, bool accumulate, Row&& row) {
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  std::unique_ptr<double[]> partial(new double[static_cast<std::size_t>(chunks * cols)]);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    double* acc = partial.get() + k * cols;
    std::fill(acc, acc + cols, 0.0);
    for (int64_t r = k * kRowChunk; r < std::min(rows, (k + 1) * kRowChunk); ++r) row(r, acc);
  }
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += kColBlock) {
    const int64_t c1 = std::min(cols, c0 + kColBlock);
    for (int64_t c = c0; c < c1; ++c) {
      double sum = accumulate ? dgamma[c] : 0.0;
      for (int64_t k = 0; k < chunks; ++k) sum += partial[static_cast<std::size_t>(k * cols + c)];
      dgamma[c] = static_cast<float>(sum);
    }
  }
}

}  // namespace

void CpuBackend::rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd,
                                 int64_t rows, int64_t cols, float eps) {
  if (kcheck::check_rmsnorm_forward(x, gamma, y, t, rstd, rows, cols, eps) ==
      kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      forward_row<St>(static_cast<const S*>(x) + r * cols, g, static_cast<S*>(y) + r * cols, cols,
                      eps, rstd + r);
    }
  });
}

void CpuBackend::rmsnorm_backward(const void* x, const void* gamma, const float* rstd,
                                  const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                                  int64_t cols, bool accumulate) {
  kcheck::check_rmsnorm_backward(x, gamma, rstd, dy, dx, t, dgamma, rows, cols);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
    backward_rows(rows, cols, dgamma, accumulate, [&](int64_t r, double* acc) {
      backward_row<St>(static_cast<const S*>(x) + r * cols, g, static_cast<const S*>(dy) + r * cols,
                       static_cast<S*>(dx) + r * cols, cols, rstd[r], acc);
    });
  });
}

void CpuBackend::rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq, void* y,
                                       DType t, float* rstd, int64_t rows, int64_t cols, int64_t width,
                                       float eps) {
  if (kcheck::check_rmsnorm_split_forward(x, gamma, sum_sq, y, t, rstd, rows, cols, width, eps) ==
      kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      // As forward_row, from the whole row's sum (read before rstd, which may alias it, is written).
      const double sq = sum_sq[r];
      const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(width) + eps));
      rstd[r] = rs;
      scale_row<St>(static_cast<const S*>(x) + r * cols, g, static_cast<S*>(y) + r * cols, cols, rs);
    }
  });
}

void CpuBackend::rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd, const float* dot,
                                        const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                                        int64_t cols, int64_t width, bool accumulate) {
  kcheck::check_rmsnorm_split_backward(x, gamma, rstd, dot, dy, dx, t, dgamma, rows, cols, width);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* g = static_cast<const S*>(gamma);
    backward_rows(rows, cols, dgamma, accumulate, [&](int64_t r, double* acc) {
      split_backward_row<St>(static_cast<const S*>(x) + r * cols, g, static_cast<const S*>(dy) + r * cols,
                             static_cast<S*>(dx) + r * cols, cols, rstd[r], dot[r], width, acc);
    });
  });
}

}  // namespace ptdp
