// MoE token dispatch and combine: moe_route's stable counting sort (dropped slots, experts
// without tokens), moe_permute's row gather for any dtype, moe_unpermute's probability-weighted
// combine (and, without probabilities, moe_permute's backward) and moe_unpermute_backward,
// against references in double and central finite differences, in every storage type.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;

namespace {

/// Expert indices [tokens, k]: distinct experts per token (as a router writes them), with
/// about `dropped` of the slots set to -1.
std::vector<int32_t> random_routing(Rand& r, int64_t tokens, int64_t k, int64_t experts, double dropped) {
  std::vector<int32_t> idx(static_cast<std::size_t>(tokens * k));
  std::vector<int32_t> perm(static_cast<std::size_t>(experts));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), r.g);
    for (int64_t j = 0; j < k; ++j) {
      idx[static_cast<std::size_t>(t * k + j)] = u(r.g) < dropped ? -1 : perm[static_cast<std::size_t>(j)];
    }
  }
  return idx;
}

/// The expert-sorted order from its definition: slots sorted by expert, stably (slot order
/// within an expert), dropped slots left out.
struct Routing {
  std::vector<int32_t> row_of;
  std::vector<int64_t> counts;
  int64_t rows = 0;
};

Routing route_ref(const std::vector<int32_t>& idx, int64_t experts) {
  std::vector<int64_t> slots;
  for (std::size_t s = 0; s < idx.size(); ++s) {
    if (idx[s] >= 0) slots.push_back(static_cast<int64_t>(s));
  }
  std::stable_sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) {
    return idx[static_cast<std::size_t>(a)] < idx[static_cast<std::size_t>(b)];
  });
  Routing r;
  r.row_of.assign(idx.size(), -1);
  r.counts.assign(static_cast<std::size_t>(experts), 0);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    r.row_of[static_cast<std::size_t>(slots[i])] = static_cast<int32_t>(i);
    ++r.counts[static_cast<std::size_t>(idx[static_cast<std::size_t>(slots[i])])];
  }
  r.rows = static_cast<int64_t>(slots.size());
  return r;
}

/// y[t] = sum_j w[t, j] e[row_of[t, j]] in double (w = 1 without probs).
dvec unpermute_ref(const dvec& e, const dvec* probs, const std::vector<int32_t>& row_of, int64_t tokens, int64_t k,
                   int64_t h) {
  dvec y(static_cast<std::size_t>(tokens * h), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_of[static_cast<std::size_t>(t * k + j)];
      if (r < 0) continue;
      const double w = probs ? (*probs)[static_cast<std::size_t>(t * k + j)] : 1.0;
      for (int64_t c = 0; c < h; ++c)
        y[static_cast<std::size_t>(t * h + c)] += w * e[static_cast<std::size_t>(r * h + c)];
    }
  return y;
}

double rtol_of(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : t == DType::F16 ? 1.0 / 1024.0 : 1e-6; }

}  // namespace

TEST_CASE("moe_route sorts slots by expert, stably, and counts each expert's rows", "[moe][moe_route]") {
  Rand r(1);
  for (const auto& [tokens, k, experts, dropped] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, double>>{
           {1, 1, 1, 0.0}, {7, 2, 4, 0.0}, {33, 4, 8, 0.2}, {50, 8, 64, 0.1}, {5, 3, 16, 1.0}}) {
    const auto idx = random_routing(r, tokens, k, experts, dropped);
    const Routing want = route_ref(idx, experts);
    std::vector<int32_t> row_of(idx.size(), 12345);
    std::vector<int64_t> counts(static_cast<std::size_t>(experts), -7);
    be().moe_route(idx.data(), tokens, k, experts, row_of.data(), counts.data());
    INFO("tokens " << tokens << " k " << k << " experts " << experts);
    CHECK(row_of == want.row_of);
    CHECK(counts == want.counts);
  }
}

