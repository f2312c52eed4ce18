// Ring attention's block-pair kernels (attention_block_forward / attention_block_backward, the
// kernels context parallelism runs per (query chunk, key chunk) pair) against the whole-sequence
// fused kernel: the sequence is cut into random query blocks and, independently, random key
// blocks; every query block merges every key block (in a shuffled order) by the log-sum-exp
// rule and must give the whole kernel's context and log-sum-exps; the backward, summed over
// every pair, its dQ, dK and dV. Causal, packed documents (boundaries inside blocks and on their
// edges), attention dropout at the global (query, key) indices, grouped-query attention, a head
// slice of a tensor-parallel rank, fp32 and bf16 storage; the same bits whatever the thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>

#include <omp.h>

#include "reference.h"

using namespace ptdp_test;
using ptdp::AttentionBlockDesc;
using ptdp::AttentionDesc;
using ptdp::DType;

namespace {

struct Case {
  int64_t s, b, heads, groups, dh;
  std::vector<std::vector<int64_t>> documents;  // lengths per sample; empty: causal
};

AttentionDesc whole_desc(const Case& c, float p) {
  AttentionDesc d;
  d.s = c.s;
  d.b = c.b;
  d.heads = c.heads;
  d.groups = c.groups;
  d.dh = c.dh;
  d.scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
  d.dropout.p = p;
  d.dropout.rng = ptdp::PhiloxStream{77, 5};
  ptdp::GlobalBlock& blk = d.dropout.block;  // a tensor-parallel rank's heads [heads, 2 heads)
  blk.shape[0] = blk.global_shape[0] = c.b;
  blk.shape[1] = c.heads;
  blk.global_shape[1] = 3 * c.heads;
  blk.offset[1] = c.heads;
  blk.shape[2] = blk.global_shape[2] = c.s * c.s;
  return d;
}

AttentionBlockDesc block_desc(const AttentionDesc& w, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  AttentionBlockDesc d;
  d.sq = q1 - q0;
  d.sk = k1 - k0;
  d.b = w.b;
  d.heads = w.heads;
  d.groups = w.groups;
  d.dh = w.dh;
  d.scale = w.scale;
  d.q_start = q0;
  d.k_start = k0;
  d.seq = w.s;
  d.document_starts = w.document_starts;
  d.dropout = w.dropout;
  return d;
}

std::vector<int32_t> starts_of(const Case& c) {
  std::vector<int32_t> out;
  for (const auto& sample : c.documents) {
    int64_t start = 0;
    for (int64_t len : sample) {
      for (int64_t k = 0; k < len; ++k) out.push_back(static_cast<int32_t>(start));
      start += len;
    }
    REQUIRE(start == c.s);
  }
  return out;
}

// A random cut of [0, s) into consecutive blocks: their boundaries 0 = c0 < c1 < ... = s.
std::vector<int64_t> random_cut(int64_t s, std::mt19937& g) {
  std::vector<int64_t> cuts{0};
  std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, s / 2));
  while (cuts.back() < s) cuts.push_back(std::min(s, cuts.back() + len(g)));
  return cuts;
}

// Storage round trip: values representable in t, as fp32, and their bytes in t.
struct BlockInput {
  fvec values;
  std::vector<uint16_t> half;
  DType t;
  BlockInput(const fvec& v, DType type) : t(type) {
    if (t == DType::F32) {
      values = v;
      return;
    }
    half.resize(v.size());
    values.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      half[i] = ptdp::f32_to_bf16(v[i]);
      values[i] = ptdp::bf16_to_f32(half[i]);
    }
  }
  const void* data() const { return t == DType::F32 ? static_cast<const void*>(values.data()) : half.data(); }
  // Element e's address.
  const void* at(int64_t e) const {
    return t == DType::F32 ? static_cast<const void*>(values.data() + e) : static_cast<const void*>(half.data() + e);
  }
};

struct Whole {
  fvec ctx, lse, dqkv;
};

}  // namespace

