// Cross-entropy over (possibly vocabulary-parallel) logits: ce_forward_local's one-pass
// statistics, their combination across vocabulary slices with ce_rescale (padded columns
// included), and ce_backward against finite differences.
#include <catch2/catch.hpp>

#include "kernels/cpu/exp_math.h"
#include "reference.h"

using namespace ptdp_test;

namespace {
struct RV {
  int64_t rows, v;
};
// {2, 600}: vector lanes and a tail; {3, 4133}: three 2048-column steps of the online max, the
// last one short and odd.
const RV kShapes[] = {{1, 1}, {1, 7}, {3, 5}, {4, 33}, {7, 3}, {2, 64}, {2, 600}, {3, 4133}};

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
template <typename Vec>
Vec columns(const Vec& m, int64_t rows, int64_t V, int64_t start, int64_t len) {
  Vec out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = start; j < start + len; ++j)
      out.push_back(m[static_cast<std::size_t>(r * V + j)]);
  return out;
}

/// ce_forward_local's three outputs for one slice.
struct CeLocal {
  fvec row_max, sum_exp, target;
};

CeLocal forward_local(const fvec& logits, const std::vector<int32_t>& targets, int64_t rows,
                      int64_t v, int64_t vocab_start) {
  const std::size_t R = static_cast<std::size_t>(rows);
  CeLocal c{fvec(R, 7.0f), fvec(R, 7.0f), fvec(R, 7.0f)};
  be().ce_forward_local(logits.data(), kF32, targets.data(), rows, v, vocab_start,
                        c.row_max.data(), c.sum_exp.data(), c.target.data());
  return c;
}

/// The loss as the tensor group computes it: per-slice statistics, all-reduce max, rescale to
/// the global max, all-reduce of the sums and target logits, ce_loss.
fvec combined_loss(const std::vector<fvec>& slice_logits,
                   const std::vector<std::pair<int64_t, int64_t>>& parts,
                   const std::vector<int32_t>& targets, int64_t rows) {
  const std::size_t R = static_cast<std::size_t>(rows);
  std::vector<CeLocal> local;
  fvec gmax(R, -std::numeric_limits<float>::infinity());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    local.push_back(
        forward_local(slice_logits[p], targets, rows, parts[p].second, parts[p].first));
    for (std::size_t i = 0; i < R; ++i) gmax[i] = std::max(gmax[i], local.back().row_max[i]);
  }
  fvec gsum(R, 0.0f), gtarget(R, 0.0f), loss(R);
  for (CeLocal& c : local) {
    be().ce_rescale(c.row_max.data(), c.sum_exp.data(), gmax.data(), rows);
    for (std::size_t i = 0; i < R; ++i) {
      gsum[i] += c.sum_exp[i];
      gtarget[i] += c.target[i];
    }
  }
  be().ce_loss(gmax.data(), gsum.data(), gtarget.data(), rows, loss.data());
  return loss;
}
}  // namespace

