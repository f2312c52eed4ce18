// Scale + optional causal mask + softmax over the last dimension of [batch, sq, sk] scores, and
// its variant for packed documents (each row sees the keys of its own document only).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq,
                                 int64_t sk, float scale, bool causal) {
  if (kcheck::check_softmax_forward(x, y, t, batch, sq, sk, scale, causal) ==
      kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * sq;
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel
    {
      // The unnormalised exponentials of one row in fp32, so y (which may alias x) is
      // rounded once.
      std::vector<float> e(static_cast<std::size_t>(sk));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r % sq;
        const int64_t valid = causal ? std::min(sk, i + (sk - sq) + 1) : sk;
        const S* xr = static_cast<const S*>(x) + r * sk;
        S* yr = static_cast<S*>(y) + r * sk;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, scale * St::load(xr[j]));
        double sum = 0.0;
        for (int64_t j = 0; j < valid; ++j) {
          e[j] = std::exp(scale * St::load(xr[j]) - mx);
          sum += e[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < valid; ++j) yr[j] = St::store(e[j] * inv);
        for (int64_t j = valid; j < sk; ++j) yr[j] = St::store(0.0f);
      }
    }
  });
}

void CpuBackend::softmax_forward_documents(const void* x, void* y, DType t, int64_t batch,
                                           int64_t heads, int64_t s, float scale,
                                           const int32_t* document_starts) {
  if (kcheck::check_softmax_forward_documents(x, y, t, batch, heads, s, scale, document_starts) ==
      kcheck::Work::none) {
    return;
  }
  const int64_t rows = batch * s;
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel
    {
      std::vector<float> e(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = r / s, i = r % s;
        // Keys first .. i: the row's document, as the fused kernels clamp it.
        const int64_t first = std::clamp<int64_t>(document_starts[(n / heads) * s + i], 0, i);
        const S* xr = static_cast<const S*>(x) + r * s;
        S* yr = static_cast<S*>(y) + r * s;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = first; j <= i; ++j) mx = std::max(mx, scale * St::load(xr[j]));
        double sum = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          e[j] = std::exp(scale * St::load(xr[j]) - mx);
          sum += e[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < first; ++j) yr[j] = St::store(0.0f);
        for (int64_t j = first; j <= i; ++j) yr[j] = St::store(e[j] * inv);
        for (int64_t j = i + 1; j < s; ++j) yr[j] = St::store(0.0f);
      }
    }
  });
}

void CpuBackend::softmax_backward(const void* y, const void* dy, void* dx, DType t, int64_t batch,
                                  int64_t sq, int64_t sk, float scale) {
  if (kcheck::check_softmax_backward(y, dy, dx, t, batch, sq, sk) == kcheck::Work::none) return;
  const int64_t rows = batch * sq;
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* yr = static_cast<const S*>(y) + r * sk;
      const S* dyr = static_cast<const S*>(dy) + r * sk;
      double dot = 0.0;
      for (int64_t j = 0; j < sk; ++j) {
        dot += static_cast<double>(St::load(dyr[j])) * St::load(yr[j]);
      }
      const float d = static_cast<float>(dot);
      S* dxr = static_cast<S*>(dx) + r * sk;
#pragma omp simd
      for (int64_t j = 0; j < sk; ++j) {
        dxr[j] = St::store(scale * St::load(yr[j]) * (St::load(dyr[j]) - d));
      }
    }
  });
}

}  // namespace ptdp
