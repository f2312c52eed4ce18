// Optimizer steps over flat parameter buffers. Same formulas, constants and operation order as
// kernels/cpu/optimizer.cpp, with the _rn intrinsics so no multiply-add is fused into an FMA and
// IEEE sqrt and division: the updates are bit-identical to the CPU backend's.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

struct AdamWConsts {
  float b1, b2, one_minus_b1, one_minus_b2, eps, step_size, inv_sqrt_bc2, decay, grad_scale;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWConsts k) {
  PTDP_GRID_STRIDE(i, n) {
    const float g = __fmul_rn(grad[i], k.grad_scale);
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
                           float lr, float mu, float wd, float gs, bool first, bool nesterov,
                           bool use_momentum) {
  PTDP_GRID_STRIDE(i, n) {
    float d = __fadd_rn(__fmul_rn(grad[i], gs), __fmul_rn(wd, param[i]));
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
  kcheck::check_adamw_step(param, grad, m, v, n, p);
  if (n == 0) return;
  // Host-side scalars from the function the CPU backend uses: the same values to the bit.
  const kcheck::AdamWScalars s = kcheck::adamw_scalars(p);
  AdamWConsts k{};
  k.b1 = p.beta1;
  k.b2 = p.beta2;
  k.one_minus_b1 = 1.0f - p.beta1;
  k.one_minus_b2 = 1.0f - p.beta2;
  k.eps = p.eps;
  k.step_size = s.step_size;
  k.inv_sqrt_bc2 = s.inv_sqrt_bc2;
  k.decay = s.decay;
  k.grad_scale = p.grad_scale;
  DeviceGuard guard(dev_);
  adamw_kernel<<<grid_for(n), kThreads, 0, stream_>>>(param, grad, m, v, n, k);
  PTDP_CU_LAUNCHED("adamw_kernel");
}

void CudaBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                           const SgdParams& p) {
  kcheck::check_sgd_step(param, grad, momentum_buf, n, p);
  if (n == 0) return;
  DeviceGuard guard(dev_);
  sgd_kernel<<<grid_for(n), kThreads, 0, stream_>>>(param, grad, momentum_buf, n, p.lr, p.momentum,
                                                    p.weight_decay, p.grad_scale, p.first_step, p.nesterov,
                                                    p.momentum > 0.0f);
  PTDP_CU_LAUNCHED("sgd_kernel");
}

}  // namespace ptdp::cuda
