// Scale + optional causal mask + softmax over the last dimension of [batch, sq, sk] scores, and
// its variant for packed documents (a row sees the keys of its own document only), for every
// floating storage type. One block per row; each thread touches the same columns in every
// pass, so y may alias x and dx may alias dy.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

// Three passes over the row: max, sum of exponentials, then the normalised values. The last pass
// recomputes each exponential instead of reading back a stored one, so a 16-bit y is rounded
// once, and nothing is written before the last pass (y may alias x).
template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t sq, int64_t sk,
                                       float scale, bool causal) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % sq;
    const int64_t lim = i + (sk - sq) + 1;
    const int64_t valid = causal ? (lim < sk ? lim : sk) : sk;
    const T* xr = x + r * sk;
    T* yr = y + r * sk;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
      mx = fmaxf(mx, __fmul_rn(scale, to_f32(xr[j])));
    mx = block_reduce(mx, MaxOp{}, -INFINITY);
    double sum = 0.0;
    // scale * x rounded before the subtraction, as on the CPU: the row's maximum gives exactly
    // exp(0) = 1 (an FMA would leave the product's rounding error in the exponent).
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
      sum += expf(__fsub_rn(__fmul_rn(scale, to_f32(xr[j])), mx));
    sum = block_reduce(sum, SumOp{}, 0.0);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
      const float e = expf(__fsub_rn(__fmul_rn(scale, to_f32(xr[j])), mx));
      yr[j] = from_f32<T>(__fmul_rn(e, inv));
    }
    for (int64_t j = valid + threadIdx.x; j < sk; j += blockDim.x) yr[j] = from_f32<T>(0.0f);
  }
}

// softmax_forward_kernel's passes over keys first .. i of row i (its document), zeros elsewhere.
template <typename T>
__global__ void softmax_documents_kernel(const T* x, T* y, int64_t rows, int64_t heads, int64_t s,
                                         float scale, const int32_t* starts) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t n = r / s, i = r % s;
    const int64_t start = starts[(n / heads) * s + i];
    const int64_t first = start < 0 ? 0 : (start > i ? i : start);
    const T* xr = x + r * s;
    T* yr = y + r * s;
    float mx = -INFINITY;
    for (int64_t j = first + threadIdx.x; j <= i; j += blockDim.x)
      mx = fmaxf(mx, __fmul_rn(scale, to_f32(xr[j])));
    mx = block_reduce(mx, MaxOp{}, -INFINITY);
    double sum = 0.0;
    for (int64_t j = first + threadIdx.x; j <= i; j += blockDim.x)
      sum += expf(__fsub_rn(__fmul_rn(scale, to_f32(xr[j])), mx));
    sum = block_reduce(sum, SumOp{}, 0.0);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
      float v = 0.0f;
      if (j >= first && j <= i) {
        v = __fmul_rn(expf(__fsub_rn(__fmul_rn(scale, to_f32(xr[j])), mx)), inv);
      }
      yr[j] = from_f32<T>(v);
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t sk,
                                        float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * sk;
    const T* dyr = dy + r * sk;
    double dot = 0.0;
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
      dot += static_cast<double>(to_f32(dyr[j])) * to_f32(yr[j]);
    dot = block_reduce(dot, SumOp{}, 0.0);
    const float d = static_cast<float>(dot);
    T* dxr = dx + r * sk;
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
      dxr[j] = from_f32<T>(scale * to_f32(yr[j]) * (to_f32(dyr[j]) - d));
  }
}

}  // namespace

void CudaBackend::softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq,
                                  int64_t sk, float scale, bool causal) {
  if (kcheck::check_softmax_forward(x, y, t, batch, sq, sk, scale, causal) ==
      kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * sq;
  DeviceGuard guard(dev_);
  dispatch_float(t, "softmax_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<T*>(y), rows, sq, sk, scale, causal);
  });
  PTDP_CU_LAUNCHED("softmax_forward_kernel");
}

void CudaBackend::softmax_forward_documents(const void* x, void* y, DType t, int64_t batch,
                                            int64_t heads, int64_t s, float scale,
                                            const int32_t* document_starts) {
  if (kcheck::check_softmax_forward_documents(x, y, t, batch, heads, s, scale, document_starts) ==
      kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * s;
  DeviceGuard guard(dev_);
  dispatch_float(t, "softmax_forward_documents", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_documents_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(x), static_cast<T*>(y), rows, heads, s, scale, document_starts);
  });
  PTDP_CU_LAUNCHED("softmax_documents_kernel");
}

void CudaBackend::softmax_backward(const void* y, const void* dy, void* dx, DType t,
                                   int64_t batch, int64_t sq, int64_t sk, float scale) {
  if (kcheck::check_softmax_backward(y, dy, dx, t, batch, sq, sk) == kcheck::Work::none) return;
  const int64_t rows = batch * sq;
  DeviceGuard guard(dev_);
  dispatch_float(t, "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_kernel<T><<<row_blocks(rows), kThreads, 0, stream_>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), rows, sk,
        scale);
  });
  PTDP_CU_LAUNCHED("softmax_backward_kernel");
}

}  // namespace ptdp::cuda
