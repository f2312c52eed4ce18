// Rotary position embedding, in place on the query and key heads of the fused QKV activation
// [s, b, groups, q_per_group + 2, dh] (rotate-half convention), for every floating storage type:
// one fused kernel before attention. Numerics follow the CPU (kernels/cpu/rope.cpp) step for
// step: angle = fp32 product of float(position) and inv_freq[i] (never contracted), cos and sin
// in double rounded to fp32, each times RopeDesc::amplitude (the backward negates the sin:
// sin(-a) = -sin(a) exactly), and
// out1 = x1 c - x2 s, out2 = x2 c + x1 s with each product and sum rounded separately, as the
// CPU's uncontracted fp32 code does. The two devices therefore agree bit for bit except where
// the device's double cos or sin (within 2 ulp of double) rounds to the other fp32 neighbour
// than the host's, a chance of about 2^-28 per value.
#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kRopeThreads = 256;

// Block (tx, ty): tx threads over the rot_dim / 2 frequencies i, ty tokens; grid-stride over the
// s * b tokens on x. Each thread evaluates cos and sin of its (token, i) once and rotates that
// pair of features in every query and key head of the token, so the double-precision sincos is
// shared by all groups * (q_per_group + 1) heads. (The minimum of 4 blocks per SM allows 64
// registers; left to itself ptxas gave the f32 kernel 32 and spilled.)
template <typename T>
__global__ void __launch_bounds__(kRopeThreads, 4)
    rope_kernel(T* qkv, int64_t tokens, int64_t b, int64_t groups, int64_t q_per_group,
                int64_t dh, int64_t half, const float* inv_freq, const int32_t* positions,
                int64_t position_offset, float amplitude, float sign) {
  const int64_t group_width = (q_per_group + 2) * dh;  // elements of one group in a token
  for (int64_t tok = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; tok < tokens;
       tok += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    // [s, b] token order: tok = si * b + bi.
    const int64_t pos = positions != nullptr ? static_cast<int64_t>(positions[tok])
                                             : tok / b + position_offset;
    T* token = qkv + tok * groups * group_width;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const float angle = __fmul_rn(static_cast<float>(pos), inv_freq[i]);
      double sd, cd;
      sincos(static_cast<double>(angle), &sd, &cd);
      // The amplitude scales the rounded fp32 cos and sin (exact for 1), as on the CPU.
      const float c = __fmul_rn(static_cast<float>(cd), amplitude);
      const float sn = sign * __fmul_rn(static_cast<float>(sd), amplitude);
      for (int64_t g = 0; g < groups; ++g) {
        T* head = token + g * group_width + i;
        for (int64_t h = 0; h <= q_per_group; ++h, head += dh) {  // query heads, then the key
          const float x1 = to_f32(head[0]), x2 = to_f32(head[half]);
          head[0] = from_f32<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn)));
          head[half] = from_f32<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)));
        }
      }
    }
  }
}

/// Launches rope_kernel on `stream` for a validated descriptor with work to do.
void launch_rope(void* qkv, DType t, const RopeDesc& d, float sign, cudaStream_t stream) {
  const int64_t half = d.rot_dim / 2, tokens = d.s * d.b;
  // Lanes over the frequencies: the smallest multiple of 32 covering them (at most the block).
  int64_t tx = (half + 31) / 32 * 32;
  if (tx > kRopeThreads) tx = kRopeThreads;
  const int64_t ty = kRopeThreads / tx;
  const int64_t want = (tokens + ty - 1) / ty;
  constexpr int64_t kMaxBlocks = 65535LL * 8;
  const auto blocks = static_cast<unsigned>(want < kMaxBlocks ? want : kMaxBlocks);
  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  dispatch_float(t, sign > 0.0f ? "rope_forward" : "rope_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<blocks, block, 0, stream>>>(static_cast<T*>(qkv), tokens, d.b, d.groups,
                                                  d.q_per_group, d.dh, half, d.inv_freq,
                                                  d.positions, d.position_offset, d.amplitude, sign);
  });
}

}  // namespace

void CudaBackend::rope_forward(void* qkv, DType t, const RopeDesc& d) {
  if (kcheck::check_rope("rope_forward", qkv, t, d) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  launch_rope(qkv, t, d, 1.0f, stream_);
  PTDP_CU_LAUNCHED("rope_kernel");
}

void CudaBackend::rope_backward(void* dqkv, DType t, const RopeDesc& d) {
  if (kcheck::check_rope("rope_backward", dqkv, t, d) == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  launch_rope(dqkv, t, d, -1.0f, stream_);
  PTDP_CU_LAUNCHED("rope_kernel");
}

}  // namespace ptdp::cuda
