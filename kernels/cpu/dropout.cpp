// Dropout with the mask drawn from Philox at each element's global index: nothing is stored,
// the backward pass regenerates the same mask, and every partition of a tensor draws the
// serial run's mask for its elements.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

// Philox blocks first .. first + n - 1 of `s`, four words each, into out[4n]. The same rounds as
// philox4x32_10, laid out across blocks so the compiler can run several blocks per instruction.
constexpr int kBlocksPerBatch = 64;

// Cloned per instruction set: the multiplies vectorise with AVX2 and AVX-512 where present.
__attribute__((target_clones("avx512f", "avx2", "default")))
void philox_words(PhiloxStream s, uint64_t first, int n, uint32_t* out) {
  uint32_t c0[kBlocksPerBatch], c1[kBlocksPerBatch], c2[kBlocksPerBatch], c3[kBlocksPerBatch];
  for (int b = 0; b < n; ++b) {
    const uint64_t block = first + static_cast<uint64_t>(b);
    c0[b] = static_cast<uint32_t>(block);
    c1[b] = static_cast<uint32_t>(block >> 32);
    c2[b] = static_cast<uint32_t>(s.stream);
    c3[b] = static_cast<uint32_t>(s.stream >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(s.seed), k1 = static_cast<uint32_t>(s.seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int b = 0; b < n; ++b) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[b];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[b];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[b] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = static_cast<uint32_t>(p1);
      c3[b] = static_cast<uint32_t>(p0);
      c0[b] = n0;
      c2[b] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int b = 0; b < n; ++b) {
    out[4 * b] = c0[b];
    out[4 * b + 1] = c1[b];
    out[4 * b + 2] = c2[b];
    out[4 * b + 3] = c3[b];
  }
}

// out[i] = in[i] * keep(i) * scale over the block, in the block's local (row-major) order.
void apply_mask(const char* op, const float* in, float* out, const DropoutDesc& d) {
  if (kcheck::check_dropout(op, in, out, d) == kcheck::Work::none) return;
  const float p = d.p;
  const float keep_scale = kcheck::dropout_keep_scale(p);
  const int64_t s0 = d.block.shape[0], s1 = d.block.shape[1], s2 = d.block.shape[2];
  const int64_t g1 = d.block.global_shape[1], g2 = d.block.global_shape[2];
  const int64_t o0 = d.block.offset[0], o1 = d.block.offset[1], o2 = d.block.offset[2];
  // Work items: pieces of at most kPiece elements of one row (dim 2), so a flat tensor is
  // spread over the threads as well as a tensor of many rows.
  constexpr int64_t kPiece = 4096;
  const int64_t pieces = (s2 + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < s0 * s1 * pieces; ++item) {
    const int64_t row = item / pieces, piece = item % pieces;
    const int64_t i0 = row / s1, i1 = row % s1;
    const int64_t j0 = piece * kPiece, j1 = std::min(s2, j0 + kPiece);
    const int64_t local = row * s2;
    // Global index of element j of this row is row_global + j.
    const uint64_t row_global = static_cast<uint64_t>(((i0 + o0) * g1 + (i1 + o1)) * g2 + o2);
    const uint64_t begin = row_global + static_cast<uint64_t>(j0), end = row_global + static_cast<uint64_t>(j1);
    const float* x = in + local;
    float* y = out + local;
    // One Philox block serves four consecutive global elements; blocks come a batch at a time.
    uint32_t words[4 * kBlocksPerBatch];
    for (uint64_t first = begin >> 2; first * 4 < end; first += kBlocksPerBatch) {
      const uint64_t last = std::min<uint64_t>((end + 3) / 4, first + kBlocksPerBatch);
      philox_words(d.rng, first, static_cast<int>(last - first), words);
      // Elements j with global index in [max(begin, 4 first), min(end, 4 last)).
      const int64_t base = static_cast<int64_t>(first * 4 - row_global);  // j of words[0]
      const int64_t jlo = std::max<int64_t>(j0, base);
      const int64_t jhi = std::min<int64_t>(j1, base + static_cast<int64_t>(4 * (last - first)));
#pragma omp simd
      for (int64_t j = jlo; j < jhi; ++j) {
        const float u = philox_bits_to_uniform(words[j - base]);
        y[j] = u >= p ? x[j] * keep_scale : 0.0f;
      }
    }
  }
}

}  // namespace

void CpuBackend::dropout_forward(const float* x, float* y, const DropoutDesc& d) {
  apply_mask("dropout_forward", x, y, d);
}

void CpuBackend::dropout_backward(const float* dy, float* dx, const DropoutDesc& d) {
  apply_mask("dropout_backward", dy, dx, d);
}

}  // namespace ptdp
