// Host memory of the CPU engine through the C API: what tensors hold now and at most.
#include "capi/src/api_guard.h"
#include "core/tensor/allocator.h"

using ptdp::capi::guard;

extern "C" {

PTDP_API ptdp_status ptdp_memory_stats(size_t* current, size_t* peak) {
  return guard(__func__, [&] {
    const ptdp::CpuAllocator& a = ptdp::cpu_allocator();
    if (current != nullptr) *current = a.bytes_in_use();
    if (peak != nullptr) *peak = a.peak_bytes();
  });
}

PTDP_API ptdp_status ptdp_memory_reset_peak(void) {
  return guard(__func__, [&] { ptdp::cpu_allocator().reset_peak(); });
}

PTDP_API ptdp_status ptdp_memory_cached(size_t* cached) {
  return guard(__func__, [&] {
    ptdp::capi::require_non_null(cached, "cached");
    *cached = ptdp::cpu_allocator().cached_bytes();
  });
}

PTDP_API ptdp_status ptdp_memory_release_cache(size_t* released) {
  return guard(__func__, [&] {
    const std::size_t bytes = ptdp::cpu_allocator().release_cached();
    if (released != nullptr) *released = bytes;
  });
}

PTDP_API ptdp_status ptdp_memory_huge_pages(size_t* advised) {
  return guard(__func__, [&] {
    ptdp::capi::require_non_null(advised, "advised");
    *advised = ptdp::cpu_allocator().huge_page_bytes();
  });
}

}  // extern "C"
