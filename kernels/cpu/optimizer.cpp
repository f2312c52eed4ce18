// Optimizer steps over flat parameter buffers (the distributed optimizer hands in one shard).
// Each thread updates one contiguous range in one vectorised pass; every element is computed
// with the same operations in the same order whatever the instruction set (simd_clones.h) or
// the number of threads.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel_ranges.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

// Below this many parameters (a bias, a LayerNorm) one thread is faster than a parallel region.
constexpr int64_t kMinParallel = int64_t{1} << 15;
constexpr int64_t kLine = 16;  // floats per 64-byte cache line

struct AdamWConstants {
  float b1, b2, eps, gs, step_size, inv_sqrt_bc2, decay;
};

PTDP_CPU_CLONES void adamw_range(float* param, const float* grad, float* m, float* v, int64_t n,
                                 AdamWConstants c) {
  const float b1 = c.b1, b2 = c.b2, eps = c.eps, gs = c.gs;
  const float a1 = 1.0f - b1, a2 = 1.0f - b2;
  const float step_size = c.step_size, inv_sqrt_bc2 = c.inv_sqrt_bc2, decay = c.decay;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + a1 * g;
    const float vi = b2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void CpuBackend::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                            const AdamWParams& p) {
  kcheck::check_adamw_step(param, grad, m, v, n, p);
  const kcheck::AdamWScalars s = kcheck::adamw_scalars(p);
  const AdamWConstants c{p.beta1,       p.beta2,          p.eps,  p.grad_scale,
                         s.step_size, s.inv_sqrt_bc2, s.decay};
  cpu::parallel_ranges(n, kLine, kMinParallel, [&](int64_t lo, int64_t hi) {
    adamw_range(param + lo, grad + lo, m + lo, v + lo, hi - lo, c);
  });
}

void CpuBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                          const SgdParams& p) {
  kcheck::check_sgd_step(param, grad, momentum_buf, n, p);
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay, gs = p.grad_scale;
  const bool first = p.first_step, nesterov = p.nesterov, use_momentum = p.momentum > 0.0f;
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i] * gs + wd * param[i];
    if (use_momentum) {
      const float buf = first ? d : mu * momentum_buf[i] + d;
      momentum_buf[i] = buf;
      d = nesterov ? d + mu * buf : buf;
    }
    param[i] -= lr * d;
  }
}

}  // namespace ptdp
