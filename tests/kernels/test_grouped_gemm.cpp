// Grouped GEMM (GroupedGemmDesc): varying M (an expert linear's forward and dgrad) and varying K
// (its wgrad, accumulating 16-bit products into fp32 with beta = 1) against per-group GEMMs in
// double, in every storage type, with groups of zero rows, padded leading dimensions and spaced
// weights; each group's bits equal one single-threaded gemm() over the whole group whatever the
// thread count (the row blocks start at multiples of every micro-kernel's unroll).
#include <catch2/catch.hpp>

#include <numeric>

#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;
using ptdp::GroupedDim;
using ptdp::GroupedGemmDesc;

namespace {

/// Relative tolerance of a result of k products rounded once to t.
double rtol_of(DType c) { return c == DType::BF16 ? 1.0 / 128.0 : c == DType::F16 ? 1.0 / 1024.0 : 1e-5; }

struct Case {
  GroupedGemmDesc d;
  std::vector<int64_t> sizes;
};

int64_t total(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t{0}); }

/// Elements of A, B and C the call reads or writes, with the layout the checks resolve.
struct Extents {
  int64_t lda, ldb, ldc, stride, a, b, c;
};

Extents extents(const GroupedGemmDesc& d) {
  Extents x{};
  const bool vm = d.varying == GroupedDim::M;
  const int64_t a_cols = vm ? d.k : d.m, b_cols = vm ? (d.trans_b ? d.k : d.n) : d.n;
  x.lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  x.ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  x.ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  const int64_t fixed_rows = vm ? (d.trans_b ? d.n : d.k) : d.m;
  x.stride = d.stride ? d.stride : fixed_rows * (vm ? x.ldb : x.ldc);
  if (vm) {
    x.a = d.m * x.lda;
    x.b = d.groups * x.stride;
    x.c = d.m * x.ldc;
  } else {
    x.a = d.k * x.lda;
    x.b = d.k * x.ldb;
    x.c = d.groups * x.stride;
  }
  return x;
}

/// The grouped product in double from the stored values of A, B and C.
dvec grouped_ref(const GroupedGemmDesc& d, const fvec& a, const fvec& b, const fvec& c) {
  const Extents x = extents(d);
  dvec ad = to_d(a), bd = to_d(b), out = to_d(c);
  int64_t off = 0;
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t s = d.sizes[g];
    if (d.varying == GroupedDim::M) {
      ref_gemm1(false, d.trans_b, s, d.n, d.k, d.alpha, ad.data() + off * x.lda, x.lda,
                bd.data() + g * x.stride, x.ldb, d.beta, out.data() + off * x.ldc, x.ldc);
    } else {
      ref_gemm1(true, false, d.m, d.n, s, d.alpha, ad.data() + off * x.lda, x.lda,
                bd.data() + off * x.ldb, x.ldb, d.beta, out.data() + g * x.stride, x.ldc);
    }
    off += s;
  }
  return out;
}

/// Runs d on the CPU backend from random A, B and C of its types; returns C's values and the
/// double reference.
std::pair<fvec, dvec> run(GroupedGemmDesc d, const std::vector<int64_t>& sizes, uint32_t seed) {
  d.sizes = sizes.data();
  d.groups = static_cast<int64_t>(sizes.size());
  const Extents x = extents(d);
  Rand r(seed);
  Stored a(r.uniform(x.a), d.a_type), b(r.uniform(x.b), d.b_type), c(r.uniform(x.c), d.c_type);
  const dvec want = grouped_ref(d, a.values(), b.values(), c.values());
  be().grouped_gemm(d, a.data(), b.data(), c.data());
  return {c.values(), want};
}

struct Types {
  DType ab, c;
};
const Types kTypes[] = {{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::F16, DType::F16},
                        {DType::BF16, DType::F32}, {DType::F16, DType::F32}};

}  // namespace

TEST_CASE("grouped_gemm varying M equals each expert's X W^T and dY W, zero-row groups included",
          "[grouped_gemm]") {
  const std::vector<int64_t> sizes = {5, 0, 13, 1, 0, 9};
  uint32_t seed = 10;
  for (const Types& ty : kTypes) {
    for (bool trans_b : {true, false}) {
      GroupedGemmDesc d;
      d.varying = GroupedDim::M;
      d.trans_b = trans_b;
      d.m = total(sizes);
      d.n = 7;
      d.k = 11;
      d.a_type = d.b_type = ty.ab;
      d.c_type = ty.c;
      INFO(ptdp::dtype_name(ty.ab) << " -> " << ptdp::dtype_name(ty.c) << " trans_b " << trans_b);
      const auto [got, want] = run(d, sizes, ++seed);
      CHECK_ALLCLOSE(got, want, 1e-5, rtol_of(ty.c));
    }
  }
}

