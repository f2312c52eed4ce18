#include "core/tensor/allocator.h"

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "kernels/cpu/host_memory.h"
#ifdef PTDP_HAVE_CUDA
#include <array>
#include <memory>
#include <mutex>

#include "kernels/cuda/cuda_backend.h"
#endif

namespace ptdp {

void Allocator::note_allocated(std::size_t bytes) {
  const std::size_t now = in_use_.fetch_add(bytes) + bytes;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

namespace {

// The size of the block behind a request of `bytes`: aligned_alloc needs a multiple of the
// alignment, and a zero-byte tensor gets a real block (wraps to less than `bytes` on overflow).
std::size_t rounded_size(std::size_t bytes) {
  return bytes == 0 ? kCpuAlignment : (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
}

}  // namespace

static_assert(kCpuHugePageBytes >= kCpuCacheMinBytes,
              "advised blocks are freed under the cache's lock, which only large blocks take");

void CpuAllocator::free_block_locked(void* p, std::size_t rounded) noexcept {
  if (rounded >= kCpuHugePageBytes && advised_.erase(p) > 0) advised_bytes_ -= rounded;
  std::free(p);
}

std::size_t CpuAllocator::huge_page_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return advised_bytes_;
}

void* CpuAllocator::allocate(std::size_t bytes) {
  // A zero-byte tensor's real, unique block keeps data pointers from ever being NULL.
  const std::size_t rounded = rounded_size(bytes);
  if (rounded < bytes) {
    throw_error(ErrorCode::OutOfMemory, "cpu allocator: request of " + std::to_string(bytes) +
                                            " bytes overflows");
  }
  if (rounded >= kCpuCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(rounded);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cached_ -= rounded;
      note_allocated(bytes);
      return p;
    }
  }
  bool advised = false;
  void* p = host_block_alloc(rounded, &advised);
  if (p == nullptr && cached_bytes() > 0) {
    release_cached();
    p = host_block_alloc(rounded, &advised);
  }
  if (p == nullptr) {
    throw_error(ErrorCode::OutOfMemory,
                "cpu allocator: out of memory allocating " + std::to_string(bytes) + " bytes (" +
                    std::to_string(bytes_in_use()) + " bytes in use by ptdp)");
  }
  if (advised) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      advised_.insert(p);
      advised_bytes_ += rounded;
    } catch (...) {
      // No memory for the set's node: the block works the same, it is only not counted.
    }
  }
  note_allocated(bytes);
  return p;
}

void CpuAllocator::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  note_freed(bytes);
  const std::size_t rounded = rounded_size(bytes);
  if (rounded >= kCpuCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t cap = peak_bytes() > kCpuCacheFloorBytes ? peak_bytes() : kCpuCacheFloorBytes;
    if (cached_ + rounded <= cap) {
      try {
        cache_.emplace(rounded, p);
        cached_ += rounded;
        return;
      } catch (...) {
        // No memory for the cache's node: the block goes back to the system.
      }
    }
    free_block_locked(p, rounded);
    return;
  }
  std::free(p);
}

std::size_t CpuAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

std::size_t CpuAllocator::release_cached() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, p] : cache_) free_block_locked(p, size);
  cache_.clear();
  const std::size_t released = cached_;
  cached_ = 0;
  return released;
}

CpuAllocator::~CpuAllocator() { release_cached(); }

CpuAllocator& cpu_allocator() {
  // Never destroyed: a tensor in static storage may free its block after every destructor of
  // this file has run. Its cached blocks stay reachable, so leak checkers do not report them.
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

#ifdef PTDP_HAVE_CUDA
namespace {

// One device's memory through the CUDA backend's caching allocator; the counters here are
// ptdp's tensors' bytes (the cache may hold more).
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  DeviceType device_type() const override { return DeviceType::CUDA; }
  void* allocate(std::size_t bytes) override {
    void* p = cuda::device_alloc(device_, bytes);
    note_allocated(bytes);
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (p == nullptr) return;
    cuda::device_free(device_, p, bytes);
    note_freed(bytes);
  }

 private:
  int device_;
};

}  // namespace

Allocator& cuda_allocator(int index) {
  constexpr int kMaxDevices = 64;
  PTDP_CHECK_ARG(index >= 0 && index < kMaxDevices, "cuda device index " + std::to_string(index) + " out of range");
  static std::array<std::unique_ptr<CudaAllocator>, kMaxDevices> allocators;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto& a = allocators[static_cast<std::size_t>(index)];
  if (!a) a = std::make_unique<CudaAllocator>(index);
  return *a;
}
#else
Allocator& cuda_allocator(int index) {
  throw_error(ErrorCode::Unsupported, "cuda:" + std::to_string(index) + ": this build of ptdp has no CUDA support");
}
#endif

}  // namespace ptdp
