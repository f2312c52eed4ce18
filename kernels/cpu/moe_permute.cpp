// Dispatch and combine of MoE tokens: moe_permute copies each token's row to its slots' rows in
// the expert-sorted buffer; moe_unpermute sums a token's expert outputs back, weighted by the
// routing probabilities (or not: the backward of moe_permute); moe_unpermute_backward scatters
// the output gradient to the slots and takes the probabilities' gradient. Each token is one
// iteration and owns what it writes (row_of maps distinct slots to distinct rows), so no two
// threads touch the same element and the sums run in slot order whatever the thread count.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

/// The row slot (t, j) maps to, or -1 where it is dropped or outside [0, rows).
inline int64_t slot_row(const int32_t* row_of, int64_t slot, int64_t rows) {
  const int64_t r = row_of[slot];
  return r >= 0 && r < rows ? r : -1;
}

}  // namespace

void CpuBackend::moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens,
                             int64_t k, int64_t h, int64_t rows, void* out) {
  if (kcheck::check_moe_permute(x, t, row_of, tokens, k, h, rows, out) == kcheck::Work::none) {
    return;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(h) * dtype_size(t);
  const auto* src = static_cast<const unsigned char*>(x);
  auto* dst = static_cast<unsigned char*>(out);
#pragma omp parallel for schedule(static)
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = slot_row(row_of, tok * k + j, rows);
      if (r >= 0) {
        std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes,
                    src + static_cast<std::size_t>(tok) * row_bytes, row_bytes);
      }
    }
  }
}

void CpuBackend::moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of,
                               int64_t tokens, int64_t k, int64_t h, int64_t rows, void* y) {
  if (kcheck::check_moe_unpermute(e, t, row_of, tokens, k, h, rows, y) == kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* es = static_cast<const S*>(e);
    S* ys = static_cast<S*>(y);
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<std::size_t>(h));  // [h] one token's fp32 sum
#pragma omp for schedule(static)
      for (int64_t tok = 0; tok < tokens; ++tok) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = slot_row(row_of, tok * k + j, rows);
          if (r < 0) continue;
          const float w = probs != nullptr ? probs[tok * k + j] : 1.0f;
          const S* er = es + r * h;
          for (int64_t c = 0; c < h; ++c) acc[static_cast<std::size_t>(c)] += w * St::load(er[c]);
        }
        S* yr = ys + tok * h;
        for (int64_t c = 0; c < h; ++c) yr[c] = St::store(acc[static_cast<std::size_t>(c)]);
      }
    }
  });
}

void CpuBackend::moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs,
                                        const int32_t* row_of, int64_t tokens, int64_t k,
                                        int64_t h, int64_t rows, void* de, float* dprobs) {
  if (kcheck::check_moe_unpermute_backward(dy, e, t, probs, row_of, tokens, k, h, rows, de,
                                           dprobs) == kcheck::Work::none) {
    return;
  }
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* dys = static_cast<const S*>(dy);
    const S* es = static_cast<const S*>(e);
    S* des = static_cast<S*>(de);
#pragma omp parallel for schedule(static)
    for (int64_t tok = 0; tok < tokens; ++tok) {
      const S* dyr = dys + tok * h;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t slot = tok * k + j;
        const int64_t r = slot_row(row_of, slot, rows);
        if (r < 0) {
          dprobs[slot] = 0.0f;
          continue;
        }
        const float w = probs[slot];
        const S* er = es + r * h;
        S* der = des + r * h;
        float dot = 0.0f;
        for (int64_t c = 0; c < h; ++c) {
          const float g = St::load(dyr[c]);
          dot += g * St::load(er[c]);
          der[c] = St::store(w * g);
        }
        dprobs[slot] = dot;
      }
    }
  });
}

}  // namespace ptdp
