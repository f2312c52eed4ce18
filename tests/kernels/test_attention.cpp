// Fused causal attention (attention_forward / attention_backward) against the unfused path the
// layers fall back to, built from the backend's own ops: batched GEMMs reading Q, K and V out of
// the [s, b, heads, 3, dh] activation, causal softmax, dropout on the [b * heads, s, s]
// probabilities, and their backwards. With and without dropout (the fused kernel must drop the
// same probabilities), sequence lengths that are not multiples of a key tile, a head slice of a
// tensor-parallel layer, and 16-bit storage against fp32. Grouped-query attention against the
// multi-head kernel with copied keys and values, and against a double reference. Packed
// documents (AttentionDesc::document_starts, at the end): the fused kernels and the unfused path
// (softmax_forward_documents) against a double reference, each document against that document
// run alone, and the document softmax itself. The fp32 exp of the CPU kernel's probabilities.
#include <catch2/catch.hpp>

#include <omp.h>

#include "base/half.h"
#include "kernels/cpu/exp_math.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::AttentionDesc;
using ptdp::DType;
using ptdp::GemmDesc;

namespace {

struct Shape {
  int64_t s, b, heads, dh;
};

/// The attention of one tensor-parallel rank: `heads` local heads starting at `head_offset` of
/// `heads_global`, dropout p.
AttentionDesc make_desc(const Shape& sh, float p, int64_t heads_global, int64_t head_offset) {
  AttentionDesc d;
  d.s = sh.s;
  d.b = sh.b;
  d.heads = sh.heads;
  d.dh = sh.dh;
  d.scale = 1.0f / std::sqrt(static_cast<float>(sh.dh));
  d.dropout.p = p;
  d.dropout.rng = ptdp::PhiloxStream{2024, 31};
  // The probabilities [b, heads, s * s] inside [b, heads_global, s * s] (SelfAttention's block).
  ptdp::GlobalBlock& blk = d.dropout.block;
  blk.shape[0] = blk.global_shape[0] = sh.b;
  blk.shape[1] = sh.heads;
  blk.global_shape[1] = heads_global;
  blk.offset[1] = head_offset;
  blk.shape[2] = blk.global_shape[2] = sh.s * sh.s;
  return d;
}

int64_t qkv_size(const AttentionDesc& d) { return d.s * d.b * d.heads * 3 * d.dh; }
int64_t ctx_size(const AttentionDesc& d) { return d.s * d.b * d.heads * d.dh; }
int64_t lse_size(const AttentionDesc& d) { return d.b * d.heads * d.s; }

/// GemmDesc over the b * heads (batch, head) pairs. Row i of a head's q, k or v is
/// qkv[i * b * heads * 3 * dh + (bi * heads + h) * 3 * dh + part * dh + e]; of ctx,
/// ctx[i * b * heads * dh + (bi * heads + h) * dh + e]; so pair bh = bi * heads + h starts at
/// bh * 3 * dh (qkv) or bh * dh (ctx), and rows are b * heads * 3 * dh (dh) apart.
GemmDesc pairs_gemm(const AttentionDesc& d) {
  GemmDesc g;
  g.batch = d.b * d.heads;
  return g;
}

struct Unfused {
  fvec probs;    // [b * heads, s, s] softmax (before dropout)
  fvec dropped;  // the same after dropout
  fvec ctx;      // [s, b, heads, dh]
  dvec lse;      // [b, heads, s], from the fp32 scores in double
};

/// The unfused forward from the backend's ops, fp32. With d.document_starts, the softmax is
/// softmax_forward_documents (and the lse is over each row's document).
Unfused unfused_forward(const AttentionDesc& d, const fvec& qkv) {
  const int64_t s = d.s, dh = d.dh, pairs = d.b * d.heads;
  const int64_t qkv_row = d.b * d.heads * 3 * dh, ctx_row = d.b * d.heads * dh;
  Unfused u;
  fvec scores(static_cast<std::size_t>(pairs * s * s));
  {
    GemmDesc g = pairs_gemm(d);  // scores = Q K^T
    g.trans_b = true;
    g.m = g.n = s;
    g.k = dh;
    g.lda = g.ldb = qkv_row;
    g.stride_a = g.stride_b = 3 * dh;
    g.stride_c = s * s;
    be().gemm(g, qkv.data(), qkv.data() + dh, scores.data());
  }
  u.lse.assign(static_cast<std::size_t>(pairs * s), 0.0);
  for (int64_t bh = 0; bh < pairs; ++bh)
    for (int64_t i = 0; i < s; ++i) {
      const float* row = &scores[static_cast<std::size_t>((bh * s + i) * s)];
      const int64_t first = d.document_starts ? d.document_starts[(bh / d.heads) * s + i] : 0;
      double mx = -1e300, sum = 0.0;
      for (int64_t j = first; j <= i; ++j) mx = std::max(mx, static_cast<double>(d.scale) * row[j]);
      for (int64_t j = first; j <= i; ++j) sum += std::exp(static_cast<double>(d.scale) * row[j] - mx);
      u.lse[static_cast<std::size_t>(bh * s + i)] = mx + std::log(sum);
    }
  u.probs.resize(scores.size());
  if (d.document_starts) {
    be().softmax_forward_documents(scores.data(), u.probs.data(), kF32, pairs, d.heads, s, d.scale,
                                   d.document_starts);
  } else {
    be().softmax_forward(scores.data(), u.probs.data(), kF32, pairs, s, s, d.scale, true);
  }
  u.dropped = u.probs;
  if (d.dropout.p > 0.0f) be().dropout_forward(u.probs.data(), u.dropped.data(), kF32, d.dropout);
  u.ctx.assign(static_cast<std::size_t>(ctx_size(d)), 0.0f);
  {
    GemmDesc g = pairs_gemm(d);  // ctx = P V
    g.m = s;
    g.n = dh;
    g.k = s;
    g.ldb = qkv_row;
    g.ldc = ctx_row;
    g.stride_a = s * s;
    g.stride_b = 3 * dh;
    g.stride_c = dh;
    be().gemm(g, u.dropped.data(), qkv.data() + 2 * dh, u.ctx.data());
  }
  return u;
}

/// The unfused backward: dqkv [s, b, heads, 3, dh] from dctx.
fvec unfused_backward(const AttentionDesc& d, const fvec& qkv, const Unfused& u, const fvec& dctx) {
  const int64_t s = d.s, dh = d.dh, pairs = d.b * d.heads;
  const int64_t qkv_row = d.b * d.heads * 3 * dh, ctx_row = d.b * d.heads * dh;
  fvec dqkv(static_cast<std::size_t>(qkv_size(d)), 0.0f);
  fvec ddropped(static_cast<std::size_t>(pairs * s * s));
  {
    GemmDesc g = pairs_gemm(d);  // dP~ = dctx V^T
    g.trans_b = true;
    g.m = g.n = s;
    g.k = dh;
    g.lda = ctx_row;
    g.ldb = qkv_row;
    g.stride_a = dh;
    g.stride_b = 3 * dh;
    g.stride_c = s * s;
    be().gemm(g, dctx.data(), qkv.data() + 2 * dh, ddropped.data());
  }
  {
    GemmDesc g = pairs_gemm(d);  // dV = P~^T dctx
    g.trans_a = true;
    g.m = s;
    g.n = dh;
    g.k = s;
    g.ldb = ctx_row;
    g.ldc = qkv_row;
    g.stride_a = s * s;
    g.stride_b = dh;
    g.stride_c = 3 * dh;
    be().gemm(g, u.dropped.data(), dctx.data(), dqkv.data() + 2 * dh);
  }
  fvec dprobs = ddropped;
  if (d.dropout.p > 0.0f) be().dropout_backward(ddropped.data(), dprobs.data(), kF32, d.dropout);
  fvec dscores(dprobs.size());  // includes the scale
  be().softmax_backward(u.probs.data(), dprobs.data(), dscores.data(), kF32, pairs, s, s, d.scale);
  {
    GemmDesc g = pairs_gemm(d);  // dQ = dS K
    g.m = s;
    g.n = dh;
    g.k = s;
    g.ldb = qkv_row;
    g.ldc = qkv_row;
    g.stride_a = s * s;
    g.stride_b = 3 * dh;
    g.stride_c = 3 * dh;
    be().gemm(g, dscores.data(), qkv.data() + dh, dqkv.data());
    g.trans_a = true;  // dK = dS^T Q
    be().gemm(g, dscores.data(), qkv.data(), dqkv.data() + dh);
  }
  return dqkv;
}

/// |got - want| <= rtol * (|want| + max |want|): relative to each value and to the array's
/// scale (values that cancel to near zero carry the rounding of their larger terms).
void check_close(const fvec& got, const fvec& want, double rtol) {
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  CHECK_ALLCLOSE(got, to_d(want), rtol * scale, rtol);
}

const Shape kShapes[] = {
    {1, 1, 1, 1},
    {5, 2, 3, 4},
    {33, 3, 2, 7},
    {67, 1, 2, 16},  // more than one key tile, not a multiple of it
    {130, 2, 1, 8},  // three tiles, the last one short
};

std::string describe(const Shape& s, float p) {
  std::ostringstream os;
  os << "s " << s.s << " b " << s.b << " heads " << s.heads << " dh " << s.dh << " p " << p;
  return os.str();
}

}  // namespace

