// The fused (flash) attention kernels against the CPU reference (cpu_backend().attention_*, fp32
// compute on the same 16-bit inputs): bf16 and f16, head dims 64 and 128, sequence lengths that
// are and are not multiples of the kernels' 64-row tiles (1, 64, 77, 200), several batch and head
// counts, with and without dropout. Tolerances: 2e-2 (bf16) and 5e-3 (f16) relative, plus half
// of that times the tensor's largest magnitude in absolute terms, on ctx and dqkv; 1e-3
// absolute on lse. The dropout masks must be exactly the unfused path's: inputs built so that
// every kept or dropped probability shows in ctx, dQ, dK and dV are checked element by element.
// Grouped-query attention (AttentionDesc::groups, qkv [s, b, groups, heads/groups + 2, dh]) is
// checked against the CPU's grouped kernel with the same tolerances, and against the multi-head
// kernels run on K and V duplicated per query head: ctx, lse and dQ are then bit-identical (the
// same arithmetic on the same values), and a group's dK and dV equal the sums of its heads' (to
// the 16-bit rounding of those heads' results). Packed documents (AttentionDesc::document_starts)
// against the CPU's kernels with the same tolerances, on layouts whose boundaries fall inside, at
// and across the 64-row tiles; every start 0 against the causal kernels bit for bit; and the
// document softmax of the unfused path against the CPU's. Ring attention's block-pair kernels
// (attention_block_forward / attention_block_backward) against the CPU's, at the end.
//
// Every test case that needs a GPU exits with the skip code 77 when there is none.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/philox.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/flash_attention.cuh"
#include "tests/cuda/device_buffer.h"

namespace {

using ptdp::AttentionDesc;
using ptdp::Backend;
using ptdp::DType;

using cuda_test::cpu;
using cuda_test::Dev;
using cuda_test::gpu;
using cuda_test::require_gpu;

uint16_t to16(float x, DType t) {
  return t == DType::BF16 ? ptdp::f32_to_bf16(x) : ptdp::f32_to_f16(x);
}
float from16(uint16_t x, DType t) {
  return t == DType::BF16 ? ptdp::bf16_to_f32(x) : ptdp::f16_to_f32(x);
}

std::vector<float> widen(const std::vector<uint16_t>& v, DType t) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from16(v[i], t);
  return out;
}

/// The largest magnitude of a tensor (at least 1e-2): errors of 16-bit attention scale with the
/// largest terms of a tensor, not with each element, so absolute tolerances are fractions of it.
double peak(const std::vector<float>& v) {
  double m = 1e-2;
  for (const float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

using cuda_test::check_close;

/// The dropout block of the probabilities [b * heads, s, s] as the unfused path draws it: this
/// rank's `heads` heads at head_offset among global_heads.
ptdp::DropoutDesc probs_dropout(float p, int64_t s, int64_t b, int64_t heads, int64_t global_heads,
                                int64_t head_offset, uint64_t stream) {
  ptdp::DropoutDesc d;
  d.p = p;
  d.rng = ptdp::PhiloxStream{0x5eed1234abcdull, stream};
  d.block.shape[0] = d.block.global_shape[0] = b;
  d.block.shape[1] = heads;
  d.block.global_shape[1] = global_heads;
  d.block.shape[2] = d.block.global_shape[2] = s * s;
  d.block.offset[1] = head_offset;
  return d;
}

/// Whether probability (bi, hi, i, j) survives dropout, from its global index in the block.
bool kept(const ptdp::DropoutDesc& d, int64_t s, int64_t bi, int64_t hi, int64_t i, int64_t j) {
  const ptdp::GlobalBlock& g = d.block;
  const int64_t index =
      ((bi + g.offset[0]) * g.global_shape[1] + (hi + g.offset[1])) * g.global_shape[2] +
      (i * s + j + g.offset[2]);
  return ptdp::philox_uniform(d.rng, static_cast<uint64_t>(index)) >= d.p;
}

std::string describe(const AttentionDesc& d, DType t) {
  std::ostringstream o;
  o << ptdp::dtype_name(t) << " s=" << d.s << " b=" << d.b << " heads=" << d.heads
    << " groups=" << d.groups << " dh=" << d.dh << " p=" << d.dropout.p;
  return o.str();
}

/// qkv [s, b, groups, heads/groups + 2, dh] and dctx [s, b, heads, dh] of normal random numbers
/// (q and k wider, so the softmax is far from uniform).
void random_inputs(const AttentionDesc& d, DType t, uint64_t seed, std::vector<uint16_t>& qkv,
                   std::vector<uint16_t>& dctx) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> qk(0.0f, 1.5f), unit(0.0f, 1.0f);
  const int64_t slots = d.q_per_group() + 2;  // per group: query heads, key, value
  const int64_t rows = d.s * d.b * d.kv_groups();
  qkv.resize(static_cast<std::size_t>(rows * slots * d.dh));
  dctx.resize(static_cast<std::size_t>(d.s * d.b * d.heads * d.dh));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < slots * d.dh; ++c) {
      qkv[static_cast<std::size_t>(r * slots * d.dh + c)] =
          to16(c < (slots - 1) * d.dh ? qk(rng) : unit(rng), t);
    }
  }
  for (auto& x : dctx) x = to16(unit(rng), t);
}

