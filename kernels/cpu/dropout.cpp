// Dropout with the mask drawn from Philox at each element's global index: nothing is stored,
// the backward pass regenerates the same mask, and every partition of a tensor draws the
// serial run's mask for its elements (the helpers are in dropout_mask.h).
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace cpu {

namespace {

void philox_words_scalar(PhiloxStream s, uint64_t first, int n, uint32_t* out) {
  for (int b = 0; b < n; ++b) {
    const Philox4x32 w = philox_block(s, first + static_cast<uint64_t>(b));
    std::memcpy(out + 4 * b, w.v, sizeof w.v);
  }
}

#if defined(__x86_64__)

// The vector versions hold each 32-bit counter word of a block in a 64-bit lane. A Philox round
// is then two widening multiplies (vpmuludq reads the low half of each lane and returns hi:lo),
// two shifts and four xors. The high halves of c0..c3 collect garbage that nothing reads: the
// multiplies ignore them, and only low halves are stored.
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

/// The key of each of the 10 rounds.
struct RoundKeys {
  uint32_t k0[10], k1[10];
  explicit RoundKeys(uint64_t seed) {
    uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r, a += kW0, b += kW1) {
      k0[r] = a;
      k1[r] = b;
    }
  }
};

// Four blocks per register.
__attribute__((target("avx2"))) void philox_words_avx2(PhiloxStream s, uint64_t first, int n,
                                                       uint32_t* out) {
  const RoundKeys keys(s.seed);
  const __m256i m0 = _mm256_set1_epi64x(kM0), m1 = _mm256_set1_epi64x(kM1);
  const __m256i s_lo = _mm256_set1_epi64x(static_cast<uint32_t>(s.stream));
  const __m256i s_hi = _mm256_set1_epi64x(static_cast<int64_t>(s.stream >> 32));
  const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);
  for (int b = 0; b < n; b += 4) {
    const uint64_t b0 = first + static_cast<uint64_t>(b);
    const __m256i block = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(b0)), lanes);
    __m256i c0 = block, c1 = _mm256_srli_epi64(block, 32), c2 = s_lo, c3 = s_hi;
    for (int r = 0; r < 10; ++r) {
      const __m256i p0 = _mm256_mul_epu32(c0, m0), p1 = _mm256_mul_epu32(c2, m1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1),
                            _mm256_set1_epi64x(keys.k0[r]));
      c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3),
                            _mm256_set1_epi64x(keys.k1[r]));
      c1 = p1;
      c3 = p0;
    }
    // Lane j of w01 holds words 0 and 1 of block j, of w23 words 2 and 3; interleaved, then the
    // 128-bit halves put back in block order.
    const __m256i w01 = _mm256_blend_epi32(c0, _mm256_slli_epi64(c1, 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(c2, _mm256_slli_epi64(c3, 32), 0xAA);
    const __m256i even = _mm256_unpacklo_epi64(w01, w23);  // blocks 0 and 2
    const __m256i odd = _mm256_unpackhi_epi64(w01, w23);   // blocks 1 and 3
    const __m256i lo = _mm256_permute2x128_si256(even, odd, 0x20);
    const __m256i hi = _mm256_permute2x128_si256(even, odd, 0x31);
    if (b + 4 <= n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * b), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * b + 8), hi);
    } else {
      uint32_t tail[16];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail + 8), hi);
      std::memcpy(out + 4 * b, tail, static_cast<std::size_t>(n - b) * 4 * sizeof(uint32_t));
    }
  }
}

// Eight blocks per register. The zero-masked forms of the intrinsics (all lanes selected) are
// the plain ones without their undefined source operand, which GCC 12 reports as used
// uninitialized (GCC bug 105593).
constexpr __mmask8 kAll8 = 0xFF;