TEST_CASE("attention_forward equals the unfused GEMM + softmax (+ dropout) + GEMM path",
          "[attention]") {
  uint32_t seed = 1;
  for (const Shape& sh : kShapes) {
    for (float p : {0.0f, 0.2f}) {
      const AttentionDesc d = make_desc(sh, p, sh.heads, 0);
      Rand r(seed++);
      const fvec qkv = r.uniform(qkv_size(d), -2.0f, 2.0f);
      const Unfused u = unfused_forward(d, qkv);
      fvec ctx(static_cast<std::size_t>(ctx_size(d)), 9.0f),
          lse(static_cast<std::size_t>(lse_size(d)), 9.0f);
      INFO(describe(sh, p));
      be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), kF32);
      check_close(ctx, u.ctx, 1e-5);
      CHECK_ALLCLOSE(lse, u.lse, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("attention_backward equals the unfused backward, for q, k and v",
          "[attention][backward]") {
  uint32_t seed = 100;
  for (const Shape& sh : kShapes) {
    for (float p : {0.0f, 0.2f}) {
      const AttentionDesc d = make_desc(sh, p, sh.heads, 0);
      Rand r(seed++);
      const fvec qkv = r.uniform(qkv_size(d), -2.0f, 2.0f);
      const fvec dctx = r.uniform(ctx_size(d));
      const Unfused u = unfused_forward(d, qkv);
      const fvec want = unfused_backward(d, qkv, u, dctx);
      fvec ctx(static_cast<std::size_t>(ctx_size(d))), lse(static_cast<std::size_t>(lse_size(d)));
      be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), kF32);
      fvec dqkv(qkv.size(), 9.0f), delta(lse.size(), 9.0f);
      INFO(describe(sh, p));
      be().attention_backward(d, qkv.data(), ctx.data(), lse.data(), dctx.data(), dqkv.data(),
                              delta.data(), kF32);
      check_close(dqkv, want, 1e-5);
      // delta is rowsum(dctx * ctx), [b, heads, s].
      dvec want_delta(delta.size(), 0.0);
      for (int64_t i = 0; i < d.s; ++i)
        for (int64_t bh = 0; bh < d.b * d.heads; ++bh)
          for (int64_t e = 0; e < d.dh; ++e) {
            const std::size_t at = static_cast<std::size_t>((i * d.b * d.heads + bh) * d.dh + e);
            want_delta[static_cast<std::size_t>(bh * d.s + i)] +=
                static_cast<double>(dctx[at]) * ctx[at];
          }
      CHECK_ALLCLOSE(delta, want_delta, 1e-6, 1e-5);
    }
  }
}