/// The elements of one kind of slot of a [s, b, groups, heads/groups + 2, dh] tensor, in order:
/// which 0 for the query heads, 1 for the key, 2 for the value.
std::vector<float> qkv_part(const AttentionDesc& d, DType t, const std::vector<uint16_t>& v,
                            int which) {
  const int64_t qpg = d.q_per_group(), slots = qpg + 2, dh = d.dh;
  const int64_t first = which == 0 ? 0 : qpg + which - 1, count = which == 0 ? qpg : 1;
  const auto row = static_cast<std::size_t>(slots * dh);
  std::vector<float> out;
  for (std::size_t r = 0; r < v.size() / row; ++r) {
    for (int64_t c = first * dh; c < (first + count) * dh; ++c) {
      out.push_back(from16(v[r * row + static_cast<std::size_t>(c)], t));
    }
  }
  return out;
}

/// `starts` (empty: causal) are the [b, s] document starts, given to the CPU in host memory and
/// to the GPU in device memory.
void compare_with_cpu(const AttentionDesc& desc, DType t, uint64_t seed,
                      const std::vector<int32_t>& starts = {}) {
  INFO(describe(desc, t) << (starts.empty() ? "" : " with documents"));
  const double rtol = t == DType::BF16 ? 2e-2 : 5e-3;
  AttentionDesc d = desc, dg = desc;  // the CPU's and the GPU's
  Dev<int32_t> starts_d(starts.empty() ? std::vector<int32_t>{0} : starts);
  if (!starts.empty()) {
    d.document_starts = starts.data();
    dg.document_starts = starts_d.get();
  }
  std::vector<uint16_t> qkv, dctx;
  random_inputs(d, t, seed, qkv, dctx);
  const auto n_ctx = dctx.size();
  const auto n_lse = static_cast<std::size_t>(d.b * d.heads * d.s);

  // Forward.
  std::vector<uint16_t> ctx_ref(n_ctx);
  std::vector<float> lse_ref(n_lse);
  cpu().attention_forward(d, qkv.data(), ctx_ref.data(), lse_ref.data(), t);
  Dev<uint16_t> qkv_d(qkv), ctx_d(n_ctx);
  Dev<float> lse_d(n_lse);
  gpu().attention_forward(dg, qkv_d.get(), ctx_d.get(), lse_d.get(), t);
  const std::vector<float> ctx_want = widen(ctx_ref, t);
  check_close(widen(ctx_d.download(), t), ctx_want, rtol, 0.5 * rtol * peak(ctx_want), "ctx");
  check_close(lse_d.download(), lse_ref, 0.0, 1e-3, "lse");

  // Backward from the same inputs on both sides (the CPU's ctx and lse).
  std::vector<uint16_t> dqkv_ref(qkv.size());
  std::vector<float> delta_ref(n_lse);
  cpu().attention_backward(d, qkv.data(), ctx_ref.data(), lse_ref.data(), dctx.data(),
                           dqkv_ref.data(), delta_ref.data(), t);
  Dev<uint16_t> ctx_in(ctx_ref), dctx_d(dctx), dqkv_d(qkv.size());
  Dev<float> lse_in(lse_ref), delta_d(n_lse);
  // Garbage in dqkv first: the kernels must write every element.
  gpu().fill(dqkv_d.get(), t, std::nan(""), static_cast<int64_t>(qkv.size()));
  gpu().attention_backward(dg, qkv_d.get(), ctx_in.get(), lse_in.get(), dctx_d.get(), dqkv_d.get(),
                           delta_d.get(), t);
  const std::vector<uint16_t> dqkv = dqkv_d.download();
  // dq, dk and dv separately: their magnitudes differ.
  const char* names[] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which) {
    const std::vector<float> want = qkv_part(d, t, dqkv_ref, which);
    check_close(qkv_part(d, t, dqkv, which), want, rtol, 0.5 * rtol * peak(want), names[which]);
  }
  check_close(delta_d.download(), delta_ref, 1e-4, 1e-4 * peak(delta_ref), "delta");

  // Deterministic: a second backward gives the same bits.
  gpu().attention_backward(dg, qkv_d.get(), ctx_in.get(), lse_in.get(), dctx_d.get(), dqkv_d.get(),
                           delta_d.get(), t);
  CHECK(dqkv_d.download() == dqkv);
}

