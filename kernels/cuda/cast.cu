// Conversions between the floating storage types, round to nearest even. The conversions are
// base/half.h's, the very functions the CPU backend uses, so results (NaN payloads included)
// are bit-identical to the CPU's; cuda_bf16.h's intrinsics differ from them on NaNs.
#include "base/half.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

__device__ __forceinline__ float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      break;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

template <DType Src, DType Dst>
__global__ void cast_kernel(const void* src, void* dst, int64_t n) {
  PTDP_GRID_STRIDE(i, n) store(dst, Dst, i, load(src, Src, i));
}

template <DType Src>
void launch_from(const void* src, DType dst_type, void* dst, int64_t n, cudaStream_t stream) {
  const unsigned grid = grid_for(n);
  switch (dst_type) {
    case DType::BF16:
      cast_kernel<Src, DType::BF16><<<grid, kThreads, 0, stream>>>(src, dst, n);
      break;
    case DType::F16:
      cast_kernel<Src, DType::F16><<<grid, kThreads, 0, stream>>>(src, dst, n);
      break;
    default:
      cast_kernel<Src, DType::F32><<<grid, kThreads, 0, stream>>>(src, dst, n);
      break;
  }
}

}  // namespace

void CudaBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  kcheck::check_cast(src, src_type, dst, dst_type, n);
  if (n == 0) return;
  if (src_type == dst_type) {
    copy(dst, src, static_cast<std::size_t>(n) * dtype_size(src_type));
    return;
  }
  DeviceGuard guard(dev_);
  switch (src_type) {
    case DType::BF16:
      launch_from<DType::BF16>(src, dst_type, dst, n, stream_);
      break;
    case DType::F16:
      launch_from<DType::F16>(src, dst_type, dst, n, stream_);
      break;
    default:
      launch_from<DType::F32>(src, dst_type, dst, n, stream_);
      break;
  }
  PTDP_CU_LAUNCHED("cast_kernel");
}

}  // namespace ptdp::cuda
