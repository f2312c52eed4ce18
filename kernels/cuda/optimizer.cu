// Optimizer steps over flat parameter buffers. Same formulas, constants and operation order as
// kernels/cpu/optimizer.cpp, with the _rn intrinsics so no multiply-add is fused into an FMA and
// IEEE sqrt and division: the updates are bit-identical to the CPU backend's.
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

struct AdamWConsts {
  float b1, b2, one_minus_b1, one_minus_b2, eps, step_size, inv_sqrt_bc2, decay;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWConsts k) {
  PTDP_GRID_STRIDE(i, n) {
    const float g = grad[i];
    // mi = b1 * m + (1 - b1) * g;  vi = b2 * v + (1 - b2) * g * g
    const float mi = __fadd_rn(__fmul_rn(k.b1, m[i]), __fmul_rn(k.one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(k.b2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    // param = param * decay - step_size * mi / (sqrt(vi) * inv_sqrt_bc2 + eps)
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), k.inv_sqrt_bc2), k.eps);
    param[i] =
        __fsub_rn(__fmul_rn(param[i], k.decay), __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
  }
}

__global__ void sgd_kernel(float* param, const float* grad, float* momentum_buf, int64_t n,
                           float lr, float mu, float wd, bool first, bool nesterov,
                           bool use_momentum) {
  PTDP_GRID_STRIDE(i, n) {
    float d = __fadd_rn(grad[i], __fmul_rn(wd, param[i]));
    if (use_momentum) {
      const float buf = first ? d : __fadd_rn(__fmul_rn(mu, momentum_buf[i]), d);
      momentum_buf[i] = buf;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mu, buf)) : buf;
    }
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, d));
  }
}

}  // namespace

void CudaBackend::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
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
  if (n == 0) return;
  // Host-side constants computed exactly as the CPU backend computes them.
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  AdamWConsts k{};
  k.b1 = p.beta1;
  k.b2 = p.beta2;
  k.one_minus_b1 = 1.0f - p.beta1;
  k.one_minus_b2 = 1.0f - p.beta2;
  k.eps = p.eps;
  k.step_size = static_cast<float>(p.lr / bc1);
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k.decay = 1.0f - p.lr * p.weight_decay;
  DeviceGuard guard(dev_);
  adamw_kernel<<<grid_for(n), kThreads, 0, stream_>>>(param, grad, m, v, n, k);
  PTDP_CU_LAUNCHED("adamw_kernel");
}

void CudaBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                           const SgdParams& p) {
  kcheck::nonneg("sgd_step", "n", n);
  kcheck::not_null("sgd_step", "param", param, n);
  kcheck::not_null("sgd_step", "grad", grad, n);
  PTDP_CHECK_ARG(p.momentum >= 0.0f,
                 "sgd_step: momentum must be >= 0, got " + std::to_string(p.momentum));
  PTDP_CHECK_ARG(!p.nesterov || p.momentum > 0.0f, "sgd_step: nesterov needs momentum > 0");
  if (p.momentum > 0.0f) kcheck::not_null("sgd_step", "momentum_buf", momentum_buf, n);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  sgd_kernel<<<grid_for(n), kThreads, 0, stream_>>>(param, grad, momentum_buf, n, p.lr, p.momentum,
                                                    p.weight_decay, p.first_step, p.nesterov,
                                                    p.momentum > 0.0f);
  PTDP_CU_LAUNCHED("sgd_kernel");
}

}  // namespace ptdp::cuda