// Structured inputs for the mask checks (s <= dh): row i of a tensor is zero, e_i (the i-th unit
// vector), or all ones.
enum class Rows { Zero, Unit, Ones };

float row_value(Rows r, int64_t i, int64_t c) {
  switch (r) {
    case Rows::Zero:
      return 0.0f;
    case Rows::Unit:
      return i == c ? 1.0f : 0.0f;
    case Rows::Ones:
      return 1.0f;
  }
  return 0.0f;
}

struct MaskRun {
  std::vector<float> ctx, dq, dk, dv;  // [b * heads][s][dh] each, in (bi, hi) order
};

/// Forward and backward on the GPU with q, k, v and dctx built from `rows`, outputs regrouped per
/// (batch, head) pair.
MaskRun run_structured(const AttentionDesc& d, DType t, Rows q, Rows k, Rows v, Rows dout) {
  const int64_t pairs = d.b * d.heads, dh = d.dh;
  std::vector<uint16_t> qkv(static_cast<std::size_t>(d.s * pairs * 3 * dh));
  std::vector<uint16_t> dctx(static_cast<std::size_t>(d.s * pairs * dh));
  for (int64_t i = 0; i < d.s; ++i) {
    for (int64_t bh = 0; bh < pairs; ++bh) {
      for (int64_t c = 0; c < dh; ++c) {
        const auto at = static_cast<std::size_t>((i * pairs + bh) * 3 * dh + c);
        qkv[at] = to16(row_value(q, i, c), t);
        qkv[at + static_cast<std::size_t>(dh)] = to16(row_value(k, i, c), t);
        qkv[at + static_cast<std::size_t>(2 * dh)] = to16(row_value(v, i, c), t);
        dctx[static_cast<std::size_t>((i * pairs + bh) * dh + c)] = to16(row_value(dout, i, c), t);
      }
    }
  }
  const auto n_lse = static_cast<std::size_t>(pairs * d.s);
  Dev<uint16_t> qkv_d(qkv), ctx_d(dctx.size()), dctx_d(dctx), dqkv_d(qkv.size());
  Dev<float> lse_d(n_lse), delta_d(n_lse);
  gpu().attention_forward(d, qkv_d.get(), ctx_d.get(), lse_d.get(), t);
  gpu().attention_backward(d, qkv_d.get(), ctx_d.get(), lse_d.get(), dctx_d.get(), dqkv_d.get(),
                           delta_d.get(), t);
  const std::vector<uint16_t> ctx = ctx_d.download(), dqkv = dqkv_d.download();
  MaskRun out;
  for (int64_t bh = 0; bh < pairs; ++bh) {
    for (int64_t i = 0; i < d.s; ++i) {
      for (int64_t c = 0; c < dh; ++c) {
        const auto row = static_cast<std::size_t>((i * pairs + bh) * 3 * dh + c);
        out.ctx.push_back(from16(ctx[static_cast<std::size_t>((i * pairs + bh) * dh + c)], t));
        out.dq.push_back(from16(dqkv[row], t));
        out.dk.push_back(from16(dqkv[row + static_cast<std::size_t>(dh)], t));
        out.dv.push_back(from16(dqkv[row + static_cast<std::size_t>(2 * dh)], t));
      }
    }
  }
  return out;
}

