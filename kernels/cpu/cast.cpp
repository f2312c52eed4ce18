// Conversions between the floating storage types (round to nearest even).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  kcheck::check_cast(src, src_type, dst, dst_type, n);
  if (src_type == dst_type) {
    copy(dst, src, static_cast<std::size_t>(n) * dtype_size(src_type));
    return;
  }
  cpu::with_storage(src_type, [&](auto src_st) {
    cpu::with_storage(dst_type, [&](auto dst_st) {
      using Src = decltype(src_st);
      using Dst = decltype(dst_st);
      const auto* s = static_cast<const typename Src::type*>(src);
      auto* d = static_cast<typename Dst::type*>(dst);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) d[i] = Dst::store(Src::load(s[i]));
    });
  });
}

}  // namespace ptdp
