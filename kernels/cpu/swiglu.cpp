// SwiGLU, the gated activation of Llama's MLP: each row of x is [gate | up], y = silu(gate) * up.
// The row loops are PTDP_CPU_CLONES (kernels/cpu/simd_clones.h), built with -fno-trapping-math
// (the sigmoid's exp vectorises) and without contraction (every copy computes the same bits).
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gelu_math.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

/// 1 / (1 + e^-g): exactly 0 for g < -88.3 (e^-g is +inf), so silu(g) = g s goes to 0 there.
inline float sigmoid_f32(float g) { return 1.0f / (1.0f + cpu::exp_simd(-g)); }

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void swiglu_forward_row(const typename St::type* gate,
                                                 const typename St::type* up,
                                                 typename St::type* y, int64_t cols) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const float g = St::load(gate[c]);
    y[c] = St::store(g * sigmoid_f32(g) * St::load(up[c]));
  }
}

// Both inputs of a column are read before either output is written (so even dx == x would
// work, though the contract does not promise it).
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void swiglu_backward_row(const typename St::type* gate,
                                                  const typename St::type* up,
                                                  const typename St::type* dy,
                                                  typename St::type* dgate,
                                                  typename St::type* dup, int64_t cols) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const float g = St::load(gate[c]), u = St::load(up[c]), d = St::load(dy[c]);
    const float s = sigmoid_f32(g);
    const float silu = g * s;
    dgate[c] = St::store(d * u * (s * (1.0f + g * (1.0f - s))));
    dup[c] = St::store(d * silu);
  }
}

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
      swiglu_forward_row<St>(gate, up, static_cast<S*>(y) + r * cols, cols);
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
      swiglu_backward_row<St>(gate, up, dyr, dgate, dgate + cols, cols);
    }
  });
}

}  // namespace ptdp
