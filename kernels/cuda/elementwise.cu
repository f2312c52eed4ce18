// Elementwise ops: residual add, axpy, scale, fill, strided sub-matrix copy and fill, and the
// sum of squares behind grad norms. Multiplies and adds use the _rn intrinsics so they are never
// fused into an FMA: results are bit-identical to the CPU backend's.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/half.h"

namespace ptdp::cuda {

namespace {

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  PTDP_GRID_STRIDE(i, n) y[i] = __fadd_rn(a[i], b[i]);
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  PTDP_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  PTDP_GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], alpha);
}

template <typename T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  PTDP_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void fill_2d_kernel(float* x, int64_t ld, int64_t rows, int64_t cols, float value) {
  PTDP_GRID_STRIDE(t, rows * cols) x[(t / cols) * ld + t % cols] = value;
}

// Pass 1: kReduceBlocks partial sums, each over a fixed grid-stride subset, in double.
__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partials) {
  double acc = 0.0;
  PTDP_GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2: one block adds the partials in a fixed order into partials[count].
__global__ void sum_squares_final_kernel(double* partials, int count) {
  const double v = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  const double total = block_reduce(v, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[count] = total;
}

}  // namespace

void CudaBackend::add(const float* a, const float* b, float* y, int64_t n) {
  kcheck::check_add(a, b, y, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  add_kernel<<<grid_for(n), kThreads, 0, stream_>>>(a, b, y, n);
  PTDP_CU_LAUNCHED("add_kernel");
}

void CudaBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  kcheck::check_axpy(x, y, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  axpy_kernel<<<grid_for(n), kThreads, 0, stream_>>>(alpha, x, y, n);
  PTDP_CU_LAUNCHED("axpy_kernel");
}

void CudaBackend::scale(float* x, float alpha, int64_t n) {
  kcheck::check_scale(x, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  scale_kernel<<<grid_for(n), kThreads, 0, stream_>>>(x, alpha, n);
  PTDP_CU_LAUNCHED("scale_kernel");
}

void CudaBackend::fill(void* x, DType t, double value, int64_t n) {
  kcheck::check_fill(x, t, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  const unsigned grid = grid_for(n);
  // The value is converted on the host exactly as the CPU backend converts it.
  switch (t) {
    case DType::F32:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<float*>(x), static_cast<float>(value),
                                                  n);
      break;
    case DType::BF16:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(x),
                                                  f32_to_bf16(static_cast<float>(value)), n);
      break;
    case DType::F16:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(x),
                                                  f32_to_f16(static_cast<float>(value)), n);
      break;
    case DType::I32:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<int32_t*>(x),
                                                  static_cast<int32_t>(value), n);
      break;
    case DType::I64:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<int64_t*>(x),
                                                  static_cast<int64_t>(value), n);
      break;
  }
  PTDP_CU_LAUNCHED("fill_kernel");
}

void CudaBackend::copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                          int64_t rows, int64_t cols) {
  if (kcheck::check_copy_2d(dst, ld_dst, src, ld_src, rows, cols) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  constexpr auto f = sizeof(float);
  PTDP_CU(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(ld_dst) * f, src,
                            static_cast<std::size_t>(ld_src) * f,
                            static_cast<std::size_t>(cols) * f, static_cast<std::size_t>(rows),
                            cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_2d(float* x, int64_t ld, int64_t rows, int64_t cols, float value) {
  if (kcheck::check_fill_2d(x, ld, rows, cols) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  fill_2d_kernel<<<grid_for(rows * cols), kThreads, 0, stream_>>>(x, ld, rows, cols, value);
  PTDP_CU_LAUNCHED("fill_2d_kernel");
}

double CudaBackend::sum_squares(const float* x, int64_t n) {
  kcheck::check_sum_squares(x, n);
  if (n == 0) return 0.0;
  DeviceGuard guard(dev_);
  std::lock_guard<std::mutex> lock(reduce_mutex_);
  // A fixed grid: the summation order, hence the result, does not depend on the GPU.
  sum_squares_partial_kernel<<<kReduceBlocks, kThreads, 0, stream_>>>(x, n, partials_);
  PTDP_CU_LAUNCHED("sum_squares_partial_kernel");
  sum_squares_final_kernel<<<1, kReduceBlocks, 0, stream_>>>(partials_, kReduceBlocks);
  PTDP_CU_LAUNCHED("sum_squares_final_kernel");
  double total = 0.0;
  PTDP_CU(cudaMemcpyAsync(&total, partials_ + kReduceBlocks, sizeof total, cudaMemcpyDeviceToHost,
                          stream_));
  PTDP_CU(cudaStreamSynchronize(stream_));
  return total;
}

}  // namespace ptdp::cuda
