// Cross-entropy over logits [rows, v] (any floating storage type) that may be one tensor rank's
// slice of the vocabulary. One pass per row yields the slice's max, its sum of exponentials
// relative to that max (online) and the target logit; the caller reduces the maxima across the
// tensor group, moves each sum to the global max (ce_rescale) and sums them, so the logits are
// never gathered. Statistics and losses are fp32.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

// One block per row: each thread keeps an online (max, sum) over its columns, the block combines
// them in a fixed order. The thread that meets the target column writes it (another rank's
// target: thread 0 writes 0), so the row is read once.
template <typename T>
__global__ void ce_forward_local_kernel(const T* logits, const int32_t* targets, int64_t rows,
                                        int64_t v, int64_t vocab_start, float* row_max,
                                        float* sum_exp, float* target_logit) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * v;
    const int64_t target = static_cast<int64_t>(targets[r]) - vocab_start;
    MaxSum acc{-INFINITY, 0.0};
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const float xj = to_f32(x[j]);
      if (j == target) target_logit[r] = xj;
      max_sum_add(acc, xj);
    }
    if (threadIdx.x == 0 && !(target >= 0 && target < v)) target_logit[r] = 0.0f;
    acc = block_reduce(acc, MaxSumOp{}, MaxSum{-INFINITY, 0.0});
    if (threadIdx.x == 0) {
      row_max[r] = acc.max;
      sum_exp[r] = static_cast<float>(acc.sum);
    }
  }
}

// A slice whose max is -inf (no valid column) has sum 0 and contributes 0, with no
// exp(-inf - -inf) NaN.
__global__ void ce_rescale_kernel(float* row_max, float* sum_exp, const float* global_max,
                                  int64_t rows) {
  PTDP_GRID_STRIDE(r, rows) {
    const float m = row_max[r], g = global_max[r];
    sum_exp[r] = m == -INFINITY ? 0.0f : __fmul_rn(sum_exp[r], expf(m - g));
    row_max[r] = g;
  }
}

__global__ void ce_loss_kernel(const float* row_max, const float* sum_exp,
                               const float* target_logit, int64_t rows, float* loss) {
  PTDP_GRID_STRIDE(r, rows) loss[r] = logf(sum_exp[r]) + row_max[r] - target_logit[r];
}

// dlogits may alias logits: each element is read and written by the same thread. The target's
// -dloss is applied in fp32 before the one rounding.
template <typename T>
__global__ void ce_backward_kernel(const T* logits, const float* row_max, const float* sum_exp,
                                   const int32_t* targets, const float* dloss, int64_t rows,
                                   int64_t v, int64_t vocab_start, T* dlogits) {
  PTDP_GRID_STRIDE(t, rows * v) {
    const int64_t r = t / v, j = t % v;
    const float inv = 1.0f / sum_exp[r];
    const float g = dloss[r];
    float d = g * expf(to_f32(logits[t]) - row_max[r]) * inv;
    if (j == static_cast<int64_t>(targets[r]) - vocab_start) d -= g;
    dlogits[t] = from_f32<T>(d);
  }
}

}  // namespace

void CudaBackend::ce_forward_local(const void* logits, DType t, const int32_t* targets,
                                   int64_t rows, int64_t v, int64_t vocab_start, float* row_max,
                                   float* sum_exp, float* target_logit) {
  kcheck::check_ce_forward_local(logits, t, targets, rows, v, vocab_start, row_max, sum_exp,
                                 target_logit);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "ce_forward_local", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_forward_local_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(logits), targets, rows, v, vocab_start, row_max, sum_exp,
        target_logit);
  });
  PTDP_CU_LAUNCHED("ce_forward_local_kernel");
}

void CudaBackend::ce_rescale(float* row_max, float* sum_exp, const float* global_max,
                             int64_t rows) {
  kcheck::check_ce_rescale(row_max, sum_exp, global_max, rows);
  if (rows == 0) return;
  DeviceGuard guard(dev_);
  ce_rescale_kernel<<<grid_for(rows), kThreads, 0, stream_>>>(row_max, sum_exp, global_max, rows);
  PTDP_CU_LAUNCHED("ce_rescale_kernel");
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

void CudaBackend::ce_backward(const void* logits, DType t, const float* row_max,
                              const float* sum_exp, const int32_t* targets, const float* dloss,
                              int64_t rows, int64_t v, int64_t vocab_start, void* dlogits) {
  kcheck::check_ce_backward(logits, t, row_max, sum_exp, targets, dloss, rows, v, vocab_start,
                            dlogits);
  if (rows == 0 || v == 0) return;
  DeviceGuard guard(dev_);
  dispatch_float(t, "ce_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_backward_kernel<T><<<grid_for(rows * v), kThreads, 0, stream_>>>(
        static_cast<const T*>(logits), row_max, sum_exp, targets, dloss, rows, v, vocab_start,
        static_cast<T*>(dlogits));
  });
  PTDP_CU_LAUNCHED("ce_backward_kernel");
}

}  // namespace ptdp::cuda
