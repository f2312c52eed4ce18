// Cross-entropy over logits [rows, v] that may be one tensor rank's slice of the vocabulary.
// The pieces (row max, sum of exponentials, target logit) are reduced across the tensor group
// by the caller between the calls, so the logits are never gathered.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::ce_row_max(const float* logits, int64_t rows, int64_t v, float* row_max) {
  kcheck::check_ce_row_max(logits, rows, v, row_max);
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
  kcheck::check_ce_sum_exp(logits, row_max, rows, v, sum_exp);
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
  kcheck::check_ce_target_logit(logits, targets, rows, v, vocab_start, target_logit);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = static_cast<int64_t>(targets[r]) - vocab_start;
    target_logit[r] = (j >= 0 && j < v) ? logits[r * v + j] : 0.0f;
  }
}

void CpuBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t rows, float* loss) {
  kcheck::check_ce_loss(row_max, sum_exp, target_logit, rows, loss);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) loss[r] = std::log(sum_exp[r]) + row_max[r] - target_logit[r];
}

void CpuBackend::ce_backward(const float* logits, const float* row_max, const float* sum_exp,
                             const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                             int64_t vocab_start, float* dlogits) {
  kcheck::check_ce_backward(logits, row_max, sum_exp, targets, dloss, rows, v, vocab_start,
                            dlogits);
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
