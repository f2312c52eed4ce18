// Host-callable probes of the CUDA kernels library that need no CUDA header to use: how many
// devices there are, what they are, and the device Philox generator (for bit-for-bit tests).
// The CUDA Backend itself is in cuda_backend.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/philox.h"

namespace ptdp::cuda {

/// Number of usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count() noexcept;

/// Free bytes on `device` (cudaMemGetInfo); 0 when it cannot be asked (never throws).
std::size_t device_free_bytes(int device) noexcept;

/// "NVIDIA H200 (sm_90, 139 GiB)"; throws Error(Device) for a bad ordinal.
std::string device_description(int device);

/// Fills host_out[i] with philox_uniform(s, offset + i) computed by a kernel on `device`,
/// so tests can compare the device's generator with the host's bit for bit.
void philox_uniform_on_device(int device, PhiloxStream s, uint64_t offset, int64_t n,
                              float* host_out);

}  // namespace ptdp::cuda
