// The CUDA backend's MoE ops against the CPU backend (the reference, tested in tests/kernels/):
// the grouped GEMM for every storage-type combination, both varying dimensions, groups without
// rows or tokens and more groups than one pointer-filling launch carries; the routing sort
// (exactly the CPU's rows and counts, over many chunks); dispatch (bit for bit) and combine; the
// router's selection (exactly the CPU's experts, ties included) and every backward; the same
// refusals in the same words; and no cudaMalloc in the steady state.
//
// Both backends get the same stored inputs. Tolerances: ~1e-4 relative for f32 GEMMs (fp32 sums
// in another order), about one unit in the last place for 16-bit results, 1e-5 for the router's
// probabilities and gradients (the device's expf against the host's); bit-exact where both
// round the same fp32 value once (permute, de = w dy).
//
// Every test case exits with the skip code 77 when there is no CUDA device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/cuda/device_buffer.h"

namespace {

using ptdp::Backend;
using ptdp::DType;
using ptdp::GroupedDim;
using ptdp::GroupedGemmDesc;
using ptdp::RouterDesc;
using ptdp::RouterScore;
using Bytes = std::vector<unsigned char>;
using cuda_test::check_close;
using cuda_test::cpu;
using cuda_test::Dev;
using cuda_test::gpu;
using cuda_test::require_gpu;

std::vector<float> random_floats(std::size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

Bytes to_storage(const std::vector<float>& v, DType t) {
  Bytes out(v.size() * ptdp::dtype_size(t));
  cpu().cast(v.data(), DType::F32, out.data(), t, static_cast<int64_t>(v.size()));
  return out;
}

std::vector<float> from_storage(const Bytes& b, DType t) {
  std::vector<float> out(b.size() / ptdp::dtype_size(t));
  cpu().cast(b.data(), t, out.data(), DType::F32, static_cast<int64_t>(out.size()));
  return out;
}

/// About one unit in the last place of a result of type t, or `f32` for f32.
double rtol_of(DType t, double f32) { return t == DType::BF16 ? 1e-2 : t == DType::F16 ? 2e-3 : f32; }

/// Expert indices [tokens, k], distinct per token, about `dropped` of them -1.
std::vector<int32_t> random_routing(uint64_t seed, int64_t tokens, int64_t k, int64_t experts, double dropped) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> idx(static_cast<std::size_t>(tokens * k)), perm(static_cast<std::size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < k; ++j) idx[static_cast<std::size_t>(t * k + j)] = u(rng) < dropped ? -1 : perm[static_cast<std::size_t>(j)];
  }
  return idx;
}

// ---- grouped GEMM ----------------------------------------------------------------------------

struct Types {
  DType ab, c;
};
constexpr Types kTypes[] = {{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::F16, DType::F16},
                            {DType::BF16, DType::F32}, {DType::F16, DType::F32}};

/// Runs d (sizes set) on both backends from the same random operands and compares C.
void compare_grouped(GroupedGemmDesc d, const std::vector<int64_t>& sizes, uint64_t seed) {
  d.groups = static_cast<int64_t>(sizes.size());
  d.sizes = sizes.data();
  const bool vm = d.varying == GroupedDim::M;
  const int64_t a_cols = vm ? d.k : d.m, b_cols = vm ? (d.trans_b ? d.k : d.n) : d.n;
  const int64_t lda = d.lda ? d.lda : a_cols, ldb = d.ldb ? d.ldb : b_cols, ldc = d.ldc ? d.ldc : d.n;
  const int64_t fixed_rows = vm ? (d.trans_b ? d.n : d.k) : d.m;
  const int64_t stride = d.stride ? d.stride : fixed_rows * (vm ? ldb : ldc);
  const int64_t na = vm ? d.m * lda : d.k * lda, nb = vm ? d.groups * stride : d.k * ldb,
                nc = vm ? d.m * ldc : d.groups * stride;
  const Bytes a = to_storage(random_floats(static_cast<std::size_t>(na), seed), d.a_type);
  const Bytes b = to_storage(random_floats(static_cast<std::size_t>(nb), seed + 1), d.b_type);
  Bytes c = to_storage(random_floats(static_cast<std::size_t>(nc), seed + 2), d.c_type);
  Dev<unsigned char> da(a), db(b), dc(c);
  gpu().grouped_gemm(d, da.get(), db.get(), dc.get());
  cpu().grouped_gemm(d, a.data(), b.data(), c.data());
  const double reduction = vm ? static_cast<double>(d.k) : static_cast<double>(d.k) / static_cast<double>(d.groups);
  const double mag = 0.3 * std::sqrt(reduction + 1.0);
  const std::string what = std::string("grouped_gemm ") + (vm ? "M" : "K") + " " + ptdp::dtype_name(d.a_type) +
                           " -> " + ptdp::dtype_name(d.c_type) + " beta " + std::to_string(d.beta);
  check_close(from_storage(dc.download(), d.c_type), from_storage(c, d.c_type), rtol_of(d.c_type, 1e-4),
              rtol_of(d.c_type, 1e-5) * mag, what);
}

