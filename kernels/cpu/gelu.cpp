// GeLU, tanh approximation, for every floating storage type (the math is in gelu_math.h, shared
// with the GEMM epilogues).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gelu_math.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::gelu_forward(const void* x, void* y, DType t, int64_t n) {
  kcheck::check_gelu_forward(x, y, t, n);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) ys[i] = St::store(cpu::gelu_f32(St::load(xs[i])));
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
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      dxs[i] = St::store(St::load(dys[i]) * cpu::gelu_grad_f32(St::load(xs[i])));
    }
  });
}

}  // namespace ptdp
