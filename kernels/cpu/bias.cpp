// Bias add and bias gradient over a [rows, cols] matrix.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {
constexpr int64_t kColBlock = 64;  // columns one thread owns while summing over rows
}

void CpuBackend::bias_add(float* y, const float* bias, int64_t rows, int64_t cols) {
  kcheck::check_bias_add(y, bias, rows, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void CpuBackend::bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                           bool accumulate) {
  kcheck::check_bias_grad(dy, dbias, rows, cols);
  // Each thread owns a block of columns and sums it over all rows in a fixed order, so the
  // result does not depend on the thread count.
  const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock;
    const int64_t nc = std::min(kColBlock, cols - c0);
    double acc[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols + c0;
      for (int64_t j = 0; j < nc; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < nc; ++j) {
      dbias[c0 + j] = static_cast<float>((accumulate ? dbias[c0 + j] : 0.0) + acc[j]);
    }
  }
}

}  // namespace ptdp