TEST_CASE("attention blocks: random block splits merged by log-sum-exp equal the whole-sequence kernel",
          "[attention][ring]") {
  const Case cases[] = {
      {13, 2, 4, 2, 4, {}},                      // causal, 2 query heads per group
      {24, 1, 4, 1, 8, {{5, 1, 10, 8}}},         // multi-query, documents (one of one token)
      {70, 2, 2, 2, 8, {{64, 6}, {10, 50, 10}}},  // documents across a key tile, two samples
      {33, 2, 6, 3, 5, {}},                      // odd sizes
  };
  std::mt19937 g(4242);
  uint32_t seed = 3100;
  for (DType t : {DType::F32, DType::BF16}) {
    for (const Case& c : cases) {
      for (float p : {0.0f, 0.2f}) {
        AttentionDesc w = whole_desc(c, p);
        const std::vector<int32_t> starts = starts_of(c);
        w.document_starts = c.documents.empty() ? nullptr : starts.data();
        const int64_t qpg = w.q_per_group(), groups = w.kv_groups();
        const int64_t qkv_n = c.s * c.b * groups * (qpg + 2) * c.dh, ctx_n = c.s * c.b * c.heads * c.dh;
        const int64_t q_row = c.b * groups * (qpg + 2) * c.dh, o_row = c.b * c.heads * c.dh;
        const int64_t kv_row = c.b * groups * 2 * c.dh;
        Rand r(seed++);
        const BlockInput qkv(r.uniform(qkv_n, -2.0f, 2.0f), t), dctx(r.uniform(ctx_n), t);
        // The whole sequence at once.
        Whole whole;
        std::vector<uint16_t> ctx16(static_cast<std::size_t>(ctx_n)), dqkv16(static_cast<std::size_t>(qkv_n));
        whole.ctx.resize(static_cast<std::size_t>(ctx_n));
        whole.lse.resize(static_cast<std::size_t>(c.b * c.heads * c.s));
        whole.dqkv.resize(static_cast<std::size_t>(qkv_n));
        fvec delta(whole.lse.size());
        void* ctx_out = t == DType::F32 ? static_cast<void*>(whole.ctx.data()) : ctx16.data();
        void* dqkv_out = t == DType::F32 ? static_cast<void*>(whole.dqkv.data()) : dqkv16.data();
        be().attention_forward(w, qkv.data(), ctx_out, whole.lse.data(), t);
        be().attention_backward(w, qkv.data(), ctx_out, whole.lse.data(), dctx.data(), dqkv_out, delta.data(), t);
        if (t != DType::F32) {
          for (int64_t e = 0; e < ctx_n; ++e) whole.ctx[e] = ptdp::bf16_to_f32(ctx16[e]);
          for (int64_t e = 0; e < qkv_n; ++e) whole.dqkv[e] = ptdp::bf16_to_f32(dqkv16[e]);
        }
        // The keys and values as the ring passes them: [s, b, groups, 2, dh].
        std::vector<uint16_t> kv16(static_cast<std::size_t>(c.s * kv_row));
        fvec kvf(static_cast<std::size_t>(c.s * kv_row));
        for (int64_t i = 0; i < c.s * c.b * groups; ++i) {
          for (int64_t e = 0; e < 2 * c.dh; ++e) {
            const int64_t src = (i * (qpg + 2) + qpg) * c.dh + e;
            kvf[i * 2 * c.dh + e] = qkv.values[src];
            if (t != DType::F32) kv16[i * 2 * c.dh + e] = qkv.half[src];
          }
        }
        auto kv_at = [&](int64_t k0) -> const void* {
          return t == DType::F32 ? static_cast<const void*>(kvf.data() + k0 * kv_row)
                                 : static_cast<const void*>(kv16.data() + k0 * kv_row);
        };
        for (int split = 0; split < 3; ++split) {
          const std::vector<int64_t> qcut = random_cut(c.s, g), kcut = random_cut(c.s, g);
          std::vector<int> korder(kcut.size() - 1);
          for (std::size_t k = 0; k < korder.size(); ++k) korder[k] = static_cast<int>(k);
          INFO("t " << ptdp::dtype_name(t) << " s " << c.s << " heads " << c.heads << " groups " << groups
                    << " p " << p << " documents " << !c.documents.empty() << " split " << split << " ("
                    << qcut.size() - 1 << " query blocks, " << korder.size() << " key blocks)");
          fvec ctx(whole.ctx.size()), lse(whole.lse.size());
          fvec dq(static_cast<std::size_t>(ctx_n), 0.0f), dkv(static_cast<std::size_t>(c.s * kv_row), 0.0f);
          std::size_t skipped = 0;
          for (std::size_t qb = 0; qb + 1 < qcut.size(); ++qb) {
            const int64_t q0 = qcut[qb], q1 = qcut[qb + 1], sq = q1 - q0;
            fvec out(static_cast<std::size_t>(sq * o_row), 0.0f);
            fvec blse(static_cast<std::size_t>(c.b * c.heads * sq), -std::numeric_limits<float>::infinity());
            std::shuffle(korder.begin(), korder.end(), g);
            for (int kb : korder) {
              const int64_t k0 = kcut[kb], k1 = kcut[kb + 1];
              const fvec before = out;
              be().attention_block_forward(block_desc(w, q0, q1, k0, k1), qkv.at(q0 * q_row), kv_at(k0), out.data(),
                                           blse.data(), t);
              if (k0 > q1 - 1) {  // keys after every query of the block: nothing merged
                CHECK(out == before);
                ++skipped;
              }
            }
            for (int64_t e = 0; e < sq * o_row; ++e) ctx[q0 * o_row + e] = out[e];
            for (int64_t bh = 0; bh < c.b * c.heads; ++bh)
              for (int64_t i = 0; i < sq; ++i) lse[bh * c.s + q0 + i] = blse[bh * sq + i];
          }
          CHECK(skipped > 0);
          // The merged context in fp32 against the whole kernel's (rounded to t once).
          const double rtol = t == DType::F32 ? 2e-5 : 1.0 / 128;
          CHECK_ALLCLOSE(ctx, to_d(whole.ctx), rtol, rtol);
          CHECK_ALLCLOSE(lse, to_d(whole.lse), 2e-5, 2e-5);
          // Backward over every pair, from the whole kernel's context and the merged lse.
          for (std::size_t qb = 0; qb + 1 < qcut.size(); ++qb) {
            const int64_t q0 = qcut[qb], q1 = qcut[qb + 1], sq = q1 - q0;
            fvec blse(static_cast<std::size_t>(c.b * c.heads * sq));
            for (int64_t bh = 0; bh < c.b * c.heads; ++bh)
              for (int64_t i = 0; i < sq; ++i) blse[bh * sq + i] = lse[bh * c.s + q0 + i];
            const void* ctx_q = t == DType::F32 ? static_cast<const void*>(whole.ctx.data() + q0 * o_row)
                                                : static_cast<const void*>(ctx16.data() + q0 * o_row);
            for (std::size_t kb = 0; kb + 1 < kcut.size(); ++kb) {
              const int64_t k0 = kcut[kb], k1 = kcut[kb + 1];
              be().attention_block_backward(block_desc(w, q0, q1, k0, k1), qkv.at(q0 * q_row), kv_at(k0), ctx_q,
                                            blse.data(), dctx.at(q0 * o_row), dq.data() + q0 * o_row,
                                            dkv.data() + k0 * kv_row, t);
            }
          }
          fvec got(whole.dqkv.size());
          for (int64_t i = 0; i < c.s * c.b * groups; ++i) {
            for (int64_t e = 0; e < qpg * c.dh; ++e) got[i * (qpg + 2) * c.dh + e] = dq[i * qpg * c.dh + e];
            for (int64_t e = 0; e < 2 * c.dh; ++e) got[(i * (qpg + 2) + qpg) * c.dh + e] = dkv[i * 2 * c.dh + e];
          }
          double scale = 0.0;
          for (float x : whole.dqkv) scale = std::max(scale, static_cast<double>(std::fabs(x)));
          const double grad_rtol = t == DType::F32 ? 1e-5 : 1.0 / 64;
          CHECK_ALLCLOSE(got, to_d(whole.dqkv), grad_rtol * scale, grad_rtol);
        }
      }
    }
  }
}

