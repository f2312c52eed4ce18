// Elementwise ops: residual add (any floating storage type), axpy and scale (fp32), fill,
// strided sub-matrix copy and fill, the sum of squares behind grad norms, and the per-row dot
// products of the split RMSNorm. Multiplies and adds use the _rn intrinsics so they are never
// fused into an FMA: results are bit-identical to the CPU backend's (the sums up to their order).
#include "base/half.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  PTDP_GRID_STRIDE(i, n) y[i] = from_f32<T>(__fadd_rn(to_f32(a[i]), to_f32(b[i])));
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

// Bits is the storage word (float or uint16_t); the value is converted on the host.
template <typename Bits>
__global__ void fill_2d_kernel(Bits* x, int64_t ld, int64_t rows, int64_t cols, Bits value) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      x[r * ld + c] = value;
    }
  }
}


// Pass 2: one block adds the partials in a fixed order into partials[count].
__global__ void sum_squares_final_kernel(double* partials, int count) {
  const double v = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  const double total = block_reduce(v, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[count] = total;
}

// One block per row (grid-stride): out[r] = sum_c a * b * (w ? w : 1) in double, in the block's
// fixed reduction order.
template <typename T>
__global__ void row_dot_kernel(const T* a, const T* b, const T* w, float* out, int64_t rows,
                               int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double p = __dmul_rn(to_f32(a[r * cols + c]), to_f32(b[r * cols + c]));
      acc = __dadd_rn(acc, w != nullptr ? __dmul_rn(p, to_f32(w[c])) : p);
    }
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) out[r] = static_cast<float>(acc);
  }
}

}  // namespace

// Pass 1 of a sum of squares (sum_squares here, Newton-Schulz's norm): kReduceBlocks partial sums, each over a fixed grid-stride subset, in double.
__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partials) {
  double acc = 0.0;
  PTDP_GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}


void CudaBackend::row_dot(const void* a, const void* b, const void* w, DType t, float* out,
                          int64_t rows, int64_t cols) {
  if (kcheck::check_row_dot(a, b, t, out, rows, cols) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "row_dot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_dot_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w), out, rows,
        cols);
  });
  PTDP_CU_LAUNCHED("row_dot_kernel");
}

void CudaBackend::add(const void* a, const void* b, void* y, DType t, int64_t n) {
  kcheck::check_add(a, b, y, t, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<T><<<grid_for(n), kThreads, 0, stream_>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
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

void CudaBackend::copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t,
                          int64_t rows, int64_t cols) {
  if (kcheck::check_copy_2d(dst, ld_dst, src, ld_src, t, rows, cols) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  const std::size_t e = dtype_size(t);
  PTDP_CU(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(ld_dst) * e, src,
                            static_cast<std::size_t>(ld_src) * e,
                            static_cast<std::size_t>(cols) * e, static_cast<std::size_t>(rows),
                            cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) {
  if (kcheck::check_fill_2d(x, t, ld, rows, cols) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  const dim3 grid = rows_cols_grid(rows, cols);
  // The value is converted on the host exactly as the CPU backend converts it.
  switch (t) {
    case DType::BF16:
      fill_2d_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(x), ld, rows, cols,
                                                     f32_to_bf16(value));
      break;
    case DType::F16:
      fill_2d_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(x), ld, rows, cols,
                                                     f32_to_f16(value));
      break;
    default:
      fill_2d_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<float*>(x), ld, rows, cols,
                                                     value);
      break;
  }
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