TEST_CASE("attention: the heads of a tensor-parallel rank drop what the full layer drops",
          "[attention][dropout]") {
  // 4 heads in all; this rank holds heads 1..2. The rank's fused output must equal the unfused
  // path over the same block (global heads 4, offset 1), and the full layer's heads 1..2.
  const Shape full{9, 2, 4, 4}, local{9, 2, 2, 4};
  const float p = 0.3f;
  const AttentionDesc df = make_desc(full, p, 4, 0);
  const AttentionDesc dl = make_desc(local, p, 4, 1);
  Rand r(200);
  const fvec qkv_full = r.uniform(qkv_size(df), -2.0f, 2.0f);
  // The local qkv: heads 1..2 of every (position, batch).
  fvec qkv_local;
  const int64_t group = 3 * full.dh;
  for (int64_t i = 0; i < full.s * full.b; ++i)
    for (int64_t h = 1; h <= 2; ++h)
      for (int64_t e = 0; e < group; ++e)
        qkv_local.push_back(qkv_full[static_cast<std::size_t>((i * 4 + h) * group + e)]);
  fvec ctx_full(static_cast<std::size_t>(ctx_size(df))),
      lse_full(static_cast<std::size_t>(lse_size(df)));
  be().attention_forward(df, qkv_full.data(), ctx_full.data(), lse_full.data(), kF32);
  fvec ctx_local(static_cast<std::size_t>(ctx_size(dl))),
      lse_local(static_cast<std::size_t>(lse_size(dl)));
  be().attention_forward(dl, qkv_local.data(), ctx_local.data(), lse_local.data(), kF32);
  check_close(ctx_local, unfused_forward(dl, qkv_local).ctx, 1e-5);
  fvec want;
  for (int64_t i = 0; i < full.s * full.b; ++i)
    for (int64_t h = 1; h <= 2; ++h)
      for (int64_t e = 0; e < full.dh; ++e)
        want.push_back(ctx_full[static_cast<std::size_t>((i * 4 + h) * full.dh + e)]);
  CHECK_BITEQUAL(ctx_local, want);
}

TEST_CASE("attention: dropout changes the output, and p = 0 needs no block", "[attention]") {
  const Shape sh{20, 1, 2, 8};
  AttentionDesc d = make_desc(sh, 0.0f, sh.heads, 0);
  d.dropout.block = ptdp::GlobalBlock{};  // ignored without dropout
  Rand r(300);
  const fvec qkv = r.uniform(qkv_size(d), -2.0f, 2.0f);
  fvec ctx0(static_cast<std::size_t>(ctx_size(d))), ctx1(ctx0.size()),
      lse0(static_cast<std::size_t>(lse_size(d))), lse1(lse0.size());
  be().attention_forward(d, qkv.data(), ctx0.data(), lse0.data(), kF32);
  const AttentionDesc dd = make_desc(sh, 0.5f, sh.heads, 0);
  be().attention_forward(dd, qkv.data(), ctx1.data(), lse1.data(), kF32);
  CHECK_BITEQUAL(lse1, lse0);  // the log-sum-exp is taken before dropout
  std::size_t differ = 0;
  for (std::size_t i = 0; i < ctx0.size(); ++i) differ += ctx0[i] != ctx1[i];
  CHECK(differ > ctx0.size() / 2);
}

TEST_CASE("attention: position 0 attends to itself only", "[attention]") {
  const Shape sh{4, 2, 3, 5};
  const AttentionDesc d = make_desc(sh, 0.0f, sh.heads, 0);
  Rand r(301);
  const fvec qkv = r.uniform(qkv_size(d), -2.0f, 2.0f);
  fvec ctx(static_cast<std::size_t>(ctx_size(d))), lse(static_cast<std::size_t>(lse_size(d)));
  be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), kF32);
  for (int64_t bh = 0; bh < d.b * d.heads; ++bh) {
    for (int64_t e = 0; e < d.dh; ++e)  // ctx_0 = v_0 exactly (probability 1)
      CHECK(ctx[static_cast<std::size_t>(bh * d.dh + e)] ==
            qkv[static_cast<std::size_t>(bh * 3 * d.dh + 2 * d.dh + e)]);
    double qk = 0.0;
    for (int64_t e = 0; e < d.dh; ++e)
      qk += static_cast<double>(qkv[static_cast<std::size_t>(bh * 3 * d.dh + e)]) *
            qkv[static_cast<std::size_t>(bh * 3 * d.dh + d.dh + e)];
    CHECK(lse[static_cast<std::size_t>(bh * d.s)] ==
          Approx(d.scale * qk).epsilon(1e-5).margin(1e-6));
  }
}

// ---- 16-bit storage ----------------------------------------------------------------------------

namespace {

double ulp(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : 1.0 / 1024.0; }

}  // namespace

TEST_CASE("16-bit fused attention is the fp32 computation on the widened inputs, rounded once",
          "[attention][mixed]") {
  uint32_t seed = 400;
  for (DType t : {DType::BF16, DType::F16}) {
    for (const Shape& sh : {Shape{33, 2, 2, 8}, Shape{70, 1, 1, 16}}) {
      for (float p : {0.0f, 0.1f}) {
        const AttentionDesc d = make_desc(sh, p, sh.heads, 0);
        Rand r(seed++);
        const auto qkv16 = to16(r.uniform(qkv_size(d), -2.0f, 2.0f), t);
        const auto dctx16 = to16(r.uniform(ctx_size(d)), t);
        const fvec qkv = from16(qkv16, t), dctx = from16(dctx16, t);
        INFO(ptdp::dtype_name(t) << " " << describe(sh, p));

        fvec ctx(static_cast<std::size_t>(ctx_size(d))), lse(static_cast<std::size_t>(lse_size(d)));
        be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), kF32);
        std::vector<uint16_t> ctx16(ctx.size());
        fvec lse16(lse.size());
        be().attention_forward(d, qkv16.data(), ctx16.data(), lse16.data(), t);
        const double sub = t == DType::F16 ? std::ldexp(1.0, -24) : 0.0;
        CHECK_ALLCLOSE(from16(ctx16, t), to_d(ctx), sub, ulp(t));
        CHECK_BITEQUAL(lse16, lse);  // fp32 statistics from the same fp32 computation
        // And close to the unfused fp32 path with 16-bit tolerance.
        check_close(from16(ctx16, t), unfused_forward(d, qkv).ctx, ulp(t));

        // Backward from the 16-bit forward's ctx (as the layer saves it).
        const fvec ctx_w = from16(ctx16, t);
        fvec dqkv(qkv.size()), delta(lse.size());
        be().attention_backward(d, qkv.data(), ctx_w.data(), lse16.data(), dctx.data(), dqkv.data(),
                                delta.data(), kF32);
        std::vector<uint16_t> dqkv16(qkv.size());
        fvec delta16(lse.size());
        be().attention_backward(d, qkv16.data(), ctx16.data(), lse16.data(), dctx16.data(),
                                dqkv16.data(), delta16.data(), t);
        CHECK_ALLCLOSE(from16(dqkv16, t), to_d(dqkv), sub, ulp(t));
        CHECK_BITEQUAL(delta16, delta);
      }
    }
  }
}

