// Cross-entropy pieces over (possibly vocabulary-parallel) logits, their combination across
// vocabulary slices, and ce_backward against finite differences.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;

namespace {
struct RV {
  int64_t rows, v;
};
const RV kShapes[] = {{1, 1}, {1, 7}, {3, 5}, {4, 33}, {7, 3}, {2, 64}};

/// Splits [0, V) into t contiguous slices of near-equal size (the first V % t one larger).
std::vector<std::pair<int64_t, int64_t>> slices(int64_t V, int64_t t) {
  std::vector<std::pair<int64_t, int64_t>> s;
  int64_t start = 0;
  for (int64_t p = 0; p < t; ++p) {
    const int64_t len = V / t + (p < V % t ? 1 : 0);
    s.emplace_back(start, len);
    start += len;
  }
  return s;
}

/// Copies columns [start, start + len) of a [rows, V] matrix.
fvec columns(const fvec& m, int64_t rows, int64_t V, int64_t start, int64_t len) {
  fvec out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = start; j < start + len; ++j) out.push_back(m[static_cast<std::size_t>(r * V + j)]);
  return out;
}
dvec columns(const dvec& m, int64_t rows, int64_t V, int64_t start, int64_t len) {
  dvec out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = start; j < start + len; ++j) out.push_back(m[static_cast<std::size_t>(r * V + j)]);
  return out;
}
}  // namespace