TEST_CASE("attention blocks: dropout and documents change the result, so the checks above can fail",
          "[attention][ring]") {
  const Case c{16, 1, 2, 1, 4, {{6, 10}}};
  AttentionDesc w = whole_desc(c, 0.0f);
  const std::vector<int32_t> starts = starts_of(c);
  Rand r(17);
  const fvec qkv = r.uniform(c.s * c.b * 3 * c.heads * c.dh / 2 * 2, -2.0f, 2.0f);
  const int64_t kv_row = c.b * 2 * c.dh, o_row = c.b * c.heads * c.dh;
  fvec kv(static_cast<std::size_t>(c.s * kv_row));
  for (int64_t i = 0; i < c.s * c.b; ++i)
    for (int64_t e = 0; e < 2 * c.dh; ++e) kv[i * 2 * c.dh + e] = qkv[(i * (c.heads + 2) + c.heads) * c.dh + e];
  auto run = [&](const AttentionDesc& d) {
    fvec out(static_cast<std::size_t>(8 * o_row), 0.0f), lse(static_cast<std::size_t>(c.heads * 8),
                                                                -std::numeric_limits<float>::infinity());
    // Queries 8 .. 15 against keys 0 .. 7 (an earlier block: full without documents).
    be().attention_block_forward(block_desc(d, 8, 16, 0, 8), qkv.data() + 8 * c.b * (c.heads + 2) * c.dh, kv.data(),
                                 out.data(), lse.data(), DType::F32);
    return lse;
  };
  const fvec plain = run(w);
  AttentionDesc docs = w;
  docs.document_starts = starts.data();
  const fvec with_docs = run(docs);
  // Queries 8 .. 15 are in the document starting at 6: they see keys 6 and 7 only.
  CHECK(plain != with_docs);
  AttentionDesc drop = w;
  drop.dropout.p = 0.5f;
  CHECK(run(drop) == plain);  // the log-sum-exps count dropped keys too
  fvec out_plain(static_cast<std::size_t>(8 * o_row), 0.0f), out_drop = out_plain;
  fvec l1(static_cast<std::size_t>(c.heads * 8), -std::numeric_limits<float>::infinity()), l2 = l1;
  be().attention_block_forward(block_desc(w, 8, 16, 0, 8), qkv.data() + 8 * c.b * (c.heads + 2) * c.dh, kv.data(),
                               out_plain.data(), l1.data(), DType::F32);
  be().attention_block_forward(block_desc(drop, 8, 16, 0, 8), qkv.data() + 8 * c.b * (c.heads + 2) * c.dh, kv.data(),
                               out_drop.data(), l2.data(), DType::F32);
  CHECK(out_plain != out_drop);
}

