// Conversions between the floating storage types (round to nearest even).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/half.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

}  // namespace

void CpuBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  kcheck::check_cast(src, src_type, dst, dst_type, n);
  if (src_type == dst_type) {
    copy(dst, src, static_cast<std::size_t>(n) * dtype_size(src_type));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) store(dst, dst_type, i, load(src, src_type, i));
}

}  // namespace ptdp
