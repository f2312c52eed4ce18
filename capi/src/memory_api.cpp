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

}  // extern "C"
