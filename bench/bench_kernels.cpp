// bench_kernels: throughput of the CPU backend at GPT-2-small sizes.
//
//   1. OpenBLAS's peak: short square cblas_sgemm calls sampled before, between and after the
//      sections (bench/sgemm_peak.h); the best sample is the ceiling every GEMM below is compared
//      with, and a run whose samples differ by more than 10% is flagged.
//   2. Every GEMM of one GPT-2-small transformer layer (h=768, s=1024, b=2, a=12 heads, dh=64,
//      ffn=3072), forward and backward, through Backend::gemm: GFLOP/s and % of (1). The
//      warm-up call of each GEMM is also checked against a double-precision dot product at a
//      few sampled elements, so a wrong layout shows up as CHECK FAILED instead of a number.
//   2b. fc1's forward (bias + GeLU epilogue) and wgrad with bf16 operands, and the fused causal
//      attention (fp32 and bf16, forward and backward, and grouped-query with 4 key/value heads
//      for the 12 query heads) in GFLOP/s over the visible half of the scores; then the fused
//      kernels beside the unfused sequence the layer runs (strided-batched GEMMs + causal
//      softmax + GEMM) at s 64 b 4 and s 1024 b 1, both counted over the visible half.
//   2c. An MoE layer's experts at OLMoE-1B-7B's shape (h 2048, expert ffn 1024 with SwiGLU, 64
//      experts, top-8; tokens scaled down for a few cores): the six grouped GEMMs of the two
//      expert linears (forward, dgrad, wgrad) through Backend::grouped_gemm, each beside one
//      plain GEMM of the same total FLOPs (every token on one expert) in GFLOP/s and % of (1);
//      then the router, the routing sort, dispatch and combine with their backwards, and their
//      share of the layer's time (those plus the grouped GEMMs and SwiGLU).
//   2d. Muon's Newton-Schulz orthogonalisation (5 quintic steps) of a [768, 768], a [768, 3072]
//      and (full mode) a [2048, 8192] matrix, fp32 and bf16 emulation, in GFLOP/s of the full
//      products (ptdp::newton_schulz_flops) and % of (1).
//   3. The memory-bound ops at GPT-2-small sizes in GB/s, counting the minimum bytes the op
//      must read and write (formula next to each op), with the Llama family's RMSNorm, SwiGLU
//      and RoPE at the same sizes. The AdamW step's GB/s is set beside ceilings measured in the
//      same run over buffers as large: STREAM's triad (mem/stream_triad) and a kernel with
//      AdamW's traffic but none of its arithmetic (mem/stream_r4w3: read 4 arrays, write 3),
//      and, as before, a memcpy per thread (mem/stream_copy).
//
// Timing: one warm-up call, then `runs` runs. The first run repeats the op until min_time has
// passed and fixes the iteration count of the others; each run yields a time per call. The
// tables show the median and the best run; rates (GFLOP/s, GB/s, % of peak) use the median.
// GFLOP and GB are 1e9. Run with --help for the flags.

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/half.h"
#include "bench/bench_common.h"
#include "bench/host_buffer.h"
#include "bench/sgemm_peak.h"
#include "bench/unfused_attention.h"
#include "kernels/backend.h"
#include "kernels/cpu/simd_clones.h"

namespace {

using ptdp::Backend;
using ptdp::DType;
using ptdp::GemmDesc;
using ptdp::bench::Buffer;
using ptdp::bench::Clock;
using ptdp::bench::cpu_seconds;
using ptdp::bench::json_escape;
using ptdp::bench::json_number;
using ptdp::bench::machine_busy_seconds;
using ptdp::bench::seconds_since;
using ptdp::bench::splitmix64;
using ptdp::bench::trim;

// ---- options ---------------------------------------------------------------------------------

struct Options : ptdp::bench::CaseOptions {
  bool list = false;
  double budget = 0.0;  // seconds one benchmark may take before its runs are cut
  int threads = 0;      // 0: leave OpenMP's default
  std::string gemm_table_path;  // --gemm-table: measure the planner's sgemm efficiency table
  std::string gemm_sizes = "32,64,128,256,512,1024,2048";  // --gemm-sizes: its grid
};

void print_help(const char* argv0) {
  ptdp::bench::print_help(
      argv0,
      "Benchmarks the CPU backend's kernels at GPT-2-small sizes: OpenBLAS's square sgemm peak,\n"
      "every GEMM of one transformer layer (forward and backward) through Backend::gemm, bf16\n"
      "GEMMs and the fused attention (gemm_bf16/, attn/), and the memory-bound ops in GB/s.\n"
      "\n"
      "Options:\n",
      {{"--quick", "small sizes and short timing (whole run in ~20 s on 2 cores)"},
       {"--filter SUBSTR", "run only benchmarks whose name contains SUBSTR (names look like\n"
                           "blas/sgemm_peak, gemm/fc1.wgrad, mem/layernorm_fwd; see --list).\n"
                           "The sgemm peak also runs whenever a gemm/ benchmark does."},
       {"--list", "print the benchmark names (after --filter) and exit"},
       {"--runs N", "timed runs per benchmark (default 5, --quick 3)"},
       {"--min-time SEC", "minimum duration of one run (default 0.2, --quick 0.05)"},
       {"--threads N", "omp_set_num_threads(N) and openblas_set_num_threads(N) first"},
       {"--gemm-table PATH", "instead of the benchmarks: time cblas_sgemm at every (M, N, K) of\n"
                             "--gemm-sizes and write the planner's GEMM efficiency table (JSON,\n"
                             "the form of core/plan/gemm_table.h) to PATH; one thread's CPU\n"
                             "time (needs --threads 1, as each bench_train rank runs)"},
       {"--gemm-sizes LIST", "comma-separated grid sizes for --gemm-table\n"
                             "(default 32,64,128,256,512,1024,2048)"}});
}

bool parse_args(int argc, char** argv, Options& o, int& exit_code) {
  if (!ptdp::bench::read_flags(argc, argv, print_help, exit_code, [&](ptdp::bench::Args& args) {
        bool ok = true;
        if (ptdp::bench::read_case_flag(args, o, ok, exit_code)) return ok;
        if (args.flag() == "--list") {
          o.list = true;
          return true;
        }
        if (args.flag() == "--threads") return args.int_value(o.threads, 1, exit_code);
        if (args.flag() == "--gemm-table") return args.require_value(o.gemm_table_path, exit_code);
        if (args.flag() == "--gemm-sizes") return args.require_value(o.gemm_sizes, exit_code);
        return args.unknown(exit_code);
      })) {
    return false;
  }
  if (o.runs == 0) o.runs = o.quick ? 3 : 5;
  if (o.min_time < 0.0) o.min_time = o.quick ? 0.05 : 0.2;
  o.budget = o.quick ? 0.6 : 4.0;
  return true;
}

// ---- buffers and random data -----------------------------------------------------------------

constexpr DType kF32 = DType::F32;

constexpr int64_t kFillChunk = int64_t{1} << 16;

/// Uniform [lo, hi) in parallel (which also spreads first touch over the threads).
void fill_uniform(float* x, int64_t n, float lo, float hi, uint64_t seed) {
  const int64_t chunks = (n + kFillChunk - 1) / kFillChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t state = seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(c);
    const int64_t end = std::min(n, (c + 1) * kFillChunk);
    for (int64_t i = c * kFillChunk; i < end; ++i) {
      const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
      x[i] = lo + (hi - lo) * u;
    }
  }
}

void fill_uniform(const Buffer<float>& b, float lo, float hi, uint64_t seed) {
  fill_uniform(b.get(), b.size(), lo, hi, seed);
}

/// One contiguous range of [0, n) per OpenMP thread, the same split on every call.
template <typename Fn>
void static_ranges(int64_t n, Fn&& fn) {
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    fn(n * t / threads, n * (t + 1) / threads);
  }
}

/// STREAM's triad over one range: a = b + q c.
PTDP_CPU_CLONES void triad_range(double* a, const double* b, const double* c, double q, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + q * c[i];
}

/// AdamW's traffic over one range: four arrays read, three written in place.
PTDP_CPU_CLONES void r4w3_range(float* p, const float* g, float* m, float* v, float q, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float d = q * g[i];
    p[i] += d;
    m[i] += d;
    v[i] += d;
  }
}

/// Integers uniform in [0, bound).
void fill_ids(const Buffer<int32_t>& b, int64_t bound, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t i = 0; i < b.size(); ++i)
    b.get()[i] = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(bound));
}

// ---- timing ----------------------------------------------------------------------------------

struct Stats {
  double median_s = 0.0;
  double best_s = 0.0;
  int64_t iters = 0;  // calls per run
  int runs = 0;
  double other_cores = -1.0;  // cores other processes kept busy while timing; < 0: unknown
};

/// A row is flagged when other processes kept more than this many cores busy while it ran.
constexpr double kContendedCores = 0.25;

// ---- results ---------------------------------------------------------------------------------

struct Result {
  std::string section;  // "blas", "gemm" or "mem"
  std::string name;
  std::string shape;
  int64_t m = 0, n = 0, k = 0, batch = 0;
  std::string ops;  // "NT": op(A) plain, op(B) transposed
  double flops = 0.0;
  double bytes = 0.0;
  Stats st;
  bool ok = false;
  std::string error;
};

// ---- the benchmark ---------------------------------------------------------------------------

