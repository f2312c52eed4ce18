// One contiguous range per OpenMP thread for the streaming ops (optimizer steps, fills): each
// thread walks its own part of the buffers front to back, the parts meet at cache-line
// boundaries, and short buffers are not worth a parallel region.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ptdp::cpu {

/// Calls fn(lo, hi) on disjoint ranges covering [0, n): on the calling thread alone when
/// n < min_parallel, else one range per thread of a parallel region, every boundary a multiple
/// of `align` elements (pass 64 bytes' worth).
template <typename Fn>
void parallel_ranges(int64_t n, int64_t align, int64_t min_parallel, Fn&& fn) {
  if (n <= 0) return;
  if (n < min_parallel || omp_get_max_threads() == 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t units = (n + align - 1) / align;
    const int64_t lo = std::min(n, units * t / threads * align);
    const int64_t hi = std::min(n, units * (t + 1) / threads * align);
    if (lo < hi) fn(lo, hi);
  }
}

}  // namespace ptdp::cpu
