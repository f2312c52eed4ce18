// Cross-entropy over logits [rows, v] that may be one tensor rank's slice of the vocabulary.
// Each slice reads its logits once (ce_forward_local: max, sum of exponentials and target
// logit together); the caller reduces the maxima across the tensor group, moves each slice's
// sum to the global max (ce_rescale) and reduces the sums, so the logits are never gathered.
// The backward pass reads and writes them once more. Both run a branch-free exp (exp_math.h)
// across vector registers; rows are spread over the threads, so a row's result does not depend
// on their number.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/exp_math.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

namespace {

// Columns per step of the online max / sum (8 KB of fp32: the second read of a chunk, for the
// exponentials, comes from L1): one rescale per chunk, not per element.
constexpr int64_t kChunk = 2048;
// Independent running maxima / sums per chunk, so the vector lanes do not wait on each other.
constexpr int kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// ce_rescale and ce_loss do a few flops per row: below this many rows a parallel region costs
// more than the loop.
constexpr int64_t kMinParallelRows = 16384;

/// The largest of x[0, n), n >= 1; NaN elements are skipped (they reach the loss through the
/// sum of exponentials instead).
PTDP_CPU_CLONES float max_of(const float* x, int64_t n) {
  float lane[kLanes];
  for (float& l : lane) l = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
  }
  for (int k = 0; j < n; ++j, ++k) lane[k] = x[j] > lane[k] ? x[j] : lane[k];
  float m = lane[0];
  for (int k = 1; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

/// The sum of exp(x[j] - m) over [0, n), element j into double lane j % kLanes, the lanes then
/// added in order.
PTDP_CPU_CLONES double sum_exp_of(const float* x, int64_t n, float m) {
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(cpu::exp_f32(x[j + k] - m));
  }
  for (int k = 0; j < n; ++j, ++k) lane[k] += static_cast<double>(cpu::exp_f32(x[j] - m));
  double s = 0.0;
  for (double l : lane) s += l;
  return s;
}

/// y[j] = g exp(x[j] - m) inv over [0, n): the softmax scaled by the loss gradient. y may be x
/// (each element is read before it is written).
PTDP_CPU_CLONES void scaled_softmax(const float* x, float* y, int64_t n, float m, float g,
                                    float inv) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = g * cpu::exp_f32(x[j] - m) * inv;
}

/// Adds the fp32 values c[0, n) of a row to its running max m and sum s of exp(x - m).
void add_chunk(const float* c, int64_t n, float& m, double& s) {
  const float cmax = max_of(c, n);
  // A chunk of padded columns (-inf) adds nothing; exp(-inf - -inf) would be NaN.
  if (cmax == kNegInf) return;
  if (cmax > m) {
    s *= std::exp(m - cmax);  // 0 while m is still -inf
    m = cmax;
  }
  s += sum_exp_of(c, n, m);
}

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
      float chunk[kChunk];  // 16-bit logits widened to fp32
      for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
        const int64_t nc = std::min(kChunk, v - c0);
        if constexpr (std::is_same_v<S, float>) {
          add_chunk(x + c0, nc, m, s);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < nc; ++j) chunk[j] = St::load(x[c0 + j]);
          add_chunk(chunk, nc, m, s);
        }
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
#pragma omp parallel for schedule(static) if (rows >= kMinParallelRows)
  for (int64_t r = 0; r < rows; ++r) {
    // A slice without a valid column has nothing to move (and -inf - -inf is NaN).
    sum_exp[r] = row_max[r] == kNegInf ? 0.0f : sum_exp[r] * std::exp(row_max[r] - global_max[r]);
    row_max[r] = global_max[r];
  }
}

void CpuBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t rows, float* loss) {
  kcheck::check_ce_loss(row_max, sum_exp, target_logit, rows, loss);
#pragma omp parallel for schedule(static) if (rows >= kMinParallelRows)
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
      if constexpr (std::is_same_v<S, float>) {
        scaled_softmax(x, dx, v, m, g, inv);
      } else {
        float chunk[kChunk];
        for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
          const int64_t nc = std::min(kChunk, v - c0);
#pragma omp simd
          for (int64_t j = 0; j < nc; ++j) chunk[j] = St::load(x[c0 + j]);
          scaled_softmax(chunk, chunk, nc, m, g, inv);
#pragma omp simd
          for (int64_t j = 0; j < nc; ++j) dx[c0 + j] = St::store(chunk[j]);
        }
      }
      if (here) dx[target] = St::store(g * cpu::exp_f32(x_target - m) * inv - g);
    }
  });
}

}  // namespace ptdp