/// With uniform probabilities 1 / (i + 1) (all scores zero), one-hot values and the right output
/// gradients, each element below shows one keep decision:
///   q = 0, k = I, v = I, dctx = 1:  ctx_i[j] = P_ij keep_ij / (1 - p)
///                                   dq_i[j]  = scale P_ij (keep_ij / (1 - p) - delta_i)
///   q = I, k = 0, v = I, dctx = 1:  dk_j[i]  = scale P_ij (keep_ij / (1 - p) - delta_i)
///   q = 0, k = 0, v = I, dctx = I:  dv_j[i]  = P_ij keep_ij / (1 - p)
/// with delta_i = sum_j P_ij keep_ij / (1 - p). ctx and dv must be zero exactly where dropped;
/// dq and dk within a quarter of the step a flipped decision would make.
void check_masks(const AttentionDesc& d, DType t) {
  INFO(describe(d, t));
  REQUIRE(d.s <= d.dh);
  const double ks = 1.0 / (1.0 - static_cast<double>(d.dropout.p));
  const int64_t s = d.s, dh = d.dh;
  const MaskRun a = run_structured(d, t, Rows::Zero, Rows::Unit, Rows::Unit, Rows::Ones);
  const MaskRun b = run_structured(d, t, Rows::Unit, Rows::Zero, Rows::Unit, Rows::Ones);
  const MaskRun c = run_structured(d, t, Rows::Zero, Rows::Zero, Rows::Unit, Rows::Unit);
  std::size_t ctx_bad = 0, dq_bad = 0, dk_bad = 0, dv_bad = 0, dropped = 0, total = 0;
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t hi = 0; hi < d.heads; ++hi) {
      const auto at = [&](int64_t i, int64_t col) {
        return static_cast<std::size_t>(((bi * d.heads + hi) * s + i) * dh + col);
      };
      for (int64_t i = 0; i < s; ++i) {
        const double p_ij = 1.0 / static_cast<double>(i + 1);
        double delta = 0.0;
        for (int64_t j = 0; j <= i; ++j)
          delta += kept(d.dropout, s, bi, hi, i, j) ? p_ij * ks : 0.0;
        for (int64_t j = 0; j < s; ++j) {
          const bool keep = j <= i && kept(d.dropout, s, bi, hi, i, j);
          total += j <= i;
          dropped += j <= i && !keep;
          if ((a.ctx[at(i, j)] != 0.0f) != keep) ++ctx_bad;
          if ((c.dv[at(j, i)] != 0.0f) != keep) ++dv_bad;
          const double want = j <= i ? d.scale * p_ij * ((keep ? ks : 0.0) - delta) : 0.0;
          const double step = 0.25 * d.scale * p_ij * ks;
          if (!(std::fabs(a.dq[at(i, j)] - want) <= step)) ++dq_bad;
          if (!(std::fabs(b.dk[at(j, i)] - want) <= step)) ++dk_bad;
        }
      }
    }
  }
  INFO(dropped << " of " << total << " probabilities dropped");
  CHECK(dropped > total / 4);
  CHECK(dropped < 3 * total / 4);
  CHECK(ctx_bad == 0);
  CHECK(dq_bad == 0);
  CHECK(dk_bad == 0);
  CHECK(dv_bad == 0);
}

}  // namespace

TEST_CASE("flash attention forward and backward match the CPU reference",
          "[gpu][flash_attention]") {
  require_gpu();
  INFO(ptdp::cuda::device_description(0));
  const int64_t shapes[][3] = {{1, 1, 1}, {64, 2, 2}, {77, 2, 3}, {200, 1, 2}};  // s, b, heads
  uint64_t seed = 1;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      CHECK(gpu().fused_attention_supported(t, dh));
      for (const auto& shape : shapes) {
        for (const float p : {0.0f, 0.1f}) {
          AttentionDesc d;
          d.s = shape[0];
          d.b = shape[1];
          d.heads = shape[2];
          d.dh = dh;
          d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
          // With dropout: this rank's heads start at head 1 of heads + 2 (a tensor-parallel slice).
          if (p > 0.0f) d.dropout = probs_dropout(p, d.s, d.b, d.heads, d.heads + 2, 1, seed);
          compare_with_cpu(d, t, seed++);
        }
      }
    }
  }
}

TEST_CASE("flash attention drops exactly the probabilities the unfused dropout drops",
          "[gpu][flash_attention]") {
  require_gpu();
  AttentionDesc d;
  d.s = 64;
  d.b = 2;
  d.heads = 2;
  d.dh = 64;
  d.scale = 0.125f;
  d.dropout = probs_dropout(0.5f, d.s, d.b, d.heads, 4, 1, 77);
  check_masks(d, DType::BF16);
  // Rows that start at unaligned Philox blocks and cross a 64-key tile; f16.
  d.s = 100;
  d.b = 1;
  d.heads = 3;
  d.dh = 128;
  d.scale = 0.0883883476f;
  d.dropout = probs_dropout(0.5f, d.s, d.b, d.heads, 3, 0, 78);
  check_masks(d, DType::F16);
}

