// The dropout mask of the CPU backend, in one place: dropout_forward/backward, bias_dropout_add
// and the fused attention all draw their keep decisions through these helpers, so an element's
// decision is the same whichever op applies it.
//
// Element (i0, i1, i2) of a DropoutDesc's block has the global index of GlobalBlock; its uniform
// is philox_uniform(rng, global index) and it is kept when that uniform is >= p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/philox.h"
#include "kernels/backend.h"

namespace ptdp::cpu {

/// Philox blocks first .. first + n - 1 of `s` (n <= kMaskBlocksPerBatch), four words each,
/// into out[4n]: the words of philox_block, computed several blocks per instruction.
inline constexpr int kMaskBlocksPerBatch = 64;
void philox_words(PhiloxStream s, uint64_t first, int n, uint32_t* out);

/// The global index of element (i0, i1, i2) of block b.
inline uint64_t global_index(const GlobalBlock& b, int64_t i0, int64_t i1, int64_t i2) {
  return static_cast<uint64_t>(
      ((i0 + b.offset[0]) * b.global_shape[1] + (i1 + b.offset[1])) * b.global_shape[2] +
      (i2 + b.offset[2]));
}

/// Whether dropout with probability p keeps an element whose uniform draw is u.
inline bool dropout_keeps(float u, float p) { return u >= p; }

/// The same decision on the element's 32 random bits: u = (bits >> 8) 2^-24 exactly and p 2^24
/// is exact, so u >= p exactly when the integer bits >> 8 >= ceil(p 2^24), the threshold of p
/// (0 .. 2^24 for p in [0, 1]). An integer compare and no conversion: loops over the words
/// vectorise to a shift and a compare.
inline int32_t dropout_threshold(float p) {
  return static_cast<int32_t>(std::ceil(p * 16777216.0f));
}
inline bool dropout_keeps_bits(uint32_t bits, int32_t threshold) {
  return static_cast<int32_t>(bits >> 8) >= threshold;
}

/// dropout_keeps_bits(bits, threshold) ? kept : +0.0f, as a bit mask rather than a branch, so
/// that loops applying a mask vectorise.
inline float dropout_select(uint32_t bits, int32_t threshold, float kept) {
  const uint32_t mask = 0u - static_cast<uint32_t>(dropout_keeps_bits(bits, threshold));
  uint32_t k;
  std::memcpy(&k, &kept, sizeof k);
  k &= mask;
  float out;
  std::memcpy(&out, &k, sizeof out);
  return out;
}

/// Whether dropout_forward with d keeps element (i0, i1, i2) of d.block.
inline bool dropout_keep(const DropoutDesc& d, int64_t i0, int64_t i1, int64_t i2) {
  return dropout_keeps(philox_uniform(d.rng, global_index(d.block, i0, i1, i2)), d.p);
}

/// Walks elements (i0, i1, j), j in [j0, j1), of d.block a batch of Philox blocks at a time:
/// fn(jlo, jhi, base, words) for consecutive runs [jlo, jhi), where words[j - base] are the
/// random bits of element j.
template <typename Fn>
void for_each_mask_run(const DropoutDesc& d, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                       Fn&& fn) {
  if (j0 >= j1) return;
  const uint64_t row_global = global_index(d.block, i0, i1, 0);
  const uint64_t begin = row_global + static_cast<uint64_t>(j0);
  const uint64_t end = row_global + static_cast<uint64_t>(j1);
  // One Philox block serves four consecutive global elements.
  uint32_t words[4 * kMaskBlocksPerBatch];
  for (uint64_t first = begin >> 2; first * 4 < end; first += kMaskBlocksPerBatch) {
    const uint64_t last = std::min<uint64_t>((end + 3) / 4, first + kMaskBlocksPerBatch);
    philox_words(d.rng, first, static_cast<int>(last - first), words);
    const int64_t base = static_cast<int64_t>(first * 4 - row_global);  // j of words[0]
    const int64_t jlo = std::max<int64_t>(j0, base);
    const int64_t jhi = std::min<int64_t>(j1, base + static_cast<int64_t>(4 * (last - first)));
    fn(jlo, jhi, base, static_cast<const uint32_t*>(words));
  }
}

/// keep[j - j0] = dropout_keep(d, i0, i1, j) for j in [j0, j1).
inline void dropout_keep_row(const DropoutDesc& d, int64_t i0, int64_t i1, int64_t j0,
                             int64_t j1, uint8_t* keep) {
  const int32_t threshold = dropout_threshold(d.p);
  for_each_mask_run(d, i0, i1, j0, j1,
                    [&](int64_t jlo, int64_t jhi, int64_t base, const uint32_t* words) {
#pragma omp simd
                      for (int64_t j = jlo; j < jhi; ++j) {
                        keep[j - j0] = dropout_keeps_bits(words[j - base], threshold);
                      }
                    });
}

/// Splits block b into work items of at most 4096 elements of one row (dim 2), so a flat tensor
/// spreads over the threads as well as one of many rows, and runs fn(i0, i1, j0, j1, local) on
/// them in parallel; local is the flat local index of element (i0, i1, 0).
template <typename Fn>
void for_each_block_piece(const GlobalBlock& b, Fn&& fn) {
  constexpr int64_t kPiece = 4096;
  const int64_t s1 = b.shape[1], s2 = b.shape[2];
  const int64_t pieces = (s2 + kPiece - 1) / kPiece;
  const int64_t items = b.shape[0] * s1 * pieces;
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t row = item / pieces, piece = item % pieces;
    const int64_t j0 = piece * kPiece, j1 = std::min(s2, j0 + kPiece);
    fn(row / s1, row % s1, j0, j1, row * s2);
  }
}

}  // namespace ptdp::cpu
