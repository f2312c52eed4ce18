// GEMM through OpenBLAS: single, strided-batched, arbitrary leading dimensions.
#include <cblas.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {
namespace {

// Below this many flops per matrix a batch is spread over OpenMP threads, each running a
// single-threaded BLAS call; above it each call already keeps every core busy.
constexpr double kParallelBatchFlops = 1 << 24;

}  // namespace

void CpuBackend::gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  const kcheck::GemmLayout layout = kcheck::check_gemm(d, a, b, c);
  if (layout.work == kcheck::Work::none) return;
  const int64_t lda = layout.lda, ldb = layout.ldb, ldc = layout.ldc;
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
