// The CUDA backend (f32, bf16 and f16 storage, fp32 compute, on device memory) and its caching
// device allocator.
//
// Host-only header: it includes no CUDA header, so core/ code compiled by the host compiler can
// use it. Everything here exists only in builds with PTDP_HAVE_CUDA (library ptdp_kernels_cuda).
//
// Streams and memory. The backend of a device runs every kernel, cuBLASLt call and copy on ONE
// compute stream that it creates. Blocks returned by device_free() go back to a cache and may be
// handed out again immediately, before the GPU has finished the work that used them; this is
// safe as long as all work touching device memory is issued on that compute stream (the stream
// orders the old uses before the new ones). Work on any other stream (a communication stream,
// for example) must be ordered after the compute stream with an event before it touches a block,
// and a block it uses must not be freed until that stream's work is ordered back, just as with
// PyTorch's caching allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace ptdp::cuda {

/// The backend of CUDA device `device`, created on first use (one per device; creation is
/// thread-safe and the instance lives until the process exits). Its ops validate arguments
/// like the CPU backend and throw Error(InvalidArgument); CUDA and cuBLASLt failures throw
/// Error(Device) naming the call, the runtime's message and the device. Ops are asynchronous
/// with respect to the host except copy_from_host, copy_to_host, sum_squares and synchronize().
/// Private scratch (the GEMM's fp32 buffer for epilogues cuBLASLt cannot fuse) comes from the
/// caching allocator and is kept, so steady-state steps allocate nothing new.
/// Throws Error(Device) when `device` is not a usable CUDA device.
Backend& backend(int device);

/// Device memory of `bytes` bytes from the caching allocator (nullptr for 0 bytes). Blocks come
/// from cudaMalloc, rounded up to a size class, and are kept on per-size-class free lists when
/// freed, so a steady-state training step makes no cudaMalloc/cudaFree calls. When the device
/// cannot provide the memory the cache is released once and the allocation retried; if that
/// fails too, throws Error(OutOfMemory) naming the size and the device's free and total memory.
/// Thread-safe. Pointers are at least 256-byte aligned.
void* device_alloc(int device, std::size_t bytes);

/// Returns a block from device_alloc(device, bytes) to the cache (nullptr is ignored). The block
/// may be reused at once by later work on the device's compute stream (see above). Thread-safe.
void device_free(int device, void* p, std::size_t bytes) noexcept;

/// Byte counts are of rounded blocks. cuda_mallocs counts cudaMalloc calls since start.
struct AllocatorStats {
  std::size_t in_use;       ///< bytes handed out and not yet freed
  std::size_t cached;       ///< bytes held in the free lists
  std::size_t peak_in_use;  ///< high-water mark of in_use
  int64_t cuda_mallocs;     ///< cudaMalloc calls made so far
};

/// The allocator's counters for `device`. Thread-safe.
AllocatorStats allocator_stats(int device);
/// The compute stream of `device`'s backend, as a cudaStream_t (opaque here: this header has no
/// CUDA types), for code that orders another stream after the backend's work or the backend
/// after it (the NCCL communicator's stream).
void* compute_stream(int device);

/// Returns every cached (free) block of `device` to the driver with cudaFree. Thread-safe.
void empty_cache(int device);

/// Copies between host memory and memory of `device`, ordered after all work already issued on
/// the device's compute stream and finished when the call returns (core uses these to stage).
void memcpy_to_host(int device, void* host, const void* dev, std::size_t bytes);
void memcpy_to_device(int device, void* dev, const void* host, std::size_t bytes);

}  // namespace ptdp::cuda