namespace {

/// Counts the elements where two equally long vectors differ (bitwise for floats too: NaN
/// payloads or signed zeros count as differences).
template <typename T>
std::size_t count_differing(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

/// Grouped-query attention against the multi-head kernels run on K and V copied to every query
/// head of their group (GPU only). ctx, lse and dQ must be bit-identical; a group's dK and dV
/// must equal the fp32 sums of its query heads' multi-head dK and dV.
void compare_with_duplicated_kv(const AttentionDesc& g, DType t, uint64_t seed) {
  INFO(describe(g, t));
  const double rtol = t == DType::BF16 ? 2e-2 : 5e-3;
  std::vector<uint16_t> qkv, dctx;
  random_inputs(g, t, seed, qkv, dctx);
  const int64_t qpg = g.q_per_group(), groups = g.kv_groups(), dh = g.dh;
  AttentionDesc m = g;
  m.groups = 0;  // multi-head: [s, b, heads, 3, dh]
  // Row (in units of dh) of group gi's slot 0 at (i, bi), and of query head hi's q in m's layout.
  const auto group_row = [&](int64_t i, int64_t bi, int64_t gi) {
    return static_cast<std::size_t>(((i * g.b + bi) * groups + gi) * (qpg + 2));
  };
  const auto head_row = [&](int64_t i, int64_t bi, int64_t hi) {
    return static_cast<std::size_t>(((i * g.b + bi) * g.heads + hi) * 3);
  };
  const auto sdh = static_cast<std::size_t>(dh);
  std::vector<uint16_t> mqkv(static_cast<std::size_t>(g.s * g.b * g.heads * 3 * dh));
  for (int64_t i = 0; i < g.s; ++i) {
    for (int64_t bi = 0; bi < g.b; ++bi) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        const std::size_t src = group_row(i, bi, gi);
        for (int64_t j = 0; j < qpg; ++j) {
          const std::size_t dst = head_row(i, bi, gi * qpg + j);
          for (std::size_t c = 0; c < sdh; ++c) {
            mqkv[dst * sdh + c] = qkv[(src + static_cast<std::size_t>(j)) * sdh + c];
            mqkv[(dst + 1) * sdh + c] = qkv[(src + static_cast<std::size_t>(qpg)) * sdh + c];
            mqkv[(dst + 2) * sdh + c] = qkv[(src + static_cast<std::size_t>(qpg) + 1) * sdh + c];
          }
        }
      }
    }
  }
  const auto n_lse = static_cast<std::size_t>(g.b * g.heads * g.s);
  Dev<uint16_t> gqkv_d(qkv), mqkv_d(mqkv), gctx_d(dctx.size()), mctx_d(dctx.size()),
      dctx_d(dctx), gd_d(qkv.size()), md_d(mqkv.size());
  Dev<float> glse_d(n_lse), mlse_d(n_lse), gdelta_d(n_lse), mdelta_d(n_lse);
  gpu().attention_forward(g, gqkv_d.get(), gctx_d.get(), glse_d.get(), t);
  gpu().attention_forward(m, mqkv_d.get(), mctx_d.get(), mlse_d.get(), t);
  const std::size_t ctx_bad = count_differing(gctx_d.download(), mctx_d.download());
  const std::size_t lse_bad = count_differing(glse_d.download(), mlse_d.download());
  INFO(ctx_bad << " ctx and " << lse_bad << " lse elements differ");
  CHECK(ctx_bad == 0);
  CHECK(lse_bad == 0);

  gpu().fill(gd_d.get(), t, std::nan(""), static_cast<int64_t>(qkv.size()));
  gpu().attention_backward(g, gqkv_d.get(), gctx_d.get(), glse_d.get(), dctx_d.get(), gd_d.get(),
                           gdelta_d.get(), t);
  gpu().attention_backward(m, mqkv_d.get(), mctx_d.get(), mlse_d.get(), dctx_d.get(), md_d.get(),
                           mdelta_d.get(), t);
  const std::vector<uint16_t> gd = gd_d.download(), md = md_d.download();
  std::size_t dq_bad = 0;
  std::vector<float> dk_got, dk_want, dv_got, dv_want;
  for (int64_t i = 0; i < g.s; ++i) {
    for (int64_t bi = 0; bi < g.b; ++bi) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        const std::size_t src = group_row(i, bi, gi);
        for (int64_t j = 0; j < qpg; ++j) {
          const std::size_t dst = head_row(i, bi, gi * qpg + j);
          for (std::size_t c = 0; c < sdh; ++c) {
            dq_bad += gd[(src + static_cast<std::size_t>(j)) * sdh + c] != md[dst * sdh + c];
          }
        }
        for (std::size_t c = 0; c < sdh; ++c) {
          float sk = 0.0f, sv = 0.0f;
          for (int64_t j = 0; j < qpg; ++j) {
            const std::size_t dst = head_row(i, bi, gi * qpg + j);
            sk += from16(md[(dst + 1) * sdh + c], t);
            sv += from16(md[(dst + 2) * sdh + c], t);
          }
          dk_want.push_back(sk);
          dv_want.push_back(sv);
          dk_got.push_back(from16(gd[(src + static_cast<std::size_t>(qpg)) * sdh + c], t));
          dv_got.push_back(from16(gd[(src + static_cast<std::size_t>(qpg) + 1) * sdh + c], t));
        }
      }
    }
  }
  INFO(dq_bad << " dq elements differ");
  CHECK(dq_bad == 0);
  // Each head's multi-head dK was rounded to 16 bits before the sum; the grouped kernel rounds
  // the group's fp32 sum once.
  check_close(dk_got, dk_want, rtol, 0.5 * rtol * peak(dk_want), "dk against summed heads");
  check_close(dv_got, dv_want, rtol, 0.5 * rtol * peak(dv_want), "dv against summed heads");
}

}  // namespace

