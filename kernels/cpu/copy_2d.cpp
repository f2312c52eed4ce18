// Strided sub-matrix copy (any dtype) and fill (floating dtypes).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t,
                         int64_t rows, int64_t cols) {
  if (kcheck::check_copy_2d(dst, ld_dst, src, ld_src, t, rows, cols) == kcheck::Work::none) {
    return;
  }
  const auto size = static_cast<int64_t>(dtype_size(t));
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    std::memmove(d + r * ld_dst * size, s + r * ld_src * size,
                 static_cast<std::size_t>(cols * size));
  }
}

void CpuBackend::fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) {
  if (kcheck::check_fill_2d(x, t, ld, rows, cols) == kcheck::Work::none) return;
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S v = St::store(value);
    S* xs = static_cast<S*>(x);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r) std::fill(xs + r * ld, xs + r * ld + cols, v);
  });
}

}  // namespace ptdp
