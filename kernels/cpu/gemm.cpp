// GEMM through OpenBLAS: single, strided-batched, arbitrary leading dimensions.
#include <cblas.h>

#include <algorithm>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {
namespace {

// Below this many flops per matrix a batch is spread over OpenMP threads, each running a
// single-threaded BLAS call; above it each call already keeps every core busy.
constexpr double kParallelBatchFlops = 1 << 24;

void check_ld(const char* what, int64_t ld, int64_t min_cols) {
  PTDP_CHECK_ARG(ld >= std::max<int64_t>(1, min_cols),
                 std::string("gemm: ") + what + " = " + std::to_string(ld) +
                     " is smaller than the row length " + std::to_string(min_cols));
}

}  // namespace

void CpuBackend::gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  kcheck::nonneg("gemm", "m", d.m);
  kcheck::nonneg("gemm", "n", d.n);
  kcheck::nonneg("gemm", "k", d.k);
  kcheck::nonneg("gemm", "batch", d.batch);
  kcheck::nonneg("gemm", "stride_a", d.stride_a);
  kcheck::nonneg("gemm", "stride_b", d.stride_b);
  kcheck::nonneg("gemm", "stride_c", d.stride_c);
  // Stored shapes (row-major): A is [m, k] or [k, m] when transposed; B is [k, n] or [n, k].
  const int64_t a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_cols = d.trans_b ? d.k : d.n;
  const int64_t lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  const int64_t ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  const int64_t ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  check_ld("lda", lda, a_cols);
  check_ld("ldb", ldb, b_cols);
  check_ld("ldc", ldc, d.n);
  if (d.m == 0 || d.n == 0 || d.batch == 0) return;
  kcheck::not_null("gemm", "c", c);
  if (d.k > 0) {
    kcheck::not_null("gemm", "a", a);
    kcheck::not_null("gemm", "b", b);
  }
  if (d.batch > 1) {
    PTDP_CHECK_ARG(d.stride_c > 0, "gemm: stride_c must be > 0 when batch > 1 (outputs would overlap)");
  }
  const auto ta = d.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = d.trans_b ? CblasTrans : CblasNoTrans;
  const auto one = [&](int64_t i) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(d.m), static_cast<blasint>(d.n),
                static_cast<blasint>(d.k), d.alpha, a + i * d.stride_a, static_cast<blasint>(lda),
                b + i * d.stride_b, static_cast<blasint>(ldb), d.beta, c + i * d.stride_c,
                static_cast<blasint>(ldc));
  };
  const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
  if (d.batch == 1 || flops >= kParallelBatchFlops) {
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  }
}

}  // namespace ptdp