TEST_CASE("attention blocks: invalid descriptions are refused, naming the field", "[attention][ring][errors]") {
  const Case c{8, 1, 2, 1, 4, {}};
  const AttentionDesc w = whole_desc(c, 0.0f);
  fvec q(256), kv(256), out(256), lse(64);
  AttentionBlockDesc d = block_desc(w, 4, 8, 0, 4);
  d.k_start = 6;  // keys 6 .. 9 outside seq = 8
  CHECK_THROWS_WITH(be().attention_block_forward(d, q.data(), kv.data(), out.data(), lse.data(), DType::F32),
                    Catch::Contains("attention_block_forward") && Catch::Contains("must lie in seq = 8"));
  d = block_desc(w, 4, 8, 0, 4);
  d.sk = 0;
  CHECK_THROWS_WITH(be().attention_block_forward(d, q.data(), kv.data(), out.data(), lse.data(), DType::F32),
                    Catch::Contains("sk"));
  d = block_desc(w, 4, 8, 0, 4);
  CHECK_THROWS_WITH(be().attention_block_backward(d, q.data(), kv.data(), out.data(), lse.data(), out.data(), nullptr,
                                                  kv.data(), DType::F32),
                    Catch::Contains("attention_block_backward") && Catch::Contains("dq"));
}

TEST_CASE("attention blocks: forward and backward are the same whatever the thread count", "[attention][ring]") {
  // A group's dK and dV collect 4 query heads; dQ and dK/dV accumulate over two key blocks.
  const Case c{40, 2, 8, 2, 8, {{15, 25}, {40}}};
  AttentionDesc w = whole_desc(c, 0.1f);
  const std::vector<int32_t> starts = starts_of(c);
  w.document_starts = starts.data();
  const int64_t qpg = 4, q_row = c.b * c.groups * (qpg + 2) * c.dh, kv_row = c.b * c.groups * 2 * c.dh;
  const int64_t o_row = c.b * c.heads * c.dh;
  Rand r(901);
  const fvec qkv = r.uniform(c.s * q_row, -2.0f, 2.0f), dctx = r.uniform(20 * o_row), ctx = r.uniform(20 * o_row);
  fvec kv(static_cast<std::size_t>(c.s * kv_row));
  for (int64_t i = 0; i < c.s * c.b * c.groups; ++i)
    for (int64_t e = 0; e < 2 * c.dh; ++e) kv[i * 2 * c.dh + e] = qkv[(i * (qpg + 2) + qpg) * c.dh + e];
  const int saved = omp_get_max_threads();
  std::vector<fvec> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    fvec out(static_cast<std::size_t>(20 * o_row), 0.0f), lse(static_cast<std::size_t>(c.b * c.heads * 20),
                                                               -std::numeric_limits<float>::infinity());
    fvec dq(out.size(), 0.0f), dkv(static_cast<std::size_t>(40 * kv_row), 0.0f);
    for (int64_t k0 : {0, 20}) {  // queries 20 .. 39 against keys 0 .. 19, then the diagonal block
      be().attention_block_forward(block_desc(w, 20, 40, k0, k0 + 20), qkv.data() + 20 * q_row,
                                   kv.data() + k0 * kv_row, out.data(), lse.data(), DType::F32);
    }
    for (int64_t k0 : {0, 20}) {
      const AttentionBlockDesc d = block_desc(w, 20, 40, k0, k0 + 20);
      be().attention_block_backward(d, qkv.data() + 20 * q_row, kv.data() + k0 * kv_row, ctx.data(), lse.data(),
                                    dctx.data(), dq.data(), dkv.data() + k0 * kv_row, DType::F32);
    }
    fvec all = out;
    all.insert(all.end(), lse.begin(), lse.end());
    all.insert(all.end(), dq.begin(), dq.end());
    all.insert(all.end(), dkv.begin(), dkv.end());
    runs.push_back(all);
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < runs.size(); ++i) CHECK(runs[i] == runs[0]);
}
