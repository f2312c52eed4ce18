// Caching device allocator: blocks from cudaMalloc, rounded to size classes, kept on free lists
// and reused, so the steady state of training makes no cudaMalloc/cudaFree calls (both are slow
// and cudaFree synchronises the whole device).
//
// Reuse is safe without events because every kernel of the device's backend runs on its one
// compute stream: a block freed while kernels that use it are still queued can only be handed
// to work queued after them on the same stream (see cuda_backend.h).
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_probe.h"

namespace ptdp::cuda {

namespace {

constexpr int kMaxDevices = 64;

// Size classes: multiples of 512 bytes up to 4 KiB, then 8 classes per power of two (at most
// 12.5% of a block is padding). cudaMalloc aligns every block to at least 256 bytes.
std::size_t size_class(std::size_t bytes) {
  if (bytes <= 4096) return (bytes + 511) & ~static_cast<std::size_t>(511);
  std::size_t top = 4096;
  while (top <= bytes / 2) top *= 2;  // largest power of two <= bytes
  const std::size_t granule = top / 8;
  return (bytes + granule - 1) / granule * granule;
}

std::string human_bytes(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : dev_(device) {}

  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    // Beyond half the address space no device can help, and rounding could overflow.
    if (bytes > (~static_cast<std::size_t>(0)) / 2) throw_oom(bytes, bytes);
    const std::size_t rounded = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= rounded;
    } else {
      p = malloc_device(bytes, rounded);
    }
    live_[p] = rounded;
    in_use_ += rounded;
    if (in_use_ > peak_) peak_ = in_use_;
    return p;
  }

  void release(void* p) noexcept {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours (or freed twice): nothing safe to do
    const std::size_t rounded = it->second;
    live_.erase(it);
    in_use_ -= rounded;
    try {
      free_[rounded].push_back(p);
      cached_ += rounded;
    } catch (...) {
      cudaFree(p);  // the free list could not grow: give the block back instead
    }
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return AllocatorStats{in_use_, cached_, peak_, mallocs_};
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

 private:
  // cudaMalloc with one retry after the cache is released. Caller holds mu_.
  void* malloc_device(std::size_t bytes, std::size_t rounded) {
    DeviceGuard guard(dev_);
    for (int attempt = 0; attempt < 2; ++attempt) {
      void* p = nullptr;
      const cudaError_t err = cudaMalloc(&p, rounded);
      if (err == cudaSuccess) {
        ++mallocs_;
        return p;
      }
      cudaGetLastError();  // clear the error so later calls do not report it
      if (err != cudaErrorMemoryAllocation) {
        // Some drivers reject absurd sizes as invalid values: that is out of memory too.
        std::size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
        if (total_b == 0 || rounded <= total_b) throw_cuda_error("cudaMalloc", err, dev_);
        throw_oom(bytes, rounded);
      }
      if (attempt == 0) release_cache_locked();
    }
    throw_oom(bytes, rounded);
  }

  // cudaFree waits for the device, so blocks still used by queued kernels are safe to release.
  void release_cache_locked() {
    DeviceGuard guard(dev_);
    while (!free_.empty()) {
      const auto it = free_.begin();
      while (!it->second.empty()) {
        // Off the list before the call, so a failing cudaFree cannot leave a freed block there.
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= it->first;
        const cudaError_t err = cudaFree(p);
        if (err != cudaSuccess) throw_cuda_error("cudaFree", err, dev_);
      }
      free_.erase(it);
    }
  }

  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t rounded) {
    std::size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    throw Error(ErrorCode::OutOfMemory,
                str_cat("CUDA device ", dev_, ": out of memory allocating ", bytes, " bytes (",
                        human_bytes(bytes), ", block of ", rounded, " bytes); device has ",
                        human_bytes(free_b), " free of ", human_bytes(total_b),
                        " total; this process holds ", human_bytes(in_use_), " in use and ",
                        human_bytes(cached_), " cached"));
  }

  const int dev_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, std::size_t> live_;     // block -> size class
  std::size_t in_use_ = 0, cached_ = 0, peak_ = 0;
  int64_t mallocs_ = 0;
};

std::mutex g_create_mutex;
std::atomic<DeviceAllocator*> g_allocators[kMaxDevices];

// The allocator of `device`, created on first use and never destroyed: at process exit the
// CUDA runtime may already be gone, and the driver reclaims the memory anyway.
DeviceAllocator& allocator(int device) {
  if (device >= 0 && device < kMaxDevices) {
    DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire);
    if (a != nullptr) return *a;
  }
  const int count = device_count();
  if (device < 0 || device >= count || device >= kMaxDevices) {
    throw Error(ErrorCode::Device,
                str_cat("CUDA device ", device, " does not exist (", count, " devices)"));
  }
  DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire);
  if (a != nullptr) return *a;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  a = g_allocators[device].load(std::memory_order_relaxed);
  if (a == nullptr) {
    a = new DeviceAllocator(device);
    g_allocators[device].store(a, std::memory_order_release);
  }
  return *a;
}

}  // namespace

void* device_alloc(int device, std::size_t bytes) { return allocator(device).allocate(bytes); }

void device_free(int device, void* p,
                 std::size_t /*bytes: the allocator knows each block's size*/) noexcept {
  if (p == nullptr || device < 0 || device >= kMaxDevices) return;
  DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire);
  if (a != nullptr) a->release(p);
}

AllocatorStats allocator_stats(int device) { return allocator(device).stats(); }

void empty_cache(int device) { allocator(device).empty_cache(); }

}  // namespace ptdp::cuda
