// Strided sub-matrix copy and fill.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                         int64_t rows, int64_t cols) {
  if (kcheck::check_copy_2d(dst, ld_dst, src, ld_src, rows, cols) == kcheck::Work::none) return;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
}

void CpuBackend::fill_2d(float* x, int64_t ld, int64_t rows, int64_t cols, float value) {
  if (kcheck::check_fill_2d(x, ld, rows, cols) == kcheck::Work::none) return;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) std::fill(x + r * ld, x + r * ld + cols, value);
}

}  // namespace ptdp
