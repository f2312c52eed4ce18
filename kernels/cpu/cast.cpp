// Conversions between the floating storage types (round to nearest even).
#include <cstring>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/half.h"

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

void check_float(const char* what, DType t) {
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(t)) && dtype_is_float(t),
                 std::string("cast: ") + what + " must be f32, bf16 or f16, got " +
                     (dtype_valid(static_cast<int>(t)) ? dtype_name(t)
                                                       : std::to_string(static_cast<int>(t))));
}

}  // namespace

void CpuBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  kcheck::nonneg("cast", "n", n);
  check_float("src_type", src_type);
  check_float("dst_type", dst_type);
  kcheck::not_null("cast", "src", src, n);
  kcheck::not_null("cast", "dst", dst, n);
  if (src_type == dst_type) {
    copy(dst, src, static_cast<std::size_t>(n) * dtype_size(src_type));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) store(dst, dst_type, i, load(src, src_type, i));
}

}  // namespace ptdp
