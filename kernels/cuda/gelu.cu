// GeLU, tanh approximation, for every floating storage type (the math is in gelu_math.cuh,
// shared with the GEMM's fallback epilogue).
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/gelu_math.cuh"

namespace ptdp::cuda {

namespace {

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  PTDP_GRID_STRIDE(i, n) y[i] = from_f32<T>(gelu_f32(to_f32(x[i])));
}

// dx may alias dy: each element is read and written by the same thread.
template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  PTDP_GRID_STRIDE(i, n) dx[i] = from_f32<T>(to_f32(dy[i]) * gelu_grad_f32(to_f32(x[i])));
}

}  // namespace

void CudaBackend::gelu_forward(const void* x, void* y, DType t, int64_t n) {
  kcheck::check_gelu_forward(x, y, t, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "gelu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_forward_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(static_cast<const T*>(x),
                                                                  static_cast<T*>(y), n);
  });
  PTDP_CU_LAUNCHED("gelu_forward_kernel");
}

void CudaBackend::gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) {
  kcheck::check_gelu_backward(x, dy, dx, t, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_backward_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), n);
  });
  PTDP_CU_LAUNCHED("gelu_backward_kernel");
}

}  // namespace ptdp::cuda