// ---- grouped-query attention -----------------------------------------------------------------
// qkv [s, b, groups, heads/groups + 2, dh]: query head hi = g * (heads/groups) + j uses group g's
// key and value. Checked against the multi-head kernel run on the activation in which every
// query head carries a copy of its group's key and value (forward bit for bit; backward: dQ bit
// for bit, the group's dK and dV the sum of its query heads' copies), and against a double
// reference.

namespace {

struct GqaShape {
  int64_t s, b, heads, groups, dh;
};

const GqaShape kGqaShapes[] = {
    {9, 2, 8, 2, 4},    // 4 query heads per group
    {37, 2, 8, 1, 8},   // multi-query attention
    {70, 1, 6, 3, 16},  // two key tiles, 2 query heads per group
    {5, 3, 4, 4, 3},    // groups == heads: multi-head attention in the GQA spelling
};

AttentionDesc make_gqa_desc(const GqaShape& sh, float p, int64_t groups) {
  AttentionDesc d = make_desc(Shape{sh.s, sh.b, sh.heads, sh.dh}, p, sh.heads, 0);
  d.groups = groups;
  return d;
}

int64_t gqa_qkv_size(const AttentionDesc& d) {
  return d.s * d.b * d.kv_groups() * (d.q_per_group() + 2) * d.dh;
}

/// Offset of query head hi's slot `slot` (0 .. q_per_group - 1: its own query; q_per_group: its
/// group's key; q_per_group + 1: its group's value) at position i, batch bi.
int64_t gqa_at(const AttentionDesc& d, int64_t i, int64_t bi, int64_t g, int64_t slot) {
  return (((i * d.b + bi) * d.kv_groups() + g) * (d.q_per_group() + 2) + slot) * d.dh;
}

/// The [s, b, heads, 3, dh] activation of the multi-head kernel in which query head hi holds
/// its own query and a copy of its group's key and value.
template <typename T>
std::vector<T> expand_kv(const AttentionDesc& d, const std::vector<T>& qkv) {
  const int64_t qpg = d.q_per_group();
  std::vector<T> out(static_cast<std::size_t>(d.s * d.b * d.heads * 3 * d.dh));
  for (int64_t i = 0; i < d.s; ++i)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t hi = 0; hi < d.heads; ++hi) {
        const int64_t g = hi / qpg;
        const int64_t src[3] = {gqa_at(d, i, bi, g, hi % qpg), gqa_at(d, i, bi, g, qpg),
                                gqa_at(d, i, bi, g, qpg + 1)};
        for (int part = 0; part < 3; ++part)
          for (int64_t e = 0; e < d.dh; ++e)
            out[static_cast<std::size_t>((((i * d.b + bi) * d.heads + hi) * 3 + part) * d.dh + e)] =
                qkv[static_cast<std::size_t>(src[part] + e)];
      }
  return out;
}

/// Folds a multi-head dqkv (of expand_kv's activation) back into the GQA layout: dQ copied, a
/// group's dK and dV summed over its query heads in double.
dvec fold_dkv(const AttentionDesc& d, const fvec& dqkv_mha) {
  const int64_t qpg = d.q_per_group();
  dvec out(static_cast<std::size_t>(gqa_qkv_size(d)), 0.0);
  for (int64_t i = 0; i < d.s; ++i)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t hi = 0; hi < d.heads; ++hi) {
        const int64_t g = hi / qpg;
        const int64_t dst[3] = {gqa_at(d, i, bi, g, hi % qpg), gqa_at(d, i, bi, g, qpg),
                                gqa_at(d, i, bi, g, qpg + 1)};
        for (int part = 0; part < 3; ++part)
          for (int64_t e = 0; e < d.dh; ++e) {
            const double v = dqkv_mha[static_cast<std::size_t>(
                (((i * d.b + bi) * d.heads + hi) * 3 + part) * d.dh + e)];
            double& o = out[static_cast<std::size_t>(dst[part] + e)];
            o = part == 0 ? v : o + v;  // a query's gradient is copied (keeping the sign of 0)
          }
      }
  return out;
}

/// Whether element e of a GQA activation belongs to a query head.
bool is_query(const AttentionDesc& d, int64_t e) {
  return (e / d.dh) % (d.q_per_group() + 2) < d.q_per_group();
}

/// Storage of type t (f32 as is, or the 16-bit roundings) of x, as raw 16-bit words or floats.
struct Buf {
  DType t;
  fvec f;
  std::vector<uint16_t> h;
  Buf(const fvec& x, DType type) : t(type) {
    if (t == DType::F32) f = x;
    else h = to16(x, t);
  }
  void* data() { return t == DType::F32 ? static_cast<void*>(f.data()) : h.data(); }
  fvec values() const { return t == DType::F32 ? f : from16(h, t); }
};

std::string describe(const AttentionDesc& d, DType t) {
  std::ostringstream os;
  os << ptdp::dtype_name(t) << " s " << d.s << " b " << d.b << " heads " << d.heads
     << " groups " << d.groups << " dh " << d.dh << " p " << d.dropout.p;
  return os.str();
}

struct AttnOut {
  fvec ctx, lse, dqkv, delta;
};