TEST_CASE("moe_route orders an expert's slots by token, then slot, and leaves idle experts empty",
          "[moe][moe_route]") {
  // Token 0 sends both slots to expert 2 (a caller's duplicate: still slot order), token 1 to 2
  // and 0; expert 1 gets nothing.
  const std::vector<int32_t> idx = {2, 2, 2, 0, -1, 2};
  std::vector<int32_t> row_of(6);
  std::vector<int64_t> counts(3);
  be().moe_route(idx.data(), 3, 2, 3, row_of.data(), counts.data());
  CHECK(counts == std::vector<int64_t>{1, 0, 4});
  CHECK(row_of == std::vector<int32_t>{1, 2, 3, 0, -1, 4});
  // No tokens: every count is 0.
  std::vector<int64_t> none(3, 9);
  be().moe_route(nullptr, 0, 2, 3, nullptr, none.data());
  CHECK(none == std::vector<int64_t>{0, 0, 0});
}

TEST_CASE("moe_permute copies each token to its slots' rows for any dtype", "[moe][moe_permute]") {
  Rand r(2);
  const int64_t tokens = 19, k = 3, experts = 5, h = 6;
  const auto idx = random_routing(r, tokens, k, experts, 0.25);
  const Routing rt = route_ref(idx, experts);
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    const std::size_t es = ptdp::dtype_size(t), row = static_cast<std::size_t>(h) * es;
    std::vector<unsigned char> x(static_cast<std::size_t>(tokens) * row), out(static_cast<std::size_t>(rt.rows) * row + es);
    for (auto& v : x) v = static_cast<unsigned char>(r.bits());
    std::fill(out.begin(), out.end(), 0xAB);
    be().moe_permute(x.data(), t, rt.row_of.data(), tokens, k, h, rt.rows, out.data());
    std::vector<unsigned char> want(out.size(), 0xAB);
    for (std::size_t s = 0; s < idx.size(); ++s) {
      if (rt.row_of[s] < 0) continue;
      std::copy_n(x.begin() + static_cast<std::ptrdiff_t>((s / k) * row), row,
                  want.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rt.row_of[s]) * row));
    }
    INFO(ptdp::dtype_name(t));
    CHECK(out == want);  // the element past the last row is untouched too
  }
}

TEST_CASE("moe_unpermute sums each token's expert rows weighted by its probabilities", "[moe][moe_unpermute]") {
  Rand r(3);
  const int64_t tokens = 23, k = 4, experts = 6, h = 9;
  auto idx = random_routing(r, tokens, k, experts, 0.2);
  for (int64_t j = 0; j < k; ++j) idx[static_cast<std::size_t>(5 * k + j)] = -1;  // token 5: all dropped
  const Routing rt = route_ref(idx, experts);
  const fvec probs = r.uniform(tokens * k, 0.0f, 1.0f);
  for (DType t : kStorageTypes) {
    const Stored e(r.uniform(rt.rows * h), t);
    const dvec ed = to_d(e.values()), pd = to_d(probs);
    for (bool weighted : {true, false}) {
      Stored y(fvec(static_cast<std::size_t>(tokens * h), 7.0f), t);
      be().moe_unpermute(e.data(), t, weighted ? probs.data() : nullptr, rt.row_of.data(), tokens, k, h, rt.rows,
                         y.data());
      const dvec want = unpermute_ref(ed, weighted ? &pd : nullptr, rt.row_of, tokens, k, h);
      INFO(ptdp::dtype_name(t) << (weighted ? " weighted" : " unweighted (moe_permute's backward)"));
      CHECK_ALLCLOSE(y.values(), want, 1e-6, rtol_of(t));
      for (int64_t c = 0; c < h; ++c) CHECK(y.values()[static_cast<std::size_t>(5 * h + c)] == 0.0f);
    }
  }
}

