// sgemm_peak.h: OpenBLAS's square sgemm rate sampled several times during a benchmark run
// (bench_gpt, bench_kernels), so that "% of peak" is measured against a ceiling taken while the
// machine was in the same state as the timed work. On a shared machine one measurement at the
// start can catch a quiet or a busy moment, and a figure above 100% of it follows.
//
// The matrices are bench/host_buffer.h arrays: the memory the model's tensors get (huge pages
// included), so the ceiling is not measured on memory the model would be slower or faster on.
// Each sample is the best of a few short cblas_sgemm calls (square n, chosen so one call takes
// about 20-60 ms); the peak is the best sample. The spread is the lowest sample in % of the best;
// a run whose samples differ by more than kPeakMovedPercent is flagged.
// Header-only; needs cblas.h (the benchmarks that link OpenBLAS include it, others don't).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/host_buffer.h"

namespace ptdp::bench {

/// Samples further apart than this (in % of the best) flag the run: the machine's state moved.
inline constexpr double kPeakMovedPercent = 10.0;

class SgemmPeak {
 public:
  struct Sample {
    std::string where;     // the moment of the run ("before the model")
    double best_s = 0.0;   // the fastest of the sample's calls
    double gflop_per_s = 0.0;
  };

  /// n > 0 fixes the size; 0 picks it from a first timed call so that one call takes ~20-60 ms.
  explicit SgemmPeak(int n = 0, int calls_per_sample = 5) : calls_(std::max(1, calls_per_sample)) {
    resize(n > 0 ? n : 1024);
    if (n > 0) return;
    // One call to warm up (threads, pages), then the best of three (a busy moment would pick a
    // small n); the rate is flat in n above ~512, so the time scales with n^3.
    call();
    double t = 1e300;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      call();
      t = std::min(t, seconds_since(t0));
    }
    if (t < 0.020 || t > 0.060) {
      const double scaled = n_ * std::cbrt(0.035 / std::max(t, 1e-6));
      resize(std::clamp(static_cast<int>(std::lround(scaled / 128.0)) * 128, 512, 4096));
      call();
    }
  }

  /// Takes one sample now: the best of calls_per_sample calls. Returns its GFLOP/s.
  double sample(const std::string& where) {
    double best = 1e300;
    for (int i = 0; i < calls_; ++i) {
      const auto t0 = Clock::now();
      call();
      best = std::min(best, seconds_since(t0));
    }
    samples_.push_back(Sample{where, best, flops() / best * 1e-9});
    return samples_.back().gflop_per_s;
  }

  /// sample(where), printed on one line of its own; returns the best sample so far.
  double sample_and_print(const char* where) {
    const double g = sample(where);
    std::printf("   [sgemm peak sample %s: %.1f GFLOP/s]\n", where, g);
    std::fflush(stdout);
    return best();
  }

  int n() const { return n_; }
  int calls_per_sample() const { return calls_; }
  double flops() const { return 2.0 * static_cast<double>(n_) * n_ * n_; }
  const std::vector<Sample>& samples() const { return samples_; }

  /// The best sample's GFLOP/s (0 before the first sample).
  double best() const {
    double b = 0.0;
    for (const Sample& s : samples_) b = std::max(b, s.gflop_per_s);
    return b;
  }
  /// The best of samples first .. last (indices into samples(), clamped): the ceiling of the
  /// work timed between sample `first` and sample `last`, the machine as it was around that
  /// work rather than at its best moment of the whole run (0 when no sample is in range).
  double best_between(std::size_t first, std::size_t last) const {
    double b = 0.0;
    for (std::size_t i = first; i <= last && i < samples_.size(); ++i) b = std::max(b, samples_[i].gflop_per_s);
    return b;
  }
  /// The index the next sample() will have.
  std::size_t next_index() const { return samples_.size(); }

