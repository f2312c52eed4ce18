// Dropout with the mask drawn from Philox at each element's global index: nothing is stored,
// the backward pass regenerates the same mask, and every partition of a tensor draws the
// serial run's mask for its elements (the helpers are in dropout_mask.h).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace cpu {

// The same rounds as philox4x32_10, laid out across blocks so the compiler can run several
// blocks per instruction. Cloned per instruction set: the multiplies vectorise with AVX2 and
// AVX-512 where present.
__attribute__((target_clones("avx512f", "avx2", "default")))
void philox_words(PhiloxStream s, uint64_t first, int n, uint32_t* out) {
  uint32_t c0[kMaskBlocksPerBatch], c1[kMaskBlocksPerBatch], c2[kMaskBlocksPerBatch],
      c3[kMaskBlocksPerBatch];
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

}  // namespace cpu

namespace {

// out[i] = in[i] * keep(i) / (1 - p) over the block, in the block's local (row-major) order.
void apply_mask(const char* op, const void* in, void* out, DType t, const DropoutDesc& d) {
  if (kcheck::check_dropout(op, in, out, t, d) == kcheck::Work::none) return;
  const float p = d.p;
  const float keep_scale = kcheck::dropout_keep_scale(p);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    cpu::for_each_block_piece(d.block, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                           int64_t local) {
      const S* x = static_cast<const S*>(in) + local;
      S* y = static_cast<S*>(out) + local;
      cpu::for_each_mask_run(d, i0, i1, j0, j1,
                             [&](int64_t jlo, int64_t jhi, int64_t base, const uint32_t* words) {
#pragma omp simd
                               for (int64_t j = jlo; j < jhi; ++j) {
                                 const float u = philox_bits_to_uniform(words[j - base]);
                                 y[j] = St::store(cpu::dropout_keeps(u, p)
                                                      ? St::load(x[j]) * keep_scale
                                                      : 0.0f);
                               }
                             });
    });
  });
}

}  // namespace

void CpuBackend::dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) {
  apply_mask("dropout_forward", x, y, t, d);
}

void CpuBackend::dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) {
  apply_mask("dropout_backward", dy, dx, t, d);
}

}  // namespace ptdp
