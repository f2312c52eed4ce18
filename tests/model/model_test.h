// Shared helpers of the multi-rank model and layer tests (tests/model): deterministic inputs,
// the GPT options of the tiny test models, parameters and gradients read back at global shape,
// and closeness checks that also record the worst difference seen (printed in the summary).
//
// Built on tests/comm/comm_test.h (failure counting summed over the ranks, tensors as host
// vectors); only the public C API and MPI are used.
#pragma once

#include "comm_test.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace mt {

using ct::expect;
using ct::expect_eq;
using ct::str;

// ---- deterministic inputs ---------------------------------------------------------------------

inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash_name(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

/// A value in [-1, 1), a pure function of (seed, i).
inline double urand(uint64_t seed, uint64_t i) {
  return static_cast<double>(mix(mix(seed) ^ i) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/// n ids in [0, v).
inline std::vector<int32_t> ids(std::size_t n, int32_t v, uint64_t seed) {
  std::vector<int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(mix(mix(seed) + i) % static_cast<uint64_t>(v));
  return out;
}

inline std::vector<float> floats(std::size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(scale * urand(seed, i));
  return out;
}

// ---- closeness ---------------------------------------------------------------------------------

/// |a - b| <= rel * max(|a|, |b|) + abs_floor.
inline bool close(double a, double b, double rel, double abs_floor) {
  return std::fabs(a - b) <= rel * std::fmax(std::fabs(a), std::fabs(b)) + abs_floor;
}

/// The worst differences seen by a family of comparisons (reported in the summary line).
struct Worst {
  double rel = 0;     ///< max |a-b| / max(|a|, |b|) over entries with max(|a|,|b|) >= rel_min
  double abs = 0;     ///< max |a-b| over all entries
  double rel_min = 0; ///< entries smaller than this do not count towards `rel`
  double rel_tol = 1e-5; ///< the relative tolerance of the checks, for `floor`
  double floor = 0;   ///< max (|a-b| - rel_tol * max(|a|,|b|)): the absolute floor they needed
  std::string where;  ///< the comparison that gave `rel`

  void see(double a, double b, const std::string& check) {
    const double d = std::fabs(a - b), m = std::fmax(std::fabs(a), std::fabs(b));
    abs = std::fmax(abs, d);
    floor = std::fmax(floor, d - rel_tol * m);
    if (m >= rel_min && m > 0 && d / m > rel) {
      rel = d / m;
      where = check;
    }
  }
  /// The maxima over every rank (collective over MPI_COMM_WORLD).
  void reduce() {
    double v[3] = {rel, abs, floor}, r[3] = {0, 0, 0};
    MPI_Allreduce(v, r, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    rel = r[0];
    abs = r[1];
    floor = r[2];
  }
};

/// Element-wise closeness of got[0, n) and want[0, n); one pass or one failure (naming the
/// first bad element and how many there are).
inline bool expect_close(const float* got, const float* want, std::size_t n, double rel, double abs_floor,
                         const std::string& check, Worst* worst = nullptr) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (worst) worst->see(got[i], want[i], check);
    if (!close(got[i], want[i], rel, abs_floor) || std::isnan(got[i]) != std::isnan(want[i])) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return expect(true, check);
  return expect(false, check,
                "every element within " + str(rel) + " relative + " + str(abs_floor) + " absolute",
                std::to_string(bad) + " of " + std::to_string(n) + " elements off, first [" + std::to_string(first) +
                    "]: " + str(got[first]) + " vs " + str(want[first]));
}

inline bool expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         double abs_floor, const std::string& check, Worst* worst = nullptr) {
  if (got.size() != want.size()) {
    return expect(false, check + " (sizes)", std::to_string(want.size()), std::to_string(got.size()));
  }
  return expect_close(got.data(), want.data(), got.size(), rel, abs_floor, check, worst);
}

/// Bitwise equality of two float arrays (memcmp: also tells -0 from +0 and NaN payloads).
inline bool expect_bitwise(const float* got, const float* want, std::size_t n, const std::string& check) {
  if (std::memcmp(got, want, n * sizeof(float)) == 0) return expect(true, check);
  std::size_t i = 0;
  while (i < n && std::memcmp(got + i, want + i, sizeof(float)) == 0) ++i;
  return expect(false, check, "bitwise equal", "first difference at [" + std::to_string(i) + "]: " +
                                                   str(got[i]) + " vs " + str(want[i]));
}

inline bool expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& check) {
  if (got.size() != want.size()) {
    return expect(false, check + " (sizes)", std::to_string(want.size()), std::to_string(got.size()));
  }
  return expect_bitwise(got.data(), want.data(), got.size(), check);
}

/// Every element of v[begin, end) is exactly 0.
inline bool expect_zero(const std::vector<float>& v, std::size_t begin, std::size_t end, const std::string& check) {
  for (std::size_t i = begin; i < end && i < v.size(); ++i) {
    if (v[i] != 0.0f) {
      std::string want = "exactly 0 in [", got = "[";  // (appends: GCC 12 misreads "..." + string&& under -Wrestrict)
      want.append(std::to_string(begin)).append(", ").append(std::to_string(end)).append(")");
      got.append(std::to_string(i)).append("] = ").append(str(v[i]));
      return expect(false, check, want, got);
    }
  }
  return expect(true, check);
}

// ---- the model ---------------------------------------------------------------------------------

/// The tiny GPT of the equality tests.
inline ptdp_gpt_options tiny_gpt() {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 2;
  o.hidden_size = 32;
  o.num_attention_heads = 4;
  o.vocab_size = 301;
  o.make_vocab_size_divisible_by = 4;
  o.seq_length = 8;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.seed = 4321;
  return o;
}

/// One named parameter as ptdp_model_param_info describes it.
struct ParamInfo {
  std::string name;
  int32_t ndim = 0;
  int64_t shape[2] = {0, 1};
  int32_t partition_dim = -2;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return ndim == 2 ? shape[1] : 1; }
  std::size_t numel() const { return static_cast<std::size_t>(rows() * cols()); }
  /// Whether the rows are the (padded) vocabulary.
  bool vocab_rows() const {
    return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
  }
};