  /// The lowest sample in % of the best (100 with one sample, 0 with none).
  double lowest_percent() const {
    if (samples_.empty()) return 0.0;
    double lo = 1e300;
    for (const Sample& s : samples_) lo = std::min(lo, s.gflop_per_s);
    return 100.0 * lo / best();
  }
  /// How far the peak moved between samples, in % of the best.
  double moved_percent() const { return samples_.empty() ? 0.0 : 100.0 - lowest_percent(); }
  /// True when the samples differ by more than kPeakMovedPercent: the machine was not steady.
  bool moved() const { return moved_percent() > kPeakMovedPercent; }

  /// "54.3%" of the best sample, or "104.2%!" where the rate is above it: a rate above the
  /// measured ceiling is an anomaly (a busy moment during every sample, or a bad count), never
  /// a result, so it is never printed without the mark.
  std::string percent(double gflop_per_s) const {
    const double p = best();
    if (p <= 0.0) return "-";
    char buf[32];
    const double pct = 100.0 * gflop_per_s / p;
    std::snprintf(buf, sizeof buf, "%.1f%%%s", pct, pct > 100.0 ? "!" : "");
    return buf;
  }

  /// Prints the samples, the peak, the spread and, when the peak moved, the warning line.
  void print(const char* indent) const {
    std::printf("%ssgemm peak: square n = %d, each sample the best of %d calls, the peak the best sample\n",
                indent, n_, calls_);
    for (const Sample& s : samples_) {
      std::printf("%s  %-40s %8.1f GFLOP/s  %6.1f%%  (%.1f ms per call)\n", indent, s.where.c_str(),
                  s.gflop_per_s, 100.0 * s.gflop_per_s / best(), s.best_s * 1e3);
    }
    std::printf("%speak %.1f GFLOP/s; samples %.1f%% .. 100.0%% of it (moved %.1f%%)\n", indent, best(),
                lowest_percent(), moved_percent());
    if (moved())
      std::printf("%sWARNING: the sgemm peak moved by %.1f%% (> %.0f%%) between samples: the machine was not "
                  "steady (other processes?); figures against the peak are uncertain, rerun on an idle machine\n",
                  indent, moved_percent(), kPeakMovedPercent);
  }

  /// The probe as a JSON object: n, calls, samples, peak, spread and the flag.
  std::string json() const {
    std::string s = "{\"n\": " + std::to_string(n_) + ", \"calls_per_sample\": " + std::to_string(calls_) +
                    ", \"samples\": [";
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      s += (i ? ", " : "") + std::string("{\"where\": \"") + json_escape(samples_[i].where) +
           "\", \"gflop_per_s\": " + json_number(samples_[i].gflop_per_s) +
           ", \"ms_per_call\": " + json_number(samples_[i].best_s * 1e3) + "}";
    }
    s += "], \"gflop_per_s\": " + json_number(best()) + ", \"lowest_percent\": " + json_number(lowest_percent()) +
         ", \"moved_percent\": " + json_number(moved_percent()) + ", \"peak_moved\": " +
         (moved() ? "true" : "false") + "}";
    return s;
  }

 private:
  void resize(int n) {
    n_ = n;
    const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    a_ = std::make_unique<Buffer<float>>(static_cast<int64_t>(nn));
    b_ = std::make_unique<Buffer<float>>(static_cast<int64_t>(nn));
    c_ = std::make_unique<Buffer<float>>(static_cast<int64_t>(nn));
    std::fill(c_->get(), c_->get() + nn, 0.0f);
    float* a = a_->get();
    float* b = b_->get();
    uint64_t state = 0x9eedull;
    for (std::size_t i = 0; i < nn; ++i) {
      a[i] = static_cast<float>(splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
      b[i] = static_cast<float>(splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
  }
  void call() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_, n_, n_, 1.0f, a_->get(), n_, b_->get(), n_, 0.0f,
                c_->get(), n_);
  }

  int n_ = 0;
  int calls_ = 5;
  std::unique_ptr<Buffer<float>> a_, b_, c_;
  std::vector<Sample> samples_;
};

}  // namespace ptdp::bench
