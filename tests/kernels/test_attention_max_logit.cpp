// QK-clip's statistic (AttentionDesc::max_logit, AttentionBlockDesc::max_logit): the largest
// pre-softmax logit scale * q_i.k_j per (sample, query head) over the (query, key) pairs the
// softmax sees, against a brute-force maximum over the scores in double. Causal and packed
// documents, multi-head, grouped-query and multi-query attention, fp32 and bf16 storage, with
// and without dropout (which acts after the softmax and must not change it), merged into what
// the buffer held; ring attention's block pairs merged into the whole sequence's maximum.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "base/half.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::AttentionBlockDesc;
using ptdp::AttentionDesc;
using ptdp::DType;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Case {
  int64_t s, b, heads, groups, dh;
  bool documents;
};

AttentionDesc desc_of(const Case& c, float p) {
  AttentionDesc d;
  d.s = c.s;
  d.b = c.b;
  d.heads = c.heads;
  d.groups = c.groups;
  d.dh = c.dh;
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
  d.dropout.p = p;
  d.dropout.rng = ptdp::PhiloxStream{91, 3};
  ptdp::GlobalBlock& blk = d.dropout.block;
  blk.shape[0] = blk.global_shape[0] = c.b;
  blk.shape[1] = blk.global_shape[1] = c.heads;
  blk.shape[2] = blk.global_shape[2] = c.s * c.s;
  return d;
}

// Documents of lengths 1, 2, 3, ... cut out of each sample (the last one shorter), shifted per
// sample so that the samples differ.
std::vector<int32_t> document_starts(const Case& c) {
  std::vector<int32_t> out;
  for (int64_t bi = 0; bi < c.b; ++bi) {
    int64_t start = 0, len = 1 + bi;
    for (int64_t i = 0; i < c.s; ++i) {
      if (i - start >= len) start = i, ++len;
      out.push_back(static_cast<int32_t>(start));
    }
  }
  return out;
}

// qkv [s, b, groups, heads/groups + 2, dh] with values whose logits spread over a wide range:
// each head's queries carry their own gain, and one head's is negative-leaning.
fvec random_qkv(const Case& c, uint32_t seed) {
  const int64_t qpg = c.heads / c.groups, n = c.s * c.b * c.groups * (qpg + 2) * c.dh;
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  fvec x(static_cast<std::size_t>(n));
  for (auto& v : x) v = normal(g);
  // Query head j of every group: gain 1 + 3 j (head 0 of group 0 also shifted negative).
  for (int64_t i = 0; i < c.s; ++i)
    for (int64_t bi = 0; bi < c.b; ++bi)
      for (int64_t gr = 0; gr < c.groups; ++gr)
        for (int64_t j = 0; j < qpg; ++j)
          for (int64_t e = 0; e < c.dh; ++e) {
            float& v = x[static_cast<std::size_t>((((i * c.b + bi) * c.groups + gr) * (qpg + 2) + j) * c.dh + e)];
            v *= 1.0f + 3.0f * static_cast<float>(j);
          }
  return x;
}

// The brute-force maximum [b, heads] of scale * q_i.k_j (in double) over the visible pairs of
// the (already rounded) values.
dvec brute_max(const AttentionDesc& d, const fvec& qkv, const std::vector<int32_t>& starts) {
  const int64_t qpg = d.q_per_group(), groups = d.kv_groups();
  const auto at = [&](int64_t i, int64_t bi, int64_t gr, int64_t slot) {
    return qkv.data() + (((i * d.b + bi) * groups + gr) * (qpg + 2) + slot) * d.dh;
  };
  dvec out(static_cast<std::size_t>(d.b * d.heads), -std::numeric_limits<double>::infinity());
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t hi = 0; hi < d.heads; ++hi) {
      const int64_t gr = hi / qpg, j = hi % qpg;
      double& m = out[static_cast<std::size_t>(bi * d.heads + hi)];
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t first = starts.empty() ? 0 : starts[static_cast<std::size_t>(bi * d.s + i)];
        for (int64_t k = first; k <= i; ++k) {
          double dot = 0.0;
          for (int64_t e = 0; e < d.dh; ++e) dot += static_cast<double>(at(i, bi, gr, j)[e]) * at(k, bi, gr, qpg)[e];
          m = std::max(m, static_cast<double>(d.scale) * dot);
        }
      }
    }
  return out;
}

// The fused kernel's max_logit, starting from `init` in every entry.
fvec fused_max(const AttentionDesc& desc, const Stored& qkv, float init) {
  AttentionDesc d = desc;
  fvec ctx32(static_cast<std::size_t>(d.s * d.b * d.heads * d.dh));
  Stored ctx(ctx32, qkv.t);
  fvec lse(static_cast<std::size_t>(d.b * d.heads * d.s));
  fvec max_logit(static_cast<std::size_t>(d.b * d.heads), init);
  d.max_logit = max_logit.data();
  be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), qkv.t);
  return max_logit;
}

const Case kCases[] = {
    {70, 2, 6, 3, 8, false},  // two key tiles, 2 query heads per group
    {70, 2, 6, 3, 8, true},   // the same with packed documents
    {33, 3, 4, 4, 16, false}, // multi-head attention
    {21, 1, 4, 1, 8, true},   // multi-query attention with documents
};

}  // namespace