TEST_CASE("flash attention with grouped-query heads matches the CPU's grouped attention",
          "[gpu][flash_attention][gqa]") {
  require_gpu();
  const int64_t shapes[][2] = {{77, 2}, {130, 1}};  // s, b
  uint64_t seed = 500;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      // 1 and 2 key/value heads for 8 query heads; 8 (= heads) is multi-head attention.
      for (const int64_t groups : {1, 2, 8}) {
        for (const auto& shape : shapes) {
          for (const float p : {0.0f, 0.1f}) {
            AttentionDesc d;
            d.s = shape[0];
            d.b = shape[1];
            d.heads = 8;
            d.groups = groups;
            d.dh = dh;
            d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
            if (p > 0.0f) d.dropout = probs_dropout(p, d.s, d.b, d.heads, d.heads + 2, 1, seed);
            compare_with_cpu(d, t, seed++);
          }
        }
      }
    }
  }
}

TEST_CASE("flash attention with grouped-query heads equals multi-head attention on copied K and V",
          "[gpu][flash_attention][gqa]") {
  require_gpu();
  uint64_t seed = 700;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      for (const int64_t groups : {1, 2, 4}) {
        for (const float p : {0.0f, 0.1f}) {
          AttentionDesc d;
          d.s = 100;
          d.b = 2;
          d.heads = 8;
          d.groups = groups;
          d.dh = dh;
          d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
          if (p > 0.0f) d.dropout = probs_dropout(p, d.s, d.b, d.heads, d.heads, 0, seed);
          compare_with_duplicated_kv(d, t, seed++);
        }
      }
    }
  }
}

// ---- packed documents -----------------------------------------------------------------------

namespace {

/// The [b, s] starts of samples whose documents have the given lengths (summing to s each).
std::vector<int32_t> starts_of(const std::vector<std::vector<int64_t>>& lengths, int64_t s) {
  std::vector<int32_t> out;
  for (const auto& sample : lengths) {
    int64_t start = 0;
    for (const int64_t len : sample) {
      for (int64_t k = 0; k < len; ++k) out.push_back(static_cast<int32_t>(start));
      start += len;
    }
    REQUIRE(start == s);
  }
  return out;
}

}  // namespace

TEST_CASE("flash attention with documents matches the CPU reference",
          "[gpu][flash_attention][documents]") {
  require_gpu();
  // (s, per-sample document lengths): boundaries inside a tile, on a tile edge (64, 128), a
  // one-token document, documents spanning several tiles, a sample of one document.
  struct Layout {
    int64_t s;
    std::vector<std::vector<int64_t>> lengths;
  };
  const Layout layouts[] = {
      {77, {{5, 59, 1, 12}, {77}}},
      {200, {{64, 64, 72}, {1, 130, 69}}},
      {300, {{10, 20, 30, 40, 50, 60, 90}}},
  };
  uint64_t seed = 900;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      for (const int64_t groups : {2, 4}) {  // 2 query heads per group, and multi-head
        for (const Layout& l : layouts) {
          for (const float p : {0.0f, 0.1f}) {
            AttentionDesc d;
            d.s = l.s;
            d.b = static_cast<int64_t>(l.lengths.size());
            d.heads = 4;
            d.groups = groups;
            d.dh = dh;
            d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
            if (p > 0.0f) d.dropout = probs_dropout(p, d.s, d.b, d.heads, d.heads + 2, 1, seed);
            compare_with_cpu(d, t, seed++, starts_of(l.lengths, l.s));
          }
        }
      }
    }
  }
}

