// Dropout with the mask drawn from Philox at each element's global index (see dropout_mask.cuh
// and GlobalBlock): nothing is stored, the backward pass regenerates the mask, and the masks are
// bit-identical to the CPU backend's for every partition of a tensor. Kept elements are scaled by
// 1 / (1 - p) (0 when p == 1) in fp32 and rounded once to the storage type.
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/dropout_mask.cuh"

namespace ptdp::cuda {

namespace {

// in and out may alias: each element is read and written by the same thread.
template <typename T>
__global__ void dropout_kernel(const T* in, T* out, PhiloxStream rng, float p, float keep_scale,
                               MaskGeometry g) {
  PTDP_GRID_STRIDE(t, g.items()) {
    const MaskSpan s = mask_span(g, rng, t);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if (w < s.w_lo || w >= s.w_hi) continue;
      const int64_t i = s.local0 + w;
      out[i] = mask_keep(s, w, p) ? from_f32<T>(__fmul_rn(to_f32(in[i]), keep_scale))
                                  : from_f32<T>(0.0f);
    }
  }
}

void apply_mask(const char* op, const void* in, void* out, DType t, const DropoutDesc& d,
                int dev_, cudaStream_t stream) {
  if (kcheck::check_dropout(op, in, out, t, d) == kcheck::Work::none) return;
  const float keep_scale = kcheck::dropout_keep_scale(d.p);
  const MaskGeometry g = mask_geometry(d.block);
  DeviceGuard guard(dev_);
  dispatch_float(t, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid_for(g.items()), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), d.rng, d.p, keep_scale, g);
  });
  PTDP_CU_LAUNCHED("dropout_kernel");
}

}  // namespace

void CudaBackend::dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) {
  apply_mask("dropout_forward", x, y, t, d, dev_, stream_);
}

void CudaBackend::dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) {
  apply_mask("dropout_backward", dy, dx, t, d, dev_, stream_);
}

}  // namespace ptdp::cuda
