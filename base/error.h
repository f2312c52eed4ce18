// ptdp::Error: the one exception type inside the library. The C API turns it into a
// ptdp_status and a message; nothing below capi/ ever lets another exception type escape
// on purpose.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ptdp {

/// Error categories; the numbers match ptdp_status in capi/include/ptdp/ptdp.h.
enum class ErrorCode : int {
  InvalidArgument = 1,
  OutOfMemory = 2,
  Unsupported = 3,
  Internal = 4,
  Timeout = 5,
  Communication = 6,
  Device = 7,
  Io = 8,
  InvalidState = 9,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// Joins anything streamable into one string, for messages (building them this way also
/// sidesteps GCC 12's false -Wrestrict on `"literal" + std::string + ...` chains).
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

/// Throws Error(Io) with the message "PATH: what" (file problems always name the file).
[[noreturn]] inline void throw_io_error(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::Io, path + ": " + what);
}

}  // namespace ptdp

// Argument checks that name what is wrong. `what` is a std::string expression.
#define PTDP_CHECK_ARG(cond, what)                                              \
  do {                                                                          \
    if (!(cond)) ::ptdp::throw_error(::ptdp::ErrorCode::InvalidArgument, (what)); \
  } while (0)
