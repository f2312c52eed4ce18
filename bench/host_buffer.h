// host_buffer.h: the benchmarks' host arrays, from the same kind of memory the CPU engine's
// tensors get (kernels/cpu/host_memory.h: 64-byte aligned, and from 2 MiB on advised for
// transparent huge pages), so that a kernel or the sgemm peak is timed as the model runs it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "kernels/cpu/host_memory.h"

namespace ptdp::bench {

/// A host array of n elements (at least one), allocated once per benchmark group and never
/// inside timing. Uninitialised.
template <class T>
class Buffer {
 public:
  explicit Buffer(int64_t n) : n_(n) {
    std::size_t bytes = static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    bytes = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    p_ = static_cast<T*>(host_block_alloc(bytes));
    if (p_ == nullptr) throw std::bad_alloc();
  }
  ~Buffer() { std::free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* get() const { return p_; }
  int64_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace ptdp::bench
