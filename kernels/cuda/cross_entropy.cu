// Cross-entropy over logits [rows, v] that may be one tensor rank's slice of the vocabulary.
// The pieces (row max, sum of exponentials, target logit) are reduced across the tensor group
// by the caller between the calls, so the logits are never gathered.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr unsigned kMaxRowBlocks = 65535u * 8u;

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks);
}

__global__ void ce_row_max_kernel(const float* logits, int64_t rows, int64_t v, float* row_max) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * v;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, x[j]);
    mx = block_reduce(mx, MaxOp{}, -INFINITY);
    if (threadIdx.x == 0) row_max[r] = mx;
  }
}

__global__ void ce_sum_exp_kernel(const float* logits, const float* row_max, int64_t rows,
                                  int64_t v, float* sum_exp) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * v;
    const float m = row_max[r];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(x[j] - m);
    s = block_reduce(s, SumOp{}, 0.0);
    if (threadIdx.x == 0) sum_exp[r] = static_cast<float>(s);
  }
}

__global__ void ce_target_logit_kernel(const float* logits, const int32_t* targets, int64_t rows,
                                       int64_t v, int64_t vocab_start, float* target_logit) {
  PTDP_GRID_STRIDE(r, rows) {
    const int64_t j = static_cast<int64_t>(targets[r]) - vocab_start;
    target_logit[r] = (j >= 0 && j < v) ? logits[r * v + j] : 0.0f;
  }
}

__global__ void ce_loss_kernel(const float* row_max, const float* sum_exp,
                               const float* target_logit, int64_t rows, float* loss) {
  PTDP_GRID_STRIDE(r, rows) loss[r] = logf(sum_exp[r]) + row_max[r] - target_logit[r];
}

// dlogits may alias logits: each element is read and written by the same thread.
__global__ void ce_backward_kernel(const float* logits, const float* row_max, const float* sum_exp,
                                   const int32_t* targets, const float* dloss, int64_t rows,
                                   int64_t v, int64_t vocab_start, float* dlogits) {
  PTDP_GRID_STRIDE(t, rows * v) {
    const int64_t r = t / v, j = t % v;
    const float inv = 1.0f / sum_exp[r];
    const float g = dloss[r];
    float d = g * expf(logits[t] - row_max[r]) * inv;
    if (j == static_cast<int64_t>(targets[r]) - vocab_start) d -= g;
    dlogits[t] = d;
  }
}

}  // namespace

void CudaBackend::ce_row_max(const float* logits, int64_t rows, int64_t v, float* row_max) {
  kcheck::check_ce_row_max(logits, rows, v, row_max);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  ce_row_max_kernel<<<row_blocks(rows), kThreads, 0, stream_>>>(logits, rows, v, row_max);
  PTDP_CU_LAUNCHED("ce_row_max_kernel");
}

void CudaBackend::ce_sum_exp(const float* logits, const float* row_max, int64_t rows, int64_t v,
                             float* sum_exp) {
  kcheck::check_ce_sum_exp(logits, row_max, rows, v, sum_exp);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  ce_sum_exp_kernel<<<row_blocks(rows), kThreads, 0, stream_>>>(logits, row_max, rows, v, sum_exp);
  PTDP_CU_LAUNCHED("ce_sum_exp_kernel");
}

void CudaBackend::ce_target_logit(const float* logits, const int32_t* targets, int64_t rows,
                                  int64_t v, int64_t vocab_start, float* target_logit) {
  kcheck::check_ce_target_logit(logits, targets, rows, v, vocab_start, target_logit);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  ce_target_logit_kernel<<<grid_for(rows), kThreads, 0, stream_>>>(logits, targets, rows, v,
                                                                   vocab_start, target_logit);
  PTDP_CU_LAUNCHED("ce_target_logit_kernel");
}

void CudaBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                          int64_t rows, float* loss) {
  kcheck::check_ce_loss(row_max, sum_exp, target_logit, rows, loss);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  ce_loss_kernel<<<grid_for(rows), kThreads, 0, stream_>>>(row_max, sum_exp, target_logit, rows,
                                                           loss);
  PTDP_CU_LAUNCHED("ce_loss_kernel");
}

void CudaBackend::ce_backward(const float* logits, const float* row_max, const float* sum_exp,
                              const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                              int64_t vocab_start, float* dlogits) {
  kcheck::check_ce_backward(logits, row_max, sum_exp, targets, dloss, rows, v, vocab_start,
                            dlogits);
  if (rows == 0 || v == 0) return;
  DeviceGuard guard(dev_);
  ce_backward_kernel<<<grid_for(rows * v), kThreads, 0, stream_>>>(
      logits, row_max, sum_exp, targets, dloss, rows, v, vocab_start, dlogits);
  PTDP_CU_LAUNCHED("ce_backward_kernel");
}

}  // namespace ptdp::cuda
