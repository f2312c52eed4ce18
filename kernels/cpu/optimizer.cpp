// Optimizer steps over flat parameter buffers (the distributed optimizer hands in one shard).
#include <cmath>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

void CpuBackend::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                            const AdamWParams& p) {
  kcheck::nonneg("adamw_step", "n", n);
  kcheck::not_null("adamw_step", "param", param, n);
  kcheck::not_null("adamw_step", "grad", grad, n);
  kcheck::not_null("adamw_step", "m", m, n);
  kcheck::not_null("adamw_step", "v", v, n);
  PTDP_CHECK_ARG(p.step >= 1, "adamw_step: step counts from 1, got " + std::to_string(p.step));
  PTDP_CHECK_ARG(p.beta1 >= 0.0f && p.beta1 < 1.0f,
                 "adamw_step: beta1 must be in [0, 1), got " + std::to_string(p.beta1));
  PTDP_CHECK_ARG(p.beta2 >= 0.0f && p.beta2 < 1.0f,
                 "adamw_step: beta2 must be in [0, 1), got " + std::to_string(p.beta2));
  PTDP_CHECK_ARG(p.eps > 0.0f, "adamw_step: eps must be > 0, got " + std::to_string(p.eps));
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

void CpuBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                          const SgdParams& p) {
  kcheck::nonneg("sgd_step", "n", n);
  kcheck::not_null("sgd_step", "param", param, n);
  kcheck::not_null("sgd_step", "grad", grad, n);
  PTDP_CHECK_ARG(p.momentum >= 0.0f,
                 "sgd_step: momentum must be >= 0, got " + std::to_string(p.momentum));
  PTDP_CHECK_ARG(!p.nesterov || p.momentum > 0.0f, "sgd_step: nesterov needs momentum > 0");
  if (p.momentum > 0.0f) kcheck::not_null("sgd_step", "momentum_buf", momentum_buf, n);
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay;
  const bool first = p.first_step, nesterov = p.nesterov, use_momentum = p.momentum > 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i] + wd * param[i];
    if (use_momentum) {
      const float buf = first ? d : mu * momentum_buf[i] + d;
      momentum_buf[i] = buf;
      d = nesterov ? d + mu * buf : buf;
    }
    param[i] -= lr * d;
  }
}

}  // namespace ptdp
