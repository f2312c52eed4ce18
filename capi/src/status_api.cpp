// Status strings, the per-thread last error, version and build features.
#include <string>

#include "base/dtype.h"
#include "capi/src/api_guard.h"

namespace ptdp::capi {

namespace {
thread_local std::string t_last_error;
}

void clear_last_error() noexcept { t_last_error.clear(); }

ptdp_status set_last_error(ptdp_status status, const char* function, const char* message) noexcept {
  try {
    t_last_error = std::string(function) + ": " + (message && *message ? message : ptdp_status_string(status));
  } catch (...) {
    // Out of memory while building the message: keep the status, drop the text.
  }
  return status;
}

ptdp_status status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return PTDP_ERR_INVALID_ARGUMENT;
    case ErrorCode::OutOfMemory: return PTDP_ERR_OUT_OF_MEMORY;
    case ErrorCode::Unsupported: return PTDP_ERR_UNSUPPORTED;
    case ErrorCode::Internal: return PTDP_ERR_INTERNAL;
    case ErrorCode::Timeout: return PTDP_ERR_TIMEOUT;
    case ErrorCode::Communication: return PTDP_ERR_COMMUNICATION;
    case ErrorCode::Device: return PTDP_ERR_DEVICE;
    case ErrorCode::Io: return PTDP_ERR_IO;
    case ErrorCode::InvalidState: return PTDP_ERR_INVALID_STATE;
  }
  return PTDP_ERR_INTERNAL;
}

}  // namespace ptdp::capi

using ptdp::capi::guard;
using ptdp::capi::require_non_null;

extern "C" {

PTDP_API const char* ptdp_status_string(ptdp_status status) {
  switch (status) {
    case PTDP_SUCCESS: return "success";
    case PTDP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case PTDP_ERR_OUT_OF_MEMORY: return "out of memory";
    case PTDP_ERR_UNSUPPORTED: return "unsupported";
    case PTDP_ERR_INTERNAL: return "internal error";
    case PTDP_ERR_TIMEOUT: return "timeout";
    case PTDP_ERR_COMMUNICATION: return "communication error";
    case PTDP_ERR_DEVICE: return "device error";
    case PTDP_ERR_IO: return "I/O error";
    case PTDP_ERR_INVALID_STATE: return "invalid state";
  }
  return "unknown status";
}

PTDP_API const char* ptdp_last_error(void) { return ptdp::capi::t_last_error.c_str(); }

#define PTDP_STR2(x) #x
#define PTDP_STR(x) PTDP_STR2(x)

PTDP_API const char* ptdp_version(void) {
  return PTDP_STR(PTDP_VERSION_MAJOR) "." PTDP_STR(PTDP_VERSION_MINOR) "." PTDP_STR(PTDP_VERSION_PATCH);
}

PTDP_API ptdp_status ptdp_get_version(int32_t* major, int32_t* minor, int32_t* patch) {
  return guard(__func__, [&] {
    require_non_null(major, "major");
    require_non_null(minor, "minor");
    require_non_null(patch, "patch");
    *major = PTDP_VERSION_MAJOR;
    *minor = PTDP_VERSION_MINOR;
    *patch = PTDP_VERSION_PATCH;
  });
}

PTDP_API ptdp_status ptdp_has_feature(ptdp_feature feature, int32_t* available) {
  return guard(__func__, [&] {
    require_non_null(available, "available");
    int32_t value = 0;
    switch (feature) {
#ifdef PTDP_HAVE_CUDA
      case PTDP_FEATURE_CUDA: value = 1; break;
#else
      case PTDP_FEATURE_CUDA: value = 0; break;
#endif
#ifdef PTDP_HAVE_NCCL
      case PTDP_FEATURE_NCCL: value = 1; break;
#else
      case PTDP_FEATURE_NCCL: value = 0; break;
#endif
#ifdef PTDP_HAVE_MPI
      case PTDP_FEATURE_MPI: value = 1; break;
#else
      case PTDP_FEATURE_MPI: value = 0; break;
#endif
      default:
        ptdp::throw_error(ptdp::ErrorCode::InvalidArgument,
                          "feature = " + std::to_string(static_cast<int>(feature)) +
                              " is not a ptdp_feature");
    }
    *available = value;
  });
}

PTDP_API ptdp_status ptdp_dtype_size(ptdp_dtype dtype, size_t* bytes) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(ptdp::dtype_valid(static_cast<int>(dtype)),
                   "dtype = " + std::to_string(static_cast<int>(dtype)) + " is not a ptdp_dtype");
    require_non_null(bytes, "bytes");
    *bytes = ptdp::dtype_size(static_cast<ptdp::DType>(dtype));
  });
}

}  // extern "C"
