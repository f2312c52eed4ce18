// host_memory.h: where the CPU engine's large host blocks come from (the tensor allocator, and
// the benchmarks, so that they measure on the same kind of memory).
#pragma once

#include <cstddef>

namespace ptdp {

/// Alignment of every CPU allocation: one cache line, and enough for AVX-512 loads.
inline constexpr std::size_t kCpuAlignment = 64;

/// Blocks this large or larger are aligned to a transparent huge page (x86-64's and most
/// AArch64 kernels' 2 MiB) and advised to use them.
inline constexpr std::size_t kCpuHugePageBytes = std::size_t{2} << 20;

/// A fresh block of `bytes` (a multiple of kCpuAlignment) from the system, or NULL when it has
/// none; release it with std::free.
///
/// From kCpuHugePageBytes on, the block starts on a 2 MiB boundary and is advised to the kernel
/// for transparent huge pages (madvise MADV_HUGEPAGE: Linux's default mode, "madvise", backs
/// only advised memory with them), so that streaming through it (the optimizer, the GEMMs'
/// packing) costs one TLB entry per 2 MiB instead of 512. PTDP_CPU_HUGEPAGES=0 (or off, false,
/// no) in the environment, read at the first such block, turns the advice off; a kernel without
/// transparent huge pages refuses it, and it is not asked again. *advised (may be NULL)
/// receives whether this block was advised.
void* host_block_alloc(std::size_t bytes, bool* advised = nullptr);

}  // namespace ptdp
