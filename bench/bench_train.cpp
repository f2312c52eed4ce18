// bench_train: end-to-end PTD-P training throughput under mpirun, CPU engine.
//
// For each (t, p, d[, e]) layout in turn, on one Runtime over MPI_COMM_WORLD: its own
// ProcessGroups, a GptPipeline of a small GPT (4 layers, h = 256, 8 heads, V = 8192, s = 128 by
// default), an AdamW optimizer (make_optimizer) and a pipeline schedule (1F1B for p > 1 unless
// --schedule says otherwise), then --warmup untimed and --iters timed calls of
// ptdp::train_iteration, each over m microbatches of b samples per data-parallel replica.
// Every iteration is preceded by a world barrier (untimed), so all ranks start it together.
//
// Per layout it prints:
//   - ms/iter: per iteration the slowest rank's IterationOutcome::seconds; the median (and the
//     fastest and slowest) of that over the timed iterations;
//   - tokens/s: the global batch's tokens (d * m * b * s) / ms/iter;
//   - comm: IterationOutcome::comm_wait_seconds / seconds summed over the timed iterations of
//     each rank (the time it was blocked in communication waits: collectives, pipeline
//     transfers, including the pipeline bubble spent waiting on a peer); max and mean over ranks;
//   - moe (MoE models, --num-experts): IterationOutcome::moe_exchange_seconds / seconds likewise:
//     the wall time of the token dispatchers' communication (the count all-gathers, the
//     all-to-all-v over the e ranks, the etp collectives; forward and backward, waits
//     included), the most that overlapping one microbatch's exchange with another's compute
//     could hide (Megatron's --overlap-moe-expert-parallel-comm; DeepSeek-V3's DualPipe);
//   - GFLOP/s per rank: the paper's model FLOPs (GptConfig::paper_flops of the global batch's
//     tokens: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), Narayanan et al. 2021) / W / ms/iter;
//   - the loss of the last timed iteration (the mean over the global batch);
//   - eff, the scaling efficiency on this machine: tokens/s / (nodes x the tokens/s of the
//     baseline), the baseline being one process alone (rank 0, t = p = d = 1, one data-parallel
//     replica's batch) with the OpenMP threads of all the node's ranks (at most its hardware
//     threads), run first while the other ranks sleep: what the node's cores do without
//     parallelism. 100% means the layout loses nothing to splitting the model or the batch.
// Run with --help for the flags.

#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "core/comm/mpi/mpi_communicator.h"
#include "core/comm/runtime.h"
#include "core/model/gpt_config.h"
#include "core/model/gpt_pipeline.h"
#include "core/optim/optimizer.h"
#include "core/parallel/groups.h"
#include "core/pipeline/schedule.h"
#include "core/plan/cost_model.h"
#include "core/train/trainer.h"

