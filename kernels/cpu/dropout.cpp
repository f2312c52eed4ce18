// Dropout with the mask drawn from Philox at each element's global index: nothing is stored,
// the backward pass regenerates the same mask, and every partition of a tensor draws the
// serial run's mask for its elements.
#include <cmath>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {

void check_desc(const char* op, const DropoutDesc& d) {
  PTDP_CHECK_ARG(d.p >= 0.0f && d.p <= 1.0f,
                 std::string(op) + ": p must be in [0, 1], got " + std::to_string(d.p));
  for (int k = 0; k < 3; ++k) {
    const std::string dim = "block dim " + std::to_string(k);
    kcheck::nonneg(op, (dim + " shape").c_str(), d.block.shape[k]);
    kcheck::nonneg(op, (dim + " offset").c_str(), d.block.offset[k]);
    PTDP_CHECK_ARG(d.block.offset[k] + d.block.shape[k] <= d.block.global_shape[k],
                   std::string(op) + ": " + dim + ": offset " + std::to_string(d.block.offset[k]) +
                       " + shape " + std::to_string(d.block.shape[k]) +
                       " exceeds the global extent " + std::to_string(d.block.global_shape[k]));
  }
}

// out[i] = in[i] * keep(i) * scale over the block, in the block's local (row-major) order.
void apply_mask(const char* op, const float* in, float* out, const DropoutDesc& d) {
  check_desc(op, d);
  const int64_t n = d.block.numel();
  if (n == 0) return;
  kcheck::not_null(op, "input", in);
  kcheck::not_null(op, "output", out);
  const float p = d.p;
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const int64_t s0 = d.block.shape[0], s1 = d.block.shape[1], s2 = d.block.shape[2];
  const int64_t g1 = d.block.global_shape[1], g2 = d.block.global_shape[2];
  const int64_t o0 = d.block.offset[0], o1 = d.block.offset[1], o2 = d.block.offset[2];
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i0 = 0; i0 < s0; ++i0) {
    for (int64_t i1 = 0; i1 < s1; ++i1) {
      const int64_t local = (i0 * s1 + i1) * s2;
      const uint64_t global = static_cast<uint64_t>(((i0 + o0) * g1 + (i1 + o1)) * g2 + o2);
      for (int64_t i2 = 0; i2 < s2; ++i2) {
        const bool keep = philox_uniform(d.rng, global + static_cast<uint64_t>(i2)) >= p;
        out[local + i2] = keep ? in[local + i2] * keep_scale : 0.0f;
      }
    }
  }
}

}  // namespace

void CpuBackend::dropout_forward(const float* x, float* y, const DropoutDesc& d) {
  apply_mask("dropout_forward", x, y, d);
}

void CpuBackend::dropout_backward(const float* dy, float* dx, const DropoutDesc& d) {
  apply_mask("dropout_backward", dy, dx, d);
}

}  // namespace ptdp
