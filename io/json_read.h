// Numbers read from JSON that ptdp does not control (a checkpoint's metadata.json, flight
// records): nlohmann's get<int>() converts whatever number it finds with a static_cast, so
// 3.7e27 read as an int is undefined behaviour and 2^32 + 2 silently becomes 2. These readers
// take only what the field can hold and otherwise throw ptdp::Error naming the field.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json_text.h"

namespace ptdp::json_read {

/// `v` as the integer type T. Refused with Error(code) unless `v` is a JSON integer (not 2.0,
/// not "2") within T's range; the message starts with `what` ("metadata.json: \"model\" entry:
/// \"num_layers\"") and shows the value.
template <typename T>
T integer(const nlohmann::json& v, const std::string& what, ErrorCode code = ErrorCode::Io) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer type");
  if (!v.is_number_integer()) throw_error(code, what + " is " + json_text(v) + ", not an integer");
  bool fits;
  if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else {
    const int64_t x = v.get<int64_t>();
    fits = x >= 0 ? static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                  : std::is_signed_v<T> && x >= static_cast<int64_t>(std::numeric_limits<T>::min());
  }
  if (!fits) {
    throw_error(code, what + " = " + json_text(v) + " is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                          " .. " + std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

/// `v` as the floating type T: any JSON number whose value is finite in T (1e300 is no float).
template <typename T>
T real(const nlohmann::json& v, const std::string& what, ErrorCode code = ErrorCode::Io) {
  static_assert(std::is_floating_point_v<T>, "a floating type");
  if (!v.is_number()) throw_error(code, what + " is " + json_text(v) + ", not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max()))
    throw_error(code, what + " = " + json_text(v) + " is not a finite " + (sizeof(T) == 4 ? "float" : "double"));
  return static_cast<T>(d);
}

/// `j[key]` read by integer<T>() or real<T>() (as T is), `fallback` when `j` has no `key`.
template <typename T>
T field_or(const nlohmann::json& j, const char* key, T fallback, const std::string& what,
           ErrorCode code = ErrorCode::Io) {
  if (!j.contains(key)) return fallback;
  if constexpr (std::is_floating_point_v<T>) {
    return real<T>(j.at(key), what, code);
  } else {
    return integer<T>(j.at(key), what, code);
  }
}

}  // namespace ptdp::json_read