TEST_CASE("flash attention with every document start 0 is the causal kernel, bit for bit",
          "[gpu][flash_attention][documents]") {
  require_gpu();
  uint64_t seed = 950;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      for (const float p : {0.0f, 0.1f}) {
        AttentionDesc d;
        d.s = 150;
        d.b = 2;
        d.heads = 4;
        d.groups = 2;
        d.dh = dh;
        d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
        if (p > 0.0f) d.dropout = probs_dropout(p, d.s, d.b, d.heads, d.heads, 0, seed);
        INFO(describe(d, t));
        std::vector<uint16_t> qkv, dctx;
        random_inputs(d, t, seed++, qkv, dctx);
        const auto n_lse = static_cast<std::size_t>(d.b * d.heads * d.s);
        Dev<int32_t> zeros(std::vector<int32_t>(static_cast<std::size_t>(d.b * d.s), 0));
        AttentionDesc docs = d;
        docs.document_starts = zeros.get();
        Dev<uint16_t> qkv_d(qkv), dctx_d(dctx), c0(dctx.size()), c1(dctx.size()), g0(qkv.size()),
            g1(qkv.size());
        Dev<float> l0(n_lse), l1(n_lse), t0(n_lse), t1(n_lse);
        gpu().attention_forward(d, qkv_d.get(), c0.get(), l0.get(), t);
        gpu().attention_forward(docs, qkv_d.get(), c1.get(), l1.get(), t);
        gpu().attention_backward(d, qkv_d.get(), c0.get(), l0.get(), dctx_d.get(), g0.get(), t0.get(), t);
        gpu().attention_backward(docs, qkv_d.get(), c0.get(), l0.get(), dctx_d.get(), g1.get(), t1.get(), t);
        CHECK(count_differing(c0.download(), c1.download()) == 0);
        CHECK(count_differing(l0.download(), l1.download()) == 0);
        CHECK(count_differing(g0.download(), g1.download()) == 0);
      }
    }
  }
}

TEST_CASE("the document softmax of the unfused path matches the CPU's",
          "[gpu][flash_attention][documents]") {
  require_gpu();
  const int64_t s = 70, heads = 3, samples = 2, batch = samples * heads;
  const std::vector<int32_t> starts = starts_of({{1, 63, 6}, {70}}, s);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(batch * s * s));
  for (auto& v : x) v = normal(rng);
  Dev<int32_t> starts_d(starts);
  for (const DType t : {DType::F32, DType::BF16, DType::F16}) {
    INFO(ptdp::dtype_name(t));
    std::vector<float> want(x.size()), got;
    if (t == DType::F32) {
      cpu().softmax_forward_documents(x.data(), want.data(), t, batch, heads, s, 0.3f, starts.data());
      Dev<float> xd(x), yd(x.size());
      gpu().softmax_forward_documents(xd.get(), yd.get(), t, batch, heads, s, 0.3f, starts_d.get());
      got = yd.download();
    } else {
      std::vector<uint16_t> x16(x.size()), y16(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) x16[i] = to16(x[i], t);
      cpu().softmax_forward_documents(x16.data(), y16.data(), t, batch, heads, s, 0.3f, starts.data());
      want = widen(y16, t);
      Dev<uint16_t> xd(x16), yd(x.size());
      gpu().softmax_forward_documents(xd.get(), yd.get(), t, batch, heads, s, 0.3f, starts_d.get());
      got = widen(yd.download(), t);
    }
    std::size_t zeros_moved = 0;
    for (std::size_t i = 0; i < want.size(); ++i) zeros_moved += (want[i] == 0.0f) != (got[i] == 0.0f);
    CHECK(zeros_moved == 0);  // the masked probabilities are exactly 0 on both
    check_close(got, want, t == DType::F32 ? 1e-5 : (t == DType::BF16 ? 1e-2 : 2e-3), 1e-7, "probs");
  }
}

// ---- ring attention's block-pair kernels (AttentionBlockDesc) ----------------------------------
// The GPU's attention_block_forward / attention_block_backward against the CPU's (themselves
// tested against the whole-sequence kernel in tests/kernels/test_attention_block.cpp) on the same
// inputs: a diagonal pair, an earlier key block, a later one (nothing merged) and a second key
// block merged into the first one's result; causal and with documents, with and without dropout,
// grouped-query heads, f32 and bf16 storage.

