// env_switch.h: on/off switches read from the environment (PTDP_MEMORY_CHECK,
// PTDP_CPU_HUGEPAGES): one spelling of "off" for all of them.
#pragma once

#include <cstdlib>
#include <string>

namespace ptdp {

/// Whether the environment variable `name` leaves its feature on: unset, empty, or anything but
/// "0", "off", "false" or "no".
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return true;
  const std::string s = v;
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

}  // namespace ptdp
