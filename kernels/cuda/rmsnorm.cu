// RMSNorm over the last dimension (no mean, no bias), saving 1/rms (fp32) for the backward pass,
// for every floating storage type of x, gamma, y, dy and dx; and the split RMSNorm, whose rows
// span several devices (Backend::rmsnorm_split_forward). Row sums are in double as on the
// CPU, and the fp32 products are rounded as the CPU rounds them (no contraction into FMAs), so
// the two devices differ only in the order of the double sums. Every reduction combines its
// terms in an order fixed by the problem's shape alone (deterministic, whatever the device).
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

// dgamma: a block sums kChunkRows rows of kColTile columns with kRowLanes threads per column;
// the chunks' partial sums are then added in chunk order. Enough blocks to fill the GPU even
// for the narrow column slices of tensor parallelism (unlike one block per column tile), and the
// summation order depends only on rows and cols.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kChunkRows = 256;
constexpr int64_t kMaxChunkBlocks = 65535;  // grid y; more chunks are strided over

// One block per row (grid-stride). y = (x * rstd) * gamma.
template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* gamma, T* y, float* rstd,
                                       int64_t rows, int64_t cols, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    double sq = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double v = to_f32(xr[c]);
      sq += v * v;
    }
    sq = block_reduce(sq, SumOp{}, 0.0);
    const float rs = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(cols) + eps));
    if (threadIdx.x == 0) rstd[r] = rs;
    T* yr = y + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = from_f32<T>(__fmul_rn(__fmul_rn(to_f32(xr[c]), rs), to_f32(gamma[c])));
    }
  }
}

// The split RMSNorm's forward (Backend::rmsnorm_split_forward): rstd from the whole row's sum of
// squares, then y = (x * rstd) * gamma; one block per row. rstd may alias sum_sq: each row's sum
// is read by every thread before thread 0 writes its rstd (the barrier in between).
template <typename T>
__global__ void rmsnorm_split_forward_kernel(const T* x, const T* gamma, const float* sum_sq, T* y,
                                             float* rstd, int64_t rows, int64_t cols, int64_t width,
                                             float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double sq = sum_sq[r];
    const float rs = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(width) + eps));
    __syncthreads();
    if (threadIdx.x == 0) rstd[r] = rs;
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = from_f32<T>(__fmul_rn(__fmul_rn(to_f32(xr[c]), rs), to_f32(gamma[c])));
    }
  }
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma, xhat = x * rstd; one block per
// row. mean(g * xhat) is computed over the row, or, for the split RMSNorm (dot not NULL), is
// rstd * dot[r] / width. dx may alias dy: each element is read and written by the same thread.
template <typename T>
__global__ void rmsnorm_dx_kernel(const T* x, const T* gamma, const float* rstd, const float* dot,
                                  const T* dy, T* dx, int64_t rows, int64_t cols, int64_t width) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const float rs = rstd[r];
    float mean_gx;
    if (dot != nullptr) {
      mean_gx = static_cast<float>(static_cast<double>(dot[r]) * rs / static_cast<double>(width));
    } else {
      double sum_gx = 0.0;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float xhat = __fmul_rn(to_f32(xr[c]), rs);
        sum_gx += static_cast<double>(to_f32(dyr[c])) * to_f32(gamma[c]) * xhat;
      }
      sum_gx = block_reduce(sum_gx, SumOp{}, 0.0);
      mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
    }
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = __fmul_rn(to_f32(xr[c]), rs);
      const float g = __fmul_rn(to_f32(dyr[c]), to_f32(gamma[c]));
      dxr[c] = from_f32<T>(__fmul_rn(rs, __fsub_rn(g, __fmul_rn(xhat, mean_gx))));
    }
  }
}

// partial[chunk, c] = sum over the chunk's rows of dy * (x * rstd), in double: grid (column
// tiles, chunks), block (kColTile, kRowLanes); row lane l takes every kRowLanes-th row of the
// chunk and the lanes are combined in lane order.
template <typename T>
__global__ void __launch_bounds__(kColTile* kRowLanes)
    rmsnorm_dgamma_partial_kernel(const T* x, const float* rstd, const T* dy, double* partial,
                                  int64_t rows, int64_t cols, int64_t chunks) {
  __shared__ double part[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r_end = (chunk + 1) * kChunkRows < rows ? (chunk + 1) * kChunkRows : rows;
    double acc = 0.0;
    if (c < cols) {
      for (int64_t r = chunk * kChunkRows + threadIdx.y; r < r_end; r += kRowLanes) {
        const float xhat = __fmul_rn(to_f32(x[r * cols + c]), rstd[r]);
        acc += static_cast<double>(to_f32(dy[r * cols + c])) * xhat;
      }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double total = 0.0;
      for (int l = 0; l < kRowLanes; ++l) total += part[l][threadIdx.x];
      partial[chunk * cols + c] = total;
    }
    __syncthreads();  // part is rewritten by the next chunk
  }
}

