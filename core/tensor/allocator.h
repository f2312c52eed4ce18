// Allocators own device memory for tensors and keep the counters the memory report reads.
#pragma once

#include <atomic>
#include <cstddef>

#include "kernels/dtype.h"

namespace ptdp {

/// Alignment of every CPU allocation: one cache line, and enough for AVX-512 loads.
inline constexpr std::size_t kCpuAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DeviceType device_type() const = 0;
  /// Returns memory for `bytes` (never NULL; a zero-byte request returns a unique pointer).
  /// Throws Error(OutOfMemory) naming the size when the device cannot provide it.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;

  std::size_t bytes_in_use() const { return in_use_.load(); }
  /// High-water mark of bytes_in_use since construction or the last reset_peak().
  std::size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 protected:
  void note_allocated(std::size_t bytes);
  void note_freed(std::size_t bytes) { in_use_.fetch_sub(bytes); }

 private:
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
};

/// 64-byte aligned host memory.
class CpuAllocator final : public Allocator {
 public:
  DeviceType device_type() const override { return DeviceType::CPU; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
};

/// The process-wide CPU allocator.
CpuAllocator& cpu_allocator();

/// Device memory of CUDA device `index` from the CUDA backend's caching allocator (no
/// cudaMalloc in the steady state). Throws Error(Unsupported) in a build without CUDA.
Allocator& cuda_allocator(int index);

}  // namespace ptdp
