#include "core/tensor/allocator.h"

#include <cstdlib>
#include <string>

#include "kernels/error.h"

namespace ptdp {

void Allocator::note_allocated(std::size_t bytes) {
  const std::size_t now = in_use_.fetch_add(bytes) + bytes;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void* CpuAllocator::allocate(std::size_t bytes) {
  // aligned_alloc needs a multiple of the alignment; round up (and give zero-byte tensors a
  // real, unique allocation so data pointers are never NULL).
  const std::size_t rounded = bytes == 0 ? kCpuAlignment
                                         : (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  if (rounded < bytes) {
    throw_error(ErrorCode::OutOfMemory, "cpu allocator: request of " + std::to_string(bytes) +
                                            " bytes overflows");
  }
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  if (p == nullptr) {
    throw_error(ErrorCode::OutOfMemory,
                "cpu allocator: out of memory allocating " + std::to_string(bytes) + " bytes (" +
                    std::to_string(bytes_in_use()) + " bytes in use by ptdp)");
  }
  note_allocated(bytes);
  return p;
}

void CpuAllocator::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  std::free(p);
  note_freed(bytes);
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace ptdp