// ---- errors ----------------------------------------------------------------------------------

/// The message a call throws as InvalidArgument ("" when it does not).
std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const ptdp::Error& e) {
    return e.code() == ptdp::ErrorCode::InvalidArgument ? e.what() : std::string("<other error> ") + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cuda grouped_gemm matches the CPU for every type, both varying dimensions, empty groups",
          "[gpu][cuda_moe][grouped_gemm]") {
  require_gpu();
  const std::vector<int64_t> sizes = {37, 0, 130, 1, 0, 64, 5};
  uint64_t seed = 1;
  for (const Types& t : kTypes) {
    for (bool trans_b : {true, false}) {
      GroupedGemmDesc d;
      d.varying = GroupedDim::M;
      d.trans_b = trans_b;
      d.m = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
      d.n = 96;
      d.k = 72;
      d.a_type = d.b_type = t.ab;
      d.c_type = t.c;
      compare_grouped(d, sizes, seed += 10);
    }
    for (float beta : {0.0f, 1.0f}) {
      GroupedGemmDesc d;
      d.varying = GroupedDim::K;
      d.m = 80;
      d.n = 48;
      d.k = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
      d.beta = beta;
      d.a_type = d.b_type = t.ab;
      d.c_type = t.c;
      compare_grouped(d, sizes, seed += 10);
    }
  }
}

TEST_CASE("cuda grouped_gemm: more groups than one pointer launch carries, padded layouts",
          "[gpu][cuda_moe][grouped_gemm]") {
  require_gpu();
  std::vector<int64_t> sizes(300);
  for (std::size_t g = 0; g < sizes.size(); ++g) sizes[g] = static_cast<int64_t>((g * 7) % 11);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  GroupedGemmDesc m;
  m.varying = GroupedDim::M;
  m.trans_b = true;
  m.m = total;
  m.n = 24;
  m.k = 16;
  m.lda = 20;
  m.ldb = 18;
  m.ldc = 32;
  m.stride = 24 * 18 + 8;
  m.a_type = m.b_type = m.c_type = DType::BF16;
  compare_grouped(m, sizes, 500);
  GroupedGemmDesc k;
  k.varying = GroupedDim::K;
  k.m = 16;
  k.n = 8;
  k.k = total;
  k.beta = 1.0f;
  k.a_type = k.b_type = DType::BF16;
  k.c_type = DType::F32;
  compare_grouped(k, sizes, 510);
}

TEST_CASE("cuda moe_route gives exactly the CPU's rows and counts", "[gpu][cuda_moe][moe_route]") {
  require_gpu();
  for (const auto& [tokens, k, experts, dropped] : std::vector<std::tuple<int64_t, int64_t, int64_t, double>>{
           {1, 1, 1, 0.0}, {3000, 8, 64, 0.1}, {777, 2, 8, 0.0}, {129, 6, 160, 0.3}, {40, 4, 16, 1.0}}) {
    const auto idx = random_routing(static_cast<uint64_t>(tokens * 31 + k), tokens, k, experts, dropped);
    std::vector<int32_t> row_cpu(idx.size());
    std::vector<int64_t> counts_cpu(static_cast<std::size_t>(experts)), counts_gpu(counts_cpu.size(), -3);
    cpu().moe_route(idx.data(), tokens, k, experts, row_cpu.data(), counts_cpu.data());
    Dev<int32_t> didx(idx), drow(idx.size());
    gpu().moe_route(didx.get(), tokens, k, experts, drow.get(), counts_gpu.data());
    INFO("tokens " << tokens << " k " << k << " experts " << experts);
    CHECK(drow.download() == row_cpu);
    CHECK(counts_gpu == counts_cpu);
  }
}