/// Forward and backward of the fused kernel on stored buffers of type t; outputs widened.
AttnOut run_attention(const AttentionDesc& d, const fvec& qkv, const fvec& dctx, DType t) {
  const int64_t nqkv = d.s * d.b * d.kv_groups() * (d.q_per_group() + 2) * d.dh;
  Buf q(qkv, t), dc(dctx, t), ctx(fvec(static_cast<std::size_t>(ctx_size(d)), 9.0f), t),
      dq(fvec(static_cast<std::size_t>(nqkv), 9.0f), t);
  AttnOut o;
  o.lse.assign(static_cast<std::size_t>(lse_size(d)), 9.0f);
  o.delta.assign(o.lse.size(), 9.0f);
  be().attention_forward(d, q.data(), ctx.data(), o.lse.data(), t);
  be().attention_backward(d, q.data(), ctx.data(), o.lse.data(), dc.data(), dq.data(),
                          o.delta.data(), t);
  o.ctx = ctx.values();
  o.dqkv = dq.values();
  return o;
}

/// Double-precision GQA attention with dropout straight from the definitions: ctx, lse, dqkv.
/// With d.document_starts, query i of sample bi sees keys starts[bi * s + i] .. i.
struct AttnRef {
  dvec ctx, lse, dqkv;
};

AttnRef attention_ref(const AttentionDesc& d, const dvec& qkv, const dvec& dctx) {
  const int64_t s = d.s, dh = d.dh, qpg = d.q_per_group();
  const std::vector<bool> keep =
      d.dropout.p > 0.0f ? dropout_mask_ref(d.dropout) : std::vector<bool>();
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(d.dropout.p));
  AttnRef r;
  r.ctx.assign(static_cast<std::size_t>(ctx_size(d)), 0.0);
  r.lse.assign(static_cast<std::size_t>(lse_size(d)), 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  auto at = [](const dvec& v, int64_t off, int64_t e) { return v[static_cast<std::size_t>(off + e)]; };
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t hi = 0; hi < d.heads; ++hi) {
      const int64_t g = hi / qpg, j_q = hi % qpg;
      std::vector<dvec> P(static_cast<std::size_t>(s), dvec(static_cast<std::size_t>(s), 0.0));
      std::vector<dvec> K(P);  // keep / (1 - p), or 1
      const auto first = [&](int64_t i) -> int64_t {
        return d.document_starts ? d.document_starts[bi * s + i] : 0;
      };
      for (int64_t i = 0; i < s; ++i) {
        const int64_t qo = gqa_at(d, i, bi, g, j_q);
        dvec sc(static_cast<std::size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = first(i); j <= i; ++j) {
          const int64_t ko = gqa_at(d, j, bi, g, qpg);
          double dotv = 0.0;
          for (int64_t e = 0; e < dh; ++e) dotv += at(qkv, qo, e) * at(qkv, ko, e);
          sc[static_cast<std::size_t>(j)] = d.scale * dotv;
          mx = std::max(mx, sc[static_cast<std::size_t>(j)]);
        }
        double sum = 0.0;
        for (int64_t j = first(i); j <= i; ++j) sum += std::exp(sc[static_cast<std::size_t>(j)] - mx);
        const double lse = mx + std::log(sum);
        r.lse[static_cast<std::size_t>((bi * d.heads + hi) * s + i)] = lse;
        for (int64_t j = first(i); j <= i; ++j) {
          const std::size_t ij = static_cast<std::size_t>(j);
          P[static_cast<std::size_t>(i)][ij] = std::exp(sc[ij] - lse);
          K[static_cast<std::size_t>(i)][ij] =
              keep.empty() ? 1.0
                           : (keep[static_cast<std::size_t>((bi * d.heads + hi) * s * s + i * s + j)]
                                  ? keep_scale
                                  : 0.0);
        }
      }
      for (int64_t i = 0; i < s; ++i) {
        const std::size_t ii = static_cast<std::size_t>(i);
        const int64_t co = ((i * d.b + bi) * d.heads + hi) * dh;
        const int64_t qo = gqa_at(d, i, bi, g, j_q);
        for (int64_t j = first(i); j <= i; ++j) {
          const std::size_t jj = static_cast<std::size_t>(j);
          const int64_t vo = gqa_at(d, j, bi, g, qpg + 1);
          for (int64_t e = 0; e < dh; ++e)
            r.ctx[static_cast<std::size_t>(co + e)] += P[ii][jj] * K[ii][jj] * at(qkv, vo, e);
        }
        // Backward of row i.
        dvec dP(static_cast<std::size_t>(i + 1));
        double delta = 0.0;
        for (int64_t j = first(i); j <= i; ++j) {
          const std::size_t jj = static_cast<std::size_t>(j);
          const int64_t vo = gqa_at(d, j, bi, g, qpg + 1);
          double dov = 0.0;
          for (int64_t e = 0; e < dh; ++e) dov += at(dctx, co, e) * at(qkv, vo, e);
          dP[jj] = K[ii][jj] * dov;
          delta += P[ii][jj] * dP[jj];
          for (int64_t e = 0; e < dh; ++e)  // dV_j += P~_ij dO_i
            r.dqkv[static_cast<std::size_t>(vo + e)] += P[ii][jj] * K[ii][jj] * at(dctx, co, e);
        }
        for (int64_t j = first(i); j <= i; ++j) {
          const std::size_t jj = static_cast<std::size_t>(j);
          const double ds = d.scale * P[ii][jj] * (dP[jj] - delta);
          const int64_t ko = gqa_at(d, j, bi, g, qpg);
          for (int64_t e = 0; e < dh; ++e) {
            r.dqkv[static_cast<std::size_t>(qo + e)] += ds * at(qkv, ko, e);
            r.dqkv[static_cast<std::size_t>(ko + e)] += ds * at(qkv, qo, e);
          }
        }
      }
    }
  return r;
}

/// |got - want| <= rtol * (|want| + max |want|) for a double reference.
void check_scaled(const fvec& got, const dvec& want, double rtol) {
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  CHECK_ALLCLOSE(got, want, rtol * scale, rtol);
}

}  // namespace

