#include "kernels/cpu/host_memory.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/env_switch.h"

namespace ptdp {

namespace {

// Whether large blocks are advised: PTDP_CPU_HUGEPAGES, read once; off for good once the
// kernel refuses the advice (built without transparent huge pages).
std::atomic<bool>& huge_pages_on() {
  static std::atomic<bool> on{env_switch_on("PTDP_CPU_HUGEPAGES")};
  return on;
}

}  // namespace

void* host_block_alloc(std::size_t bytes, bool* advised) {
  if (advised != nullptr) *advised = false;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kCpuHugePageBytes && huge_pages_on().load()) {
    void* p = nullptr;
    if (posix_memalign(&p, kCpuHugePageBytes, bytes) != 0) return nullptr;
    // The block's whole 4 KiB pages: the kernel backs each 2 MiB-aligned stretch inside them
    // with a huge page, the tail with small ones.
    if (madvise(p, bytes / 4096 * 4096, MADV_HUGEPAGE) == 0) {
      if (advised != nullptr) *advised = true;
    } else if (errno == EINVAL) {
      huge_pages_on().store(false);
    }
    return p;
  }
#endif
  return std::aligned_alloc(kCpuAlignment, bytes);
}

}  // namespace ptdp
