// Numbers in the JSON ptdp writes by hand (log lines, traces): JSON has no NaN or infinity, so
// a value that is not finite is written as null, everywhere (nlohmann::json's dump() does the
// same for the JSON written through it: checkpoint metadata, plans, reports). Readers of
// ptdp's own JSON take null as "not a number".
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace ptdp {

/// `v` with printf's `format` ("%.9g", "%.3f", ...), or "null" when `v` is NaN or infinite.
inline std::string json_number(double v, const char* format = "%.9g") {
  if (!std::isfinite(v)) return "null";
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

}  // namespace ptdp
