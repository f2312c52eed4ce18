// Bias add and bias gradient over a [rows, cols] matrix.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {
constexpr int64_t kColBlock = 64;  // columns one thread owns while summing over rows
}

void CpuBackend::bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) {
  kcheck::check_bias_add(y, bias, t, rows, cols);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* b = static_cast<const S*>(bias);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      S* row = static_cast<S*>(y) + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) row[c] = St::store(St::load(row[c]) + St::load(b[c]));
    }
  });
}

void CpuBackend::bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols,
                           bool accumulate) {
  kcheck::check_bias_grad(dy, t, dbias, rows, cols);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    // Each thread owns a block of columns and sums it over all rows in a fixed order, so the
    // result does not depend on the thread count.
    const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kColBlock;
      const int64_t nc = std::min(kColBlock, cols - c0);
      double acc[kColBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const S* row = static_cast<const S*>(dy) + r * cols + c0;
        for (int64_t j = 0; j < nc; ++j) acc[j] += St::load(row[j]);
      }
      for (int64_t j = 0; j < nc; ++j) {
        dbias[c0 + j] = static_cast<float>((accumulate ? dbias[c0 + j] : 0.0) + acc[j]);
      }
    }
  });
}

}  // namespace ptdp
