// Strided sub-matrix copy and fill.
#include <algorithm>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {

void check_2d(const char* op, const char* what, int64_t ld, int64_t rows, int64_t cols) {
  kcheck::nonneg(op, "rows", rows);
  kcheck::nonneg(op, "cols", cols);
  PTDP_CHECK_ARG(ld >= cols, std::string(op) + ": " + what + " = " + std::to_string(ld) +
                                 " is smaller than cols = " + std::to_string(cols));
}

}  // namespace

void CpuBackend::copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                         int64_t rows, int64_t cols) {
  check_2d("copy_2d", "ld_dst", ld_dst, rows, cols);
  check_2d("copy_2d", "ld_src", ld_src, rows, cols);
  if (rows == 0 || cols == 0) return;
  kcheck::not_null("copy_2d", "dst", dst);
  kcheck::not_null("copy_2d", "src", src);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
}

void CpuBackend::fill_2d(float* x, int64_t ld, int64_t rows, int64_t cols, float value) {
  check_2d("fill_2d", "ld", ld, rows, cols);
  if (rows == 0 || cols == 0) return;
  kcheck::not_null("fill_2d", "x", x);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) std::fill(x + r * ld, x + r * ld + cols, value);
}

}  // namespace ptdp