__attribute__((target("avx512f"))) void philox_words_avx512(PhiloxStream s, uint64_t first, int n,
                                                           uint32_t* out) {
  const RoundKeys keys(s.seed);
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  const __m512i s_lo = _mm512_set1_epi64(static_cast<uint32_t>(s.stream));
  const __m512i s_hi = _mm512_set1_epi64(static_cast<int64_t>(s.stream >> 32));
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  // Blocks 0..3 and 4..7 from the even (0, 2, 4, 6) and odd blocks, 128 bits at a time.
  const __m512i first_half = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second_half = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int b = 0; b < n; b += 8) {
    const uint64_t b0 = first + static_cast<uint64_t>(b);
    const __m512i block = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(b0)), lanes);
    __m512i c0 = block, c1 = _mm512_maskz_srli_epi64(kAll8, block, 32), c2 = s_lo, c3 = s_hi;
    for (int r = 0; r < 10; ++r) {
      const __m512i p0 = _mm512_maskz_mul_epu32(kAll8, c0, m0);
      const __m512i p1 = _mm512_maskz_mul_epu32(kAll8, c2, m1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_maskz_srli_epi64(kAll8, p1, 32), c1),
                            _mm512_set1_epi64(keys.k0[r]));
      c2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_maskz_srli_epi64(kAll8, p0, 32), c3),
                            _mm512_set1_epi64(keys.k1[r]));
      c1 = p1;
      c3 = p0;
    }
    const __m512i w01 = _mm512_mask_blend_epi32(0xAAAA, c0, _mm512_maskz_slli_epi64(kAll8, c1, 32));
    const __m512i w23 = _mm512_mask_blend_epi32(0xAAAA, c2, _mm512_maskz_slli_epi64(kAll8, c3, 32));
    const __m512i even = _mm512_maskz_unpacklo_epi64(kAll8, w01, w23);  // blocks 0, 2, 4, 6
    const __m512i odd = _mm512_maskz_unpackhi_epi64(kAll8, w01, w23);   // blocks 1, 3, 5, 7
    const __m512i lo = _mm512_permutex2var_epi64(even, first_half, odd);
    const __m512i hi = _mm512_permutex2var_epi64(even, second_half, odd);
    if (b + 8 <= n) {
      _mm512_storeu_si512(out + 4 * b, lo);
      _mm512_storeu_si512(out + 4 * b + 16, hi);
    } else {
      uint32_t tail[32];
      _mm512_storeu_si512(tail, lo);
      _mm512_storeu_si512(tail + 16, hi);
      std::memcpy(out + 4 * b, tail, static_cast<std::size_t>(n - b) * 4 * sizeof(uint32_t));
    }
  }
}

#endif  // __x86_64__

using PhiloxWordsFn = void (*)(PhiloxStream, uint64_t, int, uint32_t*);

PhiloxWordsFn pick_philox_words() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return philox_words_avx512;
  if (__builtin_cpu_supports("avx2")) return philox_words_avx2;
#endif
  return philox_words_scalar;
}

}  // namespace

void philox_words(PhiloxStream s, uint64_t first, int n, uint32_t* out) {
  static const PhiloxWordsFn fn = pick_philox_words();
  fn(s, first, n, out);
}

}  // namespace cpu

namespace {

// out[i] = in[i] * keep(i) / (1 - p) over the block, in the block's local (row-major) order.
void apply_mask(const char* op, const void* in, void* out, DType t, const DropoutDesc& d) {
  if (kcheck::check_dropout(op, in, out, t, d) == kcheck::Work::none) return;
  const int32_t threshold = cpu::dropout_threshold(d.p);
  const float keep_scale = kcheck::dropout_keep_scale(d.p);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    cpu::for_each_block_piece(d.block, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                           int64_t local) {
      const S* x = static_cast<const S*>(in) + local;
      S* y = static_cast<S*>(out) + local;
      cpu::for_each_mask_run(d, i0, i1, j0, j1,
                             [&](int64_t jlo, int64_t jhi, int64_t base, const uint32_t* words) {
                               // y may be x: each element is read before it is written.
#pragma omp simd
                               for (int64_t j = jlo; j < jhi; ++j) {
                                 y[j] = St::store(cpu::dropout_select(
                                     words[j - base], threshold, St::load(x[j]) * keep_scale));
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
