// Cross-entropy over logits [rows, v] that may be one tensor rank's slice of the vocabulary.
// The pieces (row max, sum of exponentials, target logit) are reduced across the tensor group
// by the caller between the calls, so the logits are never gathered.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace ptdp {

namespace {

void check_rows(const char* op, int64_t rows, int64_t v) {
  kcheck::nonneg(op, "rows", rows);
  kcheck::nonneg(op, "v", v);
}

}  // namespace

void CpuBackend::ce_row_max(const float* logits, int64_t rows, int64_t v, float* row_max) {
  check_rows("ce_row_max", rows, v);
  kcheck::not_null("ce_row_max", "logits", logits, rows * v);
  kcheck::not_null("ce_row_max", "row_max", row_max, rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * v;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, x[j]);
    row_max[r] = mx;
  }
}

void CpuBackend::ce_sum_exp(const float* logits, const float* row_max, int64_t rows, int64_t v,
                            float* sum_exp) {
  check_rows("ce_sum_exp", rows, v);
  kcheck::not_null("ce_sum_exp", "logits", logits, rows * v);
  kcheck::not_null("ce_sum_exp", "row_max", row_max, rows);
  kcheck::not_null("ce_sum_exp", "sum_exp", sum_exp, rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * v;
    const float m = row_max[r];
    double s = 0.0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[j] - m);
    sum_exp[r] = static_cast<float>(s);
  }
}

void CpuBackend::ce_target_logit(const float* logits, const int32_t* targets, int64_t rows,
                                 int64_t v, int64_t vocab_start, float* target_logit) {
  check_rows("ce_target_logit", rows, v);
  kcheck::nonneg("ce_target_logit", "vocab_start", vocab_start);
  kcheck::not_null("ce_target_logit", "logits", logits, rows * v);
  kcheck::not_null("ce_target_logit", "targets", targets, rows);
  kcheck::not_null("ce_target_logit", "target_logit", target_logit, rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = static_cast<int64_t>(targets[r]) - vocab_start;
    target_logit[r] = (j >= 0 && j < v) ? logits[r * v + j] : 0.0f;
  }
}

void CpuBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t rows, float* loss) {
  kcheck::nonneg("ce_loss", "rows", rows);
  kcheck::not_null("ce_loss", "row_max", row_max, rows);
  kcheck::not_null("ce_loss", "sum_exp", sum_exp, rows);
  kcheck::not_null("ce_loss", "target_logit", target_logit, rows);
  kcheck::not_null("ce_loss", "loss", loss, rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) loss[r] = std::log(sum_exp[r]) + row_max[r] - target_logit[r];
}

void CpuBackend::ce_backward(const float* logits, const float* row_max, const float* sum_exp,
                             const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                             int64_t vocab_start, float* dlogits) {
  check_rows("ce_backward", rows, v);
  kcheck::nonneg("ce_backward", "vocab_start", vocab_start);
  kcheck::not_null("ce_backward", "logits", logits, rows * v);
  kcheck::not_null("ce_backward", "row_max", row_max, rows);
  kcheck::not_null("ce_backward", "sum_exp", sum_exp, rows);
  kcheck::not_null("ce_backward", "targets", targets, rows);
  kcheck::not_null("ce_backward", "dloss", dloss, rows);
  kcheck::not_null("ce_backward", "dlogits", dlogits, rows * v);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * v;
    float* dx = dlogits + r * v;
    const float m = row_max[r];
    const float inv = 1.0f / sum_exp[r];
    const float g = dloss[r];
    for (int64_t j = 0; j < v; ++j) dx[j] = g * std::exp(x[j] - m) * inv;
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_start;
    if (t >= 0 && t < v) dx[t] -= g;
  }
}

}  // namespace ptdp
