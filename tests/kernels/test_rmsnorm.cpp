// RMSNorm forward (y, rstd) and backward (dx, dgamma, accumulate mode, dx aliasing dy) in f32,
// bf16 and f16 storage, against a double-precision reference and finite differences.
#include <catch2/catch.hpp>

#include <omp.h>

#include "base/half.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;

namespace {

const auto& kTypes = kStorageTypes;

/// Relative tolerance of a result rounded once to t (after fp32 math).
double tol(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : t == DType::F16 ? 1.0 / 1024.0 : 1e-5; }

/// |got - want| <= rtol * (|want| + scale): values that cancel to near zero carry the rounding
/// of their larger terms, whose magnitude is `scale`.
void check_scaled(const fvec& got, const dvec& want, double rtol, double scale) {
  CHECK_ALLCLOSE(got, want, rtol * scale, rtol);
}

struct RC {
  int64_t rows, cols;
};
const RC kMats[] = {{1, 1}, {1, 7}, {3, 2}, {3, 5}, {4, 33}, {7, 3}, {2, 70}, {5, 130}};

/// y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps), over rows of [rows, cols].
dvec rmsnorm_ref(const dvec& x, const dvec& gamma, int64_t rows, int64_t cols, double eps,
                 dvec* rstd = nullptr) {
  dvec y(x.size());
  if (rstd) rstd->assign(static_cast<std::size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(r * cols);
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) sq += x[row + c] * x[row + c];
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[row + c] = x[row + c] * rs * gamma[static_cast<std::size_t>(c)];
    if (rstd) (*rstd)[static_cast<std::size_t>(r)] = rs;
  }
  return y;
}

/// The analytic backward in double from the given rstd: dx = rstd (g - xhat mean(g xhat)),
/// g = dy gamma, xhat = x rstd; dgamma = sum_r dy xhat. term_scale: max |rstd g|, the size of
/// the terms that cancel in dx.
void rmsnorm_backward_ref(const dvec& x, const dvec& gamma, const dvec& rstd, const dvec& dy,
                          int64_t rows, int64_t cols, dvec& dx, dvec& dgamma,
                          double& term_scale) {
  term_scale = 0.0;
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<std::size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(r * cols);
    const double rs = rstd[static_cast<std::size_t>(r)];
    double sum_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      sum_gx += dy[row + c] * gamma[static_cast<std::size_t>(c)] * x[row + c] * rs;
      dgamma[static_cast<std::size_t>(c)] += dy[row + c] * x[row + c] * rs;
    }
    const double mean_gx = sum_gx / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double g = dy[row + c] * gamma[static_cast<std::size_t>(c)];
      dx[row + c] = rs * (g - x[row + c] * rs * mean_gx);
      term_scale = std::max(term_scale, std::fabs(rs * g));
    }
  }
}

struct RmsData {
  fvec x, gamma, dy;  // already rounded to the storage type
};

RmsData make(const RC& s, DType t, uint32_t seed) {
  Rand r(seed);
  RmsData d;
  d.x = r.uniform(s.rows * s.cols, -1.0f, 1.0f);
  for (float& v : d.x) v += 0.5f;  // a non-zero mean: RMSNorm does not subtract it
  d.x = rounded(d.x, t);
  d.gamma = rounded(r.uniform(s.cols, 0.5f, 1.5f), t);
  d.dy = rounded(r.uniform(s.rows * s.cols), t);
  return d;
}

}  // namespace

TEST_CASE("rmsnorm_forward: y and rstd against the double reference in every storage type",
          "[rmsnorm]") {
  uint32_t seed = 1;
  for (DType t : kTypes) {
    for (float eps : {1e-6f, 0.1f}) {  // a large eps pins down where eps goes (inside the sqrt)
      for (const RC& s : kMats) {
        const RmsData d = make(s, t, seed++);
        dvec rstd;
        const dvec want = rmsnorm_ref(to_d(d.x), to_d(d.gamma), s.rows, s.cols, eps, &rstd);
        Stored x(d.x, t), g(d.gamma, t), y(fvec(d.x.size(), 77.0f), t);
        fvec rs(static_cast<std::size_t>(s.rows), 77.0f);
        INFO(ptdp::dtype_name(t) << " rows " << s.rows << " cols " << s.cols << " eps " << eps);
        be().rmsnorm_forward(x.data(), g.data(), y.data(), t, rs.data(), s.rows, s.cols, eps);
        CHECK_ALLCLOSE(y.values(), want, t == DType::F32 ? 1e-6 : 0.0, tol(t));
        CHECK_ALLCLOSE(rs, rstd, 0.0, 1e-6);  // fp32 statistics from the stored inputs
      }
    }
  }
}

