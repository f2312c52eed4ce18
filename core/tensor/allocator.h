// Allocators own device memory for tensors and keep the counters the memory report reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "base/dtype.h"
#include "kernels/cpu/host_memory.h"

namespace ptdp {

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

/// 64-byte aligned host memory, with freed blocks of kCpuCacheMinBytes or more kept for reuse.
///
/// glibc hands such blocks out as fresh mmap'd pages and unmaps them on free, so every training
/// step paid a page fault and a zeroed page for each 4 KiB of its large activations and
/// gradients: the SwiGLU backward of a Llama-3.2-1B-shaped step took 95 ms for 1 ms of work and
/// its logits GEMMs ran at 144 GFLOP/s instead of 183. A step asks for the same sizes every
/// time, so a freed block is kept under its size and the next request of that size takes it.
/// The cache holds at most the allocator's high-water mark of tensor bytes (at least
/// kCpuCacheFloorBytes); a request that the system cannot meet releases the cache and retries.
/// bytes_in_use() and peak_bytes() count tensors' bytes, never the cache's.
///
/// Fresh blocks come from host_block_alloc(): from 2 MiB on, advised for transparent huge
/// pages (PTDP_CPU_HUGEPAGES=0 turns that off). A GPT-2-small step's AdamW went from 73 to
/// 53 ms with them; huge_page_bytes() counts the advised blocks held.
class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override;
  DeviceType device_type() const override { return DeviceType::CPU; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// Bytes held in freed blocks kept for reuse.
  std::size_t cached_bytes() const;
  /// Returns every cached block to the system; gives the bytes returned.
  std::size_t release_cached() noexcept;
  /// Bytes of the blocks held now (by tensors or in the cache) that were advised for
  /// transparent huge pages; whether the kernel backs them is its choice (AnonHugePages in
  /// /proc/self/smaps). 0 when the advice is off or the kernel refused it.
  std::size_t huge_page_bytes() const;

 private:
  // Frees a block to the system; the caller holds mutex_.
  void free_block_locked(void* p, std::size_t rounded) noexcept;

  mutable std::mutex mutex_;
  std::unordered_multimap<std::size_t, void*> cache_;  // rounded size -> free block
  std::size_t cached_ = 0;
  std::unordered_set<void*> advised_;  // blocks advised for huge pages
  std::size_t advised_bytes_ = 0;
};

/// Blocks this large or larger are cached on free (glibc mmaps from 128 KiB up to 32 MiB,
/// depending on its dynamic threshold, and always beyond).
inline constexpr std::size_t kCpuCacheMinBytes = std::size_t{1} << 20;
/// The cache may hold this much even before the high-water mark reaches it.
inline constexpr std::size_t kCpuCacheFloorBytes = std::size_t{64} << 20;

/// The process-wide CPU allocator.
CpuAllocator& cpu_allocator();

/// Device memory of CUDA device `index` from the CUDA backend's caching allocator (no
/// cudaMalloc in the steady state). Throws Error(Unsupported) in a build without CUDA.
Allocator& cuda_allocator(int index);

}  // namespace ptdp
