// Vocabulary-parallel embedding lookup and its scatter-add backward.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int64_t kColBlock = 256;

}  // namespace

void CpuBackend::embedding_forward(const int32_t* ids, int64_t n, const float* table,
                                   int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                   float* out) {
  kcheck::check_embedding_forward(ids, n, table, vocab_start, vocab_rows, h, out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    float* o = out + i * h;
    if (row >= 0 && row < vocab_rows) {
      std::copy(table + row * h, table + (row + 1) * h, o);
    } else {
      std::fill(o, o + h, 0.0f);
    }
  }
}

void CpuBackend::embedding_backward(const int32_t* ids, int64_t n, const float* dout,
                                    int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                    float* dtable) {
  kcheck::check_embedding_backward(ids, n, dout, vocab_start, vocab_rows, h, dtable);
  // Threads own column blocks and walk the tokens in order: repeated ids accumulate without
  // races and in the same order every run.
  const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock;
    const int64_t nc = std::min(kColBlock, h - c0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
      if (row < 0 || row >= vocab_rows) continue;
      float* d = dtable + row * h + c0;
      const float* g = dout + i * h + c0;
      for (int64_t j = 0; j < nc; ++j) d[j] += g[j];
    }
  }
}

}  // namespace ptdp
