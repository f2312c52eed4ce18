// SwiGLU, the gated activation of Llama's MLP: each row of x is [gate | up], y = silu(gate) * up.
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
constexpr int32_t kBitsLow = std::bit_cast<int32_t>(87.0f);   // e^-87: still a normal float
constexpr int32_t kBitsHigh = std::bit_cast<int32_t>(88.5f);  // rounds to 2^128: +inf

/// e^x as gelu_math.h's exp_simd computes it (range reduction by ln 2, a degree-7 polynomial,
/// relative error ~1e-7) for x in [-87, 88.3]; below, e^-87; above, +inf. The clamp and the
/// float-to-int conversion are done on the bits: under -ftrapping-math (this file's default) a
/// float compare or conversion keeps the loop scalar, and the C library's expf made this
/// memory-bound op compute-bound.
inline float exp_bits(float x) {
  const int32_t a = std::bit_cast<int32_t>(std::fabs(x));        // ordered like |x|
  const int32_t neg = std::bit_cast<int32_t>(x) >> 31;            // all ones where x < 0
  const int32_t limit = (kBitsLow & neg) | (kBitsHigh & ~neg);
  const int32_t over = -static_cast<int32_t>(a > limit);          // all ones where clamped
  x = std::copysign(std::bit_cast<float>((a & ~over) | (limit & over)), x);
  const float big = x * 1.44269504088896341f + kRound;  // n + 1.5 * 2^23, n = round(x / ln 2)
  const float n = big - kRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;  // Cody-Waite
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n (-126 .. 128) sits in the low mantissa bits of big; n = 128 makes the exponent all ones.
  const int32_t ni = std::bit_cast<int32_t>(big) - std::bit_cast<int32_t>(kRound);
  return p * std::bit_cast<float>((ni + 127) << 23);
}

/// 1 / (1 + e^-g): exactly 0 for g < -88.3 (e^-g is +inf), so silu(g) = g s goes to 0 there.
inline float sigmoid_f32(float g) { return 1.0f / (1.0f + exp_bits(-g)); }

}  // namespace

void CpuBackend::swiglu_forward(const void* x, void* y, DType t, int64_t rows, int64_t cols) {
  if (kcheck::check_swiglu("swiglu_forward", x, nullptr, y, t, rows, cols, false) ==
      kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* gate = static_cast<const S*>(x) + r * 2 * cols;
      const S* up = gate + cols;
      S* yr = static_cast<S*>(y) + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float g = St::load(gate[c]);
        yr[c] = St::store(g * sigmoid_f32(g) * St::load(up[c]));
      }
    }
  });
}

// d/dgate = dy * up * s (1 + g (1 - s)) with s = sigmoid(g); d/dup = dy * silu(g).
void CpuBackend::swiglu_backward(const void* x, const void* dy, void* dx, DType t, int64_t rows,
                                 int64_t cols) {
  if (kcheck::check_swiglu("swiglu_backward", x, dy, dx, t, rows, cols, true) ==
      kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* gate = static_cast<const S*>(x) + r * 2 * cols;
      const S* up = gate + cols;
      const S* dyr = static_cast<const S*>(dy) + r * cols;
      S* dgate = static_cast<S*>(dx) + r * 2 * cols;
      S* dup = dgate + cols;
      // Both inputs of a column are read before either output is written (so even dx == x
      // would work, though the contract does not promise it).
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float g = St::load(gate[c]), u = St::load(up[c]), d = St::load(dyr[c]);
        const float s = sigmoid_f32(g);
        const float silu = g * s;
        dgate[c] = St::store(d * u * (s * (1.0f + g * (1.0f - s))));
        dup[c] = St::store(d * silu);
      }
    }
  });
}

}  // namespace ptdp