TEST_CASE("moe_unpermute_backward gives the analytic and finite-difference gradients", "[moe][moe_unpermute]") {
  Rand r(4);
  const int64_t tokens = 9, k = 3, experts = 4, h = 5;
  const auto idx = random_routing(r, tokens, k, experts, 0.2);
  const Routing rt = route_ref(idx, experts);
  const fvec probs = r.uniform(tokens * k, 0.0f, 1.0f);
  const fvec e = r.uniform(rt.rows * h), dy = r.uniform(tokens * h);
  fvec de(static_cast<std::size_t>(rt.rows * h), 0.0f), dprobs(static_cast<std::size_t>(tokens * k), 5.0f);
  be().moe_unpermute_backward(dy.data(), e.data(), DType::F32, probs.data(), rt.row_of.data(), tokens, k, h, rt.rows,
                              de.data(), dprobs.data());
  // L = sum(dy * y(e, probs)), differentiated in double.
  const dvec dyd = to_d(dy);
  const auto L_of_e = [&](const dvec& ev) {
    const dvec pd = to_d(probs);
    return dot(dyd, unpermute_ref(ev, &pd, rt.row_of, tokens, k, h));
  };
  const auto L_of_p = [&](const dvec& pv) { return dot(dyd, unpermute_ref(to_d(e), &pv, rt.row_of, tokens, k, h)); };
  CHECK_ALLCLOSE(de, fd_grad(L_of_e, to_d(e)), kFdAtol, kFdRtol);
  dvec dp_want = fd_grad(L_of_p, to_d(probs));
  CHECK_ALLCLOSE(dprobs, dp_want, kFdAtol, kFdRtol);
  for (std::size_t s = 0; s < idx.size(); ++s) {
    if (rt.row_of[s] < 0) CHECK(dprobs[s] == 0.0f);
  }
  // 16-bit storage: de is probs * dy rounded once; dprobs the fp32 dot of the stored values.
  for (DType t : {DType::BF16, DType::F16}) {
    const Stored es(e, t), dys(dy, t);
    Stored des(fvec(de.size(), 0.0f), t);
    fvec dp16(dprobs.size());
    be().moe_unpermute_backward(dys.data(), es.data(), t, probs.data(), rt.row_of.data(), tokens, k, h, rt.rows,
                                des.data(), dp16.data());
    const dvec ev = to_d(es.values()), dv = to_d(dys.values());
    dvec de_want(de.size(), 0.0), dp_ref(dprobs.size(), 0.0);
    for (int64_t s = 0; s < tokens * k; ++s) {
      const int32_t row = rt.row_of[static_cast<std::size_t>(s)];
      if (row < 0) continue;
      for (int64_t c = 0; c < h; ++c) {
        const double g = dv[static_cast<std::size_t>((s / k) * h + c)];
        de_want[static_cast<std::size_t>(row * h + c)] = probs[static_cast<std::size_t>(s)] * g;
        dp_ref[static_cast<std::size_t>(s)] += g * ev[static_cast<std::size_t>(row * h + c)];
      }
    }
    INFO(ptdp::dtype_name(t));
    CHECK_ALLCLOSE(des.values(), de_want, 1e-6, rtol_of(t));
    CHECK_ALLCLOSE(dp16, dp_ref, 1e-5, 1e-5);
  }
}

TEST_CASE("moe dispatch and combine give the same bits for any thread count", "[moe][moe_unpermute]") {
  Rand r(5);
  const int64_t tokens = 257, k = 8, experts = 16, h = 33;
  const auto idx = random_routing(r, tokens, k, experts, 0.05);
  const Routing rt = route_ref(idx, experts);
  const fvec probs = r.uniform(tokens * k, 0.0f, 1.0f), x = r.uniform(tokens * h), e = r.uniform(rt.rows * h);
  const auto run = [&](int threads) {
    fvec out(static_cast<std::size_t>(rt.rows * h)), y(static_cast<std::size_t>(tokens * h)), de(out.size()),
        dprobs(probs.size());
    with_threads(threads, [&] {
      be().moe_permute(x.data(), DType::F32, rt.row_of.data(), tokens, k, h, rt.rows, out.data());
      be().moe_unpermute(e.data(), DType::F32, probs.data(), rt.row_of.data(), tokens, k, h, rt.rows, y.data());
      be().moe_unpermute_backward(x.data(), e.data(), DType::F32, probs.data(), rt.row_of.data(), tokens, k, h,
                                  rt.rows, de.data(), dprobs.data());
    });
    return std::vector<fvec>{out, y, de, dprobs};
  };
  const auto one = run(1), two = run(2), three = run(3);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK_BITEQUAL(two[i], one[i]);
    CHECK_BITEQUAL(three[i], one[i]);
  }
}