TEST_CASE("attention_forward's max_logit is the brute-force maximum of the visible scores, "
          "with or without dropout",
          "[attention][qk_clip]") {
  for (const Case& c : kCases) {
    for (DType t : {DType::F32, DType::BF16}) {
      INFO("s " << c.s << " b " << c.b << " heads " << c.heads << " groups " << c.groups << " documents "
                << c.documents << " dtype " << static_cast<int>(t));
      const std::vector<int32_t> starts = c.documents ? document_starts(c) : std::vector<int32_t>();
      const Stored qkv(random_qkv(c, 7), t);
      AttentionDesc d = desc_of(c, 0.0f);
      d.document_starts = starts.empty() ? nullptr : starts.data();
      const dvec want = brute_max(d, qkv.values(), starts);
      const fvec got = fused_max(d, qkv, kNegInf);
      // fp32 scores of a tile GEMM against the double dot products.
      CHECK_ALLCLOSE(got, want, 1e-5, 1e-5);
      // The (sample, head) entries differ by more than the tolerance, so a mixed-up index fails.
      CHECK(*std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end()) > 1.0);
      // Dropout drops probabilities after the softmax: the same maxima, bit for bit.
      AttentionDesc dropped = d;
      dropped.dropout = desc_of(c, 0.3f).dropout;
      CHECK_BITEQUAL(fused_max(dropped, qkv, kNegInf), got);
      // Merged into what the buffer holds: a larger value stays, a smaller one is replaced.
      CHECK_BITEQUAL(fused_max(d, qkv, 1e6f), fvec(got.size(), 1e6f));
      CHECK_BITEQUAL(fused_max(d, qkv, -1e6f), got);
    }
  }
}

TEST_CASE("attention_forward without max_logit is unchanged by the statistic", "[attention][qk_clip]") {
  const Case c{70, 2, 6, 3, 8, false};
  const Stored qkv(random_qkv(c, 8), DType::F32);
  AttentionDesc d = desc_of(c, 0.2f);
  fvec ctx_a(static_cast<std::size_t>(c.s * c.b * c.heads * c.dh)), ctx_b = ctx_a;
  fvec lse_a(static_cast<std::size_t>(c.b * c.heads * c.s)), lse_b = lse_a;
  be().attention_forward(d, qkv.data(), ctx_a.data(), lse_a.data(), DType::F32);
  fvec max_logit(static_cast<std::size_t>(c.b * c.heads), kNegInf);
  d.max_logit = max_logit.data();
  be().attention_forward(d, qkv.data(), ctx_b.data(), lse_b.data(), DType::F32);
  CHECK_BITEQUAL(ctx_b, ctx_a);
  CHECK_BITEQUAL(lse_b, lse_a);
}

TEST_CASE("attention_block_forward's max_logit, merged over ring attention's block pairs, is the "
          "whole sequence's",
          "[attention][ring][qk_clip]") {
  for (const Case& c : kCases) {
    for (DType t : {DType::F32, DType::BF16}) {
      INFO("s " << c.s << " b " << c.b << " heads " << c.heads << " groups " << c.groups << " documents "
                << c.documents << " dtype " << static_cast<int>(t));
      const std::vector<int32_t> starts = c.documents ? document_starts(c) : std::vector<int32_t>();
      const Stored qkv(random_qkv(c, 9), t);
      AttentionDesc w = desc_of(c, 0.25f);
      w.document_starts = starts.empty() ? nullptr : starts.data();
      const int64_t qpg = c.heads / c.groups, row = c.b * c.groups * (qpg + 2) * c.dh;
      // kv [s, b, groups, 2, dh]: each group's key and value heads out of qkv.
      const fvec values = qkv.values();
      fvec kv32(static_cast<std::size_t>(c.s * c.b * c.groups * 2 * c.dh));
      for (int64_t i = 0; i < c.s * c.b * c.groups; ++i)
        for (int64_t e = 0; e < 2 * c.dh; ++e)
          kv32[static_cast<std::size_t>(i * 2 * c.dh + e)] = values[static_cast<std::size_t>((i * (qpg + 2) + qpg) * c.dh + e)];
      const Stored kv(kv32, t);
      const std::size_t esize = t == DType::F32 ? 4 : 2;
      const auto* qbytes = static_cast<const unsigned char*>(qkv.data());
      const auto* kvbytes = static_cast<const unsigned char*>(kv.data());
      // Blocks of 3 cuts; every (query block, key block) pair, causal ones included.
      const int64_t cuts[] = {0, c.s / 3, 2 * c.s / 3, c.s};
      fvec max_logit(static_cast<std::size_t>(c.b * c.heads), kNegInf);
      for (int qb = 0; qb < 3; ++qb) {
        const int64_t q0 = cuts[qb], q1 = cuts[qb + 1];
        fvec out(static_cast<std::size_t>((q1 - q0) * c.b * c.heads * c.dh), 0.0f);
        fvec lse(static_cast<std::size_t>(c.b * c.heads * (q1 - q0)), kNegInf);
        for (int kb = 0; kb <= qb; ++kb) {
          const int64_t k0 = cuts[kb], k1 = cuts[kb + 1];
          AttentionBlockDesc d;
          d.sq = q1 - q0;
          d.sk = k1 - k0;
          d.b = c.b;
          d.heads = c.heads;
          d.groups = c.groups;
          d.dh = c.dh;
          d.scale = w.scale;
          d.q_start = q0;
          d.k_start = k0;
          d.seq = c.s;
          d.document_starts = w.document_starts;
          d.dropout = w.dropout;
          d.max_logit = max_logit.data();
          be().attention_block_forward(d, qbytes + q0 * row * esize, kvbytes + k0 * c.b * c.groups * 2 * c.dh * esize,
                                       out.data(), lse.data(), t);
        }
      }
      CHECK_ALLCLOSE(max_logit, brute_max(w, values, starts), 1e-5, 1e-5);
    }
  }
}
