// GeLU (tanh approximation, as GPT-2 and Megatron use it) and its derivative in fp32 on the
// device, shared by the GeLU ops and the GEMM's fallback epilogue so that both agree bit for bit.
// The same formulas as kernels/cpu/gelu_math.h, with the device's tanhf.
#pragma once

#include <cuda_runtime.h>

namespace ptdp::cuda {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCoeff = 0.044715f;

/// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__device__ __forceinline__ float gelu_f32(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v)));
}

/// d gelu(x) / dx.
__device__ __forceinline__ float gelu_grad_f32(float v) {
  const float t = tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v));
  const float dt = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v * v) * (1.0f - t * t);
  return 0.5f * (1.0f + t) + 0.5f * v * dt;
}

}  // namespace ptdp::cuda
