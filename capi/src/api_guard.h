// What every C entry point shares: exception-to-status translation, the per-thread last-error
// message, and the options-struct copy that lets old callers keep working.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "base/error.h"
#include "capi/src/abi_sizes.h"
#include "ptdp/ptdp.h"

namespace ptdp::capi {

void clear_last_error() noexcept;
ptdp_status set_last_error(ptdp_status status, const char* function, const char* message) noexcept;
ptdp_status status_of(ErrorCode code) noexcept;

/// Runs `body` and turns every exception into a status and a message prefixed with `function`.
/// Nothing thrown inside ever leaves.
template <typename Body>
ptdp_status guard(const char* function, Body&& body) noexcept {
  clear_last_error();
  try {
    body();
    return PTDP_SUCCESS;
  } catch (const Error& e) {
    return set_last_error(status_of(e.code()), function, e.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(PTDP_ERR_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception& e) {
    return set_last_error(PTDP_ERR_INTERNAL, function, e.what());
  } catch (...) {
    return set_last_error(PTDP_ERR_INTERNAL, function, "unknown exception");
  }
}

/// Throws InvalidArgument naming `name` when `p` is NULL.
inline void require_non_null(const void* p, const char* name) {
  PTDP_CHECK_ARG(p != nullptr, std::string(name) + " is NULL");
}

/// Throws InvalidArgument naming `name` when the path or name `p` is NULL or empty.
inline void require_path(const char* p, const char* name) {
  require_non_null(p, name);
  PTDP_CHECK_ARG(p[0] != '\0', std::string(name) + " is empty");
}

/// Throws InvalidArgument naming `name` when `v` is NaN or infinite.
inline void require_finite(double v, const char* name) {
  PTDP_CHECK_ARG(std::isfinite(v), std::string(name) + " = " + std::to_string(v) + " is not a finite number");
}

/// Throws InvalidArgument naming `name` unless `v` is finite and > 0.
inline void require_finite_positive(double v, const char* name) {
  require_finite(v, name);
  PTDP_CHECK_ARG(v > 0, std::string(name) + " = " + std::to_string(v) + " is not > 0");
}

/// Throws InvalidArgument naming `name` when the count, index or iteration `v` is negative.
inline void require_non_negative(int64_t v, const char* name) {
  PTDP_CHECK_ARG(v >= 0, std::string(name) + " = " + std::to_string(v) + " is negative");
}

/// The start of every *_options_init(): checks `user` (named `name`), zeroes it and sets its
/// struct_size; returns it for the defaults to be filled in.
template <typename Options>
Options& reset_options(Options* user, const char* name) {
  require_non_null(user, name);
  *user = Options{};
  user->struct_size = sizeof(Options);
  return *user;
}

/// The count/capacity protocol of the C API's text getters: once `buffer` and `capacity` agree, `length`
/// receives strlen(text); nothing is written unless the text and its NUL fit in `capacity` bytes.
inline void copy_text(const std::string& text, char* buffer, std::size_t capacity, std::size_t* length) {
  require_non_null(length, "length");
  PTDP_CHECK_ARG(buffer != nullptr || capacity == 0, "buffer is NULL but capacity = " + std::to_string(capacity));
  *length = text.size();
  PTDP_CHECK_ARG(capacity > text.size(), "capacity = " + std::to_string(capacity) + " is too small: the text needs " +
                                             std::to_string(text.size() + 1) +
                                             " bytes with its NUL (*length receives its strlen)");
  std::memcpy(buffer, text.c_str(), text.size() + 1);
}

/// The one check of a struct the library fills for the caller (a report, a result, a layout):
/// `user` (named `name`) is not NULL and its struct_size, the room the caller has, is at least
/// the size the struct was first published with (abi_sizes.h). Returns that size.
template <typename Out>
std::size_t require_out_struct(const Out* user, const char* name) {
  require_non_null(user, name);
  const std::size_t size = user->struct_size;
  const std::size_t min_size = first_published_size<Out>;
  const char* type = FirstPublished<Out>::name;
  PTDP_CHECK_ARG(size >= min_size, std::string(name) + "->struct_size = " + std::to_string(size) +
                                       " is smaller than any published " + type + " (" +
                                       std::to_string(min_size) + " bytes); set it to sizeof(" + type + ")");
  return size;
}

/// Copies a caller's options struct over `defaults` (both start with size_t struct_size):
/// only the bytes the caller's struct_size covers, so a program built against an older header
/// gets the defaults for the fields added since. struct_size must be at least the size the
/// struct was first published with (abi_sizes.h); bytes beyond what this library knows must be
/// zero (a newer program asking for something this library cannot do is refused, not ignored).
template <typename Options>
Options read_options(const Options* user, const Options& defaults, const char* name, const char* init_function) {
  if (user == nullptr) return defaults;
  const std::size_t size = user->struct_size;
  const std::size_t min_size = first_published_size<Options>;
  const std::size_t known = sizeof(Options);
  const char* type = FirstPublished<Options>::name;
  PTDP_CHECK_ARG(size != 0, std::string(name) + "->struct_size is 0; initialise the struct with " +
                                init_function + "()");
  PTDP_CHECK_ARG(size >= min_size, std::string(name) + "->struct_size = " + std::to_string(size) +
                                       " is smaller than any published " + type + " (" +
                                       std::to_string(min_size) + " bytes); initialise the struct with " +
                                       init_function + "()");
  if (size > known) {
    const auto* extra = reinterpret_cast<const unsigned char*>(user) + known;
    for (std::size_t i = 0; i < size - known; ++i) {
      PTDP_CHECK_ARG(extra[i] == 0, std::string(name) + "->struct_size = " + std::to_string(size) +
                                        " covers fields this library's " + type + " (" + std::to_string(known) +
                                        " bytes) does not know, and byte " + std::to_string(known + i) +
                                        " is not zero; upgrade libptdp or leave them zero");
    }
  }
  Options out = defaults;
  std::memcpy(static_cast<void*>(&out), user, size < known ? size : known);
  out.struct_size = known;
  return out;
}

}  // namespace ptdp::capi