TEST_CASE("cuda moe_permute copies rows bit for bit, aligned or not", "[gpu][cuda_moe][moe_permute]") {
  require_gpu();
  const int64_t tokens = 301, k = 4, experts = 12;
  const auto idx = random_routing(7, tokens, k, experts, 0.1);
  std::vector<int32_t> row_of(idx.size());
  std::vector<int64_t> counts(static_cast<std::size_t>(experts));
  cpu().moe_route(idx.data(), tokens, k, experts, row_of.data(), counts.data());
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  Dev<int32_t> drow(row_of);
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I64}) {
    for (int64_t h : {64, 7, 1}) {
      const std::size_t row = static_cast<std::size_t>(h) * ptdp::dtype_size(t);
      Bytes x(static_cast<std::size_t>(tokens) * row), out(static_cast<std::size_t>(rows) * row, 0x5a);
      std::mt19937 rng(static_cast<unsigned>(h));
      for (auto& v : x) v = static_cast<unsigned char>(rng());
      Dev<unsigned char> dx(x), dout(out);
      gpu().moe_permute(dx.get(), t, drow.get(), tokens, k, h, rows, dout.get());
      cpu().moe_permute(x.data(), t, row_of.data(), tokens, k, h, rows, out.data());
      INFO(ptdp::dtype_name(t) << " h " << h);
      CHECK(dout.download() == out);
    }
  }
}

TEST_CASE("cuda moe_unpermute and its backward match the CPU for every storage type",
          "[gpu][cuda_moe][moe_unpermute]") {
  require_gpu();
  const int64_t tokens = 513, k = 8, experts = 32, h = 96;
  const auto idx = random_routing(9, tokens, k, experts, 0.05);
  std::vector<int32_t> row_of(idx.size());
  std::vector<int64_t> counts(static_cast<std::size_t>(experts));
  cpu().moe_route(idx.data(), tokens, k, experts, row_of.data(), counts.data());
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const auto probs = random_floats(idx.size(), 10, 0.0f, 1.0f);
  Dev<int32_t> drow(row_of);
  Dev<float> dprobs(probs);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const Bytes e = to_storage(random_floats(static_cast<std::size_t>(rows * h), 11), t);
    const Bytes dy = to_storage(random_floats(static_cast<std::size_t>(tokens * h), 12), t);
    const std::size_t es = ptdp::dtype_size(t);
    Dev<unsigned char> de_(e), ddy(dy), dy_out(static_cast<std::size_t>(tokens * h) * es),
        dde(static_cast<std::size_t>(rows * h) * es);
    for (bool weighted : {true, false}) {
      Bytes y(static_cast<std::size_t>(tokens * h) * es);
      gpu().moe_unpermute(de_.get(), t, weighted ? dprobs.get() : nullptr, drow.get(), tokens, k, h, rows,
                          dy_out.get());
      cpu().moe_unpermute(e.data(), t, weighted ? probs.data() : nullptr, row_of.data(), tokens, k, h, rows, y.data());
      check_close(from_storage(dy_out.download(), t), from_storage(y, t), rtol_of(t, 1e-6), rtol_of(t, 1e-6),
                  std::string("moe_unpermute ") + ptdp::dtype_name(t) + (weighted ? "" : " unweighted"));
    }
    Bytes de_cpu(static_cast<std::size_t>(rows * h) * es);
    std::vector<float> dp_cpu(idx.size());
    Dev<float> ddp(idx.size());
    gpu().moe_unpermute_backward(ddy.get(), de_.get(), t, dprobs.get(), drow.get(), tokens, k, h, rows, dde.get(),
                                 ddp.get());
    cpu().moe_unpermute_backward(dy.data(), e.data(), t, probs.data(), row_of.data(), tokens, k, h, rows,
                                 de_cpu.data(), dp_cpu.data());
    INFO(ptdp::dtype_name(t));
    CHECK(dde.download() == de_cpu);  // w * dy rounded once on both
    check_close(ddp.download(), dp_cpu, 1e-5, 1e-5, std::string("dprobs ") + ptdp::dtype_name(t));
  }
}