// dgamma[c] = (accumulate ? dgamma[c] : 0) + the chunks' partial sums in chunk order.
__global__ void rmsnorm_dgamma_final_kernel(const double* partial, int64_t chunks, int64_t cols,
                                            float* dgamma, bool accumulate) {
  PTDP_GRID_STRIDE(c, cols) {
    double total = 0.0;
    for (int64_t k = 0; k < chunks; ++k) total += partial[k * cols + c];
    dgamma[c] = static_cast<float>((accumulate ? static_cast<double>(dgamma[c]) : 0.0) + total);
  }
}

}  // namespace

void CudaBackend::rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd,
                                  int64_t rows, int64_t cols, float eps) {
  if (kcheck::check_rmsnorm_forward(x, gamma, y, t, rstd, rows, cols, eps) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  dispatch_float(t, "rmsnorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsnorm_forward_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<T*>(y), rstd, rows,
        cols, eps);
  });
  PTDP_CU_LAUNCHED("rmsnorm_forward_kernel");
}

void CudaBackend::rmsnorm_backward(const void* x, const void* gamma, const float* rstd,
                                   const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                                   int64_t cols, bool accumulate) {
  kcheck::check_rmsnorm_backward(x, gamma, rstd, dy, dx, t, dgamma, rows, cols);
  rmsnorm_backward_rows(x, gamma, rstd, nullptr, dy, dx, t, dgamma, rows, cols, cols, accumulate,
                        "rmsnorm_backward");
}

void CudaBackend::rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq,
                                        void* y, DType t, float* rstd, int64_t rows, int64_t cols,
                                        int64_t width, float eps) {
  if (kcheck::check_rmsnorm_split_forward(x, gamma, sum_sq, y, t, rstd, rows, cols, width, eps) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  dispatch_float(t, "rmsnorm_split_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsnorm_split_forward_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), sum_sq, static_cast<T*>(y), rstd,
        rows, cols, width, eps);
  });
  PTDP_CU_LAUNCHED("rmsnorm_split_forward_kernel");
}

void CudaBackend::rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd,
                                         const float* dot, const void* dy, void* dx, DType t,
                                         float* dgamma, int64_t rows, int64_t cols, int64_t width,
                                         bool accumulate) {
  kcheck::check_rmsnorm_split_backward(x, gamma, rstd, dot, dy, dx, t, dgamma, rows, cols, width);
  rmsnorm_backward_rows(x, gamma, rstd, dot, dy, dx, t, dgamma, rows, cols, width, accumulate,
                        "rmsnorm_split_backward");
}

void CudaBackend::rmsnorm_backward_rows(const void* x, const void* gamma, const float* rstd,
                                        const float* dot, const void* dy, void* dx, DType t,
                                        float* dgamma, int64_t rows, int64_t cols, int64_t width,
                                        bool accumulate, const char* op) {
  DeviceGuard guard(dev_);
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  // Partial sums from the caching allocator; freeing them right after queuing is safe because
  // any reuse is ordered after these kernels on the same stream.
  const std::size_t partial_bytes = static_cast<std::size_t>(chunks * cols) * sizeof(double);
  auto* partial = static_cast<double*>(device_alloc(dev_, partial_bytes));
  try {
    dispatch_float(t, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      // dgamma first: it reads dy, so a caller that lets dx overwrite dy still gets the sums.
      if (rows > 0) {
        const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                        static_cast<unsigned>(chunks < kMaxChunkBlocks ? chunks : kMaxChunkBlocks));
        rmsnorm_dgamma_partial_kernel<T><<<grid, dim3(kColTile, kRowLanes), 0, stream_>>>(
            static_cast<const T*>(x), rstd, static_cast<const T*>(dy), partial, rows, cols,
            chunks);
        PTDP_CU_LAUNCHED("rmsnorm_dgamma_partial_kernel");
      }
      rmsnorm_dgamma_final_kernel<<<grid_for(cols), kThreads, 0, stream_>>>(partial, chunks, cols,
                                                                           dgamma, accumulate);
      PTDP_CU_LAUNCHED("rmsnorm_dgamma_final_kernel");
      if (rows == 0) return;
      rmsnorm_dx_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), rstd, dot,
          static_cast<const T*>(dy), static_cast<T*>(dx), rows, cols, width);
      PTDP_CU_LAUNCHED("rmsnorm_dx_kernel");
    });
  } catch (...) {
    device_free(dev_, partial, partial_bytes);
    throw;
  }
  device_free(dev_, partial, partial_bytes);
}

}  // namespace ptdp::cuda
