// Newton-Schulz orthogonalisation (Muon) through OpenBLAS: the iteration of NewtonSchulzDesc on
// the [k, n] orientation (k = min(rows, cols), n = max), in per-thread fp32 scratch.
//
// A = X X^T and A A are symmetric, so both come from cblas_ssyrk (half the multiplications of
// a GEMM), which writes one triangle; A's other triangle is filled because A is the full left
// operand of the second ssyrk, while B is only read through cblas_ssymm, which needs one
// triangle. Every BLAS call partitions the output, never the inner dimension, so the bits
// depend on the thread count only through OpenBLAS's kernel choice, not on the schedule. The
// norm's sum runs per row in double lanes and adds the rows in order (any thread count).
//
// precision 2 emulates PyTorch's torch.optim.Muon, whose iteration runs on bf16 tensors: X is
// rounded to bf16 after the normalisation and A, B and X after each product; the products and
// their epilogues (b A + c A A, a X + B X) accumulate in fp32 as a bf16 GEMM does. precision 1
// (TF32 on CUDA) is fp32 here.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

constexpr int kLanes = 8;
constexpr int64_t kTile = 32;                      // transpose tile
constexpr int64_t kMinParallel = int64_t{1} << 15;  // elements below which one thread is faster

// Per-thread scratch (grown, never shrunk): X and the next X [k, n], A and B [k, k], the norm's
// row sums [k].
struct Scratch {
  std::vector<float> x, y, a, b;
  std::vector<double> row_sums;
};
thread_local Scratch scratch;

float* sized(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

// dst [cols, rows] = src [rows, cols]^T.
void transpose(const float* src, float* dst, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallel && !omp_in_parallel())
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

// ||x||_F of x [rows, cols] in double: each row in kLanes lanes, the rows added in order.
double frobenius_norm(const float* x, int64_t rows, int64_t cols, std::vector<double>& row_sums) {
  if (static_cast<int64_t>(row_sums.size()) < rows) row_sums.resize(static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallel && !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double lane[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(xr[c + l]) * xr[c + l];
    }
    for (int l = 0; c < cols; ++c, ++l) lane[l] += static_cast<double>(xr[c]) * xr[c];
    double s = 0.0;
    for (int l = 0; l < kLanes; ++l) s += lane[l];
    row_sums[static_cast<std::size_t>(r)] = s;
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += row_sums[static_cast<std::size_t>(r)];
  return std::sqrt(total);
}

float round_to_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// x[i] = x[i] / div, rounded to bf16 when bf16 is set.
void normalise(float* x, int64_t n, float div, bool bf16) {
#pragma omp parallel for schedule(static) if (n >= kMinParallel && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / div;
    x[i] = bf16 ? round_to_bf16(v) : v;
  }
}

// Rounds x [n] to bf16 values (round to nearest even), kept in fp32.
void round_bf16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallel && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

// Copies the upper triangle of a [k, k] into its lower triangle.
void fill_lower(float* a, int64_t k) {
#pragma omp parallel for schedule(static) if (k * k >= kMinParallel && !omp_in_parallel())
  for (int64_t r = 1; r < k; ++r) {
    for (int64_t c = 0; c < r; ++c) a[r * k + c] = a[c * k + r];
  }
}

// Rounds the upper triangle (diagonal included) of a [k, k] to bf16.
void round_upper_bf16(float* a, int64_t k) {
#pragma omp parallel for schedule(static) if (k * k >= kMinParallel && !omp_in_parallel())
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = r; c < k; ++c) a[r * k + c] = round_to_bf16(a[r * k + c]);
  }
}

}  // namespace

void CpuBackend::newton_schulz(float* x, const NewtonSchulzDesc& d) {
  kcheck::check_newton_schulz(x, d);
  const bool tall = d.rows > d.cols;
  const int64_t k = tall ? d.cols : d.rows, n = tall ? d.rows : d.cols;
  const bool bf16 = d.precision == 2;
  const auto bk = static_cast<blasint>(k), bn = static_cast<blasint>(n);
  Scratch& s = scratch;
  float* xs = sized(s.x, k * n);  // X [k, n]
  float* ys = sized(s.y, k * n);  // the next X [k, n]
  float* a = sized(s.a, k * k);   // A [k, k], both triangles
  float* b = sized(s.b, k * k);   // B [k, k], upper triangle

  if (tall) {
    transpose(x, xs, d.rows, d.cols);
  } else {
    std::copy(x, x + k * n, xs);
  }
  const double norm = frobenius_norm(xs, k, n, s.row_sums);
  normalise(xs, k * n, std::max(static_cast<float>(norm), d.eps), bf16);

  for (int i = 0; i < d.steps; ++i) {
    const float* coef = d.coefficients[i % d.num_sets];
    // A = X X^T [k, k]
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, bk, bn, 1.0f, xs, bn, 0.0f, a, bk);
    if (bf16) round_upper_bf16(a, k);
    fill_lower(a, k);
    // B = b A + c A A (= c A A^T + b A) [k, k], upper triangle
    std::copy(a, a + k * k, b);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, bk, bk, coef[2], a, bk, coef[1], b, bk);
    if (bf16) round_upper_bf16(b, k);
    // X = a X + B X [k, n]
    std::copy(xs, xs + k * n, ys);
    cblas_ssymm(CblasRowMajor, CblasLeft, CblasUpper, bk, bn, 1.0f, b, bk, xs, bn, coef[0], ys, bn);
    if (bf16) round_bf16(ys, k * n);
    std::swap(xs, ys);
  }

  if (tall) {
    transpose(xs, x, k, n);
  } else {
    std::copy(xs, xs + k * n, x);
  }
}

}  // namespace ptdp