TEST_CASE("exp_f32_fast (the CPU kernel's probabilities) is within 1.4 * 2^-24 of exp, 0 below -87",
          "[attention]") {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (double xd = -87.0; xd <= 88.0; xd += 0.0009765625 * 3.1) {
    const float x = static_cast<float>(xd);
    const double want = std::exp(static_cast<double>(x));
    const double err = std::fabs(static_cast<double>(ptdp::cpu::exp_f32_fast(x)) - want) / want;
    if (err > worst) worst = err, worst_x = x;
  }
  INFO("worst relative error " << worst / std::ldexp(1.0, -24) << " * 2^-24 at x = " << worst_x);
  CHECK(worst <= 1.4 * std::ldexp(1.0, -24));
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(ptdp::cpu::exp_f32_fast(-inf) == 0.0f);
  CHECK(ptdp::cpu::exp_f32_fast(-87.5f) == 0.0f);
  CHECK(ptdp::cpu::exp_f32_fast(0.0f) == 1.0f);
  CHECK(ptdp::cpu::exp_f32_fast(-0.0f) == 1.0f);
  CHECK(std::isnan(ptdp::cpu::exp_f32_fast(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("attention: groups == heads is multi-head attention, bit for bit",
          "[attention][gqa]") {
  uint32_t seed = 500;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const Shape& sh : {Shape{5, 2, 3, 4}, Shape{67, 1, 2, 16}}) {
      for (float p : {0.0f, 0.2f}) {
        const AttentionDesc mha = make_desc(sh, p, sh.heads, 0);
        AttentionDesc same = mha;
        same.groups = sh.heads;
        Rand r(seed++);
        const fvec qkv = r.uniform(qkv_size(mha), -2.0f, 2.0f), dctx = r.uniform(ctx_size(mha));
        INFO(describe(same, t));
        const AttnOut a = run_attention(mha, qkv, dctx, t), b = run_attention(same, qkv, dctx, t);
        CHECK_BITEQUAL(b.ctx, a.ctx);
        CHECK_BITEQUAL(b.lse, a.lse);
        CHECK_BITEQUAL(b.dqkv, a.dqkv);
        CHECK_BITEQUAL(b.delta, a.delta);
      }
    }
  }
}

TEST_CASE("attention: grouped-query equals multi-head attention with the keys and values "
          "copied per query head",
          "[attention][gqa]") {
  uint32_t seed = 600;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const GqaShape& sh : kGqaShapes) {
      for (float p : {0.0f, 0.2f}) {
        const AttentionDesc d = make_gqa_desc(sh, p, sh.groups);
        const AttentionDesc mha = make_gqa_desc(sh, p, 0);
        Rand r(seed++);
        const fvec qkv = from16(to16(r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), DType::BF16),
                                DType::BF16);  // exact in every storage type
        const fvec dctx = from16(to16(r.uniform(ctx_size(d)), DType::BF16), DType::BF16);
        INFO(describe(d, t));
        const AttnOut got = run_attention(d, qkv, dctx, t);
        const AttnOut want = run_attention(mha, expand_kv(d, qkv), dctx, t);
        // Forward: the same fp32 computation per query head.
        CHECK_BITEQUAL(got.ctx, want.ctx);
        CHECK_BITEQUAL(got.lse, want.lse);
        CHECK_BITEQUAL(got.delta, want.delta);
        // Backward: dQ bit for bit; dK and dV the per-query-head copies' gradients summed.
        const dvec folded = fold_dkv(d, want.dqkv);
        fvec got_q, want_q, got_kv;
        dvec want_kv;
        for (int64_t e = 0; e < gqa_qkv_size(d); ++e) {
          const std::size_t ue = static_cast<std::size_t>(e);
          if (is_query(d, e)) {
            got_q.push_back(got.dqkv[ue]);
            want_q.push_back(static_cast<float>(folded[ue]));
          } else {
            got_kv.push_back(got.dqkv[ue]);
            want_kv.push_back(folded[ue]);
          }
        }
        CHECK_BITEQUAL(got_q, want_q);
        // fp32: the sum of the same fp32 shares, rounded once; 16-bit: the copies' gradients
        // were each rounded before the sum.
        const double rtol = t == DType::F32 ? 1e-6 : d.q_per_group() * ulp(t);
        check_scaled(got_kv, want_kv, rtol);
      }
    }
  }
}

TEST_CASE("attention: grouped-query forward and backward against a double reference",
          "[attention][gqa]") {
  uint32_t seed = 700;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const GqaShape& sh : {GqaShape{9, 2, 4, 2, 5}, GqaShape{12, 1, 3, 1, 4}}) {
      for (float p : {0.0f, 0.3f}) {
        const AttentionDesc d = make_gqa_desc(sh, p, sh.groups);
        Rand r(seed++);
        const fvec qkv = Buf(r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), t).values();
        const fvec dctx = Buf(r.uniform(ctx_size(d)), t).values();
        INFO(describe(d, t));
        const AttnOut got = run_attention(d, qkv, dctx, t);
        const AttnRef want = attention_ref(d, to_d(qkv), to_d(dctx));
        // 16-bit: ctx is rounded once; dqkv is computed from the rounded ctx (as the layer
        // saves it), so allow a few units of the storage type.
        const double rtol = t == DType::F32 ? 1e-5 : 4.0 * ulp(t);
        check_scaled(got.ctx, want.ctx, rtol);
        CHECK_ALLCLOSE(got.lse, want.lse, 1e-5, 1e-5);
        check_scaled(got.dqkv, want.dqkv, rtol);
      }
    }
  }
}

TEST_CASE("attention: grouped-query backward is the same whatever the thread count",
          "[attention][gqa]") {
  // dK and dV of a group collect 4 query heads that different threads compute.
  const AttentionDesc d = make_gqa_desc(GqaShape{40, 2, 8, 2, 8}, 0.1f, 2);
  Rand r(800);
  const fvec qkv = r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), dctx = r.uniform(ctx_size(d));
  const int saved = omp_get_max_threads();
  std::vector<AttnOut> runs;
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    runs.push_back(run_attention(d, qkv, dctx, kF32));
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < runs.size(); ++i) {
    CHECK_BITEQUAL(runs[i].ctx, runs[0].ctx);
    CHECK_BITEQUAL(runs[i].dqkv, runs[0].dqkv);
  }
}

// ---- packed documents --------------------------------------------------------------------------
// AttentionDesc::document_starts: query i of sample bi attends to keys starts[bi * s + i] .. i.
// The layouts below put document boundaries inside and at the edges of the 64-key tiles, give
// the samples of a batch different documents, and include one-token documents.