inline std::vector<ParamInfo> param_infos(ptdp_model m) {
  int32_t n = 0;
  ct::expect_status(ptdp_model_num_params(m, &n), PTDP_SUCCESS, "ptdp_model_num_params");
  std::vector<ParamInfo> out(static_cast<std::size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    char name[256] = {0};
    ParamInfo& p = out[static_cast<std::size_t>(i)];
    ct::expect_status(ptdp_model_param_info(m, i, name, sizeof name, &p.ndim, p.shape, &p.partition_dim), PTDP_SUCCESS,
                      "ptdp_model_param_info(" + std::to_string(i) + ")");
    p.name = name;
  }
  return out;
}

inline std::vector<float> get_param(ptdp_model m, const ParamInfo& p) {
  std::vector<float> v(p.numel(), std::nanf(""));
  ct::expect_status(ptdp_model_get_param(m, p.name.c_str(), v.data(), v.size() * sizeof(float)), PTDP_SUCCESS,
                    "ptdp_model_get_param(" + p.name + ")");
  return v;
}

inline std::vector<float> get_grad(ptdp_model m, const ParamInfo& p) {
  std::vector<float> v(p.numel(), std::nanf(""));
  ct::expect_status(ptdp_model_get_grad(m, p.name.c_str(), v.data(), v.size() * sizeof(float)), PTDP_SUCCESS,
                    "ptdp_model_get_grad(" + p.name + ")");
  return v;
}

inline void set_param(ptdp_model m, const ParamInfo& p, const std::vector<float>& v) {
  ct::expect_status(ptdp_model_set_param(m, p.name.c_str(), v.data(), v.size() * sizeof(float)), PTDP_SUCCESS,
                    "ptdp_model_set_param(" + p.name + ")");
}

/// Every gradient of the model, by parameter name.
inline std::map<std::string, std::vector<float>> all_grads(ptdp_model m, const std::vector<ParamInfo>& infos) {
  std::map<std::string, std::vector<float>> out;
  for (const ParamInfo& p : infos) out[p.name] = get_grad(m, p);
  return out;
}

}  // namespace mt