// GPT-2 small, one layer, one microbatch.
constexpr int64_t kSeq = 1024;     // s
constexpr int64_t kBatch = 2;      // b
constexpr int64_t kHeads = 12;     // a
constexpr int64_t kHeadDim = 64;   // dh
constexpr int64_t kHidden = 768;   // h = a * dh
constexpr int64_t kFfn = 3072;     // 4h
constexpr int64_t kRows = kSeq * kBatch;  // s*b tokens
constexpr int64_t kVocab = 50304;  // 50257 padded to a multiple of 128
constexpr int64_t kGpt2Params = 124439808;
constexpr int64_t kGqaGroups = 4;  // key/value heads of the grouped-query rows (12 / 4 = 3 each)

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)), be_(ptdp::cpu_backend()) {}

  int run() {
    if (!o_.gemm_table_path.empty()) return gemm_table();
    print_machine();
    bench_peak();
    bench_gemms();
    sample_peak("after the GEMMs");
    bench_compute16_and_attention();
    sample_peak("after 16-bit GEMMs and attention");
    bench_moe();
    sample_peak("after the MoE layer");
    bench_newton_schulz();
    sample_peak("after Newton-Schulz");
    bench_bias();
    bench_gelu();
    bench_layernorm();
    bench_rmsnorm();
    bench_swiglu();
    bench_rope();
    bench_softmax();
    bench_dropout();
    bench_elementwise();
    bench_cast();
    bench_embedding();
    bench_cross_entropy();
    bench_optimizer();
    if (o_.list) {
      for (const auto& n : listed_) std::printf("%s\n", n.c_str());
      return 0;
    }
    if (mem_header_printed_) std::printf("\n");
    print_optimizer_vs_stream();
    if (peak_) {
      sample_peak("at the end");
      finish_peak();
    }
    if (results_.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "No benchmark matches --filter '%s' (see --list).\n",
                   o_.filter.c_str());
      return 1;
    }
    print_cpu_usage();
    if (!o_.json_path.empty() && !write_json()) return 1;
    return any_error_ ? 1 : 0;
  }

 private:
  Options o_;
  Backend& be_;
  std::vector<Result> results_;
  std::vector<std::string> listed_;
  std::optional<ptdp::bench::SgemmPeak> peak_;  // when a GEMM or blas/sgemm_peak runs
  std::size_t peak_result_ = 0;                 // its row in results_
  double peak_gflops_ = 0.0;                    // the best sample so far
  bool above_peak_ = false;                     // a GEMM ran above it: flagged as an anomaly
  double adamw_gbps_ = 0.0, stream_gbps_ = 0.0; // best runs, for the comparison lines
  double triad_gbps_ = 0.0, r4w3_gbps_ = 0.0;   // the bandwidth ceilings, best runs
  bool any_error_ = false;
  bool mem_header_printed_ = false;
  bool compute16_header_printed_ = false;
  Clock::time_point start_ = Clock::now();
  double start_cpu_ = cpu_seconds();
  double start_machine_busy_ = machine_busy_seconds();
  double wall_s_ = 0.0, cores_busy_ = 0.0, other_cores_busy_ = -1.0;
  bool any_contended_ = false;
  std::string blas_config_, blas_core_;
  int blas_threads_ = 0;

  // -- selection -------------------------------------------------------------------------------

  bool selected(const std::string& name) {
    if (!o_.filter.empty() && name.find(o_.filter) == std::string::npos) return false;
    if (o_.list) {
      if (std::find(listed_.begin(), listed_.end(), name) == listed_.end())
        listed_.push_back(name);
      return false;
    }
    return true;
  }

  /// Evaluates every name (so --list sees them all); true when any is selected.
  bool any_selected(std::initializer_list<std::string> names) {
    bool any = false;
    for (const auto& n : names) any = selected(n) || any;
    return any;
  }

  // -- timing ----------------------------------------------------------------------------------

  Stats measure(const std::function<void()>& op, bool warm_up) {
    if (warm_up) {
      op();
      be_.synchronize();
    }
    std::vector<double> per_call;
    const double machine0 = machine_busy_seconds();
    const double cpu0 = cpu_seconds();
    // First run: repeat until min_time has passed; it fixes the calls per run.
    int64_t iters = 0;
    const auto t0 = Clock::now();
    double elapsed = 0.0;
    do {
      op();
      ++iters;
      be_.synchronize();
      elapsed = seconds_since(t0);
    } while (elapsed < o_.min_time);
    per_call.push_back(elapsed / static_cast<double>(iters));
    // Ops slower than the per-benchmark budget get fewer runs.
    int runs = o_.runs;
    if (elapsed * runs > o_.budget) runs = std::max(1, static_cast<int>(o_.budget / elapsed));
    for (int r = 1; r < runs; ++r) {
      const auto t = Clock::now();
      for (int64_t i = 0; i < iters; ++i) op();
      be_.synchronize();
      per_call.push_back(seconds_since(t) / static_cast<double>(iters));
    }
    Stats st;
    const double wall = seconds_since(t0);
    const double machine1 = machine_busy_seconds();
    if (machine0 >= 0.0 && machine1 >= 0.0 && wall > 0.0) {
      st.other_cores = std::max(0.0, (machine1 - machine0) - (cpu_seconds() - cpu0)) / wall;
      if (st.other_cores > kContendedCores) any_contended_ = true;
    }
    std::sort(per_call.begin(), per_call.end());
    const std::size_t n = per_call.size();
    st.median_s = n % 2 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]);
    st.best_s = per_call.front();
    st.iters = iters;
    st.runs = static_cast<int>(n);
    return st;
  }

  // -- header ----------------------------------------------------------------------------------

  void print_machine() {
    if (o_.threads > 0) {
      omp_set_num_threads(o_.threads);
#ifdef OPENBLAS_VERSION
      openblas_set_num_threads(o_.threads);
#endif
    }
#ifdef OPENBLAS_VERSION
    blas_config_ = trim(openblas_get_config());
    blas_core_ = trim(openblas_get_corename());
    blas_threads_ = openblas_get_num_threads();
#endif
    if (o_.list) return;
    std::printf("ptdp kernel benchmark (%s mode, backend '%s')\n", o_.quick ? "quick" : "full",
                be_.name());
    std::printf("  OpenMP threads  : %d (hardware threads: %u)\n", omp_get_max_threads(),
                std::thread::hardware_concurrency());
#ifdef OPENBLAS_VERSION
    const int par = openblas_get_parallel();
    std::printf("  OpenBLAS        : %s\n", blas_config_.c_str());
    std::printf("  OpenBLAS core   : %s, %d threads, %s\n", blas_core_.c_str(), blas_threads_,
                par == 0 ? "sequential" : par == 1 ? "pthreads" : "OpenMP");
#else
    std::printf("  BLAS            : not OpenBLAS (no config available)\n");
#endif
    std::printf("  timing          : warm-up + %d runs of >= %.2f s each; median (best) per call\n",
                o_.runs, o_.min_time);
    if (!o_.filter.empty()) std::printf("  filter          : '%s'\n", o_.filter.c_str());
    // Other processes sharing the cores (a parallel build, say) skew every number below, and
    // OpenMP's barriers suffer most: the load average before, and the footer's count of
    // other processes' CPU time during the run, make that visible.
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      double l1 = 0.0, l5 = 0.0;
      if (std::fscanf(f, "%lf %lf", &l1, &l5) == 2)
        std::printf("  load average    : %.2f (1 min), %.2f (5 min)\n", l1, l5);
      std::fclose(f);
    }
    std::printf("\n");
  }

  static const char* contended_mark(const Stats& st) {
    return st.other_cores > kContendedCores ? "  *" : "";
  }

  /// Wall time, and how many cores this process kept busy on average: well below the thread
  /// count means the threads waited for the CPU (or for each other).
  void print_cpu_usage() {
    const double wall = seconds_since(start_);
    const double cpu = cpu_seconds() - start_cpu_;
    std::printf("Total time: %.1f s wall, %.1f s CPU (%.2f cores busy on average, %d threads)\n",
                wall, cpu, wall > 0.0 ? cpu / wall : 0.0, omp_get_max_threads());
    wall_s_ = wall;
    cores_busy_ = wall > 0.0 ? cpu / wall : 0.0;
    const double machine = machine_busy_seconds();
    if (machine >= 0.0 && start_machine_busy_ >= 0.0 && wall > 0.0) {
      const double others = std::max(0.0, machine - start_machine_busy_ - cpu) / wall;
      other_cores_busy_ = others;
      std::printf("Other processes kept %.2f cores busy on average during the run.\n", others);
    }
    if (any_contended_)
      std::printf("* marks rows timed while other processes kept more than %.2f cores busy: "
                  "their numbers are skewed, rerun on an idle machine.\n",
                  kContendedCores);
  }

  // -- the planner's GEMM efficiency table (--gemm-table) ---------------------------------------

  /// Times cblas_sgemm (row-major, C = A B, as Backend::gemm calls it for fp32; in the thread's
  /// CPU time, see best_cpu_seconds_per_call) at every (M, N, K) of the grid and writes {name, source, peak_tflops, sizes, efficiency[M][N][K]} with the
  /// efficiency relative to peak_tflops, the 90th percentile of the rates measured. Each shape:
  /// one warm-up call, then the best of `runs` runs of at least min_time each (the best, not
  /// the median: a shared machine's other processes only ever slow a run down).
  int gemm_table() {
    std::vector<int64_t> sizes;
    {
      std::string rest = o_.gemm_sizes;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string item = rest.substr(0, comma);
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || end == nullptr || *end != '\0' || v <= 0 || v > 65536 ||
            (!sizes.empty() && v <= sizes.back())) {
          std::fprintf(stderr, "--gemm-sizes: '%s' is not an ascending list of sizes in [1, 65536]\n",
                       o_.gemm_sizes.c_str());
          return 2;
        }
        sizes.push_back(v);
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      }
    }
    if (o_.threads != 1) {
      std::fprintf(stderr, "--gemm-table times one thread's CPU time: give --threads 1\n");
      return 2;
    }
    omp_set_num_threads(1);
#ifdef OPENBLAS_VERSION
    openblas_set_num_threads(1);
