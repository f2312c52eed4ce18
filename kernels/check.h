// Argument checks shared by the backends' op entry points.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/error.h"

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

}  // namespace ptdp::kcheck
