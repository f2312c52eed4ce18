// GeLU, tanh approximation, for every floating storage type (the math is in gelu_math.h, shared
// with the GEMM epilogues). The loops are PTDP_CPU_CLONES (kernels/cpu/simd_clones.h): the
// baseline x86-64 build ran the tanh four lanes wide, at 5 GB/s; the AVX2 and AVX-512 copies
// compute the same bits (built without contraction) two and four times as wide.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gelu_math.h"
#include "kernels/cpu/parallel_ranges.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {
namespace {

// Ranges shorter than this run on the calling thread; 64 bytes' worth aligns the others.
constexpr int64_t kMinParallel = 1 << 14;

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void gelu_forward_range(const typename St::type* x,
                                                 typename St::type* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = St::store(cpu::gelu_f32(St::load(x[i])));
}

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void gelu_backward_range(const typename St::type* x,
                                                  const typename St::type* dy,
                                                  typename St::type* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = St::store(St::load(dy[i]) * cpu::gelu_grad_f32(St::load(x[i])));
  }
}

}  // namespace

void CpuBackend::gelu_forward(const void* x, void* y, DType t, int64_t n) {
  kcheck::check_gelu_forward(x, y, t, n);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    cpu::parallel_ranges(n, 64 / sizeof(S), kMinParallel, [&](int64_t lo, int64_t hi) {
      gelu_forward_range<St>(xs + lo, ys + lo, hi - lo);
    });
  });
}

void CpuBackend::gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) {
  kcheck::check_gelu_backward(x, dy, dx, t, n);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* xs = static_cast<const S*>(x);
    const S* dys = static_cast<const S*>(dy);
    S* dxs = static_cast<S*>(dx);
    cpu::parallel_ranges(n, 64 / sizeof(S), kMinParallel, [&](int64_t lo, int64_t hi) {
      gelu_backward_range<St>(xs + lo, dys + lo, dxs + lo, hi - lo);
    });
  });
}

}  // namespace ptdp