namespace {

template <typename S>
S store_as(float x, DType t) {
  if constexpr (std::is_same_v<S, float>) {
    (void)t;
    return x;
  } else {
    return to16(x, t);
  }
}

template <typename S>
void compare_blocks_with_cpu(DType t, bool documents, float p, uint64_t seed) {
  const int64_t s = 96, b = 2, heads = 4, groups = 2, dh = 64, qpg = heads / groups;
  const int64_t q_row = b * groups * (qpg + 2) * dh, kv_row = b * groups * 2 * dh, o_row = b * heads * dh;
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<S> qkv(static_cast<std::size_t>(s * q_row)), ctx(static_cast<std::size_t>(s * o_row)),
      dctx(ctx.size()), kv(static_cast<std::size_t>(s * kv_row));
  for (auto& x : qkv) x = store_as<S>(2.0f * u(g), t);
  for (auto& x : ctx) x = store_as<S>(u(g), t);
  for (auto& x : dctx) x = store_as<S>(u(g), t);
  for (int64_t i = 0; i < s * b * groups; ++i)
    for (int64_t e = 0; e < 2 * dh; ++e) kv[i * 2 * dh + e] = qkv[(i * (qpg + 2) + qpg) * dh + e];
  std::vector<int32_t> starts;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s; ++i) starts.push_back(static_cast<int32_t>(i < 20 ? 0 : (i < 50 + bi ? 20 : 50 + bi)));
  Dev<S> qkv_d(qkv), kv_d(kv), ctx_d(ctx), dctx_d(dctx);
  Dev<int32_t> starts_d(starts);
  struct Pair {
    int64_t q0, k0, k1;  // queries [q0, q0 + 32), keys [k0, k1) then (second) [k1, k1 + 16)
  };
  for (const Pair& pr : {Pair{32, 32, 48}, Pair{64, 0, 32}, Pair{0, 48, 64}}) {
    ptdp::AttentionBlockDesc d;
    d.sq = 32;
    d.b = b;
    d.heads = heads;
    d.groups = groups;
    d.dh = dh;
    d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
    d.q_start = pr.q0;
    d.seq = s;
    if (p > 0.0f) d.dropout = probs_dropout(p, s, b, heads, heads + 2, 2, seed);
    std::ostringstream os;
    os << ptdp::dtype_name(t) << " queries " << pr.q0 << " keys " << pr.k0 << ".." << pr.k1 + 16
       << (documents ? " documents" : "") << " p " << p;
    INFO(os.str());
    const auto n_out = static_cast<std::size_t>(d.sq * o_row), n_lse = static_cast<std::size_t>(b * heads * d.sq);
    std::vector<float> out(n_out, 0.0f), lse(n_lse, -INFINITY), dq(n_out, 0.0f),
        dkv(static_cast<std::size_t>(s * kv_row), 0.0f);
    Dev<float> out_d(out), lse_d(lse), dq_d(dq), dkv_d(dkv);
    for (int step = 0; step < 2; ++step) {
      d.k_start = step == 0 ? pr.k0 : pr.k1;
      d.sk = step == 0 ? pr.k1 - pr.k0 : 16;
      ptdp::AttentionBlockDesc dc = d, dg = d;
      dc.document_starts = documents ? starts.data() : nullptr;
      dg.document_starts = documents ? starts_d.get() : nullptr;
      cpu().attention_block_forward(dc, qkv.data() + pr.q0 * q_row, kv.data() + d.k_start * kv_row, out.data(),
                                    lse.data(), t);
      gpu().attention_block_forward(dg, qkv_d.get() + pr.q0 * q_row, kv_d.get() + d.k_start * kv_row, out_d.get(),
                                    lse_d.get(), t);
      cpu().attention_block_backward(dc, qkv.data() + pr.q0 * q_row, kv.data() + d.k_start * kv_row,
                                     ctx.data() + pr.q0 * o_row, lse.data(), dctx.data() + pr.q0 * o_row, dq.data(),
                                     dkv.data() + d.k_start * kv_row, t);
      gpu().attention_block_backward(dg, qkv_d.get() + pr.q0 * q_row, kv_d.get() + d.k_start * kv_row,
                                     ctx_d.get() + pr.q0 * o_row, lse_d.get(), dctx_d.get() + pr.q0 * o_row,
                                     dq_d.get(), dkv_d.get() + d.k_start * kv_row, t);
      // fp32 arithmetic on both sides, in different orders.
      check_close(out_d.download(), out, 1e-4, 1e-4 * peak(out), "out");
      check_close(lse_d.download(), lse, 1e-4, 1e-4, "lse");
      check_close(dq_d.download(), dq, 1e-3, 1e-4 * peak(dq), "dq");
      check_close(dkv_d.download(), dkv, 1e-3, 1e-4 * peak(dkv), "dkv");
    }
  }
}

}  // namespace

TEST_CASE("ring attention's block-pair kernels match the CPU's", "[gpu][flash_attention][ring]") {
  require_gpu();
  uint64_t seed = 1300;
  for (const bool documents : {false, true}) {
    for (const float p : {0.0f, 0.1f}) {
      compare_blocks_with_cpu<float>(DType::F32, documents, p, seed++);
      compare_blocks_with_cpu<uint16_t>(DType::BF16, documents, p, seed++);
    }
  }
}
