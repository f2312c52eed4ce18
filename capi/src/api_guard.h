// What every C entry point shares: exception-to-status translation, the per-thread last-error
// message, and the options-struct copy that lets old callers keep working.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "kernels/error.h"
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

/// The start of every *_options_init(): checks `user` (named `name`), zeroes it and sets its
/// struct_size; returns it for the defaults to be filled in.
template <typename Options>
Options& reset_options(Options* user, const char* name) {
  require_non_null(user, name);
  *user = Options{};
  user->struct_size = sizeof(Options);
  return *user;
}

/// The count/capacity protocol of the C API's text getters: `length` always receives
/// strlen(text); nothing is written unless the text and its NUL fit in `capacity` bytes.
inline void copy_text(const std::string& text, char* buffer, std::size_t capacity, std::size_t* length) {
  *length = text.size();
  PTDP_CHECK_ARG(buffer != nullptr || capacity == 0, "buffer is NULL but capacity = " + std::to_string(capacity));
  PTDP_CHECK_ARG(capacity > text.size(), "capacity = " + std::to_string(capacity) + " is too small: the text needs " +
                                             std::to_string(text.size() + 1) +
                                             " bytes with its NUL (*length receives its strlen)");
  std::memcpy(buffer, text.c_str(), text.size() + 1);
}

/// Copies a caller's options struct over `defaults` (both start with size_t struct_size):
/// only the bytes the caller's struct_size covers, and only if the rest, beyond what this
/// library knows, is zero. `min_size` is the size of the struct's first published version.
template <typename Options>
Options read_options(const Options* user, const Options& defaults, std::size_t min_size,
                     const char* name, const char* init_function) {
  if (user == nullptr) return defaults;
  const std::size_t size = user->struct_size;
  PTDP_CHECK_ARG(size != 0, std::string(name) + "->struct_size is 0; initialise the struct with " +
                                init_function + "()");
  PTDP_CHECK_ARG(size >= min_size, std::string(name) + "->struct_size = " + std::to_string(size) +
                                       " is smaller than any published version (" +
                                       std::to_string(min_size) + ")");
  Options out = defaults;
  const std::size_t known = sizeof(Options);
  std::memcpy(static_cast<void*>(&out), user, size < known ? size : known);
  if (size > known) {
    const auto* extra = reinterpret_cast<const unsigned char*>(user) + known;
    for (std::size_t i = 0; i < size - known; ++i) {
      if (extra[i] != 0) {
        throw_error(ErrorCode::Unsupported,
                    std::string(name) + " sets fields this library version does not know (byte " +
                        std::to_string(known + i) + " of " + std::to_string(size) +
                        "); upgrade libptdp");
      }
    }
  }
  out.struct_size = known;
  return out;
}

}  // namespace ptdp::capi
