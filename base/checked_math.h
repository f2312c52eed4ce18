// Checked int64 arithmetic for sizes and counts a user gives (flags, options structs): every
// product or sum that derives a shape, a parameter count or a byte count from them goes
// through here, so an overflow is refused with the numbers involved instead of wrapping into
// a negative shape.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "base/error.h"

namespace ptdp {

/// A size computed with overflow checks: `text` spells how it was derived ("4 * hidden_size
/// (1000000000)"), for the message when it overflows.
struct CheckedSize {
  int64_t value = 0;
  std::string text;
};

/// A named user value as the start of a checked computation.
inline CheckedSize sized(const std::string& name, int64_t v) { return {v, name + " (" + std::to_string(v) + ")"}; }

/// a * b; throws InvalidArgument naming both operands when the product overflows int64.
inline CheckedSize operator*(const CheckedSize& a, const CheckedSize& b) {
  CheckedSize r;
  r.text = a.text + " * " + b.text;
  PTDP_CHECK_ARG(!__builtin_mul_overflow(a.value, b.value, &r.value), r.text + " overflows a 64-bit integer");
  return r;
}
inline CheckedSize operator*(int64_t a, const CheckedSize& b) { return CheckedSize{a, std::to_string(a)} * b; }

/// a + b; throws InvalidArgument naming both operands when the sum overflows int64.
inline CheckedSize operator+(const CheckedSize& a, const CheckedSize& b) {
  CheckedSize r;
  r.text = a.text + " + " + b.text;
  PTDP_CHECK_ARG(!__builtin_add_overflow(a.value, b.value, &r.value), r.text + " overflows a 64-bit integer");
  return r;
}

/// Throws InvalidArgument unless `s` fits a 32-bit int (a dimension the engine keeps as int).
inline int32_t fits_int32(const CheckedSize& s, const std::string& what) {
  PTDP_CHECK_ARG(s.value >= 0 && s.value <= std::numeric_limits<int32_t>::max(),
                 what + " = " + s.text + " = " + std::to_string(s.value) + " does not fit a 32-bit integer");
  return static_cast<int32_t>(s.value);
}

}  // namespace ptdp