namespace {

using ptdp::bench::Clock;
using ptdp::bench::cpu_seconds;
using ptdp::bench::grouped;
using ptdp::bench::json_escape;
using ptdp::bench::json_number;
using ptdp::bench::machine_busy_seconds;
using ptdp::bench::max_rss_bytes;
using ptdp::bench::parse_int;
using ptdp::bench::seconds_since;
using ptdp::bench::splitmix64;

// ---- options ---------------------------------------------------------------------------------

struct LayoutSpec {
  int t = 1, p = 1, d = 1;
  int e = 1;  // the expert-parallel size (MoE models); t * d must be a multiple of it
};

struct Options {
  bool quick = false;
  std::optional<int> layers, hidden, heads, vocab, seq, micro_batch, microbatches, iters, warmup;
  std::optional<int> tp, pp, virtual_stages;
  std::optional<int> num_experts, moe_topk, moe_ffn;  // Megatron's --num-experts, --moe-router-topk, ...
  std::string layouts;  // "t,p,d[,e];t,p,d[,e]"
  std::string schedule = "1f1b";
  bool distributed = false;
  bool overlap_grad_reduce = false, overlap_param_gather = false;
  std::optional<int> bucket_size;
  bool progress_thread = false;
  bool verify = false;
  bool baseline = true;
  double lr = 1e-3;
  std::string json_path;
};

void print_help(const char* argv0) {
  std::printf(
      "Usage: mpirun -np W %s [options]\n"
      "\n"
      "Trains a small GPT with ptdp::train_iteration (full PTD-P: tensor, pipeline and data\n"
      "parallelism, AdamW) for each (t, p, d) layout of the W ranks in turn and reports per\n"
      "layout: tokens/s of the global batch, ms per iteration (median over the timed\n"
      "iterations of the slowest rank), the share of the iteration spent blocked in\n"
      "communication waits (max and mean over ranks), model GFLOP/s per rank with the\n"
      "paper's 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)), the loss, and the scaling\n"
      "efficiency against one process alone with the threads of all the node's ranks.\n"
      "With --num-experts the MLPs are mixtures of experts (every layer, alltoall dispatcher,\n"
      "dropless, softmax top-k, no linear biases) and each layout also reports the share of the\n"
      "iteration spent in the MoE token exchange (max and mean over ranks).\n"
      "\n"
      "Layouts: by default (W,1,1), (1,W,1), (1,1,W) and, for even W >= 4, (2,W/2,1); with\n"
      "4 ranks: 4,1,1  1,4,1  1,1,4  2,2,1. Layouts the model cannot be split for are skipped\n"
      "with the reason.\n"
      "\n"
      "Options (defaults: full run / --quick):\n"
      "  --layers N            transformer layers (4 / 4)\n"
      "  --hidden N            hidden size h (256 / 128)\n"
      "  --heads N             attention heads (8 / 4)\n"
      "  --vocab N             vocabulary size V (8192 / 2048)\n"
      "  --seq N               sequence length s (128 / 64)\n"
      "  --micro-batch N       microbatch size b (2 / 2)\n"
      "  --microbatches N      microbatches m per data-parallel replica (4 / 4)\n"
      "  --iters N             timed iterations per layout (10 / 5)\n"
      "  --warmup N            untimed iterations per layout first (2 / 1)\n"
      "  --layouts LIST        layouts to run, 't,p,d' or 't,p,d,e' separated by ';' (t*p*d =\n"
      "                        W; e, the expert-parallel size, divides t*d; default 1)\n"
      "  --num-experts E       MoE MLPs with E routed experts (none: dense)\n"
      "  --moe-router-topk K   experts per token (2)\n"
      "  --moe-ffn-hidden-size F  each expert's MLP width (the model's ffn, 4h)\n"
      "  --tp N, --pp N        one layout: t = N, p = N, d = W/(t*p) (instead of --layouts)\n"
      "  --schedule KIND       gpipe | 1f1b | zb-h1 | interleaved, for p > 1 (1f1b); p = 1\n"
      "                        layouts run interleaved as 1f1b\n"
      "  --virtual N           chunks per pipeline rank for interleaved (2)\n"
      "  --distributed-optimizer  shard the optimizer state over the data-parallel group\n"
      "  --overlap-grad-reduce    reduce each gradient bucket as the backward completes it\n"
      "  --overlap-param-gather   (with the two above) all-gather the updated weights bucket\n"
      "                        by bucket, each waited for at its first use in the next forward\n"
      "  --ddp-bucket-size N   gradient elements per data-parallel bucket (0: one per chunk)\n"
      "  --progress-thread     keep the MPI progress thread of the overlap flags running\n"
      "                        without them too (a like-for-like baseline on busy cores)\n"
      "  --lr X                AdamW learning rate, constant (1e-3)\n"
      "  --verify              keep ptdp's per-collective consistency check on (off here)\n"
      "  --no-baseline         skip the one-process baseline run and the efficiency column\n"
      "  --quick               a much smaller model and fewer iterations (< 30 s with 4\n"
      "                        ranks on 2 cores); explicit flags still win\n"
      "  --json PATH           also write the results as JSON to PATH (rank 0)\n"
      "  --help                this text\n"
      "\n"
      "Ranks on a machine with fewer cores than ranks x OpenMP threads oversubscribe it: run\n"
      "with OMP_NUM_THREADS=1 (mpirun -x OMP_NUM_THREADS=1 --oversubscribe ...).\n",
      argv0);
}

/// Returns false when the program should exit (with exit_code: 0 after --help, 2 on a bad flag).
/// Messages are printed by rank 0 only.
bool parse_args(int argc, char** argv, bool talk, Options& o, int& exit_code) {
  exit_code = 0;
  auto fail = [&](const std::string& msg) {
    if (talk) std::fprintf(stderr, "%s: %s\n", argv[0], msg.c_str());
    exit_code = 2;
    return false;
  };
  ptdp::bench::Args args(argc, argv);
  while (args.next()) {
    const std::string arg = args.flag();
    std::string value;
    auto need_value = [&]() -> bool { return args.value(value); };
    auto int_opt = [&](std::optional<int>& dst, int min) -> bool {
      if (!need_value()) return fail(arg + " needs a value");
      int v = 0;
      if (!parse_int(value, v) || v < min)
        return fail(arg + " needs an integer >= " + std::to_string(min) + ", got '" + value + "'");
      dst = v;
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      if (talk) print_help(argv[0]);
      return false;
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--distributed-optimizer") {
      o.distributed = true;
    } else if (arg == "--overlap-grad-reduce") {
      o.overlap_grad_reduce = true;
    } else if (arg == "--overlap-param-gather") {
      o.overlap_param_gather = true;
    } else if (arg == "--progress-thread") {
      o.progress_thread = true;
    } else if (arg == "--verify") {
      o.verify = true;
    } else if (arg == "--no-baseline") {
      o.baseline = false;
    } else if (arg == "--layers") {
      if (!int_opt(o.layers, 1)) return false;
    } else if (arg == "--hidden") {
      if (!int_opt(o.hidden, 1)) return false;
    } else if (arg == "--heads") {
      if (!int_opt(o.heads, 1)) return false;
    } else if (arg == "--vocab") {
      if (!int_opt(o.vocab, 2)) return false;
    } else if (arg == "--seq") {
      if (!int_opt(o.seq, 2)) return false;
    } else if (arg == "--micro-batch") {
      if (!int_opt(o.micro_batch, 1)) return false;
    } else if (arg == "--microbatches") {
      if (!int_opt(o.microbatches, 1)) return false;
    } else if (arg == "--iters") {
      if (!int_opt(o.iters, 1)) return false;
    } else if (arg == "--warmup") {
      if (!int_opt(o.warmup, 0)) return false;
    } else if (arg == "--tp") {
      if (!int_opt(o.tp, 1)) return false;
    } else if (arg == "--pp") {
      if (!int_opt(o.pp, 1)) return false;
    } else if (arg == "--virtual") {
      if (!int_opt(o.virtual_stages, 1)) return false;
    } else if (arg == "--num-experts") {
      if (!int_opt(o.num_experts, 1)) return false;
    } else if (arg == "--moe-router-topk") {
      if (!int_opt(o.moe_topk, 1)) return false;
    } else if (arg == "--moe-ffn-hidden-size") {
      if (!int_opt(o.moe_ffn, 1)) return false;
    } else if (arg == "--ddp-bucket-size") {
      if (!int_opt(o.bucket_size, 0)) return false;
    } else if (arg == "--layouts") {
      if (!need_value()) return fail(arg + " needs a value");
      o.layouts = value;
    } else if (arg == "--schedule") {
      if (!need_value()) return fail(arg + " needs a value");
      if (value != "gpipe" && value != "1f1b" && value != "zb-h1" && value != "interleaved")
        return fail("--schedule must be gpipe, 1f1b, zb-h1 or interleaved, got '" + value + "'");
      o.schedule = value;
    } else if (arg == "--lr") {
      if (!need_value()) return fail(arg + " needs a value");
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(v >= 0.0) || !std::isfinite(v))
        return fail("--lr needs a number >= 0, got '" + value + "'");
      o.lr = v;
    } else if (arg == "--json") {
      if (!need_value()) return fail(arg + " needs a value");
      o.json_path = value;
    } else {
      return fail("unknown argument '" + std::string(args.raw()) + "' (try --help)");
    }
  }
  if (!o.layouts.empty() && (o.tp || o.pp)) return fail("give either --layouts or --tp/--pp, not both");
  if (!o.num_experts && (o.moe_topk || o.moe_ffn))
    return fail("--moe-router-topk and --moe-ffn-hidden-size need --num-experts");
  if (o.virtual_stages && *o.virtual_stages > 1 && o.schedule != "interleaved")
    return fail("--virtual > 1 needs --schedule interleaved");
  if (o.schedule == "interleaved" && o.virtual_stages && *o.virtual_stages < 2)
    return fail("--schedule interleaved needs --virtual >= 2");
  return true;
}