TEST_CASE("cuda router selects exactly the CPU's experts, with matching probabilities and gradients",
          "[gpu][cuda_moe][moe_router]") {
  require_gpu();
  struct Config {
    RouterDesc d;
    bool bias;
  };
  const auto desc = [](int64_t experts, int64_t topk, RouterScore s, bool pre, int64_t groups, int64_t gk, float f) {
    RouterDesc d;
    d.tokens = 1000;
    d.experts = experts;
    d.topk = topk;
    d.score = s;
    d.pre_softmax = pre;
    d.num_groups = groups;
    d.group_topk = gk;
    d.scaling_factor = f;
    return d;
  };
  const std::vector<Config> configs = {
      {desc(8, 2, RouterScore::Softmax, false, 0, 0, 0.0f), false},
      {desc(64, 8, RouterScore::Softmax, false, 0, 0, 0.0f), false},
      {desc(60, 4, RouterScore::Softmax, true, 0, 0, 0.0f), false},
      {desc(256, 8, RouterScore::Sigmoid, false, 8, 4, 2.5f), true},
      {desc(128, 8, RouterScore::Sigmoid, false, 0, 0, 0.0f), false},
      {desc(16, 1, RouterScore::Sigmoid, false, 0, 0, 0.0f), true},
      {desc(48, 6, RouterScore::Softmax, true, 6, 3, 1.5f), false},
  };
  uint64_t seed = 20;
  for (const Config& c : configs) {
    const RouterDesc& d = c.d;
    // Logits on a coarse grid tie often: the tie rule must be the same on both devices.
    auto logits = random_floats(static_cast<std::size_t>(d.tokens * d.experts), ++seed, -3.0f, 3.0f);
    for (std::size_t i = 0; i < logits.size(); i += 3) logits[i] = std::round(logits[i] * 4.0f) / 4.0f;
    const auto bias = random_floats(static_cast<std::size_t>(d.experts), ++seed, -0.2f, 0.2f);
    const auto dprobs = random_floats(static_cast<std::size_t>(d.tokens * d.topk), ++seed);
    const std::size_t nk = static_cast<std::size_t>(d.tokens * d.topk), ne = logits.size();
    std::vector<int32_t> idx(nk);
    std::vector<float> probs(nk), dl(ne, 0.25f);
    cpu().moe_router_forward(d, logits.data(), c.bias ? bias.data() : nullptr, idx.data(), probs.data());
    cpu().moe_router_backward(d, logits.data(), idx.data(), dprobs.data(), dl.data(), true);
    Dev<float> dlog(logits), dbias(bias), ddp(dprobs), dprob(nk), ddl(std::vector<float>(ne, 0.25f));
    Dev<int32_t> didx(nk);
    gpu().moe_router_forward(d, dlog.get(), c.bias ? dbias.get() : nullptr, didx.get(), dprob.get());
    gpu().moe_router_backward(d, dlog.get(), didx.get(), ddp.get(), ddl.get(), true);
    const std::string what = "router experts " + std::to_string(d.experts) + " topk " + std::to_string(d.topk);
    INFO(what);
    CHECK(didx.download() == idx);
    check_close(dprob.download(), probs, 1e-5, 1e-6, what + ": probs");
    check_close(ddl.download(), dl, 1e-4, 1e-6, what + ": dlogits");
  }
}

TEST_CASE("cuda aux scores, log-sum-exp and z-loss gradient match the CPU", "[gpu][cuda_moe][moe_router]") {
  require_gpu();
  const int64_t tokens = 777, experts = 64;
  const auto logits = random_floats(static_cast<std::size_t>(tokens * experts), 40, -4.0f, 4.0f);
  const auto ds = random_floats(logits.size(), 41);
  Dev<float> dlog(logits), dds(ds), out(logits.size()), lse(static_cast<std::size_t>(tokens));
  for (RouterScore s : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    std::vector<float> scores(logits.size()), dl(logits.size());
    cpu().moe_aux_scores_forward(s, logits.data(), tokens, experts, scores.data());
    gpu().moe_aux_scores_forward(s, dlog.get(), tokens, experts, out.get());
    check_close(out.download(), scores, 1e-5, 1e-7, "aux scores");
    cpu().moe_aux_scores_backward(s, logits.data(), ds.data(), tokens, experts, dl.data(), false);
    gpu().moe_aux_scores_backward(s, dlog.get(), dds.get(), tokens, experts, out.get(), false);
    check_close(out.download(), dl, 1e-4, 1e-7, "aux scores backward");
  }
  std::vector<float> lse_cpu(static_cast<std::size_t>(tokens)), dl(logits.size());
  cpu().moe_router_lse(logits.data(), tokens, experts, lse_cpu.data());
  gpu().moe_router_lse(dlog.get(), tokens, experts, lse.get());
  check_close(lse.download(), lse_cpu, 1e-6, 1e-6, "lse");
  cpu().moe_router_z_loss_backward(logits.data(), lse_cpu.data(), 1e-3f, tokens, experts, dl.data(), false);
  Dev<float> dlse(lse_cpu);
  gpu().moe_router_z_loss_backward(dlog.get(), dlse.get(), 1e-3f, tokens, experts, out.get(), false);
  check_close(out.download(), dl, 1e-5, 1e-9, "z-loss backward");
}

