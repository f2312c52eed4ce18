// Vocabulary-parallel embedding lookup and its scatter-add backward.
#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {

constexpr int64_t kColBlock = 256;

void check_args(const char* op, const int32_t* ids, int64_t n, int64_t vocab_start,
                int64_t vocab_rows, int64_t h) {
  kcheck::nonneg(op, "n", n);
  kcheck::nonneg(op, "vocab_start", vocab_start);
  kcheck::nonneg(op, "vocab_rows", vocab_rows);
  kcheck::nonneg(op, "h", h);
  kcheck::not_null(op, "ids", ids, n);
}

}  // namespace

void CpuBackend::embedding_forward(const int32_t* ids, int64_t n, const float* table,
                                   int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                   float* out) {
  check_args("embedding_forward", ids, n, vocab_start, vocab_rows, h);
  kcheck::not_null("embedding_forward", "out", out, n * h);
  kcheck::not_null("embedding_forward", "table", table, vocab_rows * h);
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
  check_args("embedding_backward", ids, n, vocab_start, vocab_rows, h);
  kcheck::not_null("embedding_backward", "dout", dout, n * h);
  kcheck::not_null("embedding_backward", "dtable", dtable, vocab_rows * h);
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
