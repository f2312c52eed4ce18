// LayerNorm over the last dimension, saving mean and 1/std (fp32) for the backward pass, for
// every floating storage type of x, gamma, beta, y, dy and dx. Row sums are in double as on the
// CPU; each reduction combines its terms in a fixed order (deterministic).
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kColTile = 32;
constexpr int kRowLanes = 32;

// One block per row.
template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean, float* rstd, int64_t rows, int64_t cols,
                                         float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    double sum = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += to_f32(xr[c]);
    sum = block_reduce(sum, SumOp{}, 0.0);
    const double mu = sum / static_cast<double>(cols);
    double sq = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = to_f32(xr[c]) - mu;
      sq += d * d;
    }
    sq = block_reduce(sq, SumOp{}, 0.0);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(cols) + eps));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    T* yr = y + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = from_f32<T>((to_f32(xr[c]) - m) * rs * to_f32(gamma[c]) + to_f32(beta[c]));
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; one block per row.
// dx may alias dy: each element is read and written by the same thread.
template <typename T>
__global__ void layernorm_dx_kernel(const T* x, const T* gamma, const float* mean,
                                    const float* rstd, const T* dy, T* dx, int64_t rows,
                                    int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const float m = mean[r], rs = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double g = static_cast<double>(to_f32(dyr[c])) * to_f32(gamma[c]);
      sum_g += g;
      sum_gx += g * ((to_f32(xr[c]) - m) * rs);
    }
    sum_g = block_reduce(sum_g, SumOp{}, 0.0);
    sum_gx = block_reduce(sum_gx, SumOp{}, 0.0);
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(cols));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (to_f32(xr[c]) - m) * rs;
      dxr[c] = from_f32<T>(rs * (to_f32(dyr[c]) * to_f32(gamma[c]) - mean_g - xhat * mean_gx));
    }
  }
}

// dgamma[c], dbeta[c] (fp32): sums over rows, 32 row lanes per column combined in lane order.
template <typename T>
__global__ void __launch_bounds__(kColTile* kRowLanes)
    layernorm_dparams_kernel(const T* x, const float* mean, const float* rstd, const T* dy,
                             float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                             bool accumulate) {
  __shared__ double part_g[kRowLanes][kColTile + 1];
  __shared__ double part_b[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  double acc_g = 0.0, acc_b = 0.0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) {
      const float xv = to_f32(x[r * cols + c]), dyv = to_f32(dy[r * cols + c]);
      acc_g += static_cast<double>(dyv) * ((xv - mean[r]) * rstd[r]);
      acc_b += dyv;
    }
  }
  part_g[threadIdx.y][threadIdx.x] = acc_g;
  part_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double tg = 0.0, tb = 0.0;
    for (int l = 0; l < kRowLanes; ++l) {
      tg += part_g[l][threadIdx.x];
      tb += part_b[l][threadIdx.x];
    }
    dgamma[c] = static_cast<float>((accumulate ? static_cast<double>(dgamma[c]) : 0.0) + tg);
    dbeta[c] = static_cast<float>((accumulate ? static_cast<double>(dbeta[c]) : 0.0) + tb);
  }
}

}  // namespace

void CudaBackend::layernorm_forward(const void* x, const void* gamma, const void* beta, void* y,
                                    DType t, float* mean, float* rstd, int64_t rows, int64_t cols,
                                    float eps) {
  if (kcheck::check_layernorm_forward(x, gamma, beta, y, t, mean, rstd, rows, cols, eps) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  dispatch_float(t, "layernorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    layernorm_forward_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
        static_cast<T*>(y), mean, rstd, rows, cols, eps);
  });
  PTDP_CU_LAUNCHED("layernorm_forward_kernel");
}

void CudaBackend::layernorm_backward(const void* x, const void* gamma, const float* mean,
                                     const float* rstd, const void* dy, void* dx, DType t,
                                     float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                     bool accumulate) {
  kcheck::check_layernorm_backward(x, gamma, mean, rstd, dy, dx, t, dgamma, dbeta, rows, cols);
  DeviceGuard guard(dev_);
  const auto col_blocks = static_cast<unsigned>((cols + kColTile - 1) / kColTile);
  dispatch_float(t, "layernorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Parameter gradients first: they read dy, so a caller that lets dx overwrite dy still gets
    // the right sums.
    layernorm_dparams_kernel<T><<<col_blocks, dim3(kColTile, kRowLanes), 0, stream_>>>(
        static_cast<const T*>(x), mean, rstd, static_cast<const T*>(dy), dgamma, dbeta, rows,
        cols, accumulate);
    PTDP_CU_LAUNCHED("layernorm_dparams_kernel");
    if (rows == 0) return;
    layernorm_dx_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), mean, rstd,
        static_cast<const T*>(dy), static_cast<T*>(dx), rows, cols);
    PTDP_CU_LAUNCHED("layernorm_dx_kernel");
  });
}

}  // namespace ptdp::cuda