TEST_CASE("cuda MoE ops refuse what the CPU refuses, in the same words", "[gpu][cuda_moe][errors]") {
  require_gpu();
  // Host values that both backends' checks read before touching memory; the device gets the same
  // values in device buffers.
  const std::vector<int32_t> idx = {0, 1, 3, -2, 9, 0};
  Dev<int32_t> didx(idx), drow(6);
  std::vector<int32_t> row(6);
  std::vector<int64_t> counts(4);
  std::vector<float> host(64, 1.0f);
  Dev<float> dev(64);
  const std::vector<int64_t> sizes = {2, 3};
  GroupedGemmDesc g;
  g.groups = 2;
  g.sizes = sizes.data();
  g.m = 6;  // sum(sizes) is 5
  g.n = 2;
  g.k = 3;
  RouterDesc r;
  r.tokens = 2;
  r.experts = 8;
  r.topk = 2;
  r.num_groups = 4;
  r.group_topk = 3;  // does not divide topk
  const auto same = [](const std::function<void(Backend&, bool)>& call) {
    const std::string on_cpu = refusal([&] { call(cpu(), false); });
    const std::string on_gpu = refusal([&] { call(gpu(), true); });
    INFO("cpu: " << on_cpu << "\ngpu: " << on_gpu);
    CHECK_FALSE(on_cpu.empty());
    CHECK(on_gpu == on_cpu);
  };
  same([&](Backend& b, bool d) { b.grouped_gemm(g, d ? dev.get() : host.data(), d ? dev.get() : host.data(), d ? dev.get() : host.data()); });
  same([&](Backend& b, bool d) {
    b.moe_route(d ? didx.get() : idx.data(), 3, 2, 4, d ? drow.get() : row.data(), counts.data());
  });
  same([&](Backend& b, bool d) {
    b.moe_permute(d ? dev.get() : host.data(), DType::F32, d ? drow.get() : row.data(), 2, 0, 4, 4,
                  d ? dev.get() : host.data());
  });
  same([&](Backend& b, bool d) {
    b.moe_unpermute(d ? dev.get() : host.data(), DType::I32, nullptr, d ? drow.get() : row.data(), 2, 2, 4, 4,
                    d ? dev.get() : host.data());
  });
  same([&](Backend& b, bool d) {
    b.moe_router_forward(r, d ? dev.get() : host.data(), nullptr, d ? drow.get() : row.data(),
                         d ? dev.get() : host.data());
  });
  same([&](Backend& b, bool d) {
    b.moe_router_z_loss_backward(d ? dev.get() : host.data(), d ? dev.get() : host.data(), INFINITY, 2, 8,
                                 d ? dev.get() : host.data(), false);
  });
  // The device's index check (after its count kernel) leaves row_of unwritten, as the CPU's.
  drow.upload(std::vector<int32_t>(6, 77));
  CHECK_FALSE(refusal([&] { gpu().moe_route(didx.get(), 3, 2, 4, drow.get(), counts.data()); }).empty());
  CHECK(drow.download() == std::vector<int32_t>(6, 77));
}

TEST_CASE("cuda MoE ops make no cudaMalloc in the steady state", "[gpu][cuda_moe][allocator]") {
  require_gpu();
  const int64_t tokens = 512, k = 4, experts = 16, h = 64, ffn = 32;
  const auto idx = random_routing(60, tokens, k, experts, 0.0);
  Dev<int32_t> didx(idx), drow(idx.size());
  Dev<float> x(static_cast<std::size_t>(tokens * h)), xs(static_cast<std::size_t>(tokens * k * h)),
      w(static_cast<std::size_t>(experts * ffn * h)), ys(static_cast<std::size_t>(tokens * k * ffn));
  gpu().fill(x.get(), DType::F32, 0.5, tokens * h);
  gpu().fill(w.get(), DType::F32, 0.25, experts * ffn * h);
  std::vector<int64_t> counts(static_cast<std::size_t>(experts));
  const auto round = [&] {
    gpu().moe_route(didx.get(), tokens, k, experts, drow.get(), counts.data());
    gpu().moe_permute(x.get(), DType::F32, drow.get(), tokens, k, h, tokens * k, xs.get());
    GroupedGemmDesc d;
    d.groups = experts;
    d.sizes = counts.data();
    d.trans_b = true;
    d.m = tokens * k;
    d.n = ffn;
    d.k = h;
    gpu().grouped_gemm(d, xs.get(), w.get(), ys.get());
    gpu().synchronize();
  };
  round();
  const auto first = ptdp::cuda::allocator_stats(0);
  round();
  round();
  const auto later = ptdp::cuda::allocator_stats(0);
  CHECK(later.cuda_mallocs == first.cuda_mallocs);
  CHECK(later.in_use == first.in_use);
}