TEST_CASE("ce_forward_local on the full vocabulary: max, sum of exponentials, target logit",
          "[cross_entropy]") {
  uint32_t seed = 1;
  for (const RV& s : kShapes) {
    for (float offset : {0.0f, 50.0f}) {  // large logits need the max subtracted
      Rand r(seed++);
      fvec logits = r.uniform(s.rows * s.v, -4.0f, 4.0f);
      for (float& x : logits) x += offset;
      const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
      const dvec L = to_d(logits);
      dvec mx(static_cast<std::size_t>(s.rows)), se(mx.size()), tl(mx.size());
      for (std::size_t i = 0; i < mx.size(); ++i) {
        const double* row = &L[i * static_cast<std::size_t>(s.v)];
        double m = -1e300;
        for (int64_t j = 0; j < s.v; ++j) m = std::max(m, row[j]);
        double e = 0.0;
        for (int64_t j = 0; j < s.v; ++j) e += std::exp(row[j] - m);
        mx[i] = m;
        se[i] = e;
        tl[i] = row[targets[i]];
      }
      const dvec want_loss = ce_ref(L, targets, s.rows, s.v);
      INFO("rows " << s.rows << " v " << s.v << " offset " << offset);

      const CeLocal c = forward_local(logits, targets, s.rows, s.v, 0);
      CHECK_ALLCLOSE(c.row_max, mx, 0.0, 0.0);  // the max is one of the inputs
      CHECK_ALLCLOSE(c.sum_exp, se, 1e-6, 1e-5);
      CHECK_ALLCLOSE(c.target, tl, 0.0, 0.0);
      fvec loss(mx.size(), 7.0f);
      be().ce_loss(c.row_max.data(), c.sum_exp.data(), c.target.data(), s.rows, loss.data());
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
  for (const RV& s : {RV{3, 7}, RV{5, 33}, RV{1, 3}, RV{4, 10}, RV{3, 700}}) {
    Rand r(seed++);
    const fvec logits = r.uniform(s.rows * s.v, -5.0f, 5.0f);
    const std::vector<int32_t> targets = r.ids(s.rows, 0, static_cast<int32_t>(s.v - 1));
    const dvec want = ce_ref(to_d(logits), targets, s.rows, s.v);
    for (int64_t t : {1, 2, 3}) {
      if (t > s.v) continue;
      INFO("rows " << s.rows << " v " << s.v << " t " << t);
      std::vector<fvec> slice_logits;
      for (const auto& [start, len] : slices(s.v, t))
        slice_logits.push_back(columns(logits, s.rows, s.v, start, len));
      CHECK_ALLCLOSE(combined_loss(slice_logits, slices(s.v, t), targets, s.rows), want, 1e-5,
                     1e-5);
    }
  }
}

TEST_CASE("ce_forward_local + ce_rescale over two slices equal the whole-vocabulary pieces",
          "[cross_entropy]") {
  // The statistics themselves, not only the loss: after ce_rescale to the global max and a
  // sum over the slices, sum_exp is the whole vocabulary's.
  const int64_t rows = 4, v = 300, split = 129;
  Rand r(150);
  fvec logits = r.uniform(rows * v, -6.0f, 6.0f);
  logits[5] = 40.0f;                                  // row 0: the max in the first slice
  logits[static_cast<std::size_t>(v + 250)] = 30.0f;  // row 1: the max in the second slice
  const std::vector<int32_t> targets = {3, 250, 120, 299};
  const CeLocal whole = forward_local(logits, targets, rows, v, 0);
  CeLocal a = forward_local(columns(logits, rows, v, 0, split), targets, rows, split, 0);
  CeLocal b =
      forward_local(columns(logits, rows, v, split, v - split), targets, rows, v - split, split);
  const std::size_t R = static_cast<std::size_t>(rows);
  fvec gmax(R);
  for (std::size_t i = 0; i < R; ++i) gmax[i] = std::max(a.row_max[i], b.row_max[i]);
  be().ce_rescale(a.row_max.data(), a.sum_exp.data(), gmax.data(), rows);
  be().ce_rescale(b.row_max.data(), b.sum_exp.data(), gmax.data(), rows);
  fvec sum(R), target(R);
  for (std::size_t i = 0; i < R; ++i) {
    CHECK(a.row_max[i] == gmax[i]);
    CHECK(b.row_max[i] == gmax[i]);
    sum[i] = a.sum_exp[i] + b.sum_exp[i];
    target[i] = a.target[i] + b.target[i];
  }
  CHECK_ALLCLOSE(gmax, to_d(whole.row_max), 0.0, 0.0);
  CHECK_ALLCLOSE(sum, to_d(whole.sum_exp), 0.0, 1e-5);
  CHECK_ALLCLOSE(target, to_d(whole.target), 0.0, 0.0);
}

TEST_CASE("cross-entropy: padded (-inf) columns and all-padding slices add nothing",
          "[cross_entropy]") {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t rows = 3, valid = 7, padded_v = 12;  // a vocabulary of 7 padded to 12 columns
  Rand r(170);
  const fvec valid_logits = r.uniform(rows * valid, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 6, 4};
  const dvec want = ce_ref(to_d(valid_logits), targets, rows, valid);
  fvec padded(static_cast<std::size_t>(rows * padded_v), -inf);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < valid; ++j)
      padded[static_cast<std::size_t>(i * padded_v + j)] =
          valid_logits[static_cast<std::size_t>(i * valid + j)];

  // One slice with the padding at its end.
  CHECK_ALLCLOSE(combined_loss({padded}, {{0, padded_v}}, targets, rows), want, 1e-5, 1e-5);

  // Three slices of 4: the last one is all padding (max -inf, sum 0, and no NaN once moved to
  // the global max).
  std::vector<fvec> parts;
  std::vector<std::pair<int64_t, int64_t>> where;
  for (int64_t start = 0; start < padded_v; start += 4) {
    parts.push_back(columns(padded, rows, padded_v, start, 4));
    where.emplace_back(start, 4);
  }
  CeLocal last = forward_local(parts[2], targets, rows, 4, 8);
  const fvec gmax(static_cast<std::size_t>(rows), 1.5f);
  for (std::size_t i = 0; i < gmax.size(); ++i) {
    CHECK(last.row_max[i] == -inf);
    CHECK(last.sum_exp[i] == 0.0f);
  }
  be().ce_rescale(last.row_max.data(), last.sum_exp.data(), gmax.data(), rows);
  for (std::size_t i = 0; i < gmax.size(); ++i) {
    CHECK(last.row_max[i] == 1.5f);
    CHECK(last.sum_exp[i] == 0.0f);
  }
  CHECK_ALLCLOSE(combined_loss(parts, where, targets, rows), want, 1e-5, 1e-5);

  // A row whose first 300 columns (more than one step of the online max) are padding.
  const int64_t wide = 600, pad = 300;
  fvec row(static_cast<std::size_t>(wide), -inf);
  for (int64_t j = pad; j < wide; ++j)
    row[static_cast<std::size_t>(j)] = 0.01f * static_cast<float>(j % 17);
  const dvec want_wide = ce_ref(to_d(columns(row, 1, wide, pad, wide - pad)), {150}, 1, wide - pad);
  CHECK_ALLCLOSE(combined_loss({row}, {{0, wide}}, {pad + 150}, 1), want_wide, 1e-5, 1e-5);
}

TEST_CASE("ce_forward_local: slices not holding the target give 0", "[cross_entropy]") {
  // Slice [4, 7) of a vocabulary of 10.
  const fvec logits = {1, 2, 3, 4, 5, 6};  // [2, 3]
  CeLocal c = forward_local(logits, {5, 9}, 2, 3, 4);
  CHECK(c.target[0] == 2.0f);
  CHECK(c.target[1] == 0.0f);
  c = forward_local(logits, {3, 6}, 2, 3, 4);  // just below the slice, its last column
  CHECK(c.target[0] == 0.0f);
  CHECK(c.target[1] == 6.0f);
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
    const CeLocal c = forward_local(logits, targets, s.rows, s.v, 0);
    const fvec& row_max = c.row_max;
    const fvec& sum_exp = c.sum_exp;
    INFO("rows " << s.rows << " v " << s.v);
    fvec dl(logits.size(), 3.0f);
    be().ce_backward(logits.data(), kF32, row_max.data(), sum_exp.data(), targets.data(), dloss.data(),
                     s.rows, s.v, 0, dl.data());
    CHECK_ALLCLOSE(dl, want, kFdAtol, kFdRtol);
    // dlogits aliasing logits.
    fvec inplace = logits;
    be().ce_backward(inplace.data(), kF32, row_max.data(), sum_exp.data(), targets.data(),
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
        be().ce_backward(sl.data(), kF32, gmax.data(), gsum.data(), targets.data(), dloss.data(),
                         s.rows, len, start, dl.data());
        CHECK_ALLCLOSE(dl, want_sl, kFdAtol, kFdRtol);
      }
    }
  }
}

