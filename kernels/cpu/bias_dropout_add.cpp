// The end of an attention or MLP block in one pass: y = residual + dropout(x + bias), in fp32
// with one rounding, the mask being dropout_forward's for the same descriptor.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::bias_dropout_add(const void* x, const void* bias, const void* residual, void* y,
                                  DType t, int64_t rows, int64_t cols, const DropoutDesc& d) {
  if (kcheck::check_bias_dropout_add(x, bias, residual, y, t, rows, cols, d) ==
      kcheck::Work::none) {
    return;
  }
  const float p = d.p;
  const float keep_scale = kcheck::dropout_keep_scale(p);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* xs = static_cast<const S*>(x);
    const S* bs = static_cast<const S*>(bias);
    const S* rs = static_cast<const S*>(residual);
    S* ys = static_cast<S*>(y);
    // Elements [e0, e1) of the flat [rows, cols] matrix; keep(e) answers the mask.
    const auto run = [&](int64_t e0, int64_t e1, auto&& keep) {
      int64_t c = e0 % cols;
      for (int64_t e = e0; e < e1; ++e) {
        float v = St::load(xs[e]);
        if (bs != nullptr) v += St::load(bs[c]);
        v = keep(e) ? v * keep_scale : 0.0f;
        ys[e] = St::store(St::load(rs[e]) + v);
        if (++c == cols) c = 0;
      }
    };
    if (p == 0.0f) {
      // Every uniform is >= 0 and the keep scale is 1: no mask to draw.
      const int64_t n = rows * cols;
      constexpr int64_t kChunk = 16384;
#pragma omp parallel for schedule(static)
      for (int64_t e0 = 0; e0 < n; e0 += kChunk) {
        run(e0, std::min(n, e0 + kChunk), [](int64_t) { return true; });
      }
      return;
    }
    cpu::for_each_block_piece(d.block, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                           int64_t local) {
      cpu::for_each_mask_run(d, i0, i1, j0, j1,
                             [&](int64_t jlo, int64_t jhi, int64_t base, const uint32_t* words) {
                               run(local + jlo, local + jhi, [&](int64_t e) {
                                 const float u = philox_bits_to_uniform(words[e - local - base]);
                                 return cpu::dropout_keeps(u, p);
                               });
                             });
    });
  });
}

}  // namespace ptdp
