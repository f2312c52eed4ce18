// What the core-attention tests share: a small grouped-query configuration, deterministic
// inputs and host comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/layers/attention/core_attention.h"

namespace attention_test {

/// a = 4 query heads in g = 2 groups (so a/g = 2 query heads share each key and value head),
/// dh = 8, s = 16 positions (2c chunks for c up to 8).
inline ptdp::LayerConfig config(float attention_dropout = 0.0f) {
  ptdp::LayerConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_attention_heads = 4;
  cfg.num_query_groups = 2;
  cfg.seq_length = 16;
  cfg.attention_dropout = attention_dropout;
  cfg.hidden_dropout = 0.0f;
  cfg.seed = 77;
  return cfg;
}

/// n values in [-1, 1) from a fixed sequence keyed by `key`, the same on every rank.
inline std::vector<float> values(int64_t n, uint32_t key) {
  std::vector<float> v(static_cast<std::size_t>(n));
  uint32_t x = 2463534242u ^ (key * 2654435761u);
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = static_cast<float>(x % 20001u) / 10000.0f - 1.0f;
  }
  return v;
}

/// [rows, cols] fp32 of values(rows * cols, key).
inline ptdp::Tensor random(int64_t rows, int64_t cols, uint32_t key) {
  const std::vector<float> v = values(rows * cols, key);
  return ptdp::Tensor::from_host(v.data(), {rows, cols}, ptdp::DType::F32);
}

inline std::vector<float> host(const ptdp::Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  t.copy_to_host(v.data(), v.size() * sizeof(float));
  return v;
}

/// The largest |a - b| over the elements; +inf when the sizes differ.
inline double max_diff(const ptdp::Tensor& a, const ptdp::Tensor& b) {
  const std::vector<float> x = host(a), y = host(b);
  if (x.size() != y.size()) return INFINITY;
  double d = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(x[i]) - y[i]));
  return d;
}

inline bool same_bits(const ptdp::Tensor& a, const ptdp::Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(host(a).data(), host(b).data(), a.nbytes()) == 0;
}

/// Packed documents of b samples of s positions, [b, s] i32: sample bi's documents start at
/// 0, 5 and 11 (sample 0) or 0 and 7 (the others).
inline ptdp::Tensor documents(int64_t b, int64_t s) {
  std::vector<int32_t> starts(static_cast<std::size_t>(b * s));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int32_t at = static_cast<int32_t>(si);
      starts[static_cast<std::size_t>(bi * s + si)] = bi == 0 ? (at >= 11 ? 11 : at >= 5 ? 5 : 0) : (at >= 7 ? 7 : 0);
    }
  }
  return ptdp::Tensor::from_host(starts.data(), {b, s}, ptdp::DType::I32);
}

}  // namespace attention_test
