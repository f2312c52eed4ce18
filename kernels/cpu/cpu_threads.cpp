#include "kernels/cpu/cpu_threads.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "base/error.h"

namespace ptdp {

namespace {

// The count and how many times it was set, in one word so a thread never reads the count of
// one call with the generation of another: (generation << 32) | count.
std::atomic<std::uint64_t> g_setting{0};
thread_local std::uint64_t t_adopted_generation = 0;

std::uint64_t generation_of(std::uint64_t setting) { return setting >> 32; }
int count_of(std::uint64_t setting) { return static_cast<int>(setting & 0xffffffffu); }

}  // namespace

void set_cpu_threads(int threads) {
  PTDP_CHECK_ARG(threads >= 1, "CPU threads = " + std::to_string(threads) + " is not >= 1");
  std::uint64_t old = g_setting.load(std::memory_order_relaxed), next = 0;
  do {
    next = ((generation_of(old) + 1) << 32) | static_cast<std::uint32_t>(threads);
  } while (!g_setting.compare_exchange_weak(old, next, std::memory_order_acq_rel));
  t_adopted_generation = generation_of(next);
  omp_set_num_threads(threads);
  // The OpenMP build of OpenBLAS follows omp_get_max_threads() on each call; this also sizes
  // its buffers now and covers a build linked against its pthreads variant.
  openblas_set_num_threads(threads);
}

int cpu_threads_set() noexcept { return count_of(g_setting.load(std::memory_order_acquire)); }

void adopt_cpu_threads() noexcept {
  const std::uint64_t setting = g_setting.load(std::memory_order_acquire);
  if (generation_of(setting) == t_adopted_generation) return;
  t_adopted_generation = generation_of(setting);
  // Inside a parallel region the count would only size regions nested in it; leave it.
  if (!omp_in_parallel()) omp_set_num_threads(count_of(setting));
}

}  // namespace ptdp
