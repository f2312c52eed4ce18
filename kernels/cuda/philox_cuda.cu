// Philox on the device: the same header the CPU uses, compiled for sm_90.
#include <memory>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_probe.h"

namespace ptdp::cuda {

namespace {

__global__ void philox_uniform_kernel(PhiloxStream s, uint64_t offset, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = philox_uniform(s, offset + static_cast<uint64_t>(i));
}

struct DeviceFree {
  void operator()(float* p) const noexcept { cudaFree(p); }
};

}  // namespace

void philox_uniform_on_device(int device, PhiloxStream s, uint64_t offset, int64_t n,
                              float* host_out) {
  PTDP_CHECK_ARG(n >= 0, "philox_uniform_on_device: n must be >= 0");
  if (n == 0) return;
  PTDP_CHECK_ARG(host_out != nullptr, "philox_uniform_on_device: host_out is NULL");
  PTDP_CUDA_CHECK(cudaSetDevice(device));
  float* raw = nullptr;
  PTDP_CUDA_CHECK(cudaMalloc(&raw, static_cast<size_t>(n) * sizeof(float)));
  std::unique_ptr<float, DeviceFree> buf(raw);
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  philox_uniform_kernel<<<blocks, kThreads>>>(s, offset, n, buf.get());
  PTDP_CUDA_CHECK(cudaGetLastError());
  PTDP_CUDA_CHECK(cudaMemcpy(host_out, buf.get(), static_cast<size_t>(n) * sizeof(float),
                             cudaMemcpyDeviceToHost));
}

}  // namespace ptdp::cuda
