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
  const int32_t threshold = cpu::dropout_threshold(d.p);
  const float keep_scale = kcheck::dropout_keep_scale(d.p);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* xs = static_cast<const S*>(x);
    const S* bs = static_cast<const S*>(bias);
    const S* rs = static_cast<const S*>(residual);
    S* ys = static_cast<S*>(y);
    // Elements [e, e + n) of one row, starting at column c; words[i] are the random bits of
    // element e + i (NULL when p == 0: every element is kept and the keep scale is 1). y may be
    // x or the residual: each element is read before it is written. One loop per case, none
    // with a branch, so each vectorises.
    const auto segment = [&](int64_t e, int64_t n, int64_t c, const uint32_t* words) {
      const S* xr = xs + e;
      const S* rr = rs + e;
      S* yr = ys + e;
      const S* br = bs != nullptr ? bs + c : nullptr;
      if (words == nullptr && br == nullptr) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = St::store(St::load(rr[i]) + St::load(xr[i]));
      } else if (words == nullptr) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          yr[i] = St::store(St::load(rr[i]) + (St::load(xr[i]) + St::load(br[i])));
        }
      } else if (br == nullptr) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float v = cpu::dropout_select(words[i], threshold, St::load(xr[i]) * keep_scale);
          yr[i] = St::store(St::load(rr[i]) + v);
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float v = cpu::dropout_select(
              words[i], threshold, (St::load(xr[i]) + St::load(br[i])) * keep_scale);
          yr[i] = St::store(St::load(rr[i]) + v);
        }
      }
    };
    // Elements [e0, e1) of the flat [rows, cols] matrix, cut at row ends.
    const auto run = [&](int64_t e0, int64_t e1, const uint32_t* words) {
      for (int64_t e = e0; e < e1;) {
        const int64_t c = e % cols;
        const int64_t n = std::min(e1 - e, cols - c);
        segment(e, n, c, words == nullptr ? nullptr : words + (e - e0));
        e += n;
      }
    };
    if (d.p == 0.0f) {
      // Every uniform is >= 0 and the keep scale is 1: no mask to draw.
      const int64_t n = rows * cols;
      constexpr int64_t kChunk = 16384;
#pragma omp parallel for schedule(static)
      for (int64_t e0 = 0; e0 < n; e0 += kChunk) run(e0, std::min(n, e0 + kChunk), nullptr);
      return;
    }
    cpu::for_each_block_piece(d.block, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                           int64_t local) {
      cpu::for_each_mask_run(d, i0, i1, j0, j1,
                             [&](int64_t jlo, int64_t jhi, int64_t base, const uint32_t* words) {
                               run(local + jlo, local + jhi, words + (jlo - base));
                             });
    });
  });
}

}  // namespace ptdp
