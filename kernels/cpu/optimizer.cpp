// Optimizer steps over flat parameter buffers (the distributed optimizer hands in one shard).
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                            const AdamWParams& p) {
  kcheck::check_adamw_step(param, grad, m, v, n, p);
  const kcheck::AdamWScalars s = kcheck::adamw_scalars(p);
  const float step_size = s.step_size, inv_sqrt_bc2 = s.inv_sqrt_bc2, decay = s.decay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, gs = p.grad_scale;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

void CpuBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                          const SgdParams& p) {
  kcheck::check_sgd_step(param, grad, momentum_buf, n, p);
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay, gs = p.grad_scale;
  const bool first = p.first_step, nesterov = p.nesterov, use_momentum = p.momentum > 0.0f;
#pragma omp parallel for schedule(static)
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
