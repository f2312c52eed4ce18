// GeLU, tanh approximation (as GPT-2 and Megatron use it), with the device's tanhf.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  PTDP_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kCoeff * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  PTDP_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kSqrt2OverPi * (v + kCoeff * v * v * v));
    const float dt = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v) * (1.0f - t * t);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

}  // namespace

void CudaBackend::gelu_forward(const float* x, float* y, int64_t n) {
  kcheck::check_gelu_forward(x, y, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(x, y, n);
  PTDP_CU_LAUNCHED("gelu_forward_kernel");
}

void CudaBackend::gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  kcheck::check_gelu_backward(x, dy, dx, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(x, dy, dx, n);
  PTDP_CU_LAUNCHED("gelu_backward_kernel");
}

}  // namespace ptdp::cuda