TEST_CASE("exp_f32 is exp rounded to float (within 0.501 ulp) over the float range, special values exact",
          "[cross_entropy]") {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (double xd = -110.0; xd <= 89.0; xd += 0.0009765625 * 3.1) {
    const float x = static_cast<float>(xd);
    const float got = ptdp::cpu::exp_f32(x);
    const double want = std::exp(static_cast<double>(x));
    const float wantf = static_cast<float>(want);
    if (std::isinf(wantf)) {
      if (!std::isinf(got)) worst = std::numeric_limits<double>::infinity(), worst_x = x;
      continue;
    }
    // One ulp of the float nearest the exact value (the smallest denormal below FLT_MIN).
    const double ulp = wantf < std::numeric_limits<float>::min()
                           ? std::numeric_limits<float>::denorm_min()
                           : std::nextafter(wantf, std::numeric_limits<float>::infinity()) - wantf;
    const double err = std::fabs(static_cast<double>(got) - want) / ulp;
    if (err > worst) worst = err, worst_x = x;
  }
  INFO("worst " << worst << " ulp at x = " << worst_x);
  CHECK(worst <= 0.501);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(ptdp::cpu::exp_f32(-inf) == 0.0f);
  CHECK(ptdp::cpu::exp_f32(-200.0f) == 0.0f);
  CHECK(ptdp::cpu::exp_f32(inf) == inf);
  CHECK(ptdp::cpu::exp_f32(100.0f) == inf);
  CHECK(std::isnan(ptdp::cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  CHECK(ptdp::cpu::exp_f32(0.0f) == 1.0f);
  CHECK(ptdp::cpu::exp_f32(-0.0f) == 1.0f);
}

TEST_CASE("cross-entropy gives the same bits on 1 and 2 threads, and NaN logits reach the loss",
          "[cross_entropy]") {
  const int64_t rows = 5, v = 4133;
  Rand r(77);
  const fvec logits = r.uniform(rows * v, -6.0f, 6.0f);
  const std::vector<int32_t> targets = {0, 4132, 17, 2048, 2047};
  const fvec dloss = {0.2f, 0.3f, 0.1f, 0.25f, 0.15f};
  CeLocal c[2];
  fvec dx[2];
  for (int k = 0; k < 2; ++k) {
    with_threads(k + 1, [&] {
      c[k] = forward_local(logits, targets, rows, v, 0);
      dx[k] = fvec(logits.size());
      be().ce_backward(logits.data(), kF32, c[k].row_max.data(), c[k].sum_exp.data(), targets.data(),
                       dloss.data(), rows, v, 0, dx[k].data());
    });
  }
  CHECK_BITEQUAL(c[1].row_max, c[0].row_max);
  CHECK_BITEQUAL(c[1].sum_exp, c[0].sum_exp);
  CHECK_BITEQUAL(dx[1], dx[0]);
  // A NaN logit is skipped by the max but makes its row's sum, and so its loss, NaN.
  fvec bad = logits;
  bad[static_cast<std::size_t>(2 * v + 3001)] = std::numeric_limits<float>::quiet_NaN();
  const CeLocal cb = forward_local(bad, targets, rows, v, 0);
  CHECK(cb.row_max[2] == c[0].row_max[2]);
  CHECK(std::isnan(cb.sum_exp[2]));
  CHECK(cb.sum_exp[1] == c[0].sum_exp[1]);
}
