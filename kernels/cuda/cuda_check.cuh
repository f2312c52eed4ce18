// Turns CUDA runtime errors into ptdp::Error(Device) with the call and the runtime's message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "base/error.h"

#define PTDP_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    const cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                             \
      ::ptdp::throw_error(::ptdp::ErrorCode::Device, std::string(#call) + " failed: " +    \
                                                         cudaGetErrorString(err_));        \
    }                                                                                      \
  } while (0)