#endif
    const int64_t top = sizes.back();
    Buffer<float> a(top * top), b(top * top), c(top * top);
    fill_uniform(a, -1.0f, 1.0f, 1);
    fill_uniform(b, -1.0f, 1.0f, 2);
    fill_uniform(c, -1.0f, 1.0f, 3);
    const std::size_t n = sizes.size();
    std::vector<double> rate(n * n * n, 0.0);
    std::printf("sgemm rates (GFLOP/s) on a %zu^3 grid, %d thread(s)\n", n, omp_get_max_threads());
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        for (std::size_t k = 0; k < n; ++k) {
          const int M = static_cast<int>(sizes[i]), N = static_cast<int>(sizes[j]), K = static_cast<int>(sizes[k]);
          const auto call = [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.get(), K, b.get(), N, 0.0f,
                        c.get(), N);
          };
          rate[(i * n + j) * n + k] = 2.0 * M * N * K / best_cpu_seconds_per_call(call);
        }
        std::printf("  M %5" PRId64 " N %5" PRId64 ":", sizes[i], sizes[j]);
        for (std::size_t k = 0; k < n; ++k) std::printf(" %7.1f", rate[(i * n + j) * n + k] * 1e-9);
        std::printf("\n");
      }
    }
    // The peak: the 90th percentile of the rates (the single best is often one lucky shape on
    // a shared machine); the few shapes above it get efficiency 1.
    std::vector<double> sorted = rate;
    std::sort(sorted.begin(), sorted.end());
    const double peak = sorted[static_cast<std::size_t>(0.9 * static_cast<double>(sorted.size() - 1))];
    std::string s = "{\n  \"name\": \"cpu\",\n";
    s += "  \"source\": \"bench_kernels --gemm-table: cblas_sgemm (" + json_escape(blas_core_name()) + ", " +
         std::to_string(omp_get_max_threads()) + " thread(s)), thread CPU time, best of " + std::to_string(o_.runs) +
         " runs per shape; efficiency relative to the 90th percentile of the rates measured\",\n";
    s += "  \"peak_tflops\": " + json_number(peak * 1e-12) + ",\n  \"sizes\": [";
    for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
    s += "],\n  \"efficiency\": [\n";
    for (std::size_t i = 0; i < n; ++i) {
      s += "    [\n";
      for (std::size_t j = 0; j < n; ++j) {
        s += "      [";
        for (std::size_t k = 0; k < n; ++k) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%s%.4f", k ? ", " : "", std::clamp(rate[(i * n + j) * n + k] / peak, 1e-4, 1.0));
          s += buf;
        }
        s += j + 1 < n ? "],\n" : "]\n";
      }
      s += i + 1 < n ? "    ],\n" : "    ]\n";
    }
    s += "  ]\n}\n";
    std::printf("peak %.1f GFLOP/s; table written to %s\n", peak * 1e-9, o_.gemm_table_path.c_str());
    return ptdp::bench::write_text_file(o_.gemm_table_path, s) ? 0 : 1;
  }

  /// CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID).
  static double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

  /// The best of `runs` runs of the thread's CPU seconds per call, each run repeating the call
  /// for at least min_time CPU seconds, after one warm-up call. Thread CPU time, not wall time:
  /// on a shared machine the time another process holds the core is not the GEMM's, so the
  /// table holds the rate of a rank that has its core (what the time model then shares out).
  /// One thread only (--threads 1): other threads' CPU time is not counted.
  double best_cpu_seconds_per_call(const std::function<void()>& op) const {
    op();
    double best = 0;
    for (int r = 0; r < o_.runs; ++r) {
      const double t0 = thread_cpu_seconds();
      int64_t calls = 0;
      double spent = 0;
      do {
        op();
        ++calls;
        spent = thread_cpu_seconds() - t0;
      } while (spent < o_.min_time);
      const double per_call = spent / static_cast<double>(calls);
      if (r == 0 || per_call < best) best = per_call;
    }
    return best;
  }

  static std::string blas_core_name() {
#ifdef OPENBLAS_VERSION
    return trim(openblas_get_corename());
#else
    return "BLAS";
#endif
  }

  // -- 1. OpenBLAS peak ------------------------------------------------------------------------

  bool any_gemm_selected() {
    bool any = false;
    for (const auto& n : gemm_names()) any = selected(n) || any;
    for (const auto& n : moe_gemm_names()) any = selected(n) || any;
    return any;
  }

  void bench_peak() {
    const std::string name = "blas/sgemm_peak";
    const bool want = selected(name);
    const bool gemms = any_gemm_selected();
    if (!want && !gemms) return;
    try {
      peak_.emplace();
    } catch (const std::exception& e) {
      any_error_ = true;
      std::printf("1. OpenBLAS peak: ERROR: %s\n\n", e.what());
      return;
    }
    std::printf("1. OpenBLAS peak: cblas_sgemm, row-major C = A*B, square n = %d, sampled before, between\n"
                "   and after the sections (each sample the best of %d calls; the peak is the best sample)\n",
                peak_->n(), peak_->calls_per_sample());
    sample_peak("before the GEMMs");
    std::printf("\n");
    Result r;
    r.section = "blas";
    r.name = name;
    r.m = r.n = r.k = peak_->n();
    r.batch = 1;
    r.ops = "NN";
    r.shape = std::to_string(peak_->n()) + "^3";
    r.flops = peak_->flops();
    r.ok = true;
    peak_result_ = results_.size();
    results_.push_back(std::move(r));
  }

  /// Takes a sample of the sgemm peak (when it runs) and prints it on one line.
  void sample_peak(const char* where) {
    if (peak_) peak_gflops_ = peak_->sample_and_print(where);
  }

  /// Prints the samples, the spread and the flag, and makes the blas/sgemm_peak row the best
  /// sample.
  void finish_peak() {
    std::printf("\n");
    peak_->print("");
    // Against the whole run's peak (the rows' ! marks were against the best sample then).
    above_peak_ = false;
    for (const Result& r : results_) {
      if (!r.ok || r.section == "mem" || r.section == "blas" || r.st.median_s <= 0.0) continue;
      const double g = r.flops / r.st.median_s * 1e-9;
      if (g > peak_->best()) {
        above_peak_ = true;
        std::printf("ANOMALY: %s ran at %.1f GFLOP/s, %s of the measured sgemm peak\n", r.name.c_str(), g,
                    peak_->percent(g).c_str());
      }
    }
    if (above_peak_)
      std::printf("  nothing runs faster than a large square sgemm: the samples or those GEMMs caught an unusual "
                  "moment\n  of the machine; do not read them as results, rerun on an idle machine\n");
    std::printf("\n");
    Result& r = results_[peak_result_];
    const double best_s = peak_->flops() / (peak_->best() * 1e9);
    r.st.median_s = r.st.best_s = best_s;
    r.st.iters = 1;
    r.st.runs = static_cast<int>(peak_->samples().size()) * peak_->calls_per_sample();
  }

  /// "% of the peak" of a rate: against the best sgemm sample so far, "!" above 100%.
  std::string percent_of_peak(double gflops) {
    if (!peak_) return "-";
    const std::string p = peak_->percent(gflops);
    if (!p.empty() && p.back() == '!') above_peak_ = true;
    return p;
  }

  // -- 2. GEMMs of one GPT-2-small layer -------------------------------------------------------

  struct Linear {
    const char* name;
    int64_t in, out;
  };
  static constexpr Linear kLinears[] = {
      {"qkv", kHidden, 3 * kHidden},
      {"proj", kHidden, kHidden},
      {"fc1", kHidden, kFfn},
      {"fc2", kFfn, kHidden},
  };
  static constexpr const char* kAttnGemms[] = {
      "attn_score.fwd", "attn_score.dq", "attn_score.dk",
      "attn_ctx.fwd",   "attn_ctx.dprob", "attn_ctx.dv",
  };

  static std::vector<std::string> gemm_names() {
    std::vector<std::string> names;
    for (const auto& l : kLinears)
      for (const char* pass : {".fwd", ".dgrad", ".wgrad"})
        names.push_back(std::string("gemm/") + l.name + pass);
    for (const char* a : kAttnGemms) names.push_back(std::string("gemm/") + a);
    return names;
  }

  /// Runs d once and compares a few sampled elements of C with a double-precision dot product
  /// over the same strides. A, B and C must not overlap. Returns an empty string when all match.
  std::string check_gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
    struct Sample {
      int64_t z, i, j;
      double c_old;
    };
    std::vector<Sample> samples;
    uint64_t state = 12345;
    samples.push_back({0, 0, 0, 0.0});
    samples.push_back({d.batch - 1, d.m - 1, d.n - 1, 0.0});
    for (int s = 0; s < 14; ++s) {
      const int64_t z = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(d.batch));
      const int64_t i = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(d.m));
      const int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(d.n));
      samples.push_back({z, i, j, 0.0});
    }
    auto c_at = [&](const Sample& s) -> float& { return c[s.z * d.stride_c + s.i * d.ldc + s.j]; };
    for (auto& s : samples) s.c_old = c_at(s);
    be_.gemm(d, a, b, c);
    be_.synchronize();
    for (const auto& s : samples) {
      const float* az = a + s.z * d.stride_a;
      const float* bz = b + s.z * d.stride_b;
      double dot = 0.0, mag = 0.0;
      for (int64_t p = 0; p < d.k; ++p) {
        const double av = d.trans_a ? az[p * d.lda + s.i] : az[s.i * d.lda + p];
        const double bv = d.trans_b ? bz[s.j * d.ldb + p] : bz[p * d.ldb + s.j];
        dot += av * bv;
        mag += std::fabs(av * bv);
      }
      const double want = d.alpha * dot + d.beta * s.c_old;
      const double got = c_at(s);
      const double tol =
          1e-4 * (std::fabs(d.alpha) * mag + std::fabs(d.beta * s.c_old)) + 1e-5;
      if (!(std::fabs(got - want) <= tol)) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "CHECK FAILED at batch %" PRId64 ", C[%" PRId64 ", %" PRId64
                      "]: got %.6g, want %.6g",
                      s.z, s.i, s.j, got, want);
        return buf;
      }
    }
    return "";
  }

  void print_gemm_header() {
    std::printf("2. GEMMs of one GPT-2-small layer through Backend::gemm (h=%" PRId64
                ", s=%" PRId64 ", b=%" PRId64 ", a=%" PRId64 ", dh=%" PRId64 ", ffn=%" PRId64
                ")\n",
                kHidden, kSeq, kBatch, kHeads, kHeadDim, kFfn);
    std::printf("   Linear weights are [out, in]: fwd Y = X*W^T, dgrad dX = dY*W, wgrad dW += "
                "dY^T*X (beta = 1).\n");
    std::printf("   Attention reads Q, K, V from the [s, b, a, 3, dh] QKV buffer (ld %" PRId64
                ", batch stride %" PRId64 ").\n",
                kBatch * kHeads * 3 * kHeadDim, 3 * kHeadDim);
    std::printf("   %-20s %3s %6s %6s %6s %5s %10s %10s %9s %7s\n", "name", "op", "m", "n", "k",
                "batch", "ms", "best ms", "GFLOP/s", "% peak");
    std::printf("   %s\n", std::string(90, '-').c_str());
  }

  /// Ends the row of a FLOP-counted case (time, GFLOP/s, % of the sgemm peak, or its error) and
  /// records it.
  void report_flops(Result r) {
    if (r.ok) {
      const double gflops = r.flops / r.st.median_s * 1e-9;
      std::printf(" %10.3f %10.3f %9.1f", r.st.median_s * 1e3, r.st.best_s * 1e3, gflops);
      std::printf(" %7s%s\n", percent_of_peak(gflops).c_str(), contended_mark(r.st));
    } else {
      any_error_ = true;
      std::printf("  %s\n", r.error.c_str());
    }
    results_.push_back(std::move(r));
  }

  void gemm_case(const std::string& short_name, const GemmDesc& d, const float* a, const float* b,
                 float* c, const std::vector<const Buffer<float>*>& refill) {
    const std::string name = "gemm/" + short_name;
    if (!selected(name)) return;
    Result r;
    r.section = "gemm";
    r.name = name;
    r.m = d.m;
    r.n = d.n;
    r.k = d.k;
    r.batch = d.batch;
    r.ops = std::string(d.trans_a ? "T" : "N") + (d.trans_b ? "T" : "N");
    r.flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) *
              static_cast<double>(d.k) * static_cast<double>(d.batch);
    std::printf("   %-20s %3s %6" PRId64 " %6" PRId64 " %6" PRId64 " %5" PRId64, short_name.c_str(),
                r.ops.c_str(), d.m, d.n, d.k, d.batch);
    std::fflush(stdout);
    try {
      // Fresh random operands for every case keep magnitudes sane (outputs of one case are
      // inputs of the next) and give the check nonzero data.
      uint64_t seed = 100;
      for (const auto* buf : refill) fill_uniform(*buf, -1.0f, 1.0f, ++seed);
      // The warm-up call is the checked call.
      r.error = check_gemm(d, a, b, c);
      if (r.error.empty()) {
        r.st = measure([&] { be_.gemm(d, a, b, c); }, false);
        r.ok = true;
      }
    } catch (const std::exception& e) {
      r.error = std::string("ERROR: ") + e.what();
    }
    report_flops(std::move(r));
  }

  void bench_gemms() {
    if (!any_gemm_selected()) return;
    print_gemm_header();

    // Linear layers: X [T, in], W [out, in], Y [T, out] and their gradients.
    Buffer<float> x(kRows * kFfn), y(kRows * kFfn), w(kFfn * kHidden), dw(kFfn * kHidden);
    for (const auto& l : kLinears) {
      const std::string base = l.name;
      {  // forward: Y[T, out] = X[T, in] * W[out, in]^T
        GemmDesc d;
        d.trans_b = true;
        d.m = kRows, d.n = l.out, d.k = l.in;
        d.lda = l.in, d.ldb = l.in, d.ldc = l.out;
        gemm_case(base + ".fwd", d, x.get(), w.get(), y.get(), {&x, &w, &y});
      }
      {  // dgrad: dX[T, in] = dY[T, out] * W[out, in]
        GemmDesc d;
        d.m = kRows, d.n = l.in, d.k = l.out;
        d.lda = l.out, d.ldb = l.in, d.ldc = l.in;
        gemm_case(base + ".dgrad", d, y.get(), w.get(), x.get(), {&x, &w, &y});
      }
      {  // wgrad: dW[out, in] += dY[T, out]^T * X[T, in]
        GemmDesc d;
        d.trans_a = true;
        d.m = l.out, d.n = l.in, d.k = kRows;
        d.beta = 1.0f;
        d.lda = l.out, d.ldb = l.in, d.ldc = l.in;
        gemm_case(base + ".wgrad", d, y.get(), x.get(), dw.get(), {&x, &y, &dw});
      }
    }

    // Attention over b*a batches. QKV is [s, b, a, 3, dh]: batch z = (bi, ai) starts at
    // z * 3dh, row si of Q/K/V is ld = b*a*3*dh further, and K, V sit dh, 2dh after Q.
    // Context (and its gradient) is [s, b, a, dh] = [s, b, h]; scores/probs are packed
    // [b*a, s, s].
    const int64_t nb = kBatch * kHeads;
    const int64_t ld_qkv = nb * 3 * kHeadDim;
    const int64_t st_qkv = 3 * kHeadDim;
    const int64_t ld_ctx = nb * kHeadDim;
    const int64_t st_ctx = kHeadDim;
    const int64_t st_prob = kSeq * kSeq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    Buffer<float> qkv(kRows * 3 * kHidden), dqkv(kRows * 3 * kHidden);
    Buffer<float> ctx(kRows * kHidden), dctx(kRows * kHidden);
    Buffer<float> prob(nb * kSeq * kSeq), dprob(nb * kSeq * kSeq);
    const float* q = qkv.get();
    const float* k = qkv.get() + kHeadDim;
    const float* v = qkv.get() + 2 * kHeadDim;
    float* dq = dqkv.get();
    float* dk = dqkv.get() + kHeadDim;
    float* dv = dqkv.get() + 2 * kHeadDim;
    auto attn = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha, int64_t lda,
                    int64_t sa, int64_t ldb, int64_t sb, int64_t ldc, int64_t sc) {
      GemmDesc d;
      d.trans_a = ta, d.trans_b = tb;
      d.m = m, d.n = n, d.k = kk;
      d.alpha = alpha;
      d.lda = lda, d.ldb = ldb, d.ldc = ldc;
      d.batch = nb;
      d.stride_a = sa, d.stride_b = sb, d.stride_c = sc;
      return d;
    };
    // scores[z] = scale * Q[z] * K[z]^T: [s, dh] x [dh, s]
    gemm_case("attn_score.fwd",
              attn(false, true, kSeq, kSeq, kHeadDim, scale, ld_qkv, st_qkv, ld_qkv, st_qkv, kSeq,
                   st_prob),
              q, k, prob.get(), {&qkv, &prob});
    // dQ[z] = scale * dS[z] * K[z]: [s, s] x [s, dh], written into the dQKV buffer
    gemm_case("attn_score.dq",
              attn(false, false, kSeq, kHeadDim, kSeq, scale, kSeq, st_prob, ld_qkv, st_qkv,
                   ld_qkv, st_qkv),
              dprob.get(), k, dq, {&dprob, &qkv, &dqkv});
    // dK[z] = scale * dS[z]^T * Q[z]
    gemm_case("attn_score.dk",
              attn(true, false, kSeq, kHeadDim, kSeq, scale, kSeq, st_prob, ld_qkv, st_qkv,
                   ld_qkv, st_qkv),
              dprob.get(), q, dk, {&dprob, &qkv, &dqkv});
    // ctx[z] = P[z] * V[z]: [s, s] x [s, dh]
    gemm_case("attn_ctx.fwd",
              attn(false, false, kSeq, kHeadDim, kSeq, 1.0f, kSeq, st_prob, ld_qkv, st_qkv,
                   ld_ctx, st_ctx),
              prob.get(), v, ctx.get(), {&prob, &qkv, &ctx});
    // dP[z] = dctx[z] * V[z]^T: [s, dh] x [dh, s]
    gemm_case("attn_ctx.dprob",
              attn(false, true, kSeq, kSeq, kHeadDim, 1.0f, ld_ctx, st_ctx, ld_qkv, st_qkv, kSeq,
                   st_prob),
              dctx.get(), v, dprob.get(), {&dctx, &qkv, &dprob});
    // dV[z] = P[z]^T * dctx[z]
    gemm_case("attn_ctx.dv",
              attn(true, false, kSeq, kHeadDim, kSeq, 1.0f, kSeq, st_prob, ld_ctx, st_ctx, ld_qkv,
                   st_qkv),
              prob.get(), dctx.get(), dv, {&prob, &dctx, &dqkv});

    // Layer total over the GEMMs that ran.
    double total_s = 0.0, total_flops = 0.0;
    int count = 0;
    for (const auto& r : results_) {
      if (r.section != "gemm" || !r.ok) continue;
      total_s += r.st.median_s;
      total_flops += r.flops;
      ++count;
    }
    std::printf("   %s\n", std::string(90, '-').c_str());
    if (count > 0) {
      const double gflops = total_flops / total_s * 1e-9;
      std::printf("   %-20s %3s %6s %6s %6s %5d %10.3f %10s %9.1f", "total (sum)", "", "", "",
                  "", count, total_s * 1e3, "", gflops);
      std::printf(" %7s\n", percent_of_peak(gflops).c_str());
    }
    std::printf("\n");
  }

  // -- 2b. 16-bit GEMMs and fused attention ---------------------------------------------------

  static constexpr const char* kComputeNames[] = {
      "gemm_bf16/fc1.fwd+bias_gelu", "gemm_bf16/fc1.wgrad", "attn/fused_fwd", "attn/fused_bwd",
      "attn/fused_fwd.bf16", "attn/fused_fwd.gqa", "attn/fused_bwd.gqa",
      "attn/fused_fwd.s64b4", "attn/unfused_fwd.s64b4", "attn/fused_bwd.s64b4",
      "attn/unfused_bwd.s64b4", "attn/fused_fwd.s1024b1", "attn/unfused_fwd.s1024b1",
      "attn/fused_bwd.s1024b1", "attn/unfused_bwd.s1024b1",
  };

  /// Times `op` (flops per call) as one row of section 2b; `check` (may be empty) runs first,
  /// untimed, and returns an error message or "".
  void flop_case(const std::string& name, const std::string& ops, int64_t m, int64_t n, int64_t k,
                 int64_t batch, double flops, const std::function<void()>& op,
                 const std::function<std::string()>& check = {}) {
    if (!selected(name)) return;
    if (!compute16_header_printed_) {
      compute16_header_printed_ = true;
      std::printf(
          "2b. bf16 GEMMs (fp32 accumulation) and fused causal attention "
          "(flops of the visible half)\n");
      std::printf("   %-28s %6s %6s %6s %6s %5s %10s %10s %9s %7s\n", "name", "op", "m", "n", "k",
                  "batch", "ms", "best ms", "GFLOP/s", "% peak");
      std::printf("   %s\n", std::string(100, '-').c_str());
    }
    Result r;
    r.section = name.substr(0, name.find('/'));
    r.name = name;
    r.m = m;
    r.n = n;
    r.k = k;
    r.batch = batch;
    r.ops = ops;
    r.flops = flops;
    const std::string short_name = name.substr(name.find('/') + 1);
    std::printf("   %-28s %6s %6" PRId64 " %6" PRId64 " %6" PRId64 " %5" PRId64, short_name.c_str(),
                ops.c_str(), m, n, k, batch);
    std::fflush(stdout);
    try {
      if (check) r.error = check();
      if (r.error.empty()) {
        r.st = measure(op, !check);
        r.ok = true;
      }
    } catch (const std::exception& e) {
      r.error = std::string("ERROR: ") + e.what();
    }
    report_flops(std::move(r));
  }

  static std::vector<uint16_t> to_bf16(const Buffer<float>& f) {
    std::vector<uint16_t> h(static_cast<std::size_t>(f.size()));
    for (int64_t i = 0; i < f.size(); ++i)
      h[static_cast<std::size_t>(i)] = ptdp::f32_to_bf16(f.get()[i]);
    return h;
  }

  void bench_compute16_and_attention() {
    bool any = false;
    for (const char* n : kComputeNames) any = selected(n) || any;
    if (!any) return;
    using ptdp::bf16_to_f32;
    const int64_t rows = o_.quick ? 512 : kRows;

    // fc1 forward in bf16 with the fused bias + GeLU epilogue (aux saved), and fc1's wgrad
    // accumulating bf16 products into the fp32 main gradient.
    Buffer<float> x(rows * kHidden), w(kFfn * kHidden), bias(kFfn), dy(rows * kFfn);
    fill_uniform(x, -1.0f, 1.0f, 201);
    fill_uniform(w, -0.05f, 0.05f, 202);
    fill_uniform(bias, -0.1f, 0.1f, 203);
    fill_uniform(dy, -1.0f, 1.0f, 204);
    const std::vector<uint16_t> x16 = to_bf16(x), w16 = to_bf16(w), b16 = to_bf16(bias),
                                dy16 = to_bf16(dy);
    std::vector<uint16_t> y16(static_cast<std::size_t>(rows * kFfn)), aux16(y16.size());
    Buffer<float> dw(kFfn * kHidden);
    fill_uniform(dw, -1.0f, 1.0f, 205);
    {
      GemmDesc d;
      d.trans_b = true;
      d.m = rows, d.n = kFfn, d.k = kHidden;
      d.a_type = d.b_type = d.c_type = DType::BF16;
      d.epilogue = ptdp::Epilogue::BiasGelu;
      d.bias = b16.data();
      d.aux = aux16.data();
      auto op = [&] { be_.gemm(d, x16.data(), w16.data(), y16.data()); };
      // Sampled check: aux = bf16(x.w + b) and y = bf16(gelu(aux)), from the bf16 inputs.
      auto check = [&]() -> std::string {
        op();
        uint64_t state = 7;
        for (int t = 0; t < 16; ++t) {
          const int64_t i = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(rows));
          const int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(kFfn));
          double dot = bf16_to_f32(b16[static_cast<std::size_t>(j)]), mag = std::fabs(dot);
          for (int64_t p = 0; p < kHidden; ++p) {
            const double v =
                static_cast<double>(bf16_to_f32(x16[static_cast<std::size_t>(i * kHidden + p)])) *
                bf16_to_f32(w16[static_cast<std::size_t>(j * kHidden + p)]);
            dot += v;
            mag += std::fabs(v);
          }
          const double got = bf16_to_f32(aux16[static_cast<std::size_t>(i * kFfn + j)]);
          if (!(std::fabs(got - dot) <= 1e-2 * mag + 1e-4)) {
            char buf[160];
            std::snprintf(buf, sizeof buf,
                          "CHECK FAILED at aux[%" PRId64 ", %" PRId64 "]: got %.6g, want %.6g", i,
                          j, got, dot);
            return buf;
          }
        }
        return "";
      };
      flop_case(
          "gemm_bf16/fc1.fwd+bias_gelu", "NT", d.m, d.n, d.k, 1,
          2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k), op,
          check);
    }
    {
      GemmDesc d;
      d.trans_a = true;
      d.m = kFfn, d.n = kHidden, d.k = rows;
      d.beta = 1.0f;
      d.a_type = d.b_type = DType::BF16;  // C (the main gradient) stays fp32
      flop_case(
          "gemm_bf16/fc1.wgrad", "TN", d.m, d.n, d.k, 1,
          2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k),
          [&] { be_.gemm(d, dy16.data(), x16.data(), dw.get()); });
    }

    // Fused causal attention over the [s, b, a, 3, dh] QKV activation.
    const int64_t s = o_.quick ? 256 : kSeq;
    const ptdp::AttentionDesc ad = causal_attention(s, kBatch);
    const int64_t nqkv = s * kBatch * kHeads * 3 * kHeadDim, nctx = s * kBatch * kHidden;
    const int64_t nlse = kBatch * kHeads * s;
    Buffer<float> qkv(nqkv), dqkv(nqkv), ctx(nctx), dctx(nctx), lse(nlse), delta(nlse);
    fill_uniform(qkv, -1.0f, 1.0f, 211);
    fill_uniform(dctx, -1.0f, 1.0f, 212);
    const std::vector<uint16_t> qkv16 = to_bf16(qkv);
    std::vector<uint16_t> ctx16(static_cast<std::size_t>(nctx));
    // Visible (causal) score entries per (batch, head): s (s + 1) / 2. Forward: Q K^T and P V,
    // 2 dh flops each per entry; backward: Q K^T again, dP = dO V^T, dV, dQ and dK.
    const double visible = static_cast<double>(s) * static_cast<double>(s + 1) / 2.0;
    const double pairs = static_cast<double>(kBatch * kHeads);
    const double fwd_flops = 4.0 * kHeadDim * visible * pairs;
    auto fwd = [&] { be_.attention_forward(ad, qkv.get(), ctx.get(), lse.get(), kF32); };
    flop_case("attn/fused_fwd", "causal", s, s, kHeadDim, kBatch * kHeads, fwd_flops, fwd);
    if (selected("attn/fused_bwd")) fwd();  // the backward reads the forward's ctx and lse
    flop_case("attn/fused_bwd", "causal", s, s, kHeadDim, kBatch * kHeads, 2.5 * fwd_flops, [&] {
      be_.attention_backward(ad, qkv.get(), ctx.get(), lse.get(), dctx.get(), dqkv.get(),
                             delta.get(), kF32);
    });
    flop_case("attn/fused_fwd.bf16", "causal", s, s, kHeadDim, kBatch * kHeads, fwd_flops, [&] {
      be_.attention_forward(ad, qkv16.data(), ctx16.data(), lse.get(), DType::BF16);
    });
    // Grouped-query: the same 12 query heads sharing 4 key/value heads, qkv [s, b, 4, 5, dh]
    // (a prefix of the buffers above); the same flops per query head.
    ptdp::AttentionDesc gd = ad;
    gd.groups = kGqaGroups;
    auto gqa_fwd = [&] { be_.attention_forward(gd, qkv.get(), ctx.get(), lse.get(), kF32); };
    flop_case("attn/fused_fwd.gqa", "causal", s, s, kHeadDim, kBatch * kHeads, fwd_flops,
              gqa_fwd);
    if (selected("attn/fused_bwd.gqa")) gqa_fwd();
    flop_case("attn/fused_bwd.gqa", "causal", s, s, kHeadDim, kBatch * kHeads, 2.5 * fwd_flops,
              [&] {
                be_.attention_backward(gd, qkv.get(), ctx.get(), lse.get(), dctx.get(),
                                       dqkv.get(), delta.get(), kF32);
              });
    // Fused against unfused at GPT-2 small's training shape (s 64, b 4) and at a long sequence
    // (s 1024, b 1), fp32 without dropout.
    attention_fused_vs_unfused(64, 4);
    attention_fused_vs_unfused(1024, 1);
    if (compute16_header_printed_) std::printf("\n");
  }

  /// Causal self-attention of the GPT-2-small heads (kHeads of kHeadDim) over s positions and b
  /// samples, scaled by 1/sqrt(dh), without dropout or documents.
  static ptdp::AttentionDesc causal_attention(int64_t s, int64_t b) {
    ptdp::AttentionDesc ad;
    ad.s = s;
    ad.b = b;
    ad.heads = kHeads;
    ad.dh = kHeadDim;
    ad.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    return ad;
  }

  /// The fused kernels beside the unfused sequence the layer runs on the same shape
  /// (core/layers/attention.cpp): strided-batched scores = Q K^T, causal softmax_forward,
  /// ctx = P V; backward dP = dO V^T, dV = P^T dO, softmax_backward, dQ = dS K, dK = dS^T Q.
  /// Both rows count the flops of the visible half, so their GFLOP/s compare as their times.
  void attention_fused_vs_unfused(int64_t s, int64_t b) {
    const std::string tag = ".s" + std::to_string(s) + "b" + std::to_string(b);
    if (!any_selected({"attn/fused_fwd" + tag, "attn/unfused_fwd" + tag, "attn/fused_bwd" + tag,
                       "attn/unfused_bwd" + tag})) {
      return;
    }
    const int64_t dh = kHeadDim, pairs = b * kHeads, row = pairs * 3 * dh;
    const ptdp::AttentionDesc ad = causal_attention(s, b);
    Buffer<float> qkv(s * row), dqkv(s * row), ctx(s * pairs * dh), dctx(s * pairs * dh);
    Buffer<float> lse(pairs * s), delta(pairs * s), probs(pairs * s * s), dprobs(pairs * s * s);
    fill_uniform(qkv, -1.0f, 1.0f, 221);
    fill_uniform(dctx, -1.0f, 1.0f, 222);
    const double visible = static_cast<double>(s) * static_cast<double>(s + 1) / 2.0;
    const double fwd_flops = 4.0 * dh * visible * static_cast<double>(pairs);
    auto fused_fwd = [&] { be_.attention_forward(ad, qkv.get(), ctx.get(), lse.get(), kF32); };
    auto unfused_fwd = [&] {
      ptdp::bench::unfused_attention_forward(be_, s, pairs, dh, ad.scale, qkv.get(), probs.get(), ctx.get());
    };
    flop_case("attn/fused_fwd" + tag, "causal", s, s, dh, pairs, fwd_flops, fused_fwd);
    flop_case("attn/unfused_fwd" + tag, "causal", s, s, dh, pairs, fwd_flops, unfused_fwd);
    if (selected("attn/fused_bwd" + tag)) fused_fwd();  // ctx and lse for the backward
    flop_case("attn/fused_bwd" + tag, "causal", s, s, dh, pairs, 2.5 * fwd_flops, [&] {
      be_.attention_backward(ad, qkv.get(), ctx.get(), lse.get(), dctx.get(), dqkv.get(),
                             delta.get(), kF32);
    });
    if (selected("attn/unfused_bwd" + tag)) unfused_fwd();  // the probabilities
    flop_case("attn/unfused_bwd" + tag, "causal", s, s, dh, pairs, 2.5 * fwd_flops, [&] {
      ptdp::bench::unfused_attention_backward(be_, s, pairs, dh, ad.scale, qkv.get(), probs.get(), dctx.get(),
                                              dprobs.get(), dqkv.get());
    });
  }

  // -- 2c. an MoE layer's experts (OLMoE-1B-7B's shape) -----------------------------------------

  static constexpr int64_t kMoeHidden = 2048;  // h
  static constexpr int64_t kMoeFfn = 1024;     // one expert's ffn (fc1 writes 2 * ffn for SwiGLU)
  static constexpr int64_t kMoeExperts = 64;
  static constexpr int64_t kMoeTopk = 8;

  /// The expert GEMMs: name, grouped descriptor shape (varying M or K) and the plain GEMM of
  /// the same FLOPs.
  struct MoeGemm {
    const char* name;
    ptdp::GroupedDim varying;
    bool trans_b;
    int64_t n, fixed;  // n, and k (varying M) or m (varying K)
  };
  static constexpr MoeGemm kMoeGemms[] = {
      {"fc1.fwd", ptdp::GroupedDim::M, true, 2 * kMoeFfn, kMoeHidden},     // [T, h] x W1^T
      {"fc1.dgrad", ptdp::GroupedDim::M, false, kMoeHidden, 2 * kMoeFfn},  // dY1 W1
      {"fc1.wgrad", ptdp::GroupedDim::K, false, kMoeHidden, 2 * kMoeFfn},  // dY1^T X
      {"fc2.fwd", ptdp::GroupedDim::M, true, kMoeHidden, kMoeFfn},         // A W2^T
      {"fc2.dgrad", ptdp::GroupedDim::M, false, kMoeFfn, kMoeHidden},      // dY2 W2
      {"fc2.wgrad", ptdp::GroupedDim::K, false, kMoeFfn, kMoeHidden},      // dY2^T A
  };

  static std::vector<std::string> moe_gemm_names() {
    std::vector<std::string> names;
    for (const auto& g : kMoeGemms) {
      names.push_back(std::string("moe/grouped.") + g.name);
      names.push_back(std::string("moe/sgemm.") + g.name);
    }
    return names;
  }

  static std::vector<std::string> moe_op_names() {
    return {"moe/router.fwd", "moe/router.bwd", "moe/route", "moe/permute.fwd", "moe/permute.bwd",
            "moe/unpermute.fwd", "moe/unpermute.bwd", "moe/swiglu.fwd", "moe/swiglu.bwd"};
  }

  /// One timed row of section 2c: FLOP-counted (flops > 0) or a plain time.
  double moe_case(const std::string& name, const std::string& ops, int64_t m, int64_t n, int64_t k,
                  double flops, const std::function<void()>& op) {
    if (!selected(name)) return 0.0;
    Result r;
    r.section = "moe";
    r.name = name;
    r.m = m;
    r.n = n;
    r.k = k;
    r.batch = 1;
    r.ops = ops;
    r.flops = flops;
    std::printf("   %-22s %3s %6" PRId64 " %6" PRId64 " %6" PRId64, name.substr(4).c_str(), ops.c_str(), m, n,
                k);
    std::fflush(stdout);
    try {
      r.st = measure(op, true);
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = std::string("ERROR: ") + e.what();
    }
    const double seconds = r.ok ? r.st.median_s : 0.0;
    if (flops > 0.0 || !r.ok) {
      report_flops(std::move(r));
    } else {
      std::printf(" %10.3f %10.3f\n", r.st.median_s * 1e3, r.st.best_s * 1e3);
      results_.push_back(std::move(r));
    }
    return seconds;
  }

  /// Section 2d: Muon's Newton-Schulz orthogonalisation (Backend::newton_schulz, 5 steps of the
  /// quintic (3.4445, -4.775, 2.0315)) of a GPT-2-small square weight, its MLP's [h, 4h] and a
  /// [2048, 8192] (full mode only: ~0.8 TFLOP per call), in fp32 and in bf16 emulation. FLOPs are
  /// ptdp::newton_schulz_flops (full products: 4 k^2 n + 2 k^3 per step), so the CPU's symmetric
  /// products show as a rate above the sgemm peak's share of the work.
  void bench_newton_schulz() {
    struct Shape {
      int64_t rows, cols;
    };
    std::vector<Shape> shapes = {{kHidden, kHidden}, {kHidden, kFfn}};
    if (!o_.quick) shapes.push_back({2048, 8192});
    std::vector<std::string> names;
    for (const Shape& sh : shapes) {
      for (const char* prec : {"f32", "bf16"}) {
        names.push_back("ns/" + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + "." + prec);
      }
    }
    bool any = false;
    for (const auto& n : names) any = selected(n) || any;
    if (!any) return;
    std::printf("2d. Newton-Schulz (Muon), 5 quintic steps, FLOPs of the full products (4 k^2 n + 2 k^3 a step)\n");
    std::printf("   %-22s %3s %6s %6s %6s %10s %10s %9s %7s\n", "name", "op", "rows", "cols", "steps", "ms",
                "best ms", "GFLOP/s", "% peak");
    std::printf("   %s\n", std::string(90, '-').c_str());
    std::size_t i = 0;
    for (const Shape& sh : shapes) {
      Buffer<float> x(sh.rows * sh.cols);
      for (int precision : {0, 2}) {
        const std::string name = names[i++];
        if (!selected(name)) continue;
        fill_uniform(x, -1.0f, 1.0f, 950);
        ptdp::NewtonSchulzDesc d;
        d.rows = sh.rows;
        d.cols = sh.cols;
        d.steps = 5;
        d.num_sets = 1;
        d.coefficients[0][0] = 3.4445f;
        d.coefficients[0][1] = -4.775f;
        d.coefficients[0][2] = 2.0315f;
        d.precision = precision;
        Result r;
        r.section = "ns";
        r.name = name;
        r.m = sh.rows;
        r.n = sh.cols;
        r.k = d.steps;
        r.batch = 1;
        r.ops = "NS";
        r.flops = ptdp::newton_schulz_flops(sh.rows, sh.cols, d.steps);
        std::printf("   %-22s %3s %6" PRId64 " %6" PRId64 " %6d", name.substr(3).c_str(), r.ops.c_str(), sh.rows,
                    sh.cols, d.steps);
        std::fflush(stdout);
        try {
          // Repeated calls orthogonalise an orthogonalised matrix: the values stay bounded.
          r.st = measure([&] { be_.newton_schulz(x.get(), d); }, true);
          r.ok = true;
        } catch (const std::exception& e) {
          r.error = std::string("ERROR: ") + e.what();
        }
        report_flops(std::move(r));
      }
    }
  }

  void bench_moe() {
    const auto gemms = moe_gemm_names(), ops = moe_op_names();
    bool any = false;
    for (const auto& n : gemms) any = selected(n) || any;
    for (const auto& n : ops) any = selected(n) || any;
    if (!any) return;
    const int64_t tokens = o_.quick ? 256 : 1024, k = kMoeTopk, E = kMoeExperts, h = kMoeHidden;
    const int64_t slots = tokens * k, ffn = kMoeFfn;
    std::printf("2c. MoE experts at OLMoE-1B-7B's shape (h %" PRId64 ", expert ffn %" PRId64
                " SwiGLU, %" PRId64 " experts, top-%" PRId64 ", %" PRId64 " tokens: %" PRId64
                " rows)\n",
                h, ffn, E, k, tokens, slots);
    // Routing from random router logits, as the layer does it: uneven expert loads.
    Buffer<float> logits(tokens * E), probs(slots), dprobs(slots), dlogits(tokens * E);
    Buffer<int32_t> idx(slots), row_of(slots);
    fill_uniform(logits, -2.0f, 2.0f, 901);
    fill_uniform(dprobs, -1.0f, 1.0f, 902);
    ptdp::RouterDesc rd;
    rd.tokens = tokens;
    rd.experts = E;
    rd.topk = k;
    std::vector<int64_t> counts(static_cast<std::size_t>(E));
    be_.moe_router_forward(rd, logits.get(), nullptr, idx.get(), probs.get());
    be_.moe_route(idx.get(), tokens, k, E, row_of.get(), counts.data());
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    std::printf("   rows per expert: min %" PRId64 ", max %" PRId64 ", mean %.1f\n", *lo, *hi,
                static_cast<double>(slots) / static_cast<double>(E));
    std::printf("   %-22s %3s %6s %6s %6s %10s %10s %9s %7s\n", "name", "op", "m", "n", "k", "ms", "best ms",
                "GFLOP/s", "% peak");
    std::printf("   %s\n", std::string(90, '-').c_str());
    // Buffers big enough for every GEMM: rows x (2 ffn) activations, E experts' weights (1 GiB:
    // the layer's real size, which the forward and dgrad stream through once per call).
    const int64_t wide = 2 * ffn > h ? 2 * ffn : h;
    Buffer<float> a(slots * wide), b(E * 2 * ffn * h), c(slots * wide);
    fill_uniform(a, -1.0f, 1.0f, 903);
    fill_uniform(b, -0.05f, 0.05f, 904);
    fill_uniform(c, -1.0f, 1.0f, 905);
    // gemm_s: every grouped GEMM; paired_*: the rows where both the grouped and the plain GEMM ran.
    double gemm_s = 0.0, paired_grouped_s = 0.0, paired_sgemm_s = 0.0;
    for (const MoeGemm& g : kMoeGemms) {
      ptdp::GroupedGemmDesc d;
      d.groups = E;
      d.sizes = counts.data();
      d.varying = g.varying;
      d.trans_b = g.trans_b;
      d.n = g.n;
      GemmDesc plain;
      plain.n = g.n;
      plain.trans_b = g.trans_b;
      if (g.varying == ptdp::GroupedDim::M) {
        d.m = slots;
        d.k = g.fixed;
        plain.m = slots;
        plain.k = g.fixed;
      } else {
        d.m = g.fixed;
        d.k = slots;
        d.beta = 1.0f;  // wgrad accumulates
        plain.trans_a = true;
        plain.m = g.fixed;
        plain.k = slots;
        plain.beta = 1.0f;
      }
      const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
      const std::string ops_name = g.varying == ptdp::GroupedDim::M ? (g.trans_b ? "NT" : "NN") : "TN";
      // Forward and dgrad read the experts' weights (b) and write activations (c); wgrad reads
      // two activations (a, c) and writes the experts' gradients (over b).
      const bool wgrad = g.varying == ptdp::GroupedDim::K;
      float* in2 = wgrad ? c.get() : b.get();
      float* out = wgrad ? b.get() : c.get();
      const double t = moe_case(std::string("moe/grouped.") + g.name, ops_name, d.m, d.n, d.k, flops,
                                [&] { be_.grouped_gemm(d, a.get(), in2, out); });
      gemm_s += t;
      const double ts = moe_case(std::string("moe/sgemm.") + g.name, ops_name, plain.m, plain.n, plain.k, flops,
                                 [&] { be_.gemm(plain, a.get(), in2, out); });
      if (t > 0.0 && ts > 0.0) {
        paired_sgemm_s += ts;
        paired_grouped_s += t;
      }
    }
    // The ops around the GEMMs (no FLOP count: time only).
    Buffer<float> x(tokens * h), xs(slots * h), y(tokens * h), act(slots * 2 * ffn), acto(slots * ffn);
    fill_uniform(x, -1.0f, 1.0f, 906);
    fill_uniform(xs, -1.0f, 1.0f, 907);
    fill_uniform(act, -1.0f, 1.0f, 908);
    double other_s = 0.0, swiglu_s = 0.0;
    other_s += moe_case("moe/router.fwd", "", tokens, E, k, 0.0,
                        [&] { be_.moe_router_forward(rd, logits.get(), nullptr, idx.get(), probs.get()); });
    other_s += moe_case("moe/router.bwd", "", tokens, E, k, 0.0, [&] {
      be_.moe_router_backward(rd, logits.get(), idx.get(), dprobs.get(), dlogits.get(), false);
    });
    other_s += moe_case("moe/route", "", tokens, E, k, 0.0,
                        [&] { be_.moe_route(idx.get(), tokens, k, E, row_of.get(), counts.data()); });
    other_s += moe_case("moe/permute.fwd", "", tokens, h, k, 0.0, [&] {
      be_.moe_permute(x.get(), kF32, row_of.get(), tokens, k, h, slots, xs.get());
    });
    other_s += moe_case("moe/permute.bwd", "", tokens, h, k, 0.0, [&] {
      be_.moe_unpermute(xs.get(), kF32, nullptr, row_of.get(), tokens, k, h, slots, y.get());
    });
    other_s += moe_case("moe/unpermute.fwd", "", tokens, h, k, 0.0, [&] {
      be_.moe_unpermute(xs.get(), kF32, probs.get(), row_of.get(), tokens, k, h, slots, y.get());
    });
    other_s += moe_case("moe/unpermute.bwd", "", tokens, h, k, 0.0, [&] {
      be_.moe_unpermute_backward(y.get(), xs.get(), kF32, probs.get(), row_of.get(), tokens, k, h, slots,
                                 xs.get(), dprobs.get());
    });
    swiglu_s += moe_case("moe/swiglu.fwd", "", slots, ffn, 0, 0.0,
                         [&] { be_.swiglu_forward(act.get(), acto.get(), kF32, slots, ffn); });
    swiglu_s += moe_case("moe/swiglu.bwd", "", slots, ffn, 0, 0.0,
                         [&] { be_.swiglu_backward(act.get(), acto.get(), a.get(), kF32, slots, ffn); });
    if (paired_grouped_s > 0.0) {
      std::printf("   grouped GEMMs ran at %.0f%% of the plain GEMMs' speed on the same FLOPs\n",
                  100.0 * paired_sgemm_s / paired_grouped_s);
    }
    if (gemm_s > 0.0 && other_s > 0.0) {
      const double layer = gemm_s + swiglu_s + other_s;
      std::printf("   router + routing + permute + unpermute (fwd and bwd): %.3f ms of the layer's %.3f ms "
                  "(%.1f%%; grouped GEMMs %.1f%%, SwiGLU %.1f%%)\n",
                  other_s * 1e3, layer * 1e3, 100.0 * other_s / layer, 100.0 * gemm_s / layer,
                  100.0 * swiglu_s / layer);
    }
    std::printf("\n");
  }

  // -- 3. memory-bound ops ---------------------------------------------------------------------

  void print_mem_header() {
    if (mem_header_printed_) return;
    mem_header_printed_ = true;
    std::printf("3. Memory-bound ops (GB/s over the minimum bytes each op must read and write)\n");
    std::printf("   %-20s %-30s %10s %10s %10s %9s\n", "name", "shape", "MB moved", "ms",
                "best ms", "GB/s");
    std::printf("   %s\n", std::string(94, '-').c_str());
  }

  std::string shape2(int64_t r, int64_t c) {
    return "[" + std::to_string(r) + " x " + std::to_string(c) + "]";
  }
  std::string shape3(int64_t a, int64_t b, int64_t c) {
    return "[" + std::to_string(a) + " x " + std::to_string(b) + " x " + std::to_string(c) + "]";
  }

  /// Times one memory-bound op. `setup` runs once, untimed, before the warm-up (it produces
  /// the saved statistics a backward op reads).
  void mem_case(const std::string& short_name, const std::string& shape, double bytes,
                const std::function<void()>& op, const std::function<void()>& setup = {}) {
    const std::string name = "mem/" + short_name;
    if (!selected(name)) return;
    print_mem_header();
    Result r;
    r.section = "mem";
    r.name = name;
    r.shape = shape;
    r.bytes = bytes;
    std::printf("   %-20s %-30s %10.1f", short_name.c_str(), shape.c_str(), bytes * 1e-6);
    std::fflush(stdout);
    try {
      if (setup) {
        setup();
        be_.synchronize();
      }
      r.st = measure(op, true);
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = std::string("ERROR: ") + e.what();
    }
    if (r.ok) {
      std::printf(" %10.3f %10.3f %9.1f%s\n", r.st.median_s * 1e3, r.st.best_s * 1e3,
                  bytes / r.st.median_s * 1e-9, contended_mark(r.st));
    } else {
      any_error_ = true;
      std::printf("  %s\n", r.error.c_str());
    }
    results_.push_back(std::move(r));
  }

  static double f32_bytes(double elements) { return 4.0 * elements; }

  void bench_bias() {
    if (!any_selected({"mem/bias_add", "mem/bias_grad"})) return;
    const int64_t rows = kRows, cols = kFfn;  // fc1's output
    const double rc = static_cast<double>(rows * cols);
    Buffer<float> y(rows * cols), bias(cols), dbias(cols);
    fill_uniform(y, -1.0f, 1.0f, 11);
    fill_uniform(bias, -1.0f, 1.0f, 12);
    // bias_add: read y, write y, read bias = 4 (2 R C + C)
    mem_case("bias_add", shape2(rows, cols), f32_bytes(2 * rc + cols),
             [&] { be_.bias_add(y.get(), bias.get(), kF32, rows, cols); });
    // bias_grad (overwrite): read dy, write dbias = 4 (R C + C)
    mem_case("bias_grad", shape2(rows, cols), f32_bytes(rc + cols),
             [&] { be_.bias_grad(y.get(), kF32, dbias.get(), rows, cols, false); });
  }

  void bench_gelu() {
    if (!any_selected({"mem/gelu_fwd", "mem/gelu_bwd"})) return;
    const int64_t rows = kRows, cols = kFfn;
    const int64_t n = rows * cols;
    Buffer<float> x(n), y(n), dy(n), dx(n);
    fill_uniform(x, -3.0f, 3.0f, 21);
    fill_uniform(dy, -1.0f, 1.0f, 22);
    // gelu_forward: read x, write y = 4 (2 n)
    mem_case("gelu_fwd", shape2(rows, cols), f32_bytes(2.0 * n),
             [&] { be_.gelu_forward(x.get(), y.get(), kF32, n); });
    // gelu_backward (dx separate from dy): read x, dy, write dx = 4 (3 n)
    mem_case("gelu_bwd", shape2(rows, cols), f32_bytes(3.0 * n),
             [&] { be_.gelu_backward(x.get(), dy.get(), dx.get(), kF32, n); });
  }

  void bench_layernorm() {
    if (!any_selected({"mem/layernorm_fwd", "mem/layernorm_bwd"})) return;
    const int64_t rows = kRows, cols = kHidden;
    const double rc = static_cast<double>(rows * cols);
    Buffer<float> x(rows * cols), y(rows * cols), dy(rows * cols), dx(rows * cols);
    Buffer<float> gamma(cols), beta(cols), dgamma(cols), dbeta(cols), mean(rows), rstd(rows);
    fill_uniform(x, -2.0f, 2.0f, 31);
    fill_uniform(dy, -1.0f, 1.0f, 32);
    fill_uniform(gamma, 0.5f, 1.5f, 33);
    fill_uniform(beta, -0.5f, 0.5f, 34);
    auto fwd = [&] {
      be_.layernorm_forward(x.get(), gamma.get(), beta.get(), y.get(), kF32, mean.get(),
                            rstd.get(), rows, cols, 1e-5f);
    };
    // layernorm_forward: read x, gamma, beta; write y, mean, rstd = 4 (2 R C + 2 C + 2 R)
    mem_case("layernorm_fwd", shape2(rows, cols), f32_bytes(2 * rc + 2.0 * cols + 2.0 * rows),
             fwd);
    // layernorm_backward (overwrite): read x, dy, gamma, mean, rstd; write dx, dgamma, dbeta
    //   = 4 (3 R C + 3 C + 2 R)
    mem_case(
        "layernorm_bwd", shape2(rows, cols), f32_bytes(3 * rc + 3.0 * cols + 2.0 * rows),
        [&] {
          be_.layernorm_backward(x.get(), gamma.get(), mean.get(), rstd.get(), dy.get(), dx.get(),
                                 kF32, dgamma.get(), dbeta.get(), rows, cols, false);
        },
        fwd);
  }

  void bench_rmsnorm() {
    if (!any_selected({"mem/rmsnorm_fwd", "mem/rmsnorm_bwd"})) return;
    const int64_t rows = kRows, cols = kHidden;
    const double rc = static_cast<double>(rows * cols);
    Buffer<float> x(rows * cols), y(rows * cols), dy(rows * cols), dx(rows * cols);
    Buffer<float> gamma(cols), dgamma(cols), rstd(rows);
    fill_uniform(x, -2.0f, 2.0f, 41);
    fill_uniform(dy, -1.0f, 1.0f, 42);
    fill_uniform(gamma, 0.5f, 1.5f, 43);
    auto fwd = [&] {
      be_.rmsnorm_forward(x.get(), gamma.get(), y.get(), kF32, rstd.get(), rows, cols, 1e-5f);
    };
    // rmsnorm_forward: read x, gamma; write y, rstd = 4 (2 R C + C + R)
    mem_case("rmsnorm_fwd", shape2(rows, cols), f32_bytes(2 * rc + cols + rows), fwd);
    // rmsnorm_backward (overwrite): read x, dy, gamma, rstd; write dx, dgamma
    //   = 4 (3 R C + 2 C + R)
    mem_case(
        "rmsnorm_bwd", shape2(rows, cols), f32_bytes(3 * rc + 2.0 * cols + rows),
        [&] {
          be_.rmsnorm_backward(x.get(), gamma.get(), rstd.get(), dy.get(), dx.get(), kF32,
                               dgamma.get(), rows, cols, false);
        },
        fwd);
  }

  void bench_swiglu() {
    if (!any_selected({"mem/swiglu_fwd", "mem/swiglu_bwd"})) return;
    const int64_t rows = kRows, cols = kFfn;  // x [rows, 2 * ffn] = [gate | up], y [rows, ffn]
    const double rc = static_cast<double>(rows * cols);
    Buffer<float> x(2 * rows * cols), y(rows * cols), dy(rows * cols), dx(2 * rows * cols);
    fill_uniform(x, -4.0f, 4.0f, 51);
    fill_uniform(dy, -1.0f, 1.0f, 52);
    // swiglu_forward: read x, write y = 4 (2 R C + R C)
    mem_case("swiglu_fwd", shape2(rows, 2 * cols), f32_bytes(3 * rc),
             [&] { be_.swiglu_forward(x.get(), y.get(), kF32, rows, cols); });
    // swiglu_backward: read x, dy, write dx = 4 (2 R C + R C + 2 R C)
    mem_case("swiglu_bwd", shape2(rows, 2 * cols), f32_bytes(5 * rc),
             [&] { be_.swiglu_backward(x.get(), dy.get(), dx.get(), kF32, rows, cols); });
  }

  void bench_rope() {
    if (!any_selected({"mem/rope_fwd", "mem/rope_bwd"})) return;
    // Llama-style grouped-query activation: 12 query heads in 4 groups, qkv [s, b, 4, 3 + 2, dh],
    // every query and key feature rotated.
    const int64_t groups = kGqaGroups, qpg = kHeads / kGqaGroups;
    const int64_t tokens = kRows, n = tokens * groups * (qpg + 2) * kHeadDim;
    Buffer<float> qkv(n), inv_freq(kHeadDim / 2);
    fill_uniform(qkv, -1.0f, 1.0f, 61);
    for (int64_t i = 0; i < kHeadDim / 2; ++i)
      inv_freq.get()[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / kHeadDim));
    ptdp::RopeDesc d;
    d.s = kSeq;
    d.b = kBatch;
    d.groups = groups;
    d.q_per_group = qpg;
    d.dh = kHeadDim;
    d.rot_dim = kHeadDim;
    d.inv_freq = inv_freq.get();
    // In place over the query and key heads: read and write them = 4 (2 tokens groups (qpg + 1)
    // dh); the value heads are not touched.
    const double rotated = static_cast<double>(tokens * groups * (qpg + 1) * kHeadDim);
    const std::string shape = "[" + std::to_string(tokens) + " x " + std::to_string(groups) +
                              " x " + std::to_string(qpg + 2) + " x " + std::to_string(kHeadDim) +
                              "]";
    mem_case("rope_fwd", shape, f32_bytes(2 * rotated),
             [&] { be_.rope_forward(qkv.get(), kF32, d); });
    mem_case("rope_bwd", shape, f32_bytes(2 * rotated),
             [&] { be_.rope_backward(qkv.get(), kF32, d); });
  }

  void bench_softmax() {
    if (!any_selected({"mem/softmax_fwd", "mem/softmax_bwd"})) return;
    const int64_t nb = kBatch * kHeads;
    const int64_t s = o_.quick ? 512 : kSeq;
    const double total = static_cast<double>(nb * s * s);
    const double visible = static_cast<double>(nb) * static_cast<double>(s * (s + 1) / 2);
    Buffer<float> x(nb * s * s), y(nb * s * s), dy(nb * s * s), dx(nb * s * s);
    fill_uniform(x, -4.0f, 4.0f, 41);
    fill_uniform(dy, -1.0f, 1.0f, 42);
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    auto fwd = [&] { be_.softmax_forward(x.get(), y.get(), kF32, nb, s, s, scale, true); };
    // softmax_forward, causal, sq = sk = s: read the visible s(s+1)/2 scores per batch, write
    // all of y (masked entries are stored as 0) = 4 (B s (s+1)/2 + B s s)
    mem_case("softmax_fwd", shape3(nb, s, s) + " causal", f32_bytes(visible + total), fwd);
    // softmax_backward (dx separate from dy): read y, dy, write dx = 4 (3 B s s)
    mem_case(
        "softmax_bwd", shape3(nb, s, s), f32_bytes(3.0 * total),
        [&] { be_.softmax_backward(y.get(), dy.get(), dx.get(), kF32, nb, s, s, scale); }, fwd);
  }

  void bench_dropout() {
    if (!any_selected({"mem/dropout_fwd", "mem/dropout_bwd", "mem/bias_dropout_add"})) return;
    const int64_t rows = kRows, cols = kHidden;  // hidden dropout after proj and fc2
    const int64_t n = rows * cols;
    Buffer<float> x(n), y(n);
    fill_uniform(x, -1.0f, 1.0f, 51);
    ptdp::DropoutDesc d;
    d.p = 0.1f;
    d.rng.seed = 1234;
    d.rng.stream = ptdp::philox_name_hash("bench.dropout");
    d.block = ptdp::GlobalBlock::flat(n);
    // dropout_forward: read x, write y = 4 (2 n) (the mask is regenerated, never stored)
    mem_case("dropout_fwd", shape2(rows, cols) + " p=0.1", f32_bytes(2.0 * n),
             [&] { be_.dropout_forward(x.get(), y.get(), kF32, d); });
    // dropout_backward: read dy, write dx = 4 (2 n)
    mem_case("dropout_bwd", shape2(rows, cols) + " p=0.1", f32_bytes(2.0 * n),
             [&] { be_.dropout_backward(y.get(), x.get(), kF32, d); });
    // bias_dropout_add (y in place over the residual): read x, bias, residual, write y
    //   = 4 (3 n + C)
    Buffer<float> bias(cols);
    fill_uniform(bias, -1.0f, 1.0f, 52);
    mem_case("bias_dropout_add", shape2(rows, cols) + " p=0.1", f32_bytes(3.0 * n + cols), [&] {
      be_.bias_dropout_add(x.get(), bias.get(), y.get(), y.get(), kF32, rows, cols, d);
    });
  }

  void bench_elementwise() {
    if (!any_selected({"mem/add", "mem/axpy", "mem/scale", "mem/fill", "mem/fill_zero",
                       "mem/sum_squares"}))
      return;
    const int64_t rows = kRows, cols = kFfn;
    const int64_t n = rows * cols;
    Buffer<float> a(n), b(n), y(n);
    fill_uniform(a, -1.0f, 1.0f, 61);
    fill_uniform(b, -1.0f, 1.0f, 62);
    fill_uniform(y, -1.0f, 1.0f, 63);
    // add (out of place): read a, b, write y = 4 (3 n)
    mem_case("add", shape2(rows, cols), f32_bytes(3.0 * n),
             [&] { be_.add(a.get(), b.get(), y.get(), kF32, n); });
    // axpy: read x, read y, write y = 4 (3 n)
    mem_case("axpy", shape2(rows, cols), f32_bytes(3.0 * n),
             [&] { be_.axpy(1e-3f, a.get(), y.get(), n); });
    // scale (in place): read x, write x = 4 (2 n). The factor alternates so values stay put.
    bool up = false;
    mem_case("scale", shape2(rows, cols), f32_bytes(2.0 * n), [&] {
      up = !up;
      be_.scale(b.get(), up ? 2.0f : 0.5f, n);
    });
    // fill (f32): write x = 4 n
    mem_case("fill", shape2(rows, cols) + " f32", f32_bytes(1.0 * n),
             [&] { be_.fill(y.get(), ptdp::DType::F32, 0.5, n); });
    // fill with 0 (gradient zeroing): write x = 4 n
    mem_case("fill_zero", shape2(rows, cols) + " f32", f32_bytes(1.0 * n),
             [&] { be_.fill(y.get(), ptdp::DType::F32, 0.0, n); });
    // sum_squares: read x = 4 n
    volatile double sink = 0.0;
    mem_case("sum_squares", shape2(rows, cols), f32_bytes(1.0 * n),
             [&] { sink = sink + be_.sum_squares(a.get(), n); });
  }

  void bench_cast() {
    if (!any_selected({"mem/cast_f32_bf16", "mem/cast_bf16_f32", "mem/cast_f32_f16"})) return;
    const int64_t rows = kRows, cols = kFfn;
    const int64_t n = rows * cols;
    Buffer<float> f(n), f_out(n);
    Buffer<uint16_t> h(n), h_out(n);
    fill_uniform(f, -4.0f, 4.0f, 71);
    for (int64_t i = 0; i < n; ++i) h.get()[i] = ptdp::f32_to_bf16(f.get()[i]);
    // every cast: read n source elements, write n destination elements = n (4 + 2)
    mem_case("cast_f32_bf16", shape2(rows, cols), 6.0 * n,
             [&] { be_.cast(f.get(), DType::F32, h_out.get(), DType::BF16, n); });
    mem_case("cast_bf16_f32", shape2(rows, cols), 6.0 * n,
             [&] { be_.cast(h.get(), DType::BF16, f_out.get(), DType::F32, n); });
    mem_case("cast_f32_f16", shape2(rows, cols), 6.0 * n,
             [&] { be_.cast(f.get(), DType::F32, h_out.get(), DType::F16, n); });
  }

  void bench_embedding() {
    if (!any_selected({"mem/embedding_fwd", "mem/embedding_bwd"})) return;
    const int64_t n = kRows, h = kHidden, vocab = kVocab;
    Buffer<float> table(vocab * h), dtable(vocab * h), out(n * h), dout(n * h);
    Buffer<int32_t> ids(n);
    fill_uniform(table, -1.0f, 1.0f, 81);
    fill_uniform(dtable, -1.0f, 1.0f, 82);
    fill_uniform(dout, -1e-3f, 1e-3f, 83);
    fill_ids(ids, vocab, 84);
    std::vector<int32_t> sorted(ids.get(), ids.get() + n);
    std::sort(sorted.begin(), sorted.end());
    const double unique =
        static_cast<double>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    const std::string shape = std::to_string(n) + " ids, " + shape2(vocab, h);
    // embedding_forward: read ids, read n table rows, write out = 4 n + 4 (2 n h)
    mem_case("embedding_fwd", shape, 4.0 * n + f32_bytes(2.0 * n * h), [&] {
      be_.embedding_forward(ids.get(), n, table.get(), kF32, 0, vocab, h, out.get());
    });
    // embedding_backward: read ids, read dout, read + write the U distinct rows of dtable the
    // ids touch = 4 n + 4 (n h + 2 U h)
    mem_case("embedding_bwd", shape, 4.0 * n + f32_bytes(n * h + 2.0 * unique * h), [&] {
      be_.embedding_backward(ids.get(), n, dout.get(), kF32, 0, vocab, h, dtable.get());
    });
  }

  void bench_cross_entropy() {
    if (!any_selected({"mem/ce_forward_local", "mem/ce_backward"})) return;
    const int64_t rows = o_.quick ? 256 : kRows, v = kVocab;
    const double rv = static_cast<double>(rows) * static_cast<double>(v);
    Buffer<float> logits(rows * v), dlogits(rows * v);
    Buffer<float> row_max(rows), sum_exp(rows), target_logit(rows), dloss(rows);
    Buffer<int32_t> targets(rows);
    fill_uniform(logits, -4.0f, 4.0f, 91);
    fill_uniform(dloss, 0.5f / static_cast<float>(rows), 1.5f / static_cast<float>(rows), 92);
    fill_ids(targets, v, 93);
    auto forward_op = [&] {
      be_.ce_forward_local(logits.get(), kF32, targets.get(), rows, v, 0, row_max.get(),
                           sum_exp.get(), target_logit.get());
    };
    // ce_forward_local (one pass): read logits, targets; write row_max, sum_exp, target_logit
    //   = 4 (R V + 4 R)
    mem_case("ce_forward_local", shape2(rows, v), f32_bytes(rv + 4.0 * rows), forward_op);
    // ce_backward (dlogits separate): read logits, row_max, sum_exp, targets, dloss; write
    // dlogits = 4 (2 R V + 4 R)
    mem_case(
        "ce_backward", shape2(rows, v), f32_bytes(2.0 * rv + 4.0 * rows),
        [&] {
          be_.ce_backward(logits.get(), kF32, row_max.get(), sum_exp.get(), targets.get(),
                          dloss.get(), rows, v, 0, dlogits.get());
        },
        forward_op);
  }

  void bench_optimizer() {
    if (!any_selected({"mem/adamw_step", "mem/stream_copy", "mem/stream_triad", "mem/stream_r4w3",
                       "mem/sgd_step"}))
      return;
    const int64_t n = o_.quick ? int64_t{16} << 20 : kGpt2Params;
    const std::string shape = std::to_string(n) + " params";
    Buffer<float> param(n), grad(n), m(n), v(n);
    fill_uniform(param, -0.1f, 0.1f, 101);
    fill_uniform(grad, -1e-2f, 1e-2f, 102);
    fill_uniform(m, -1e-3f, 1e-3f, 103);
    fill_uniform(v, 0.0f, 1e-4f, 104);
    ptdp::AdamWParams ap;
    ap.lr = 1e-4f;
    ap.weight_decay = 0.1f;
    ap.step = 10;
    // adamw_step: read param, grad, m, v; write param, m, v = 4 (7 n)
    mem_case("adamw_step", shape, f32_bytes(7.0 * n), [&] {
      be_.adamw_step(param.get(), grad.get(), m.get(), v.get(), n, ap);
    });
    if (!results_.empty() && results_.back().name == "mem/adamw_step" && results_.back().ok)
      adamw_gbps_ = results_.back().bytes / results_.back().st.best_s * 1e-9;
    // The bandwidth a memory-bound op can reach: a copy over as many elements (grad into v, which
    // the SGD step below does not read), one contiguous memcpy per OpenMP thread: read n, write n
    // = 4 (2 n). Pieces this large make glibc's memcpy store around the cache (non-temporal), so
    // the destination is not read first and the bytes counted are the bytes moved.
    if (selected("mem/stream_copy")) {
      mem_case("stream_copy", shape, f32_bytes(2.0 * n), [&] {
        const float* src = grad.get();
        float* dst = v.get();
#pragma omp parallel
        {
          const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
          const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
          std::memcpy(dst + begin, src + begin, static_cast<std::size_t>(end - begin) * sizeof(float));
        }
      });
      if (!results_.empty() && results_.back().name == "mem/stream_copy" && results_.back().ok)
        stream_gbps_ = results_.back().bytes / results_.back().st.best_s * 1e-9;
    }
    bench_stream_ceilings(n, shape);
    ptdp::SgdParams sp;
    sp.lr = 1e-3f;
    sp.momentum = 0.9f;
    sp.weight_decay = 1e-4f;
    // sgd_step with momentum: read param, grad, buf; write param, buf = 4 (5 n)
    mem_case("sgd_step", shape + ", momentum", f32_bytes(5.0 * n),
             [&] { be_.sgd_step(param.get(), grad.get(), m.get(), n, sp); });
  }

  /// The memory-bandwidth ceilings of a streaming op over buffers as large as the optimizer's:
  ///   stream_triad: STREAM's triad a[i] = b[i] + s c[i] in double precision, each array as large
  ///     as one fp32 optimizer buffer (n / 2 doubles), counted as STREAM counts it: 24 bytes per
  ///     element (b, c read, a written; the write-allocate read of a is not counted);
  ///   stream_r4w3: AdamW's traffic without its arithmetic, four fp32 arrays read and three of them
  ///     written in place: 28 bytes per element, every byte it moves.
  /// Both initialise their arrays in the kernel's own static split over the OpenMP threads (first
  /// touch puts each page with the thread that streams it) and run vector loops compiled, like
  /// the optimizer's, for the machine's widest vectors: a baseline SSE2 loop has four times the
  /// instructions per cache line and, on one core, runs out of room for loads in flight before
  /// the memory does.
  void bench_stream_ceilings(int64_t n, const std::string& shape) {
    if (selected("mem/stream_triad")) {
      const int64_t nd = n / 2;
      Buffer<double> a(nd), b(nd), c(nd);
      double* pa = a.get();
      double* pb = b.get();
      double* pc = c.get();
      static_ranges(nd, [&](int64_t lo, int64_t hi) {
        std::fill(pa + lo, pa + hi, 0.0);
        std::fill(pb + lo, pb + hi, 1.0);
        std::fill(pc + lo, pc + hi, 2.0);
      });
      mem_case("stream_triad", std::to_string(nd) + " doubles x 3", 24.0 * static_cast<double>(nd), [&] {
        static_ranges(nd, [&](int64_t lo, int64_t hi) { triad_range(pa + lo, pb + lo, pc + lo, 3.0, hi - lo); });
      });
      if (!results_.empty() && results_.back().name == "mem/stream_triad" && results_.back().ok)
        triad_gbps_ = results_.back().bytes / results_.back().st.best_s * 1e-9;
    }
    if (selected("mem/stream_r4w3")) {
      Buffer<float> p(n), g(n), m(n), v(n);
      float* pp = p.get();
      float* pg = g.get();
      float* pm = m.get();
      float* pv = v.get();
      static_ranges(n, [&](int64_t lo, int64_t hi) {
        std::fill(pp + lo, pp + hi, 0.0f);
        std::fill(pg + lo, pg + hi, 1e-3f);
        std::fill(pm + lo, pm + hi, 0.0f);
        std::fill(pv + lo, pv + hi, 0.0f);
      });
      // The updates alternate in sign so the values stay put.
      float q = 1.0f;
      mem_case("stream_r4w3", shape, f32_bytes(7.0 * n), [&] {
        q = -q;
        static_ranges(n, [&](int64_t lo, int64_t hi) {
          r4w3_range(pp + lo, pg + lo, pm + lo, pv + lo, q, hi - lo);
        });
      });
      if (!results_.empty() && results_.back().name == "mem/stream_r4w3" && results_.back().ok)
        r4w3_gbps_ = results_.back().bytes / results_.back().st.best_s * 1e-9;
    }
  }

  /// The AdamW step's bandwidth beside the ceilings measured in the same run, all from their
  /// best runs.
  void print_optimizer_vs_stream() {
    if (adamw_gbps_ <= 0.0 || (stream_gbps_ <= 0.0 && triad_gbps_ <= 0.0 && r4w3_gbps_ <= 0.0)) return;
    std::printf("AdamW against the memory bandwidth (best runs; AdamW moves 28 bytes per parameter):\n");
    if (triad_gbps_ > 0.0) {
      std::printf("   adamw_step %.1f GB/s, STREAM triad %.1f GB/s: AdamW at %.0f%% of the triad's bandwidth\n",
                  adamw_gbps_, triad_gbps_, 100.0 * adamw_gbps_ / triad_gbps_);
    }
    if (r4w3_gbps_ > 0.0) {
      std::printf("   adamw_step %.1f GB/s, read-4-write-3 %.1f GB/s: AdamW at %.0f%% of its own traffic's ceiling\n",
                  adamw_gbps_, r4w3_gbps_, 100.0 * adamw_gbps_ / r4w3_gbps_);
    }
    if (stream_gbps_ > 0.0) {
      std::printf("   adamw_step %.1f GB/s, stream copy %.1f GB/s: AdamW at %.0f%% of the copy's bandwidth\n",
                  adamw_gbps_, stream_gbps_, 100.0 * adamw_gbps_ / stream_gbps_);
    }
    std::printf("\n");
  }

  // -- JSON ------------------------------------------------------------------------------------

  bool write_json() {
    std::string s = "{\n";
    s += "  \"mode\": \"" + std::string(o_.quick ? "quick" : "full") + "\",\n";
    s += "  \"backend\": \"" + json_escape(be_.name()) + "\",\n";
    s += "  \"omp_threads\": " + std::to_string(omp_get_max_threads()) + ",\n";
    s += "  \"openblas_threads\": " + std::to_string(blas_threads_) + ",\n";
    s += "  \"openblas_config\": \"" + json_escape(blas_config_) + "\",\n";
    s += "  \"openblas_core\": \"" + json_escape(blas_core_) + "\",\n";
    s += "  \"runs\": " + std::to_string(o_.runs) + ",\n";
    s += "  \"min_time_s\": " + json_number(o_.min_time) + ",\n";
    s += "  \"filter\": \"" + json_escape(o_.filter) + "\",\n";
    s += "  \"peak_gflops\": " + (peak_gflops_ > 0.0 ? json_number(peak_gflops_) : "null") +
         ",\n";
    if (peak_) {
      s += "  \"sgemm_peak\": " + peak_->json() + ",\n";
      s += "  \"peak_moved\": " + std::string(peak_->moved() ? "true" : "false") + ",\n";
      s += "  \"above_peak\": " + std::string(above_peak_ ? "true" : "false") + ",\n";
    }
    if (adamw_gbps_ > 0.0 && stream_gbps_ > 0.0) {
      s += "  \"adamw_vs_stream\": {\"adamw_gbps\": " + json_number(adamw_gbps_) +
           ", \"stream_copy_gbps\": " + json_number(stream_gbps_) +
           ", \"ratio\": " + json_number(adamw_gbps_ / stream_gbps_) + "},\n";
    }
    if (adamw_gbps_ > 0.0 && (triad_gbps_ > 0.0 || r4w3_gbps_ > 0.0)) {
      const auto gbps = [](double g) { return g > 0.0 ? json_number(g) : std::string("null"); };
      const auto ratio = [&](double g) { return g > 0.0 ? json_number(adamw_gbps_ / g) : std::string("null"); };
      s += "  \"adamw_vs_triad\": {\"adamw_gbps\": " + json_number(adamw_gbps_) +
           ", \"triad_gbps\": " + gbps(triad_gbps_) + ", \"ratio\": " + ratio(triad_gbps_) +
           ", \"r4w3_gbps\": " + gbps(r4w3_gbps_) + ", \"r4w3_ratio\": " + ratio(r4w3_gbps_) + "},\n";
    }
    s += "  \"wall_s\": " + json_number(wall_s_) + ",\n";
    s += "  \"cores_busy\": " + json_number(cores_busy_) + ",\n";
    s += "  \"other_cores_busy\": " +
         (other_cores_busy_ >= 0.0 ? json_number(other_cores_busy_) : "null") + ",\n";
    s += "  \"results\": [";
    bool first = true;
    for (const auto& r : results_) {
      s += first ? "\n" : ",\n";
      first = false;
      s += "    {\"section\": \"" + r.section + "\", \"name\": \"" + json_escape(r.name) + "\"";
      if (r.section != "mem") {
        s += ", \"m\": " + std::to_string(r.m) + ", \"n\": " + std::to_string(r.n) +
             ", \"k\": " + std::to_string(r.k) + ", \"batch\": " + std::to_string(r.batch) +
             ", \"op\": \"" + r.ops + "\", \"flops\": " + json_number(r.flops);
      } else {
        s += ", \"shape\": \"" + json_escape(r.shape) + "\", \"bytes\": " + json_number(r.bytes);
      }
      s += ", \"ok\": " + std::string(r.ok ? "true" : "false");
      if (r.ok) {
        s += ", \"ms_median\": " + json_number(r.st.median_s * 1e3) +
             ", \"ms_best\": " + json_number(r.st.best_s * 1e3) +
             ", \"iters_per_run\": " + std::to_string(r.st.iters) +
             ", \"runs\": " + std::to_string(r.st.runs);
        if (r.st.other_cores >= 0.0)
          s += ", \"other_cores_busy\": " + json_number(r.st.other_cores);
        if (r.section != "mem") {
          const double gflops = r.flops / r.st.median_s * 1e-9;
          s += ", \"gflops\": " + json_number(gflops);
          if (peak_gflops_ > 0.0) s += ", \"pct_peak\": " + json_number(100.0 * gflops / peak_gflops_);
        } else {
          s += ", \"gbps\": " + json_number(r.bytes / r.st.median_s * 1e-9);
        }
      } else {
        s += ", \"error\": \"" + json_escape(r.error) + "\"";
      }
      s += "}";
    }
    s += "\n  ]\n}\n";
    return ptdp::bench::write_text_file(o_.json_path, s);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return ptdp::bench::bench_main<Options>(argc, argv, "bench_kernels", parse_args,
                                          [](Options& o) { return Bench(std::move(o)).run(); });
}