namespace {

/// The [b, s] document starts of samples whose documents have the given lengths (each sample's
/// lengths sum to s).
std::vector<int32_t> starts_of(const std::vector<std::vector<int64_t>>& lengths, int64_t s) {
  std::vector<int32_t> out;
  for (const auto& sample : lengths) {
    int64_t start = 0;
    for (int64_t len : sample) {
      for (int64_t k = 0; k < len; ++k) out.push_back(static_cast<int32_t>(start));
      start += len;
    }
    REQUIRE(start == s);
  }
  return out;
}

struct DocCase {
  GqaShape shape;
  std::vector<std::vector<int64_t>> lengths;  // per sample
};

const DocCase kDocCases[] = {
    {{9, 2, 4, 2, 5}, {{3, 1, 5}, {9}}},                        // GQA, one-token document
    {{12, 1, 3, 1, 4}, {{4, 4, 4}}},                            // multi-query attention
    {{70, 2, 2, 2, 8}, {{64, 6}, {10, 50, 10}}},                // a boundary at the tile edge
    {{150, 1, 4, 2, 16}, {{40, 60, 1, 49}}},                    // documents across three tiles
    {{130, 2, 2, 1, 8}, {{1, 129}, {65, 65}}},                  // a sample of one long document
};

std::string describe(const DocCase& c) {
  std::ostringstream os;
  os << "documents";
  for (const auto& sample : c.lengths) {
    os << " [";
    for (int64_t len : sample) os << " " << len;
    os << " ]";
  }
  return os.str();
}

}  // namespace

TEST_CASE("attention: documents, fused forward and backward against a double reference",
          "[attention][documents]") {
  uint32_t seed = 900;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const DocCase& c : kDocCases) {
      for (float p : {0.0f, 0.25f}) {
        AttentionDesc d = make_gqa_desc(c.shape, p, c.shape.groups);
        const std::vector<int32_t> starts = starts_of(c.lengths, d.s);
        d.document_starts = starts.data();
        Rand r(seed++);
        const fvec qkv = Buf(r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), t).values();
        const fvec dctx = Buf(r.uniform(ctx_size(d)), t).values();
        INFO(describe(d, t) << " " << describe(c));
        const AttnOut got = run_attention(d, qkv, dctx, t);
        const AttnRef want = attention_ref(d, to_d(qkv), to_d(dctx));
        const double rtol = t == DType::F32 ? 1e-5 : 4.0 * ulp(t);
        check_scaled(got.ctx, want.ctx, rtol);
        CHECK_ALLCLOSE(got.lse, want.lse, 1e-5, 1e-5);
        check_scaled(got.dqkv, want.dqkv, rtol);
        // The documents matter: the causal result differs.
        AttentionDesc causal = d;
        causal.document_starts = nullptr;
        const AttnOut plain = run_attention(causal, qkv, dctx, t);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < plain.lse.size(); ++i) differ += plain.lse[i] != got.lse[i];
        CHECK(differ > 0);
      }
    }
  }
}

TEST_CASE("attention: one document per sample is causal attention, bit for bit",
          "[attention][documents]") {
  uint32_t seed = 950;
  for (DType t : {DType::F32, DType::BF16}) {
    for (float p : {0.0f, 0.2f}) {
      AttentionDesc d = make_gqa_desc(GqaShape{70, 2, 4, 2, 8}, p, 2);
      const std::vector<int32_t> zeros(static_cast<std::size_t>(d.b * d.s), 0);
      Rand r(seed++);
      const fvec qkv = Buf(r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), t).values();
      const fvec dctx = Buf(r.uniform(ctx_size(d)), t).values();
      const AttnOut causal = run_attention(d, qkv, dctx, t);
      d.document_starts = zeros.data();
      const AttnOut docs = run_attention(d, qkv, dctx, t);
      INFO(describe(d, t));
      CHECK_BITEQUAL(docs.ctx, causal.ctx);
      CHECK_BITEQUAL(docs.lse, causal.lse);
      CHECK_BITEQUAL(docs.dqkv, causal.dqkv);
    }
  }
}

TEST_CASE("attention: each document of a packed sample is that document run alone, bit for bit",
          "[attention][documents]") {
  uint32_t seed = 1000;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const DocCase& c : kDocCases) {
      AttentionDesc d = make_gqa_desc(c.shape, 0.0f, c.shape.groups);
      const std::vector<int32_t> starts = starts_of(c.lengths, d.s);
      d.document_starts = starts.data();
      Rand r(seed++);
      const fvec qkv = Buf(r.uniform(gqa_qkv_size(d), -2.0f, 2.0f), t).values();
      const fvec dctx = Buf(r.uniform(ctx_size(d)), t).values();
      const AttnOut packed = run_attention(d, qkv, dctx, t);
      const int64_t unit = (d.q_per_group() + 2) * d.dh;  // one group's slots at one position
      const int64_t gw = d.kv_groups() * unit, hw = d.heads * d.dh;
      for (int64_t bi = 0; bi < d.b; ++bi) {
        int64_t a = 0;
        for (int64_t len : c.lengths[static_cast<std::size_t>(bi)]) {
          INFO(describe(d, t) << " " << describe(c) << ": sample " << bi << ", positions " << a << " .. "
                              << a + len - 1);
          // The document alone: b = 1, s = len.
          AttentionDesc alone = d;
          alone.s = len;
          alone.b = 1;
          alone.document_starts = nullptr;
          alone.dropout = ptdp::DropoutDesc{};
          fvec q1, dc1;
          for (int64_t i = a; i < a + len; ++i) {
            const std::size_t q0 = static_cast<std::size_t>((i * d.b + bi) * gw);
            q1.insert(q1.end(), qkv.begin() + q0, qkv.begin() + q0 + gw);
            const std::size_t c0 = static_cast<std::size_t>((i * d.b + bi) * hw);
            dc1.insert(dc1.end(), dctx.begin() + c0, dctx.begin() + c0 + hw);
          }
          const AttnOut one = run_attention(alone, q1, dc1, t);
          fvec ctx_p, dqkv_p, lse_p;
          for (int64_t i = a; i < a + len; ++i) {
            const std::size_t c0 = static_cast<std::size_t>((i * d.b + bi) * hw);
            ctx_p.insert(ctx_p.end(), packed.ctx.begin() + c0, packed.ctx.begin() + c0 + hw);
            const std::size_t q0 = static_cast<std::size_t>((i * d.b + bi) * gw);
            dqkv_p.insert(dqkv_p.end(), packed.dqkv.begin() + q0, packed.dqkv.begin() + q0 + gw);
          }
          for (int64_t h = 0; h < d.heads; ++h)
            for (int64_t i = a; i < a + len; ++i)
              lse_p.push_back(packed.lse[static_cast<std::size_t>((bi * d.heads + h) * d.s + i)]);
          CHECK_BITEQUAL(ctx_p, one.ctx);
          CHECK_BITEQUAL(lse_p, one.lse);
          CHECK_BITEQUAL(dqkv_p, one.dqkv);
          a += len;
        }
      }
    }
  }
}

