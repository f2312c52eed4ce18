// Scale + optional causal mask + softmax over the last dimension of [batch, sq, sk] scores.
// One block per row; each thread touches the same columns in every pass, so y may alias x and
// dx may alias dy.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr unsigned kMaxRowBlocks = 65535u * 8u;

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks);
}

__global__ void softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t sq,
                                       int64_t sk, float scale, bool causal) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % sq;
    const int64_t lim = i + (sk - sq) + 1;
    const int64_t valid = causal ? (lim < sk ? lim : sk) : sk;
    const float* xr = x + r * sk;
    float* yr = y + r * sk;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
      mx = fmaxf(mx, __fmul_rn(scale, xr[j]));
    mx = block_reduce(mx, MaxOp{}, -INFINITY);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
      // scale * x rounded before the subtraction, as on the CPU: the row's maximum gives
      // exactly exp(0) = 1 (an FMA would leave the product's rounding error in the exponent).
      const float e = expf(__fsub_rn(__fmul_rn(scale, xr[j]), mx));
      yr[j] = e;
      sum += e;
    }
    sum = block_reduce(sum, SumOp{}, 0.0);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) yr[j] *= inv;
    for (int64_t j = valid + threadIdx.x; j < sk; j += blockDim.x) yr[j] = 0.0f;
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows,
                                        int64_t sk, float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * sk;
    const float* dyr = dy + r * sk;
    double dot = 0.0;
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
      dot += static_cast<double>(dyr[j]) * yr[j];
    dot = block_reduce(dot, SumOp{}, 0.0);
    const float d = static_cast<float>(dot);
    float* dxr = dx + r * sk;
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) dxr[j] = scale * yr[j] * (dyr[j] - d);
  }
}

}  // namespace

void CudaBackend::softmax_forward(const float* x, float* y, int64_t batch, int64_t sq, int64_t sk,
                                  float scale, bool causal) {
  if (kcheck::check_softmax_forward(x, y, batch, sq, sk, scale, causal) == kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * sq;
  DeviceGuard guard(dev_);
  softmax_forward_kernel<<<row_blocks(rows), kThreads, 0, stream_>>>(x, y, rows, sq, sk, scale,
                                                                     causal);
  PTDP_CU_LAUNCHED("softmax_forward_kernel");
}

void CudaBackend::softmax_backward(const float* y, const float* dy, float* dx, int64_t batch,
                                   int64_t sq, int64_t sk, float scale) {
  if (kcheck::check_softmax_backward(y, dy, dx, batch, sq, sk) == kcheck::Work::none) return;
  const int64_t rows = batch * sq;
  DeviceGuard guard(dev_);
  softmax_backward_kernel<<<row_blocks(rows), kThreads, 0, stream_>>>(y, dy, dx, rows, sk, scale);
  PTDP_CU_LAUNCHED("softmax_backward_kernel");
}

}  // namespace ptdp::cuda