TEST_CASE("rmsnorm_forward: zero rows give y = 0 and rstd = 1/sqrt(eps), large values stay finite",
          "[rmsnorm]") {
  const int64_t cols = 5;
  fvec x(cols, 0.0f), gamma(cols, 2.0f), y(cols, 9.0f), rs(1);
  be().rmsnorm_forward(x.data(), gamma.data(), y.data(), kF32, rs.data(), 1, cols, 1e-5f);
  CHECK_BITEQUAL(y, fvec(cols, 0.0f));
  CHECK(rs[0] == Approx(1.0 / std::sqrt(1e-5)).epsilon(1e-6));
  // Squares of 1e20 overflow fp32 but not the double accumulation.
  fvec big = {1e20f, -2e20f, 3e20f, 1e20f, -1e20f};
  be().rmsnorm_forward(big.data(), gamma.data(), y.data(), kF32, rs.data(), 1, cols, 1e-5f);
  dvec want_rs;
  const dvec want = rmsnorm_ref(to_d(big), to_d(gamma), 1, cols, 1e-5, &want_rs);
  CHECK_ALLCLOSE(y, want, 0.0, 1e-6);
  CHECK_ALLCLOSE(rs, want_rs, 0.0, 1e-6);
}

TEST_CASE("rmsnorm_backward: dx and dgamma match finite differences", "[rmsnorm][backward]") {
  uint32_t seed = 100;
  const float eps = 1e-5f;
  for (const RC& s : kMats) {
    const RmsData d = make(s, DType::F32, seed++);
    const dvec G = to_d(d.dy), X = to_d(d.x), Gam = to_d(d.gamma);
    dvec rstd;
    rmsnorm_ref(X, Gam, s.rows, s.cols, eps, &rstd);
    auto L = [&](const dvec& x, const dvec& ga) {
      return dot(G, rmsnorm_ref(x, ga, s.rows, s.cols, eps));
    };
    const dvec want_dx = fd_grad([&](const dvec& x) { return L(x, Gam); }, X);
    const dvec want_dg = fd_grad([&](const dvec& ga) { return L(X, ga); }, Gam);
    const fvec rs = to_f(rstd);
    INFO("rows " << s.rows << " cols " << s.cols);

    fvec dx(d.x.size(), 9.0f), dg(d.gamma.size(), 9.0f);
    be().rmsnorm_backward(d.x.data(), d.gamma.data(), rs.data(), d.dy.data(), dx.data(), kF32,
                          dg.data(), s.rows, s.cols, false);
    CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(dg, want_dg, kFdAtol, kFdRtol);

    // Accumulate mode adds to dgamma (dx is still overwritten).
    Rand r(seed++);
    const fvec g0 = r.uniform(s.cols);
    fvec dx2(d.x.size(), -3.0f), dg2 = g0;
    be().rmsnorm_backward(d.x.data(), d.gamma.data(), rs.data(), d.dy.data(), dx2.data(), kF32,
                          dg2.data(), s.rows, s.cols, true);
    dvec want_dg2(want_dg);
    for (std::size_t j = 0; j < want_dg2.size(); ++j) want_dg2[j] += g0[j];
    CHECK_ALLCLOSE(dx2, want_dx, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(dg2, want_dg2, kFdAtol, kFdRtol);
  }
}

TEST_CASE("rmsnorm_backward: dx and dgamma against the analytic double reference in every "
          "storage type, dx aliasing dy",
          "[rmsnorm][backward]") {
  uint32_t seed = 200;
  const float eps = 1e-5f;
  for (DType t : kTypes) {
    for (const RC& s : kMats) {
      const RmsData d = make(s, t, seed++);
      // The forward's rstd, as the layer saves it.
      Stored x(d.x, t), g(d.gamma, t), y(d.x, t), dy(d.dy, t);
      fvec rs(static_cast<std::size_t>(s.rows));
      be().rmsnorm_forward(x.data(), g.data(), y.data(), t, rs.data(), s.rows, s.cols, eps);
      dvec want_dx, want_dg;
      double term_scale = 0.0;
      rmsnorm_backward_ref(to_d(d.x), to_d(d.gamma), to_d(rs), to_d(d.dy), s.rows, s.cols,
                           want_dx, want_dg, term_scale);
      INFO(ptdp::dtype_name(t) << " rows " << s.rows << " cols " << s.cols);

      Stored dx(fvec(d.x.size(), 9.0f), t);
      fvec dg(d.gamma.size(), 9.0f);
      be().rmsnorm_backward(x.data(), g.data(), rs.data(), dy.data(), dx.data(), t, dg.data(),
                            s.rows, s.cols, false);
      check_scaled(dx.values(), want_dx, tol(t), term_scale);
      CHECK_ALLCLOSE(dg, want_dg, 1e-6, 1e-5);  // fp32, accumulated in double

      // dx may alias dy: the same results, bit for bit.
      Stored inplace(d.dy, t);
      fvec dg_in(d.gamma.size(), 9.0f);
      be().rmsnorm_backward(x.data(), g.data(), rs.data(), inplace.data(), inplace.data(), t,
                            dg_in.data(), s.rows, s.cols, false);
      CHECK_BITEQUAL(inplace.values(), dx.values());
      CHECK_BITEQUAL(dg_in, dg);

      // Accumulate: dgamma (fp32) adds to its contents in every storage type.
      fvec dg_acc(d.gamma.size(), 0.25f);
      be().rmsnorm_backward(x.data(), g.data(), rs.data(), dy.data(), dx.data(), t,
                            dg_acc.data(), s.rows, s.cols, true);
      dvec want_acc = want_dg;
      for (double& v : want_acc) v += 0.25;
      CHECK_ALLCLOSE(dg_acc, want_acc, 1e-6, 1e-5);
    }
  }
}

TEST_CASE("rmsnorm_backward with rows = 0 clears dgamma, or keeps it when accumulating",
          "[rmsnorm][backward]") {
  fvec dg(4, 3.0f);
  be().rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, kBF16, dg.data(), 0, 4, true);
  CHECK_BITEQUAL(dg, fvec(4, 3.0f));
  be().rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, kBF16, dg.data(), 0, 4, false);
  CHECK_BITEQUAL(dg, fvec(4, 0.0f));
  CHECK_NOTHROW(be().rmsnorm_forward(nullptr, nullptr, nullptr, kF16, nullptr, 0, 4, 1e-5f));
}

