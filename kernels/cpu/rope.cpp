// Rotary position embedding, in place on the query and key heads of the fused QKV activation
// [s, b, groups, q_per_group + 2, dh] (rotate-half convention). The cos and sin of every
// (position, frequency) pair are evaluated once per call into a table (in double, rounded to
// fp32, then times the amplitude, as RopeDesc prescribes), then every head of every token is
// rotated in fp32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

// cos and sin of angle = fp32(position * inv_freq[i]) for the positions a call needs: rows of
// half = rot_dim / 2 entries, row = position - first (explicit positions spanning at most as
// many values as there are tokens, and the offset form) or else one row per token.
struct RopeTable {
  std::vector<float> cos, sin;  // [rows, half]
  int64_t first = 0;            // position of row 0
  bool per_token = false;       // rows are tokens (si * b + bi) instead of positions
};

RopeTable make_table(const RopeDesc& d, float sign) {
  const int64_t half = d.rot_dim / 2, tokens = d.s * d.b;
  RopeTable tab;
  int64_t rows = d.s;
  tab.first = d.position_offset;
  if (d.positions != nullptr) {
    const auto [lo, hi] = std::minmax_element(d.positions, d.positions + tokens);
    tab.first = *lo;
    rows = static_cast<int64_t>(*hi) - *lo + 1;
    if (rows > tokens) {
      tab.per_token = true;
      rows = tokens;
    }
  }
  tab.cos.resize(static_cast<std::size_t>(rows * half));
  tab.sin.resize(tab.cos.size());
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = tab.per_token ? d.positions[r] : tab.first + r;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * d.inv_freq[i];
      // The amplitude scales the rounded fp32 cos and sin (exact for 1).
      tab.cos[static_cast<std::size_t>(r * half + i)] =
          static_cast<float>(std::cos(static_cast<double>(angle))) * d.amplitude;
      // sin(-a) = -sin(a) exactly, so the backward's table is the forward's with sin negated.
      tab.sin[static_cast<std::size_t>(r * half + i)] =
          sign * (static_cast<float>(std::sin(static_cast<double>(angle))) * d.amplitude);
    }
  }
  return tab;
}

/// Rotates by the table's angles (sign folded into its sin): out1 = x1 c - x2 s,
/// out2 = x2 c + x1 s, one rounding to the storage type each.
void rotate(void* qkv, DType t, const RopeDesc& d, float sign) {
  const RopeTable tab = make_table(d, sign);
  const int64_t half = d.rot_dim / 2, tokens = d.s * d.b;
  const int64_t group = (d.q_per_group + 2) * d.dh;  // elements of one group in a token
  const int64_t rotated = d.q_per_group + 1;          // query heads and the key head
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t tok = 0; tok < tokens; ++tok) {
      const int64_t row = tab.per_token ? tok
                          : d.positions != nullptr
                              ? static_cast<int64_t>(d.positions[tok]) - tab.first
                              : tok / d.b;  // [s, b] token order: si = tok / b
      const float* c = tab.cos.data() + row * half;
      const float* sn = tab.sin.data() + row * half;
      S* base = static_cast<S*>(qkv) + tok * d.groups * group;
      for (int64_t g = 0; g < d.groups; ++g) {
        for (int64_t h = 0; h < rotated; ++h) {
          S* x1 = base + g * group + h * d.dh;
          S* x2 = x1 + half;
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float a = St::load(x1[i]), b = St::load(x2[i]);
            x1[i] = St::store(a * c[i] - b * sn[i]);
            x2[i] = St::store(b * c[i] + a * sn[i]);
          }
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::rope_forward(void* qkv, DType t, const RopeDesc& d) {
  if (kcheck::check_rope("rope_forward", qkv, t, d) == kcheck::Work::none) return;
  rotate(qkv, t, d, 1.0f);
}

void CpuBackend::rope_backward(void* dqkv, DType t, const RopeDesc& d) {
  if (kcheck::check_rope("rope_backward", dqkv, t, d) == kcheck::Work::none) return;
  rotate(dqkv, t, d, -1.0f);
}

}  // namespace ptdp