/// The layouts to run for W ranks; false (with a message) when the flags name an impossible one.
bool layouts_for(const Options& o, int world, std::vector<LayoutSpec>& out, std::string& error) {
  out.clear();
  if (o.tp || o.pp) {
    const int t = o.tp.value_or(1), p = o.pp.value_or(1);
    if (world % (t * p) != 0) {
      error = "--tp " + std::to_string(t) + " --pp " + std::to_string(p) + ": t*p does not divide W = " +
              std::to_string(world);
      return false;
    }
    out.push_back({t, p, world / (t * p)});
    return true;
  }
  if (!o.layouts.empty()) {
    std::size_t pos = 0;
    while (pos <= o.layouts.size()) {
      std::size_t end = o.layouts.find(';', pos);
      if (end == std::string::npos) end = o.layouts.size();
      const std::string item = o.layouts.substr(pos, end - pos);
      pos = end + 1;
      if (item.empty()) continue;
      LayoutSpec l;
      char extra = 0;
      const int n = std::sscanf(item.c_str(), "%d,%d,%d,%d%c", &l.t, &l.p, &l.d, &l.e, &extra);
      if ((n != 3 && n != 4) || l.t < 1 || l.p < 1 || l.d < 1 || l.e < 1) {
        error = "--layouts: '" + item + "' is not 't,p,d' or 't,p,d,e' with positive sizes";
        return false;
      }
      if (l.e > 1 && !o.num_experts) {
        error = "--layouts: " + item + " has e = " + std::to_string(l.e) + ": expert parallelism needs --num-experts";
        return false;
      }
      if (l.t * l.p * l.d != world) {
        error = "--layouts: " + item + " has t*p*d = " + std::to_string(l.t * l.p * l.d) + ", not W = " +
                std::to_string(world);
        return false;
      }
      out.push_back(l);
    }
    if (out.empty()) {
      error = "--layouts names no layout";
      return false;
    }
    return true;
  }
  auto add = [&](LayoutSpec l) {
    for (const auto& x : out)
      if (x.t == l.t && x.p == l.p && x.d == l.d && x.e == l.e) return;
    out.push_back(l);
  };
  add({world, 1, 1});
  add({1, world, 1});
  add({1, 1, world});
  if (world >= 4 && world % 2 == 0) add({2, world / 2, 1});
  return true;
}

// ---- helpers ---------------------------------------------------------------------------------

/// Other processes kept more than this many cores busy while a layout was timed: flagged.
constexpr double kContendedCores = 0.25;

/// Hardware threads this process may run on (its CPU affinity; MPI launchers bind ranks), or 0.
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_array(const std::vector<double>& v, double scale = 1.0) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_number(v[i] * scale);
  return s + "]";
}

ptdp::ScheduleKind schedule_kind(const std::string& s) {
  if (s == "gpipe") return ptdp::ScheduleKind::GPipe;
  if (s == "zb-h1") return ptdp::ScheduleKind::ZeroBubbleH1;
  if (s == "interleaved") return ptdp::ScheduleKind::Interleaved1F1B;
  return ptdp::ScheduleKind::OneFOneB;
}

// ---- the benchmark ---------------------------------------------------------------------------

struct Result {
  LayoutSpec l;
  int v = 1;
  std::string schedule;
  std::string skipped;  // non-empty: why the layout did not run
  int64_t tokens = 0;   // global batch tokens per iteration
  std::vector<double> slowest_s;  // per timed iteration, max over ranks
  double median_s = 0, min_s = 0, max_s = 0;
  std::vector<double> comm_share;  // per rank, over the timed iterations
  double comm_max = 0, comm_mean = 0;
  std::vector<double> moe_share;  // per rank: the MoE token exchange's share of the timed iterations
  double moe_max = 0, moe_mean = 0;
  double gflops_per_rank = 0;
  std::vector<double> losses;  // every iteration, warm-up included
  double grad_norm_last = 0;
  int64_t skipped_steps = 0;
  double setup_s = 0;              // slowest rank
  double opt_state_bytes_max = 0;  // over ranks
  double ranks_cores = -1;         // CPU time of all ranks / wall while timed (cores kept busy)
  double other_cores = -1;         // cores other processes kept busy meanwhile; < 0: unknown
  double predicted_s = 0;          // the planner's time per iteration (0: not predicted)
  double predicted_cores = 0;      // the cores it was given
  std::string predict_error;       // why not
};

class Bench {
 public:
  Bench(Options o, std::shared_ptr<ptdp::Runtime> rt) : o_(std::move(o)), rt_(std::move(rt)) {
    const bool q = o_.quick;
    cfg_.num_layers = o_.layers.value_or(4);
    cfg_.hidden_size = o_.hidden.value_or(q ? 128 : 256);
    cfg_.num_attention_heads = o_.heads.value_or(q ? 4 : 8);
    cfg_.vocab_size = o_.vocab.value_or(q ? 2048 : 8192);
    cfg_.seq_length = o_.seq.value_or(q ? 64 : 128);
    if (o_.num_experts) {
      cfg_.moe.num_experts = *o_.num_experts;
      cfg_.moe.router_topk = o_.moe_topk.value_or(2);
      cfg_.moe.ffn_hidden_size = o_.moe_ffn.value_or(0);
      // As Megatron's MoE models: no linear biases, which expert tensor parallelism (etp = t here)
      // cannot split.
      cfg_.add_bias_linear = false;
    }
    b_ = o_.micro_batch.value_or(2);
    m_ = o_.microbatches.value_or(4);
    iters_ = o_.iters.value_or(q ? 5 : 10);
    warmup_ = o_.warmup.value_or(q ? 1 : 2);
    kind_ = schedule_kind(o_.schedule);
    v_ = kind_ == ptdp::ScheduleKind::Interleaved1F1B ? o_.virtual_stages.value_or(2) : 1;
    world_ = rt_->world_size();
    rank_ = rt_->world_rank();
    ocfg_.kind = ptdp::OptimizerKind::Adam;
    ocfg_.lr.lr = o_.lr;
    ocfg_.distributed = o_.distributed;
    ocfg_.overlap_grad_reduce = o_.overlap_grad_reduce;
    ocfg_.overlap_param_gather = o_.overlap_param_gather;
    ocfg_.bucket_elements = o_.bucket_size.value_or(0);
  }

