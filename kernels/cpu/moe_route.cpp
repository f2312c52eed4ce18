// Token routing to expert-sorted rows: a stable counting sort of the slots by expert. Sequential:
// it reads tokens * k int32 twice, a few microseconds for a microbatch, and one pass keeps the
// order (token, then slot) without a merge.
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts,
                           int32_t* row_of, int64_t* counts) {
  const kcheck::Work work = kcheck::check_moe_route(indices, tokens, k, experts, row_of, counts);
  const int64_t slots = tokens * k;
  // Every index is checked before anything is written.
  for (int64_t s = 0; s < slots && work == kcheck::Work::some; ++s) {
    if (indices[s] < -1 || indices[s] >= experts) {
      kcheck::refuse_moe_route_index(s, k, indices[s], experts);
    }
  }
  std::vector<int64_t> next(static_cast<std::size_t>(experts), 0);  // [experts] next free row
  for (int64_t s = 0; s < slots; ++s) {
    if (indices[s] >= 0) ++next[static_cast<std::size_t>(indices[s])];
  }
  int64_t start = 0;
  for (int64_t e = 0; e < experts; ++e) {
    counts[e] = next[static_cast<std::size_t>(e)];
    next[static_cast<std::size_t>(e)] = start;
    start += counts[e];
  }
  for (int64_t s = 0; s < slots; ++s) {
    row_of[s] = indices[s] >= 0 ? static_cast<int32_t>(next[static_cast<std::size_t>(indices[s])]++)
                                : -1;
  }
}

}  // namespace ptdp
