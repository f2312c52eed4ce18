// The dropout mask on the device, shared by dropout.cu and bias_dropout_add.cu: one thread per
// Philox block of a row of the local block, so every mask is bit-identical to the CPU backend's
// (kernels/cpu/dropout.cpp) for every partition of a tensor.
//
// Index equivalence with the CPU: element (i0, i1, j) of the local block, at local offset
// (i0 * s1 + i1) * s2 + j, has global index
//   ((i0 + o0) * g1 + (i1 + o1)) * g2 + o2 + j,
// its 32 random bits are word (index & 3) of Philox block (index >> 2) of the stream, and it is
// kept when philox_bits_to_uniform(bits) >= p.
#pragma once

#include <cstdint>

#include "base/philox.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

struct MaskGeometry {
  int64_t rows;            // s0 * s1 rows of s2 contiguous elements
  int64_t s1, s2;          // local shape (dims 1, 2)
  int64_t g1, g2;          // global shape (dims 1, 2)
  int64_t o0, o1, o2;      // offsets
  int64_t blocks_per_row;  // Philox blocks a thread grid assigns to each row

  /// Work items of a grid-stride loop: one per (row, Philox block of the row).
  __host__ __device__ int64_t items() const { return rows * blocks_per_row; }
};

inline MaskGeometry mask_geometry(const GlobalBlock& b) {
  MaskGeometry g{};
  g.rows = b.shape[0] * b.shape[1];
  g.s1 = b.shape[1];
  g.s2 = b.shape[2];
  g.g1 = b.global_shape[1];
  g.g2 = b.global_shape[2];
  g.o0 = b.offset[0];
  g.o1 = b.offset[1];
  g.o2 = b.offset[2];
  // A row of s2 elements starting anywhere in a block of four touches at most (s2 + 3) / 4 + 1
  // Philox blocks; threads past the row's end do nothing.
  g.blocks_per_row = (g.s2 + 3) / 4 + 1;
  return g;
}

/// The elements work item t covers: words [w_lo, w_hi) of `words`, word w belonging to local
/// element local0 + w (row-major over the block). Empty (w_lo == w_hi) past a row's end.
struct MaskSpan {
  int64_t local0;
  int w_lo, w_hi;
  Philox4x32 words;
};

__device__ __forceinline__ MaskSpan mask_span(const MaskGeometry& g, PhiloxStream rng,
                                              int64_t t) {
  MaskSpan s{};
  const int64_t row = t / g.blocks_per_row, q = t % g.blocks_per_row;
  const int64_t i0 = row / g.s1, i1 = row % g.s1;
  // Global index of element j of this row is row_global + j.
  const auto row_global = static_cast<uint64_t>(((i0 + g.o0) * g.g1 + (i1 + g.o1)) * g.g2 + g.o2);
  const uint64_t row_end = row_global + static_cast<uint64_t>(g.s2);
  const uint64_t block = (row_global >> 2) + static_cast<uint64_t>(q);
  const uint64_t first = block * 4;  // global index of the block's word 0
  if (first >= row_end) return s;    // w_lo == w_hi == 0
  s.w_lo = first < row_global ? static_cast<int>(row_global - first) : 0;
  s.w_hi = row_end - first < 4 ? static_cast<int>(row_end - first) : 4;
  s.local0 = row * g.s2 + (static_cast<int64_t>(first) - static_cast<int64_t>(row_global));
  s.words = philox_block(rng, block);
  return s;
}

/// Whether the element of word w is kept.
__device__ __forceinline__ bool mask_keep(const MaskSpan& s, int w, float p) {
  return philox_bits_to_uniform(s.words.v[w]) >= p;
}

}  // namespace ptdp::cuda
