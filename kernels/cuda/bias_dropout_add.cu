// The end of an attention or MLP block, fused: y = residual + dropout(x + bias) over a
// [rows, cols] matrix, for every floating storage type. The mask is dropout_forward's for the same
// DropoutDesc (dropout_mask.cuh), so it is bit-identical to the CPU backend's and to the unfused
// ops'; everything is fp32 until the one rounding of y.
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/dropout_mask.cuh"

namespace ptdp::cuda {

namespace {

// With dropout: one thread per Philox block of a row of the mask's block (see dropout.cu). The
// bias column of the first element is computed once, the next ones by counting. y may alias
// residual (or x): each element is read and written by the same thread.
template <typename T>
__global__ void bias_dropout_add_kernel(const T* x, const T* bias, const T* residual, T* y,
                                        int64_t cols, PhiloxStream rng, float p, float keep_scale,
                                        MaskGeometry g) {
  PTDP_GRID_STRIDE(t, g.items()) {
    const MaskSpan s = mask_span(g, rng, t);
    if (s.w_lo == s.w_hi) continue;
    int64_t col = bias != nullptr ? (s.local0 + s.w_lo) % cols : 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if (w < s.w_lo || w >= s.w_hi) continue;
      const int64_t i = s.local0 + w;
      float v = to_f32(x[i]);
      if (bias != nullptr) {
        v = __fadd_rn(v, to_f32(bias[col]));
        if (++col == cols) col = 0;
      }
      v = mask_keep(s, w, p) ? __fmul_rn(v, keep_scale) : 0.0f;
      y[i] = from_f32<T>(__fadd_rn(to_f32(residual[i]), v));
    }
  }
}

// p == 0: no mask, y = residual + (x + bias); rows on grid y, columns on grid x.
template <typename T>
__global__ void bias_add_residual_kernel(const T* x, const T* bias, const T* residual, T* y,
                                         int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i = r * cols + c;
      float v = to_f32(x[i]);
      if (bias != nullptr) v = __fadd_rn(v, to_f32(bias[c]));
      y[i] = from_f32<T>(__fadd_rn(to_f32(residual[i]), v));
    }
  }
}

}  // namespace

void CudaBackend::bias_dropout_add(const void* x, const void* bias, const void* residual, void* y,
                                   DType t, int64_t rows, int64_t cols, const DropoutDesc& d) {
  if (kcheck::check_bias_dropout_add(x, bias, residual, y, t, rows, cols, d) ==
      kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  dispatch_float(t, "bias_dropout_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* xs = static_cast<const T*>(x);
    const auto* bs = static_cast<const T*>(bias);
    const auto* rs = static_cast<const T*>(residual);
    auto* ys = static_cast<T*>(y);
    if (d.p == 0.0f) {
      bias_add_residual_kernel<T><<<rows_cols_grid(rows, cols), kThreads, 0, stream_>>>(
          xs, bs, rs, ys, rows, cols);
      return;
    }
    const MaskGeometry g = mask_geometry(d.block);
    bias_dropout_add_kernel<T><<<grid_for(g.items()), kThreads, 0, stream_>>>(
        xs, bs, rs, ys, cols, d.rng, d.p, kcheck::dropout_keep_scale(d.p), g);
  });
  PTDP_CU_LAUNCHED("bias_dropout_add_kernel");
}

}  // namespace ptdp::cuda
