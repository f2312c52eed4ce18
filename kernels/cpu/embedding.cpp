// Vocabulary-parallel embedding lookup and its scatter-add backward (into an fp32 gradient).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int64_t kColBlock = 256;

}  // namespace

void CpuBackend::embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                                   int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                   void* out) {
  kcheck::check_embedding_forward(ids, n, table, t, vocab_start, vocab_rows, h, out);
  // Table and output share the storage type: rows are copied as bytes.
  const auto row_bytes = static_cast<std::size_t>(h) * dtype_size(t);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    char* o = static_cast<char*>(out) + static_cast<std::size_t>(i) * row_bytes;
    if (row >= 0 && row < vocab_rows) {
      std::memcpy(o, static_cast<const char*>(table) + static_cast<std::size_t>(row) * row_bytes,
                  row_bytes);
    } else {
      std::memset(o, 0, row_bytes);  // +0.0 in every floating storage type
    }
  }
}

void CpuBackend::embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                                    int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                    float* dtable) {
  kcheck::check_embedding_backward(ids, n, dout, t, vocab_start, vocab_rows, h, dtable);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
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
        const S* g = static_cast<const S*>(dout) + i * h + c0;
        for (int64_t j = 0; j < nc; ++j) d[j] += St::load(g[j]);
      }
    }
  });
}

}  // namespace ptdp