TEST_CASE("grouped_gemm varying K accumulates each expert's dY^T X into fp32 with beta = 1",
          "[grouped_gemm]") {
  // Expert 1 received no token: beta = 1 leaves its gradient, beta = 0 clears it.
  const std::vector<int64_t> sizes = {6, 0, 17, 2};
  uint32_t seed = 40;
  for (const Types& ty : kTypes) {
    for (float beta : {1.0f, 0.0f, 0.5f}) {
      GroupedGemmDesc d;
      d.varying = GroupedDim::K;
      d.m = 9;
      d.n = 5;
      d.k = total(sizes);
      d.beta = beta;
      d.alpha = 0.75f;
      d.a_type = d.b_type = ty.ab;
      d.c_type = ty.c;
      INFO(ptdp::dtype_name(ty.ab) << " -> " << ptdp::dtype_name(ty.c) << " beta " << beta);
      const auto [got, want] = run(d, sizes, ++seed);
      CHECK_ALLCLOSE(got, want, 1e-5, rtol_of(ty.c));
    }
  }
}

TEST_CASE("grouped_gemm honours padded leading dimensions and spaced expert weights", "[grouped_gemm]") {
  const std::vector<int64_t> sizes = {3, 4, 0, 2};
  GroupedGemmDesc m;
  m.varying = GroupedDim::M;
  m.trans_b = true;
  m.m = total(sizes);
  m.n = 6;
  m.k = 5;
  m.lda = 8;
  m.ldb = 7;
  m.ldc = 9;
  m.stride = 6 * 7 + 3;  // B_g [6, 5] with ld 7, then 3 unused elements
  {
    const auto [got, want] = run(m, sizes, 70);
    CHECK_ALLCLOSE(got, want, 1e-5, 1e-5);
  }
  GroupedGemmDesc k;
  k.varying = GroupedDim::K;
  k.m = 4;
  k.n = 3;
  k.k = total(sizes);
  k.lda = 6;
  k.ldb = 5;
  k.ldc = 4;
  k.stride = 4 * 4 + 1;
  k.beta = 1.0f;
  const auto [got, want] = run(k, sizes, 71);
  CHECK_ALLCLOSE(got, want, 1e-5, 1e-5);
}

TEST_CASE("grouped_gemm gives each group a one-thread gemm()'s bits for any thread count", "[grouped_gemm]") {
  // Groups long enough to be cut into several row blocks (k = n = 256: blocks of 256 rows).
  const std::vector<int64_t> sizes = {600, 0, 77, 300};
  for (GroupedDim v : {GroupedDim::M, GroupedDim::K}) {
    GroupedGemmDesc d;
    d.varying = v;
    d.trans_b = v == GroupedDim::M;
    d.groups = static_cast<int64_t>(sizes.size());
    d.sizes = sizes.data();
    if (v == GroupedDim::M) {
      d.m = total(sizes);
      d.n = d.k = 256;
    } else {
      d.m = 700;  // C_g's rows are cut into blocks
      d.n = 256;
      d.k = total(sizes);
      d.beta = 1.0f;
    }
    const Extents x = extents(d);
    Rand r(80 + static_cast<uint32_t>(v));
    const fvec a = r.uniform(x.a), b = r.uniform(x.b), c0 = r.uniform(x.c);
    // One single-threaded gemm() per group (OpenBLAS's own threads may sum in another order).
    fvec want = c0;
    int64_t off = 0;
    for (int64_t g = 0; g < d.groups; ++g) {
      ptdp::GemmDesc one;
      one.trans_a = v == GroupedDim::K;
      one.trans_b = d.trans_b;
      one.m = v == GroupedDim::M ? sizes[static_cast<std::size_t>(g)] : d.m;
      one.n = d.n;
      one.k = v == GroupedDim::M ? d.k : sizes[static_cast<std::size_t>(g)];
      one.beta = d.beta;
      with_threads(1, [&] {
        if (v == GroupedDim::M) {
          be().gemm(one, a.data() + off * x.lda, b.data() + g * x.stride, want.data() + off * x.ldc);
        } else {
          be().gemm(one, a.data() + off * x.lda, b.data() + off * x.ldb, want.data() + g * x.stride);
        }
      });
      off += sizes[static_cast<std::size_t>(g)];
    }
    for (int threads : {1, 2, 3}) {
      fvec got = c0;
      with_threads(threads, [&] { be().grouped_gemm(d, a.data(), b.data(), got.data()); });
      INFO("varying " << (v == GroupedDim::M ? "M" : "K") << ", " << threads << " threads");
      CHECK_BITEQUAL(got, want);
    }
  }
}

TEST_CASE("grouped_gemm with no rows or no groups writes nothing", "[grouped_gemm]") {
  fvec c(12, 3.0f);
  const std::vector<int64_t> zeros = {0, 0};
  GroupedGemmDesc d;
  d.varying = GroupedDim::M;
  d.groups = 2;
  d.sizes = zeros.data();
  d.n = 3;
  d.k = 4;
  be().grouped_gemm(d, nullptr, nullptr, c.data());
  CHECK_BITEQUAL(c, fvec(12, 3.0f));
  d.groups = 0;
  d.sizes = nullptr;
  be().grouped_gemm(d, nullptr, nullptr, nullptr);
}
