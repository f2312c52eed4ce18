// What the CPU attention kernels share (the whole-sequence kernel in attention.cpp, ring
// attention's block pairs in attention_block.cpp): the online-softmax key tile, and the dot
// products and axpy over a head's dh elements of the block pairs' row-by-row loops.
#pragma once

#include <cstdint>
#include <limits>

namespace ptdp::cpu_attention {

inline constexpr int64_t kKeyTile = 64;  // keys scored per online-softmax step
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t e = 0; e < n; ++e) acc += x[e] * y[e];
  return acc;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) y[e] += alpha * x[e];
}

}  // namespace ptdp::cpu_attention