TEST_CASE("rmsnorm_backward is deterministic whatever the thread count", "[rmsnorm][backward]") {
  // Many rows summed into dgamma: a thread-order-dependent summation would show in the low bits.
  const int64_t rows = 257, cols = 150;
  const RmsData d = make({rows, cols}, DType::F32, 300);
  fvec y(d.x.size()), rs(static_cast<std::size_t>(rows));
  be().rmsnorm_forward(d.x.data(), d.gamma.data(), y.data(), kF32, rs.data(), rows, cols, 1e-5f);
  const int saved = omp_get_max_threads();
  std::vector<fvec> dxs, dgs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    fvec dx(d.x.size()), dg(static_cast<std::size_t>(cols));
    be().rmsnorm_backward(d.x.data(), d.gamma.data(), rs.data(), d.dy.data(), dx.data(), kF32,
                          dg.data(), rows, cols, false);
    dxs.push_back(dx);
    dgs.push_back(dg);
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < dxs.size(); ++i) {
    CHECK_BITEQUAL(dxs[i], dxs[0]);
    CHECK_BITEQUAL(dgs[i], dgs[0]);
  }
}

// ---- the split RMSNorm: rows spread over devices, row sums completed between two ops ----------

namespace {

/// The split of a row of `width` features over devices: each device's column count.
struct Split {
  int64_t rows;
  std::vector<int64_t> cols;  // per device; their sum is the row's width
  int64_t width() const {
    int64_t w = 0;
    for (int64_t c : cols) w += c;
    return w;
  }
};
const Split kSplits[] = {{1, {1}}, {3, {5}}, {1, {1, 1}}, {4, {8, 8}}, {3, {2, 5, 4}}, {5, {33, 33}},
                         {2, {70, 60, 1}}};

/// Columns [c0, c0 + n) of a [rows, width] matrix (a device's part).
fvec cols_of(const fvec& m, int64_t rows, int64_t width, int64_t c0, int64_t n) {
  fvec out(static_cast<std::size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(m.begin() + r * width + c0, n, out.begin() + r * n);
  return out;
}

/// Writes a device's [rows, n] part into columns [c0, c0 + n) of `m` [rows, width].
void put_cols(fvec& m, const fvec& part, int64_t rows, int64_t width, int64_t c0, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(part.begin() + r * n, n, m.begin() + r * width + c0);
}

/// The split RMSNorm's forward over every device as the attention layer runs it: row_dot(x, x)
/// on each device, the sums added over the devices (the all-reduce), rmsnorm_split_forward on
/// each. Returns y [rows, width] and the (equal) rstd of every device.
fvec split_forward(const Split& s, const fvec& x, const fvec& gamma, DType t, float eps, fvec& rstd) {
  const int64_t w = s.width();
  const auto rows = static_cast<std::size_t>(s.rows);
  fvec sum(rows, 0.0f);
  int64_t c0 = 0;
  for (int64_t n : s.cols) {
    Stored xs(cols_of(x, s.rows, w, c0, n), t);
    fvec part(rows, 77.0f);
    be().row_dot(xs.data(), xs.data(), nullptr, t, part.data(), s.rows, n);
    for (std::size_t r = 0; r < rows; ++r) sum[r] += part[r];
    c0 += n;
  }
  fvec y(x.size(), 0.0f);
  c0 = 0;
  for (int64_t n : s.cols) {
    Stored xs(cols_of(x, s.rows, w, c0, n), t), gs(fvec(gamma.begin() + c0, gamma.begin() + c0 + n), t);
    Stored ys(fvec(static_cast<std::size_t>(s.rows * n), 77.0f), t);
    fvec rs = sum;  // rstd written over the sums (allowed)
    be().rmsnorm_split_forward(xs.data(), gs.data(), rs.data(), ys.data(), t, rs.data(), s.rows, n, w, eps);
    put_cols(y, ys.values(), s.rows, w, c0, n);
    rstd = rs;
    c0 += n;
  }
  return y;
}

/// The split backward over every device: row_dot(dy, x, gamma) summed over the devices, then
/// rmsnorm_split_backward on each. dgamma [width] is each device's part, placed side by side.
void split_backward(const Split& s, const fvec& x, const fvec& gamma, const fvec& rstd, const fvec& dy, DType t,
                    bool accumulate, fvec& dx, fvec& dgamma) {
  const int64_t w = s.width();
  const auto rows = static_cast<std::size_t>(s.rows);
  fvec dot_sum(rows, 0.0f);
  int64_t c0 = 0;
  for (int64_t n : s.cols) {
    Stored xs(cols_of(x, s.rows, w, c0, n), t), dys(cols_of(dy, s.rows, w, c0, n), t);
    Stored gs(fvec(gamma.begin() + c0, gamma.begin() + c0 + n), t);
    fvec part(rows, 77.0f);
    be().row_dot(dys.data(), xs.data(), gs.data(), t, part.data(), s.rows, n);
    for (std::size_t r = 0; r < rows; ++r) dot_sum[r] += part[r];
    c0 += n;
  }
  dx.assign(x.size(), 0.0f);
  c0 = 0;
  for (int64_t n : s.cols) {
    Stored xs(cols_of(x, s.rows, w, c0, n), t), dys(cols_of(dy, s.rows, w, c0, n), t);
    Stored gs(fvec(gamma.begin() + c0, gamma.begin() + c0 + n), t);
    Stored dxs(fvec(static_cast<std::size_t>(s.rows * n), 9.0f), t);
    fvec dg(dgamma.begin() + c0, dgamma.begin() + c0 + n);
    be().rmsnorm_split_backward(xs.data(), gs.data(), rstd.data(), dot_sum.data(), dys.data(), dxs.data(), t,
                                dg.data(), s.rows, n, w, accumulate);
    put_cols(dx, dxs.values(), s.rows, w, c0, n);
    std::copy(dg.begin(), dg.end(), dgamma.begin() + c0);
    c0 += n;
  }
}

}  // namespace

TEST_CASE("row_dot: per-row sums of a * b (* w) against the double reference in every storage type",
          "[rmsnorm][row_dot]") {
  uint32_t seed = 400;
  for (DType t : kTypes) {
    for (const RC& s : kMats) {
      Rand r(seed++);
      const fvec a = rounded(r.uniform(s.rows * s.cols), t), b = rounded(r.uniform(s.rows * s.cols), t);
      const fvec w = rounded(r.uniform(s.cols, 0.5f, 1.5f), t);
      Stored as(a, t), bs(b, t), ws(w, t);
      INFO(ptdp::dtype_name(t) << " rows " << s.rows << " cols " << s.cols);
      for (const bool weighted : {false, true}) {
        for (const bool same : {false, true}) {
          dvec want(static_cast<std::size_t>(s.rows), 0.0);
          double scale = 0.0;
          for (int64_t i = 0; i < s.rows; ++i) {
            for (int64_t c = 0; c < s.cols; ++c) {
              const auto k = static_cast<std::size_t>(i * s.cols + c);
              const double term = static_cast<double>(a[k]) * (same ? a[k] : b[k]) *
                                  (weighted ? w[static_cast<std::size_t>(c)] : 1.0);
              want[static_cast<std::size_t>(i)] += term;
              scale = std::max(scale, std::fabs(term));
            }
          }
          fvec got(static_cast<std::size_t>(s.rows), 77.0f);
          be().row_dot(as.data(), same ? as.data() : bs.data(), weighted ? ws.data() : nullptr, t, got.data(),
                       s.rows, s.cols);
          // Exact products summed in double: one fp32 rounding of the result.
          CHECK_ALLCLOSE(got, want, 1e-7 * scale, 1e-7);
        }
      }
    }
  }
  // No columns: every sum is 0; no rows: nothing is read or written.
  fvec out(3, 5.0f);
  be().row_dot(nullptr, nullptr, nullptr, kF32, out.data(), 3, 0);
  CHECK_BITEQUAL(out, fvec(3, 0.0f));
  CHECK_NOTHROW(be().row_dot(nullptr, nullptr, nullptr, kBF16, nullptr, 0, 4));
}

TEST_CASE("rmsnorm_split_forward over 1 to 3 devices: y and rstd of the whole row against the double "
          "reference in every storage type",
          "[rmsnorm][split]") {
  uint32_t seed = 500;
  for (DType t : kTypes) {
    for (float eps : {1e-6f, 0.1f}) {
      for (const Split& s : kSplits) {
        const int64_t w = s.width();
        const RmsData d = make({s.rows, w}, t, seed++);
        dvec want_rstd;
        const dvec want = rmsnorm_ref(to_d(d.x), to_d(d.gamma), s.rows, w, eps, &want_rstd);
        INFO(ptdp::dtype_name(t) << " rows " << s.rows << " width " << w << " devices " << s.cols.size()
                                 << " eps " << eps);
        fvec rstd;
        const fvec y = split_forward(s, d.x, d.gamma, t, eps, rstd);
        CHECK_ALLCLOSE(y, want, t == DType::F32 ? 1e-6 : 0.0, tol(t));
        CHECK_ALLCLOSE(rstd, want_rstd, 0.0, 1e-6);
        if (s.cols.size() == 1) {
          // One device: rmsnorm_forward's rstd and y (its row sum is not rounded to fp32, so the
          // two may differ in the last bit of rstd).
          Stored x(d.x, t), g(d.gamma, t), y1(d.x, t);
          fvec rs1(static_cast<std::size_t>(s.rows));
          be().rmsnorm_forward(x.data(), g.data(), y1.data(), t, rs1.data(), s.rows, w, eps);
          CHECK_ALLCLOSE(rstd, to_d(rs1), 0.0, 2e-7);
          CHECK_ALLCLOSE(y, to_d(y1.values()), t == DType::F32 ? 1e-6 : 0.0, tol(t));
        }
      }
    }
  }
}

TEST_CASE("rmsnorm_split_backward over 1 to 3 devices: dx and dgamma match finite differences of the "
          "whole-row norm",
          "[rmsnorm][split][backward]") {
  uint32_t seed = 600;
  const float eps = 1e-5f;
  for (const Split& s : kSplits) {
    const int64_t w = s.width();
    const RmsData d = make({s.rows, w}, DType::F32, seed++);
    const dvec G = to_d(d.dy), X = to_d(d.x), Gam = to_d(d.gamma);
    auto L = [&](const dvec& x, const dvec& ga) { return dot(G, rmsnorm_ref(x, ga, s.rows, w, eps)); };
    const dvec want_dx = fd_grad([&](const dvec& x) { return L(x, Gam); }, X);
    const dvec want_dg = fd_grad([&](const dvec& ga) { return L(X, ga); }, Gam);
    INFO("rows " << s.rows << " width " << w << " devices " << s.cols.size());
    fvec rstd;
    split_forward(s, d.x, d.gamma, kF32, eps, rstd);
    fvec dx, dg(static_cast<std::size_t>(w), 9.0f);
    split_backward(s, d.x, d.gamma, rstd, d.dy, kF32, false, dx, dg);
    CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(dg, want_dg, kFdAtol, kFdRtol);
    // Accumulate mode adds to dgamma.
    Rand r(seed++);
    const fvec g0 = r.uniform(w);
    fvec dx2, dg2 = g0;
    split_backward(s, d.x, d.gamma, rstd, d.dy, kF32, true, dx2, dg2);
    dvec want_dg2(want_dg);
    for (std::size_t j = 0; j < want_dg2.size(); ++j) want_dg2[j] += g0[j];
    CHECK_BITEQUAL(dx2, dx);
    CHECK_ALLCLOSE(dg2, want_dg2, kFdAtol, kFdRtol);
  }
}

TEST_CASE("rmsnorm_split_backward: dx and dgamma against the analytic double reference in every storage "
          "type, dx aliasing dy",
          "[rmsnorm][split][backward]") {
  uint32_t seed = 700;
  const float eps = 1e-5f;
  for (DType t : kTypes) {
    for (const Split& s : kSplits) {
      const int64_t w = s.width();
      const RmsData d = make({s.rows, w}, t, seed++);
      fvec rstd;
      split_forward(s, d.x, d.gamma, t, eps, rstd);
      dvec want_dx, want_dg;
      double term_scale = 0.0;
      rmsnorm_backward_ref(to_d(d.x), to_d(d.gamma), to_d(rstd), to_d(d.dy), s.rows, w, want_dx, want_dg,
                           term_scale);
      INFO(ptdp::dtype_name(t) << " rows " << s.rows << " width " << w << " devices " << s.cols.size());
      fvec dx, dg(static_cast<std::size_t>(w), 9.0f);
      split_backward(s, d.x, d.gamma, rstd, d.dy, t, false, dx, dg);
      check_scaled(dx, want_dx, tol(t), term_scale);
      CHECK_ALLCLOSE(dg, want_dg, 1e-6, 1e-5);

      // dx over dy on one device (the whole row): the same bits as separate buffers.
      if (s.cols.size() == 1) {
        Stored x(d.x, t), g(d.gamma, t), dy(d.dy, t), out(fvec(d.x.size(), 9.0f), t);
        fvec dot(static_cast<std::size_t>(s.rows)), dg1(static_cast<std::size_t>(w)), dg2(dg1);
        be().row_dot(dy.data(), x.data(), g.data(), t, dot.data(), s.rows, w);
        be().rmsnorm_split_backward(x.data(), g.data(), rstd.data(), dot.data(), dy.data(), out.data(), t,
                                    dg1.data(), s.rows, w, w, false);
        be().rmsnorm_split_backward(x.data(), g.data(), rstd.data(), dot.data(), dy.data(), dy.data(), t,
                                    dg2.data(), s.rows, w, w, false);
        CHECK_BITEQUAL(dy.values(), out.values());
        CHECK_BITEQUAL(dg2, dg1);
      }
    }
  }
}

TEST_CASE("rmsnorm_split_backward with rows = 0 clears dgamma, or keeps it when accumulating",
          "[rmsnorm][split][backward]") {
  fvec dg(4, 3.0f);
  be().rmsnorm_split_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, kBF16, dg.data(), 0, 4, 8,
                              true);
  CHECK_BITEQUAL(dg, fvec(4, 3.0f));
  be().rmsnorm_split_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, kBF16, dg.data(), 0, 4, 8,
                              false);
  CHECK_BITEQUAL(dg, fvec(4, 0.0f));
  CHECK_NOTHROW(be().rmsnorm_split_forward(nullptr, nullptr, nullptr, nullptr, kF16, nullptr, 0, 4, 8, 1e-5f));
}
