// Bias add and bias gradient over a [rows, cols] matrix.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kColTile = 32;   // columns per block (one per lane: coalesced row reads)
constexpr int kRowLanes = 32;  // threads per column, each summing every 32nd row

__global__ void bias_add_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  PTDP_GRID_STRIDE(t, rows * cols) y[t] += bias[t % cols];
}

// dbias[c] = (accumulate ? dbias[c] : 0) + sum_r dy[r, c], in double; the partial sums of the
// row lanes are combined in lane order, so the result is the same every run.
__global__ void __launch_bounds__(kColTile* kRowLanes)
    bias_grad_kernel(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate) {
  __shared__ double part[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  double acc = 0.0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += dy[r * cols + c];
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

void CudaBackend::bias_add(float* y, const float* bias, int64_t rows, int64_t cols) {
  kcheck::check_bias_add(y, bias, rows, cols);
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(dev_);
  bias_add_kernel<<<grid_for(rows * cols), kThreads, 0, stream_>>>(y, bias, rows, cols);
  PTDP_CU_LAUNCHED("bias_add_kernel");
}

void CudaBackend::bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                            bool accumulate) {
  kcheck::check_bias_grad(dy, dbias, rows, cols);
  if (cols == 0) return;
  DeviceGuard guard(dev_);
  const auto blocks = static_cast<unsigned>((cols + kColTile - 1) / kColTile);
  bias_grad_kernel<<<blocks, dim3(kColTile, kRowLanes), 0, stream_>>>(dy, dbias, rows, cols,
                                                                      accumulate);
  PTDP_CU_LAUNCHED("bias_grad_kernel");
}

}  // namespace ptdp::cuda
