// Device discovery.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_probe.h"

namespace ptdp::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::size_t device_free_bytes(int device) noexcept {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    free_b = 0;
  }
  cudaSetDevice(previous);
  return free_b;
}

std::string device_description(int device) {
  cudaDeviceProp prop{};
  PTDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(static_cast<int>(gib)) + " GiB)";
}

}  // namespace ptdp::cuda
