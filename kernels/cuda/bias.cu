// Bias add and bias gradient over a [rows, cols] matrix, for every floating storage type (the
// bias gradient is fp32).
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kColTile = 32;   // columns per block (one per lane: coalesced row reads)
constexpr int kRowLanes = 32;  // threads per column, each summing every 32nd row

// Rows on grid dimension y and columns on x: the column of an element needs no division.
template <typename T>
__global__ void bias_add_kernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    T* yr = y + r * cols;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      yr[c] = from_f32<T>(__fadd_rn(to_f32(yr[c]), to_f32(bias[c])));
    }
  }
}

// dbias[c] = (accumulate ? dbias[c] : 0) + sum_r dy[r, c], in double; the partial sums of the
// row lanes are combined in lane order, so the result is the same every run.
template <typename T>
__global__ void __launch_bounds__(kColTile* kRowLanes)
    bias_grad_kernel(const T* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate) {
  __shared__ double part[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  double acc = 0.0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += to_f32(dy[r * cols + c]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = 0.0;
    for (int l = 0; l < kRowLanes; ++l) total += part[l][threadIdx.x];
    dbias[c] = static_cast<float>((accumulate ? static_cast<double>(dbias[c]) : 0.0) + total);
  }
}

}  // namespace

void CudaBackend::bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) {
  kcheck::check_bias_add(y, bias, t, rows, cols);
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "bias_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_add_kernel<T><<<rows_cols_grid(rows, cols), kThreads, 0, stream_>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), rows, cols);
  });
  PTDP_CU_LAUNCHED("bias_add_kernel");
}

void CudaBackend::bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols,
                            bool accumulate) {
  kcheck::check_bias_grad(dy, t, dbias, rows, cols);
  if (cols == 0) return;
  DeviceGuard guard(dev_);
  const auto blocks = static_cast<unsigned>((cols + kColTile - 1) / kColTile);
  dispatch_float(t, "bias_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<blocks, dim3(kColTile, kRowLanes), 0, stream_>>>(
        static_cast<const T*>(dy), dbias, rows, cols, accumulate);
  });
  PTDP_CU_LAUNCHED("bias_grad_kernel");
}

}  // namespace ptdp::cuda