TEST_CASE("attention: with documents, the unfused path (softmax_forward_documents) equals the "
          "fused kernel, dropout included",
          "[attention][documents]") {
  uint32_t seed = 1100;
  for (const Shape& sh : {Shape{9, 2, 3, 4}, Shape{70, 2, 2, 8}}) {
    for (float p : {0.0f, 0.3f}) {
      AttentionDesc d = make_desc(sh, p, sh.heads, 0);
      const std::vector<int32_t> starts =
          sh.s == 9 ? starts_of({{2, 7}, {4, 4, 1}}, 9) : starts_of({{64, 6}, {1, 33, 36}}, 70);
      d.document_starts = starts.data();
      Rand r(seed++);
      const fvec qkv = r.uniform(qkv_size(d), -2.0f, 2.0f);
      const fvec dctx = r.uniform(ctx_size(d));
      const Unfused u = unfused_forward(d, qkv);
      // The masked probabilities are exactly 0.
      std::size_t nonzero_outside = 0;
      for (int64_t bh = 0; bh < d.b * d.heads; ++bh)
        for (int64_t i = 0; i < d.s; ++i)
          for (int64_t j = 0; j < d.s; ++j) {
            const int64_t first = starts[static_cast<std::size_t>((bh / d.heads) * d.s + i)];
            const float prob = u.probs[static_cast<std::size_t>((bh * d.s + i) * d.s + j)];
            if (j > i || j < first) nonzero_outside += prob != 0.0f;
          }
      CHECK(nonzero_outside == 0);
      fvec ctx(static_cast<std::size_t>(ctx_size(d))), lse(static_cast<std::size_t>(lse_size(d)));
      INFO(describe(sh, p));
      be().attention_forward(d, qkv.data(), ctx.data(), lse.data(), kF32);
      check_close(ctx, u.ctx, 1e-5);
      CHECK_ALLCLOSE(lse, u.lse, 1e-5, 1e-5);
      fvec dqkv(qkv.size()), delta(lse.size());
      be().attention_backward(d, qkv.data(), ctx.data(), lse.data(), dctx.data(), dqkv.data(), delta.data(), kF32);
      check_close(dqkv, unfused_backward(d, qkv, u, dctx), 1e-5);
    }
  }
}

TEST_CASE("softmax_forward_documents: each row is the softmax of its document's keys, the rest "
          "exactly 0",
          "[attention][documents][softmax]") {
  // 2 samples x 3 heads of [s, s] scores; sample 0: documents 3, 1, 4; sample 1: one of 8.
  const int64_t s = 8, heads = 3, batch = 2 * heads;
  const std::vector<int32_t> starts = starts_of({{3, 1, 4}, {8}}, s);
  const float scale = 0.7f;
  Rand r(1200);
  const fvec x = r.uniform(batch * s * s, -3.0f, 3.0f);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    INFO(ptdp::dtype_name(t));
    const Buf in(x, t);
    Buf out(fvec(x.size(), 9.0f), t);
    Buf in_copy = in;
    be().softmax_forward_documents(in_copy.data(), out.data(), t, batch, heads, s, scale, starts.data());
    const fvec xv = in.values(), y = out.values();
    dvec want(x.size(), 0.0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t first = starts[static_cast<std::size_t>((n / heads) * s + i)];
        const auto score = [&](int64_t j) {
          return scale * static_cast<double>(xv[static_cast<std::size_t>((n * s + i) * s + j)]);
        };
        double mx = -1e300, sum = 0.0;
        for (int64_t j = first; j <= i; ++j) mx = std::max(mx, score(j));
        for (int64_t j = first; j <= i; ++j) sum += std::exp(score(j) - mx);
        for (int64_t j = first; j <= i; ++j)
          want[static_cast<std::size_t>((n * s + i) * s + j)] = std::exp(score(j) - mx) / sum;
      }
    const double tol = t == DType::F32 ? 1e-6 : ulp(t);
    CHECK_ALLCLOSE(y, want, 0.0, tol);  // zeros exactly where want is 0
    // In place (y aliases x) gives the same.
    be().softmax_forward_documents(in_copy.data(), in_copy.data(), t, batch, heads, s, scale, starts.data());
    CHECK_BITEQUAL(in_copy.values(), y);
    // All starts 0: the causal softmax, bit for bit.
    const std::vector<int32_t> zeros(starts.size(), 0);
    Buf a(x, t), b(x, t);
    be().softmax_forward_documents(a.data(), a.data(), t, batch, heads, s, scale, zeros.data());
    be().softmax_forward(b.data(), b.data(), t, batch, s, s, scale, true);
    CHECK_BITEQUAL(a.values(), b.values());
  }
  // Arguments are checked.
  fvec y(x.size());
  CHECK_INVALID_ARG(be().softmax_forward_documents(x.data(), y.data(), kF32, 5, heads, s, scale, starts.data()));
  CHECK_THROWS_WITH(be().softmax_forward_documents(x.data(), y.data(), kF32, 5, heads, s, scale, starts.data()),
                    Catch::Contains("batch = 5 is not a multiple of heads = 3"));
  CHECK_THROWS_WITH(be().softmax_forward_documents(x.data(), y.data(), kF32, batch, heads, s, scale, nullptr),
                    Catch::Contains("document_starts"));
  CHECK_THROWS_WITH(be().softmax_forward_documents(x.data(), y.data(), kF32, batch, 0, s, scale, starts.data()),
                    Catch::Contains("heads"));
}