TEST_CASE("cross-entropy pieces on the full vocabulary", "[cross_entropy]") {
  uint32_t seed = 1;
  for (const RV& s : kShapes) {
    for (float offset : {0.0f, 50.0f}) {  // large logits need the max subtracted
      Rand r(seed++);
      fvec logits = r.uniform(s.rows * s.v, -4.0f, 4.0f);
      for (float& x : logits) x += offset;
      const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
      const dvec L = to_d(logits);
      dvec mx(static_cast<std::size_t>(s.rows)), se(mx.size()), tl(mx.size());
      for (int64_t i = 0; i < s.rows; ++i) {
        double m = -1e300;
        for (int64_t j = 0; j < s.v; ++j) m = std::max(m, L[static_cast<std::size_t>(i * s.v + j)]);
        double e = 0.0;
        for (int64_t j = 0; j < s.v; ++j) e += std::exp(L[static_cast<std::size_t>(i * s.v + j)] - m);
        mx[static_cast<std::size_t>(i)] = m;
        se[static_cast<std::size_t>(i)] = e;
        tl[static_cast<std::size_t>(i)] = L[static_cast<std::size_t>(i * s.v + targets[static_cast<std::size_t>(i)])];
      }
      const dvec want_loss = ce_ref(L, targets, s.rows, s.v);
      INFO("rows " << s.rows << " v " << s.v << " offset " << offset);

      fvec row_max(mx.size(), 7.0f), sum_exp(mx.size(), 7.0f), target(mx.size(), 7.0f),
          loss(mx.size(), 7.0f);
      be().ce_row_max(logits.data(), s.rows, s.v, row_max.data());
      CHECK_ALLCLOSE(row_max, mx, 0.0, 0.0);  // the max is one of the inputs
      be().ce_sum_exp(logits.data(), row_max.data(), s.rows, s.v, sum_exp.data());
      CHECK_ALLCLOSE(sum_exp, se, 1e-6, 1e-5);
      be().ce_target_logit(logits.data(), targets.data(), s.rows, s.v, 0, target.data());
      CHECK_ALLCLOSE(target, tl, 0.0, 0.0);
      be().ce_loss(row_max.data(), sum_exp.data(), target.data(), s.rows, loss.data());
      CHECK_ALLCLOSE(loss, want_loss, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("ce_loss is log(sum_exp) + row_max - target_logit", "[cross_entropy]") {
  const fvec row_max = {0.0f, 2.5f, -1.0f, 100.0f};
  const fvec sum_exp = {1.0f, 3.0f, 7.5f, 1.25f};
  const fvec target = {0.0f, 1.0f, -3.0f, 99.0f};
  dvec want;
  for (std::size_t i = 0; i < 4; ++i)
    want.push_back(std::log(static_cast<double>(sum_exp[i])) + row_max[i] - target[i]);
  fvec loss(4);
  be().ce_loss(row_max.data(), sum_exp.data(), target.data(), 4, loss.data());
  CHECK_ALLCLOSE(loss, want, 1e-5, 1e-6);
}

TEST_CASE("cross-entropy over t = 1, 2, 3 vocabulary slices equals the unsplit loss",
          "[cross_entropy]") {
  uint32_t seed = 100;
  for (const RV& s : {RV{3, 7}, RV{5, 33}, RV{1, 3}, RV{4, 10}}) {
    Rand r(seed++);
    const fvec logits = r.uniform(s.rows * s.v, -5.0f, 5.0f);
    const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
    const dvec want = ce_ref(to_d(logits), targets, s.rows, s.v);
    const std::size_t R = static_cast<std::size_t>(s.rows);
    for (int64_t t : {1, 2, 3}) {
      if (t > s.v) continue;
      INFO("rows " << s.rows << " v " << s.v << " t " << t);
      const auto parts = slices(s.v, t);
      std::vector<fvec> slice_logits;
      for (const auto& [start, len] : parts)
        slice_logits.push_back(columns(logits, s.rows, s.v, start, len));

      // All-reduce max, then each slice's sum_exp against the global max, then sum; the target
      // logit is the sum over slices (zero where a slice does not hold it).
      fvec gmax(R, -std::numeric_limits<float>::infinity()), gsum(R, 0.0f), gtarget(R, 0.0f);
      std::vector<fvec> local_max;
      for (std::size_t p = 0; p < parts.size(); ++p) {
        fvec m(R);
        be().ce_row_max(slice_logits[p].data(), s.rows, parts[p].second, m.data());
        for (std::size_t i = 0; i < R; ++i) gmax[i] = std::max(gmax[i], m[i]);
        local_max.push_back(m);
      }
      for (std::size_t p = 0; p < parts.size(); ++p) {
        fvec e(R), tl(R, 5.0f);
        be().ce_sum_exp(slice_logits[p].data(), gmax.data(), s.rows, parts[p].second, e.data());
        be().ce_target_logit(slice_logits[p].data(), targets.data(), s.rows, parts[p].second,
                             parts[p].first, tl.data());
        for (std::size_t i = 0; i < R; ++i) {
          gsum[i] += e[i];
          gtarget[i] += tl[i];
        }
      }
      fvec loss(R);
      be().ce_loss(gmax.data(), gsum.data(), gtarget.data(), s.rows, loss.data());
      CHECK_ALLCLOSE(loss, want, 1e-5, 1e-5);

      // Alternatively each slice uses its own max and the sums are rescaled to the global max.
      fvec rsum(R, 0.0f);
      for (std::size_t p = 0; p < parts.size(); ++p) {
        fvec e(R);
        be().ce_sum_exp(slice_logits[p].data(), local_max[p].data(), s.rows, parts[p].second,
                        e.data());
        for (std::size_t i = 0; i < R; ++i)
          rsum[i] += static_cast<float>(e[i] * std::exp(static_cast<double>(local_max[p][i]) - gmax[i]));
      }
      fvec loss2(R);
      be().ce_loss(gmax.data(), rsum.data(), gtarget.data(), s.rows, loss2.data());
      CHECK_ALLCLOSE(loss2, want, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("ce_target_logit: slices not holding the target give 0", "[cross_entropy]") {
  // Slice [4, 7) of a vocabulary of 10.
  const fvec logits = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const std::vector<int32_t> targets = {5, 9};
  fvec tl(2, 9.0f);
  be().ce_target_logit(logits.data(), targets.data(), 2, 3, 4, tl.data());
  CHECK(tl[0] == 2.0f);
  CHECK(tl[1] == 0.0f);
  const std::vector<int32_t> targets2 = {3, 6};  // just below the slice, its last column
  be().ce_target_logit(logits.data(), targets2.data(), 2, 3, 4, tl.data());
  CHECK(tl[0] == 0.0f);
  CHECK(tl[1] == 6.0f);
}

TEST_CASE("ce_backward on the full vocabulary matches finite differences",
          "[cross_entropy][backward]") {
  uint32_t seed = 200;
  for (const RV& s : kShapes) {
    Rand r(seed++);
    const fvec logits = r.uniform(s.rows * s.v, -3.0f, 3.0f);
    const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
    const fvec dloss = r.uniform(s.rows, 0.2f, 2.0f);  // per-row weights (e.g. 1/tokens, masks)
    const dvec W = to_d(dloss);
    const dvec want = fd_grad(
        [&](const dvec& l) { return dot(W, ce_ref(l, targets, s.rows, s.v)); }, to_d(logits));
    fvec row_max(static_cast<std::size_t>(s.rows)), sum_exp(row_max.size());
    be().ce_row_max(logits.data(), s.rows, s.v, row_max.data());
    be().ce_sum_exp(logits.data(), row_max.data(), s.rows, s.v, sum_exp.data());
    INFO("rows " << s.rows << " v " << s.v);
    fvec dl(logits.size(), 3.0f);
    be().ce_backward(logits.data(), row_max.data(), sum_exp.data(), targets.data(), dloss.data(),
                     s.rows, s.v, 0, dl.data());
    CHECK_ALLCLOSE(dl, want, kFdAtol, kFdRtol);
    // dlogits aliasing logits.
    fvec inplace = logits;
    be().ce_backward(inplace.data(), row_max.data(), sum_exp.data(), targets.data(),
                     dloss.data(), s.rows, s.v, 0, inplace.data());
    CHECK_ALLCLOSE(inplace, want, kFdAtol, kFdRtol);
  }
}

TEST_CASE("ce_backward on vocabulary slices matches finite differences of the full loss",
          "[cross_entropy][backward]") {
  uint32_t seed = 300;
  for (const RV& s : {RV{3, 7}, RV{2, 10}, RV{4, 5}}) {
    Rand r(seed++);
    const fvec logits = r.uniform(s.rows * s.v, -3.0f, 3.0f);
    const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
    const fvec dloss = r.uniform(s.rows, 0.2f, 2.0f);
    const dvec W = to_d(dloss);
    const dvec want = fd_grad(
        [&](const dvec& l) { return dot(W, ce_ref(l, targets, s.rows, s.v)); }, to_d(logits));
    // Global statistics as the tensor group would reduce them (computed in double here so
    // that only ce_backward is under test).
    const std::size_t R = static_cast<std::size_t>(s.rows);
    fvec gmax(R), gsum(R);
    for (std::size_t i = 0; i < R; ++i) {
      double m = -1e300, e = 0.0;
      for (int64_t j = 0; j < s.v; ++j) m = std::max(m, static_cast<double>(logits[i * static_cast<std::size_t>(s.v) + static_cast<std::size_t>(j)]));
      for (int64_t j = 0; j < s.v; ++j) e += std::exp(logits[i * static_cast<std::size_t>(s.v) + static_cast<std::size_t>(j)] - m);
      gmax[i] = static_cast<float>(m);
      gsum[i] = static_cast<float>(e);
    }
    for (int64_t t : {2, 3}) {
      for (const auto& [start, len] : slices(s.v, t)) {
        const fvec sl = columns(logits, s.rows, s.v, start, len);
        const dvec want_sl = columns(want, s.rows, s.v, start, len);
        fvec dl(sl.size(), 3.0f);
        INFO("rows " << s.rows << " v " << s.v << " t " << t << " slice [" << start << ", "
                     << start + len << ")");
        be().ce_backward(sl.data(), gmax.data(), gsum.data(), targets.data(), dloss.data(),
                         s.rows, len, start, dl.data());
        CHECK_ALLCLOSE(dl, want_sl, kFdAtol, kFdRtol);
      }
    }
  }
}
