// Cross-entropy over logits [rows, v] that may be one tensor rank's slice of the vocabulary.
// Each slice reads its logits once (ce_forward_local: max, sum of exponentials and target
// logit together); the caller reduces the maxima across the tensor group, moves each slice's
// sum to the global max (ce_rescale) and reduces the sums, so the logits are never gathered.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

// Columns per step of the online max / sum: one rescale per chunk, not per element.
constexpr int64_t kChunk = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

void CpuBackend::ce_forward_local(const void* logits, DType t, const int32_t* targets,
                                  int64_t rows, int64_t v, int64_t vocab_start, float* row_max,
                                  float* sum_exp, float* target_logit) {
  kcheck::check_ce_forward_local(logits, t, targets, rows, v, vocab_start, row_max, sum_exp,
                                 target_logit);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* x = static_cast<const S*>(logits) + r * v;
      const int64_t target = static_cast<int64_t>(targets[r]) - vocab_start;
      float m = kNegInf;
      double s = 0.0;
      float chunk[kChunk];
      for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
        const int64_t nc = std::min(kChunk, v - c0);
        float cmax = kNegInf;
        for (int64_t j = 0; j < nc; ++j) {
          chunk[j] = St::load(x[c0 + j]);
          cmax = std::max(cmax, chunk[j]);
        }
        // A chunk of padded columns (-inf) adds nothing; exp(-inf - -inf) would be NaN.
        if (cmax == kNegInf) continue;
        if (cmax > m) {
          s *= std::exp(m - cmax);  // 0 while m is still -inf
          m = cmax;
        }
        double cs = 0.0;
        for (int64_t j = 0; j < nc; ++j) cs += std::exp(chunk[j] - m);
        s += cs;
      }
      row_max[r] = m;
      sum_exp[r] = static_cast<float>(s);
      target_logit[r] = (target >= 0 && target < v) ? St::load(x[target]) : 0.0f;
    }
  });
}

void CpuBackend::ce_rescale(float* row_max, float* sum_exp, const float* global_max,
                            int64_t rows) {
  kcheck::check_ce_rescale(row_max, sum_exp, global_max, rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    // A slice without a valid column has nothing to move (and -inf - -inf is NaN).
    sum_exp[r] = row_max[r] == kNegInf ? 0.0f : sum_exp[r] * std::exp(row_max[r] - global_max[r]);
    row_max[r] = global_max[r];
  }
}

void CpuBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t rows, float* loss) {
  kcheck::check_ce_loss(row_max, sum_exp, target_logit, rows, loss);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) loss[r] = std::log(sum_exp[r]) + row_max[r] - target_logit[r];
}

void CpuBackend::ce_backward(const void* logits, DType t, const float* row_max,
                             const float* sum_exp, const int32_t* targets, const float* dloss,
                             int64_t rows, int64_t v, int64_t vocab_start, void* dlogits) {
  kcheck::check_ce_backward(logits, t, row_max, sum_exp, targets, dloss, rows, v, vocab_start,
                            dlogits);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const S* x = static_cast<const S*>(logits) + r * v;
      S* dx = static_cast<S*>(dlogits) + r * v;
      const float m = row_max[r];
      const float inv = 1.0f / sum_exp[r];
      const float g = dloss[r];
      const int64_t target = static_cast<int64_t>(targets[r]) - vocab_start;
      const bool here = target >= 0 && target < v;
      // Read before dlogits (which may alias logits) is written; the target's gradient is
      // finished in fp32 and rounded once.
      const float x_target = here ? St::load(x[target]) : 0.0f;
      for (int64_t j = 0; j < v; ++j) dx[j] = St::store(g * std::exp(St::load(x[j]) - m) * inv);
      if (here) dx[target] = St::store(g * std::exp(x_target - m) * inv - g);
    }
  });
}

}  // namespace ptdp