  /// Returns the exit status (the same on every rank).
  int run(const std::vector<LayoutSpec>& layouts) {
    print_header();
    if (o_.baseline) run_baseline();
    // The bench's own MPI calls below hold ptdp's MPI lock, as the progress thread requires.
    const std::shared_ptr<void> progress = o_.progress_thread ? rt_->world().background_progress() : nullptr;
    for (const LayoutSpec& l : layouts) {
      Result r = run_layout(l);
      if (rank_ == 0) print_row(r);
      results_.push_back(std::move(r));
    }
    wall_s_ = seconds_since(start_);
    double rss = max_rss_bytes(), rss_max = 0;
    {
      std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
      MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }
    rss_max_ = rss_max;
    if (rank_ == 0) print_footer();
    int status = ok_ ? 0 : 1;
    if (rank_ == 0 && !o_.json_path.empty() && !write_json()) status = 1;
    {
      std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
      MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    return status;
  }

 private:
  Options o_;
  std::shared_ptr<ptdp::Runtime> rt_;
  ptdp::GptConfig cfg_;
  ptdp::OptimizerConfig ocfg_;
  ptdp::ScheduleKind kind_ = ptdp::ScheduleKind::OneFOneB;
  int b_ = 2, m_ = 4, iters_ = 6, warmup_ = 1, v_ = 1, world_ = 1, rank_ = 0;
  Clock::time_point start_ = Clock::now();
  double wall_s_ = 0, rss_max_ = 0;
  bool ok_ = true;
  bool oversubscribed_ = false;
  bool any_contended_ = false;
  static constexpr int kRule = 162;
  std::vector<Result> results_;
  // The one-process baseline (rank 0): median seconds per iteration, its threads, or why not.
  double baseline_s_ = 0;
  int baseline_threads_ = 0;
  double baseline_other_cores_ = -1;  // cores other processes kept busy meanwhile; < 0: unknown
  std::string baseline_error_;

  int64_t replica_tokens() const { return static_cast<int64_t>(m_) * b_ * cfg_.seq_length; }

  bool moe() const { return cfg_.moe.enabled(); }

  /// MoE with t > 1 runs sequence parallelism (Megatron requires it): the layout's setting,
  /// which the model follows.
  bool sequence_parallel(const LayoutSpec& l) const { return moe() && l.t > 1; }

  ptdp::GptConfig config_at(const LayoutSpec& l) const {
    ptdp::GptConfig c = cfg_;
    c.sequence_parallel = sequence_parallel(l);
    return c;
  }

  ptdp::ParallelConfig parallel_at(const LayoutSpec& l, int v) const {
    ptdp::ParallelConfig pc{world_, l.t, l.p, v};
    pc.expert_model = l.e;
    pc.sequence_parallel = sequence_parallel(l);
    return pc;
  }

  /// "t,p,d", or "t,p,d,e" for MoE models.
  std::string label(const LayoutSpec& l) const {
    std::string s = std::to_string(l.t) + "," + std::to_string(l.p) + "," + std::to_string(l.d);
    return moe() ? s + "," + std::to_string(l.e) : s;
  }

  void print_header() {
    const int omp = omp_get_max_threads();
    const unsigned hw = std::thread::hardware_concurrency();
    const int local = rt_->local_size();
    // Ranks sharing cores is expected (their communication waits back off and leave the core
    // to the peer); several OpenMP threads per rank on top of that make OpenMP barriers stall.
    oversubscribed_ = hw > 0 && omp > 1 && static_cast<unsigned>(local * omp) > hw;
    // The fewest hardware threads any rank may use: a launcher binding each rank to one core
    // (Open MPI does for -np <= 2) leaves its OpenMP threads one core between them.
    int cpus = affinity_cpus(), cpus_min = 0;
    {
      std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
      MPI_Allreduce(&cpus, &cpus_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    }
    if (rank_ != 0) return;
    std::printf("ptdp training benchmark (%s mode, CPU engine): %d ranks, %d on this node, %u hardware "
                "threads, %d OpenMP thread%s per rank\n",
                o_.quick ? "quick" : "full", world_, local, hw, omp, omp == 1 ? "" : "s");
    if (hw > 0 && static_cast<unsigned>(local) > hw)
      std::printf("note    : %d ranks share %u hardware threads: a rank waiting for a peer that waits for a "
                  "core counts that as\n          communication wait, so the comm shares include the "
                  "oversubscription\n",
                  local, hw);
    if (oversubscribed_)
      std::printf("WARNING: %d ranks x %d OpenMP threads oversubscribe %u hardware threads; OpenMP barriers "
                  "then stall.\n         Run with OMP_NUM_THREADS=1 (mpirun -x OMP_NUM_THREADS=1).\n",
                  local, omp, hw);
    if (cpus_min > 0 && omp > cpus_min)
      std::printf("WARNING: a rank may run on only %d hardware thread%s (CPU affinity: the launcher binds ranks) "
                  "but has %d OpenMP threads;\n         with Open MPI add --bind-to none for multithreaded "
                  "ranks.\n",
                  cpus_min, cpus_min == 1 ? "" : "s", omp);
    std::printf("model   : %d layers, hidden %d, %d heads, ffn %d, vocab %d, seq %d, tied embeddings, "
                "dropout %.2g; %s parameters (padded vocabulary at t = 1)\n",
                cfg_.num_layers, cfg_.hidden_size, cfg_.num_attention_heads, cfg_.ffn(), cfg_.vocab_size,
                cfg_.seq_length, cfg_.hidden_dropout, grouped(cfg_.parameter_count(1)).c_str());
    if (moe())
      std::printf("experts : every MLP a mixture of %d experts of width %lld, top-%d softmax routing, dropless, "
                  "alltoall dispatcher, no linear biases; sequence parallelism and etp = t where t > 1\n",
                  cfg_.moe.num_experts, static_cast<long long>(cfg_.moe_ffn()), cfg_.moe.router_topk);
    std::printf("batch   : micro-batch b = %d, m = %d microbatches per data-parallel replica: %" PRId64
                " tokens per replica and iteration\n",
                b_, m_, replica_tokens());
    std::printf("optim   : AdamW, lr %g constant, weight decay %g, clip %g, fp32, distributed optimizer %s, "
                "overlap grad reduce %s, overlap param gather %s, bucket %lld elements%s, MPI progress thread %s\n",
                ocfg_.lr.lr, ocfg_.weight_decay, ocfg_.clip_grad, ocfg_.distributed ? "on" : "off",
                ocfg_.overlap_grad_reduce ? "on" : "off", ocfg_.overlap_param_gather ? "on" : "off",
                static_cast<long long>(ocfg_.bucket_elements), ocfg_.bucket_elements == 0 ? " (one per chunk)" : "",
                o_.progress_thread || ocfg_.overlap_grad_reduce || ocfg_.overlap_param_gather ? "on" : "off");
    std::string sched = ptdp::schedule_kind_name(kind_);
    if (v_ > 1) sched += " (v = " + std::to_string(v_) + ")";
    std::printf("schedule: %s for p > 1; scatter/gather of stage-boundary tensors for t > 1; collective "
                "consistency check %s\n",
                sched.c_str(), o_.verify ? "on (--verify)" : "off");
    std::printf("timing  : %d warm-up + %d timed iterations per layout, a world barrier before each; "
                "ms/iter = median over the\n"
                "          timed iterations of the slowest rank; comm = time blocked in communication waits "
                "/ iteration time\n"
                "          (per rank over the timed iterations; max and mean over ranks); GFLOP/s per rank = "
                "72*B*s*l*h^2*\n"
                "          (1 + s/(6h) + V/(12*l*h)) for the global batch / W / ms/iter\n",
                warmup_, iters_);
    if (moe())
      std::printf("          moe = time in the MoE token exchange (the dispatchers' communication, waits "
                  "included) / iteration time,\n"
                  "          per rank as comm: what overlapping the dispatch with another microbatch's compute "
                  "could hide at most\n");
    std::printf("\n%-9s %-16s %9s %9s %9s %9s %10s %9s %9s %8s %8s %12s %8s %7s %8s %6s %6s\n",
                moe() ? "t,p,d,e" : "t,p,d", "schedule", "tokens/it", "ms/iter", "min ms", "max ms", "tokens/s",
                "comm max", "comm avg", "moe max", "moe avg", "GFLOP/s/rank", "loss", "setup s", "opt MiB", "cores",
                "eff");
    std::printf("%s\n", std::string(kRule, '-').c_str());
    std::fflush(stdout);
  }

  /// This replica's batch of iteration `it`: [m*b, s] ids and next-token labels. Each sequence
  /// is an arithmetic progression modulo V (a random start and a stride in [1, 16]) so there is
  /// something to learn; the sequences are keyed by (iteration, global sequence index).
  void make_batch(int64_t it, int dp_rank, std::vector<int32_t>& tokens, std::vector<int32_t>& labels) const {
    const int64_t s = cfg_.seq_length, n = static_cast<int64_t>(m_) * b_;
    const uint64_t vocab = static_cast<uint64_t>(cfg_.vocab_size);
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t g = static_cast<uint64_t>(dp_rank) * static_cast<uint64_t>(n) + static_cast<uint64_t>(j);
      uint64_t state = (static_cast<uint64_t>(it) << 32) ^ (g * 0x2545F4914F6CDD1Dull) ^ 0x5eedull;
      const uint64_t x0 = splitmix64(state) % vocab, stride = 1 + splitmix64(state) % 16;
      for (int64_t k = 0; k < s; ++k) {
        const std::size_t at = static_cast<std::size_t>(j * s + k);
        tokens[at] = static_cast<int32_t>((x0 + static_cast<uint64_t>(k) * stride) % vocab);
        labels[at] = static_cast<int32_t>((x0 + static_cast<uint64_t>(k + 1) * stride) % vocab);
      }
    }
  }

  /// Nodes the ranks span (ranks per node taken as this node's).
  int nodes() const { return std::max(1, world_ / std::max(1, rt_->local_size())); }

  /// tokens/s of `r` / (nodes x the baseline's tokens/s); 0 without a baseline.
  double efficiency(const Result& r) const {
    if (baseline_s_ <= 0 || r.median_s <= 0) return 0.0;
    return (static_cast<double>(r.tokens) / r.median_s) / (nodes() * static_cast<double>(replica_tokens()) / baseline_s_);
  }

  /// Waits for every rank, sleeping between polls, so that a rank computing alone meanwhile
  /// keeps the cores (MPI's own barrier busy-polls).
  void sleeping_barrier() {
    MPI_Request req;
    {
      std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
      MPI_Ibarrier(MPI_COMM_WORLD, &req);
    }
    for (int done = 0;;) {
      {
        std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  /// The baseline of the efficiency column (see the header comment): rank 0 alone, in a world
  /// of one (Runtime::create_self), with the node's ranks x OpenMP threads (at most the hardware
  /// threads), --warmup + --iters iterations of one replica's batch; the others sleep meanwhile.
  void run_baseline() {
    const int omp = omp_get_max_threads();
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    baseline_threads_ = std::max(1, std::min(rt_->local_size() * omp, hw));
    if (rank_ == 0) {
      omp_set_num_threads(baseline_threads_);
      try {
        ptdp::RuntimeOptions ro;
        ro.verify_collectives = false;
        std::shared_ptr<ptdp::Runtime> self = ptdp::Runtime::create_self(ro);
        ptdp::ProcessGroups groups(self, ptdp::ParallelConfig{1, 1, 1, 1});
        ptdp::GptPipeline model(cfg_, groups);
        ptdp::OptimizerConfig oc = ocfg_;
        oc.distributed = false;
        oc.overlap_grad_reduce = false;
        oc.overlap_param_gather = false;
        std::unique_ptr<ptdp::Optimizer> opt = ptdp::make_optimizer(model, groups, oc);
        const ptdp::Schedule schedule = ptdp::make_schedule(ptdp::ScheduleKind::OneFOneB, 1, m_, 1);
        const std::size_t n_ids = static_cast<std::size_t>(replica_tokens());
        std::vector<int32_t> tokens(n_ids), labels(n_ids);
        std::vector<double> secs;
        ptdp::ExecutorOptions eo;
        Clock::time_point timed0;
        double cpu0 = 0, machine0 = -1;
        for (int i = 0; i < warmup_ + iters_; ++i) {
          make_batch(i, 0, tokens, labels);
          if (i == warmup_) {
            timed0 = Clock::now();
            cpu0 = cpu_seconds();
            machine0 = machine_busy_seconds();
          }
          const ptdp::IterationOutcome it =
              ptdp::train_iteration(model, *opt, groups, schedule, tokens.data(), labels.data(), b_, i, eo);
          if (i >= warmup_) secs.push_back(it.seconds);
        }
        const double wall = seconds_since(timed0), cpu = cpu_seconds() - cpu0, machine1 = machine_busy_seconds();
        // The other ranks sleep: what else kept cores busy is other processes (this node only).
        if (machine0 >= 0 && machine1 >= 0 && wall > 0 && rt_->local_size() == world_)
          baseline_other_cores_ = std::max(0.0, machine1 - machine0 - cpu) / wall;
        baseline_s_ = median(secs);
      } catch (const std::exception& e) {
        baseline_error_ = e.what();
      }
      omp_set_num_threads(omp);
    }
    sleeping_barrier();
  }

  Result run_layout(const LayoutSpec& l) {
    Result r;
    r.l = l;
    r.v = l.p > 1 ? v_ : 1;
    // p = 1: interleaving needs p > 1; the other kinds run as asked.
    const ptdp::ScheduleKind kind =
        l.p == 1 && kind_ == ptdp::ScheduleKind::Interleaved1F1B ? ptdp::ScheduleKind::OneFOneB : kind_;
    r.schedule = ptdp::schedule_kind_name(kind);
    if (r.v > 1) r.schedule = "int-1F1B v=" + std::to_string(r.v);
    r.tokens = replica_tokens() * l.d;

    // Checks that need no communication and give the same answer on every rank.
    ptdp::Schedule schedule;
    const ptdp::GptConfig cfg = config_at(l);
    const ptdp::ParallelConfig pc = parallel_at(l, r.v);
    try {
      ptdp::Layout check(pc);
      cfg.validate(l.t);
      cfg.validate_experts(l.e, pc.expert_tensor_size());
      if (cfg_.num_layers % (l.p * r.v) != 0)
        throw std::runtime_error(std::to_string(cfg_.num_layers) + " layers do not split over p*v = " +
                                 std::to_string(l.p * r.v) + " chunks");
      schedule = ptdp::make_schedule(kind, l.p, m_, r.v);
    } catch (const std::exception& e) {
      r.skipped = e.what();
      return r;
    }

    const auto t_setup = Clock::now();
    ptdp::ProcessGroups groups(rt_, pc);
    ptdp::GptPipeline model(cfg, groups);
    std::unique_ptr<ptdp::Optimizer> opt = ptdp::make_optimizer(model, groups, ocfg_);
    double setup = seconds_since(t_setup);
    const double state_bytes = static_cast<double>(opt->state_bytes());

    const int dp_rank = groups.rank(ptdp::GroupKind::Data);
    const std::size_t n_ids = static_cast<std::size_t>(replica_tokens());
    std::vector<int32_t> tokens(n_ids), labels(n_ids);
    std::vector<double> secs, waits, exchanges;
    ptdp::ExecutorOptions eo;
    Clock::time_point timed0;
    double cpu0 = 0, machine0 = -1;
    for (int i = 0; i < warmup_ + iters_; ++i) {
      make_batch(i, dp_rank, tokens, labels);
      rt_->world().barrier()->wait();
      if (i == warmup_) {
        timed0 = Clock::now();
        cpu0 = cpu_seconds();
        machine0 = rank_ == 0 ? machine_busy_seconds() : -1.0;
      }
      const ptdp::IterationOutcome it =
          ptdp::train_iteration(model, *opt, groups, schedule, tokens.data(), labels.data(), b_, i, eo);
      r.losses.push_back(it.loss);
      if (!std::isfinite(it.loss)) ok_ = false;
      if (i >= warmup_) {
        secs.push_back(it.seconds);
        waits.push_back(it.comm_wait_seconds);
        exchanges.push_back(it.moe_exchange_seconds);
      }
      r.grad_norm_last = it.step.grad_norm;
    }
    r.skipped_steps = opt->skipped_iterations();
    const double cpu_timed = cpu_seconds() - cpu0;
    rt_->world().barrier()->wait();
    const double wall_timed = seconds_since(timed0);
    const double machine1 = rank_ == 0 ? machine_busy_seconds() : -1.0;

    // Gather every rank's figures on rank 0 (the barrier above backs off while it waits, so
    // MPI's busy-polling gather finds everybody there).
    std::vector<double> mine;
    mine.insert(mine.end(), secs.begin(), secs.end());
    mine.insert(mine.end(), waits.begin(), waits.end());
    mine.insert(mine.end(), exchanges.begin(), exchanges.end());
    mine.push_back(setup);
    mine.push_back(state_bytes);
    mine.push_back(cpu_timed);
    const int per = static_cast<int>(mine.size());
    std::vector<double> all(rank_ == 0 ? static_cast<std::size_t>(per) * static_cast<std::size_t>(world_) : 0);
    {
      std::lock_guard<std::recursive_mutex> lock(ptdp::mpi_call_mutex());
      MPI_Gather(mine.data(), per, MPI_DOUBLE, all.data(), per, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    if (rank_ != 0) return r;

    const std::size_t n = secs.size();
    r.slowest_s.assign(n, 0.0);
    double cpu_all = 0;
    for (int w = 0; w < world_; ++w) {
      const double* row = all.data() + static_cast<std::size_t>(w) * static_cast<std::size_t>(per);
      double sum_s = 0, sum_w = 0, sum_x = 0;
      for (std::size_t i = 0; i < n; ++i) {
        r.slowest_s[i] = std::max(r.slowest_s[i], row[i]);
        sum_s += row[i];
        sum_w += row[n + i];
        sum_x += row[2 * n + i];
      }
      r.comm_share.push_back(sum_s > 0 ? sum_w / sum_s : 0.0);
      r.moe_share.push_back(sum_s > 0 ? sum_x / sum_s : 0.0);
      r.setup_s = std::max(r.setup_s, row[3 * n]);
      r.opt_state_bytes_max = std::max(r.opt_state_bytes_max, row[3 * n + 1]);
      cpu_all += row[3 * n + 2];
    }
    if (wall_timed > 0) {
      r.ranks_cores = cpu_all / wall_timed;
      // /proc/stat covers this node only: meaningful when every rank runs here.
      if (machine0 >= 0 && machine1 >= 0 && rt_->local_size() == world_)
        r.other_cores = std::max(0.0, machine1 - machine0 - cpu_all) / wall_timed;
    }
    r.median_s = median(r.slowest_s);
    r.min_s = *std::min_element(r.slowest_s.begin(), r.slowest_s.end());
    r.max_s = *std::max_element(r.slowest_s.begin(), r.slowest_s.end());
    r.comm_max = *std::max_element(r.comm_share.begin(), r.comm_share.end());
    r.comm_mean = std::accumulate(r.comm_share.begin(), r.comm_share.end(), 0.0) / world_;
    r.moe_max = *std::max_element(r.moe_share.begin(), r.moe_share.end());
    r.moe_mean = std::accumulate(r.moe_share.begin(), r.moe_share.end(), 0.0) / world_;
    r.gflops_per_rank = cfg_.paper_flops(r.tokens / cfg_.seq_length) / world_ / r.median_s * 1e-9;
    return r;
  }

  void print_row(const Result& r) {
    const std::string lay_text = label(r.l);
    const char* lay = lay_text.c_str();
    if (!r.skipped.empty()) {
      std::printf("%-9s %-16s skipped: %s\n", lay, r.schedule.c_str(), r.skipped.c_str());
    } else {
      const bool contended = r.other_cores > kContendedCores;
      if (contended) any_contended_ = true;
      const double eff = efficiency(r);
      char eff_text[16] = "-";
      if (eff > 0) std::snprintf(eff_text, sizeof eff_text, "%.1f%%", 100.0 * eff);
      char moe_max[16] = "-", moe_mean[16] = "-";
      if (moe()) {
        std::snprintf(moe_max, sizeof moe_max, "%.1f%%", 100.0 * r.moe_max);
        std::snprintf(moe_mean, sizeof moe_mean, "%.1f%%", 100.0 * r.moe_mean);
      }
      std::printf("%-9s %-16s %9" PRId64 " %9.1f %9.1f %9.1f %10.0f %8.1f%% %8.1f%% %8s %8s %12.2f %8.4f %7.2f %8.2f "
                  "%6.2f %6s%s\n",
                  lay, r.schedule.c_str(), r.tokens, r.median_s * 1e3, r.min_s * 1e3, r.max_s * 1e3,
                  static_cast<double>(r.tokens) / r.median_s, 100.0 * r.comm_max, 100.0 * r.comm_mean, moe_max,
                  moe_mean, r.gflops_per_rank, r.losses.empty() ? 0.0 : r.losses.back(), r.setup_s,
                  r.opt_state_bytes_max / (1024.0 * 1024.0), r.ranks_cores, eff_text, contended ? " *" : "");
    }
    std::fflush(stdout);
  }

  void print_footer() {
    std::printf("%s\n", std::string(kRule, '-').c_str());
    std::printf("loss: the last timed iteration's mean over the global batch (ln V = %.4f at initialisation); "
                "per layout first -> last:\n",
                std::log(static_cast<double>(cfg_.vocab_size)));
    for (const Result& r : results_) {
      if (!r.skipped.empty() || r.losses.empty()) continue;
      std::printf("  %s: %.4f -> %.4f over %zu iterations (last grad norm %.3g%s)\n", label(r.l).c_str(),
                  r.losses.front(), r.losses.back(), r.losses.size(), r.grad_norm_last,
                  r.skipped_steps ? ", some steps skipped" : "");
    }
    if (!ok_) std::printf("ERROR: a loss is not finite\n");
    std::printf("opt MiB: optimizer state (AdamW moments) of the rank holding the most; setup: groups, model "
                "and optimizer, slowest rank;\n"
                "cores: CPU time of all ranks / wall time over the timed iterations\n");
    if (baseline_s_ > 0)
      std::printf("eff: tokens/s / (%d node%s x %.0f tokens/s), the baseline: one process, t = p = d = 1, one "
                  "replica's batch (%" PRId64 " tokens),\n     %d OpenMP thread%s (the node's ranks x threads, at "
                  "most its hardware threads): %.1f ms/iter\n",
                  nodes(), nodes() == 1 ? "" : "s", static_cast<double>(replica_tokens()) / baseline_s_,
                  replica_tokens(), baseline_threads_, baseline_threads_ == 1 ? "" : "s", baseline_s_ * 1e3);
    if (baseline_s_ > 0 && baseline_other_cores_ > kContendedCores)
      std::printf("WARNING: other processes kept %.2f cores busy during the baseline: its multithreaded OpenMP "
                  "barriers stall first,\n         so every eff is overstated; rerun on an idle machine.\n",
                  baseline_other_cores_);
    else if (!baseline_error_.empty())
      std::printf("eff: no baseline: %s\n", baseline_error_.c_str());
    std::string others;
    for (const Result& r : results_) {
      if (!r.skipped.empty() || r.other_cores < 0) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %.2f", others.empty() ? "" : ", ", label(r.l).c_str(), r.other_cores);
      others += buf;
    }
    if (!others.empty()) std::printf("other processes kept busy (cores, per layout): %s\n", others.c_str());
    if (any_contended_)
      std::printf("* marks layouts timed while other processes kept more than %.2f cores busy: their numbers "
                  "are skewed, rerun on an idle machine.\n",
                  kContendedCores);
    std::printf("peak resident memory: %.2f GiB (rank with the most)\n", rss_max_ / (1024.0 * 1024.0 * 1024.0));
    std::printf("Total time: %.1f s wall\n", wall_s_);
    if (oversubscribed_) std::printf("WARNING: ranks x OpenMP threads oversubscribed the cores (see the header)\n");
    print_predictions();
    std::fflush(stdout);
  }

  // -- the planner's prediction ------------------------------------------------------------------

  /// The planner's time per iteration for the layout that ran (plan::cpu_iteration_seconds with
  /// plan::cpu_cluster: the "cpu" GEMM table, the CPU's measured memory-bound and MPI rates),
  /// given the cores the ranks had: the hardware threads less what other processes kept busy
  /// while the layout was timed (a shared machine's load is part of what was measured).
  void predict(Result& r) const {
    namespace plan = ptdp::plan;
    const double hw = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
    r.predicted_cores = std::max(0.25, hw - std::max(0.0, r.other_cores));
    plan::PlanRequest q;
    q.model = config_at(r.l);
    q.global_batch_size = static_cast<int64_t>(m_) * b_ * r.l.d;
    q.precision = plan::Precision::Fp32;
    q.allow_distributed_optimizer = o_.distributed;
    plan::Layout L;
    L.t = r.l.t;
    L.p = r.l.p;
    L.d = r.l.d;
    L.v = r.v;
    L.e = r.l.e;
    L.b = b_;
    L.m = m_;
    L.schedule = r.l.p == 1 && kind_ == ptdp::ScheduleKind::Interleaved1F1B ? ptdp::ScheduleKind::OneFOneB : kind_;
    L.distributed_optimizer = o_.distributed && r.l.d > 1;
    try {
      r.predicted_s = plan::cpu_iteration_seconds(q, L, r.predicted_cores);
    } catch (const std::exception& e) {
      r.predict_error = e.what();
    }
  }

  void print_predictions() {
    std::printf("\nplanner's prediction (plan::cpu_iteration_seconds: GEMM table \"cpu\", given the cores the ranks\n"
                "had: hardware threads less what other processes kept busy) vs measured ms/iter (median):\n");
    std::printf("  %-7s %-16s %7s %12s %12s %8s\n", "t,p,d", "schedule", "cores", "predicted ms", "measured ms",
                "diff");
    double worst = 0;
    for (Result& r : results_) {
      if (!r.skipped.empty()) continue;
      predict(r);
      char lay[32];
      std::snprintf(lay, sizeof lay, "%s", label(r.l).c_str());
      if (r.predicted_s <= 0) {
        std::printf("  %-7s %-16s not predicted: %s\n", lay, r.schedule.c_str(), r.predict_error.c_str());
        continue;
      }
      const double diff = r.predicted_s / r.median_s - 1.0;
      worst = std::max(worst, std::abs(diff));
      std::printf("  %-7s %-16s %7.2f %12.1f %12.1f %+7.1f%%\n", lay, r.schedule.c_str(), r.predicted_cores,
                  r.predicted_s * 1e3, r.median_s * 1e3, 100.0 * diff);
    }
    std::printf("  worst |predicted / measured - 1| = %.1f%%\n", 100.0 * worst);
  }

  bool write_json() {
    std::string s = "{\n";
    s += "  \"benchmark\": \"bench_train\",\n";
    s += "  \"mode\": \"" + std::string(o_.quick ? "quick" : "full") + "\",\n";
    s += "  \"ranks\": " + std::to_string(world_) + ",\n";
    s += "  \"ranks_on_node\": " + std::to_string(rt_->local_size()) + ",\n";
    s += "  \"omp_threads\": " + std::to_string(omp_get_max_threads()) + ",\n";
    s += "  \"hardware_threads\": " + std::to_string(std::thread::hardware_concurrency()) + ",\n";
    s += "  \"config\": {\"num_layers\": " + std::to_string(cfg_.num_layers) +
         ", \"hidden_size\": " + std::to_string(cfg_.hidden_size) +
         ", \"num_attention_heads\": " + std::to_string(cfg_.num_attention_heads) +
         ", \"ffn_hidden_size\": " + std::to_string(cfg_.ffn()) + ", \"vocab_size\": " +
         std::to_string(cfg_.vocab_size) + ", \"seq_length\": " + std::to_string(cfg_.seq_length) +
         ", \"micro_batch\": " + std::to_string(b_) + ", \"microbatches_per_replica\": " + std::to_string(m_) +
         ", \"hidden_dropout\": " + json_number(cfg_.hidden_dropout) +
         ", \"attention_dropout\": " + json_number(cfg_.attention_dropout) + "},\n";
    s += "  \"parameters\": " + std::to_string(cfg_.parameter_count(1)) + ",\n";
    s += "  \"optimizer\": {\"kind\": \"adamw\", \"lr\": " + json_number(ocfg_.lr.lr) +
         ", \"weight_decay\": " + json_number(ocfg_.weight_decay) + ", \"clip_grad\": " +
         json_number(ocfg_.clip_grad) + ", \"distributed\": " + (ocfg_.distributed ? "true" : "false") +
         ", \"overlap_grad_reduce\": " + (ocfg_.overlap_grad_reduce ? "true" : "false") +
         ", \"overlap_param_gather\": " + (ocfg_.overlap_param_gather ? "true" : "false") +
         ", \"bucket_elements\": " + std::to_string(ocfg_.bucket_elements) + "},\n";
    s += "  \"schedule\": \"" + o_.schedule + "\",\n";
    s += "  \"virtual_stages\": " + std::to_string(v_) + ",\n";
    s += "  \"verify_collectives\": " + std::string(o_.verify ? "true" : "false") + ",\n";
    s += "  \"warmup\": " + std::to_string(warmup_) + ",\n";
    s += "  \"iters\": " + std::to_string(iters_) + ",\n";
    if (baseline_s_ > 0)
      s += "  \"baseline\": {\"omp_threads\": " + std::to_string(baseline_threads_) + ", \"tokens_per_iteration\": " +
           std::to_string(replica_tokens()) + ", \"ms_median\": " + json_number(baseline_s_ * 1e3) +
           ", \"tokens_per_s\": " + json_number(static_cast<double>(replica_tokens()) / baseline_s_) +
           ", \"nodes\": " + std::to_string(nodes()) + ", \"other_cores_busy\": " +
           (baseline_other_cores_ >= 0 ? json_number(baseline_other_cores_) : std::string("null")) + "},\n";
    s += "  \"flops_formula\": \"72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) of the global batch, per rank = / W\",\n";
    s += "  \"layouts\": [";
    for (std::size_t i = 0; i < results_.size(); ++i) {
      const Result& r = results_[i];
      s += i ? ",\n    {" : "\n    {";
      s += "\"t\": " + std::to_string(r.l.t) + ", \"p\": " + std::to_string(r.l.p) + ", \"d\": " +
           std::to_string(r.l.d) + ", \"e\": " + std::to_string(r.l.e) + ", \"v\": " + std::to_string(r.v) +
           ", \"schedule\": \"" +
           json_escape(r.schedule) + "\"";
      if (!r.skipped.empty()) {
        s += ", \"skipped\": \"" + json_escape(r.skipped) + "\"}";
        continue;
      }
      s += ", \"tokens_per_iteration\": " + std::to_string(r.tokens);
      if (r.predicted_s > 0) {
        s += ", \"predicted_ms\": " + json_number(r.predicted_s * 1e3) + ", \"predicted_cores\": " +
             json_number(r.predicted_cores);
      }
      s += ", \"ms_median\": " + json_number(r.median_s * 1e3) + ", \"ms_min\": " + json_number(r.min_s * 1e3) +
           ", \"ms_max\": " + json_number(r.max_s * 1e3) + ", \"ms_slowest_rank_all\": " +
           json_array(r.slowest_s, 1e3);
      s += ", \"tokens_per_s\": " + json_number(static_cast<double>(r.tokens) / r.median_s);
      s += ", \"comm_share_max\": " + json_number(r.comm_max) + ", \"comm_share_mean\": " +
           json_number(r.comm_mean) + ", \"comm_share_per_rank\": " + json_array(r.comm_share);
      if (moe())
        s += ", \"moe_exchange_share_max\": " + json_number(r.moe_max) + ", \"moe_exchange_share_mean\": " +
             json_number(r.moe_mean) + ", \"moe_exchange_share_per_rank\": " + json_array(r.moe_share);
      s += ", \"model_gflop_per_iteration\": " + json_number(cfg_.paper_flops(r.tokens / cfg_.seq_length) * 1e-9) +
           ", \"gflop_per_s_per_rank\": " + json_number(r.gflops_per_rank);
      std::vector<double> losses(r.losses.begin(), r.losses.end());
      s += ", \"losses_all\": " + json_array(losses) + ", \"loss_last\": " + json_number(losses.back());
      s += ", \"grad_norm_last\": " + json_number(r.grad_norm_last) + ", \"skipped_steps\": " +
           std::to_string(r.skipped_steps);
      s += ", \"ranks_cores_busy\": " + json_number(r.ranks_cores) + ", \"other_cores_busy\": " +
           (r.other_cores >= 0 ? json_number(r.other_cores) : std::string("null"));
      s += ", \"setup_s\": " + json_number(r.setup_s) + ", \"optimizer_state_bytes_max\": " +
           json_number(r.opt_state_bytes_max);
      s += ", \"scaling_efficiency\": " + (efficiency(r) > 0 ? json_number(efficiency(r)) : std::string("null")) + "}";
    }
    s += "\n  ],\n";
    s += "  \"max_rss_bytes\": " + json_number(rss_max_) + ",\n";
    s += "  \"wall_s\": " + json_number(wall_s_) + "\n";
    s += "}\n";
    return ptdp::bench::write_text_file(o_.json_path, s);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o;
  int status = 0;
  std::vector<LayoutSpec> layouts;
  std::string error;
  if (!parse_args(argc, argv, rank == 0, o, status)) {
    MPI_Finalize();
    return status;
  }
  if (!layouts_for(o, size, layouts, error)) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    MPI_Finalize();
    return 2;
  }
  try {
    ptdp::RuntimeOptions ro;
    ro.verify_collectives = o.verify;
    MPI_Comm world = MPI_COMM_WORLD;
    auto rt = ptdp::Runtime::create_from_mpi(ro, &world);
    Bench bench(std::move(o), rt);
    status = bench.run(layouts);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_train (rank %d): %s\n", rank, e.what());
    // The other ranks may be blocked in a collective this rank will never join.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
