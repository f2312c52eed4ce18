// Argument checks shared by the backends' op entry points.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/error.h"

namespace ptdp::kcheck {

inline void nonneg(const char* op, const char* what, int64_t v) {
  PTDP_CHECK_ARG(v >= 0, std::string(op) + ": " + what + " must be >= 0, got " + std::to_string(v));
}

inline void positive(const char* op, const char* what, int64_t v) {
  PTDP_CHECK_ARG(v > 0, std::string(op) + ": " + what + " must be > 0, got " + std::to_string(v));
}

inline void not_null(const char* op, const char* what, const void* p, int64_t n = 1) {
  PTDP_CHECK_ARG(p != nullptr || n == 0, std::string(op) + ": " + what + " is NULL");
}

namespace detail {
/// "t = i32" or, for a number outside the enum, "t = 7".
inline std::string dtype_arg(const char* what, DType t) {
  const int v = static_cast<int>(t);
  return std::string(what) + " = " + (dtype_valid(v) ? dtype_name(t) : std::to_string(v));
}
}  // namespace detail

/// t must be f32, bf16 or f16; `what` names the argument (t, a_type, ...).
inline void float_type(const char* op, const char* what, DType t) {
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(t)) && dtype_is_float(t),
                 std::string(op) + ": " + detail::dtype_arg(what, t) +
                     " is not a floating storage type (f32, bf16, f16)");
}

}  // namespace ptdp::kcheck
