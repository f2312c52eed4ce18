// bench_schedule_predict: the schedule simulator as a predictor, under mpirun with W = p ranks
// on the CPU engine.
//
// 1. Trace: the zero-bubble schedule of each layout (ZB-H1 for v = 1, interleaved zero bubble
//    for v = 2; p = W, m = 2p) runs warm-up iterations; then each traced iteration of it gives,
//    per rank, per-(kind, chunk) costs (mean span of F, B, W per chunk:
//    ptdp::measure_chunk_costs), combined over the ranks and completed
//    (ptdp::complete_chunk_costs: a full backward is B + W), and the transfer time that makes
//    the traced iteration's simulation last as long as it did (ptdp::fit_p2p_latency).
// 2. Predict and measure, for every case (schedule, p, v, m): --warmup untimed iterations, then
//    --iters timed ones, each after a world barrier, timed as the slowest rank's
//    ptdp::forward_backward. Before each timed iteration, one traced iteration of each tracer
//    feeds the simulator, so that prediction and measurement see the machine's load of the same
//    moment: "trace" from the per-chunk costs of the same layout's tracer; "fit" from the
//    per-layer fit of the v = 2 tracer (ptdp::fit_layer_costs, ptdp::chunk_costs: costs per
//    decoder layer plus the extras of the embedding's and the output layer's chunks) applied to
//    the case's chunks; "own" from the per-chunk costs in the trace of the case's own timed
//    iteration, with the lower quartile of its communication spans as the transfer time. The table gives measured and predicted (medians) milliseconds and the errors.
//
// The prediction assumes that the ranks compute in parallel: run with at most one rank per
// free core and OMP_NUM_THREADS=1 (mpirun -x OMP_NUM_THREADS=1 -n 2 ...). Run with --help.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.h"
#include "core/comm/runtime.h"
#include "core/model/gpt_config.h"
#include "core/model/gpt_pipeline.h"
#include "core/model/pipeline_split.h"
#include "core/parallel/groups.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/pipeline/trace.h"
#include "core/train/forward_backward.h"

namespace {

using ptdp::ScheduleKind;
using ptdp::bench::Clock;
using ptdp::bench::parse_int;
using ptdp::bench::seconds_since;

struct Case {
  ScheduleKind kind;
  int v, m;
};

struct Options {
  int layers = 8, hidden = 128, heads = 4, vocab = 1024, seq = 64, micro_batch = 2;
  int iters = 5, warmup = 2;
};

void print_help(const char* argv0) {
  std::printf(
      "Usage: mpirun -x OMP_NUM_THREADS=1 -np P %s [options]\n"
      "\n"
      "Predicts with the schedule simulator, fed with per-chunk forward, backward-input and\n"
      "backward-weight costs and the transfer time measured from a trace of one zero-bubble\n"
      "iteration (per chunk of the same layout, or per layer of the v = 2 layout), and measures the\n"
      "iteration time (forward and backward of all microbatches, slowest rank, median of the\n"
      "timed iterations) of 1F1B, GPipe, ZB-H1, interleaved 1F1B, interleaved zero bubble, ZB-V\n"
      "and DualPipeV at m = 2P and 4P.\n"
      "\n"
      "Options (defaults):\n"
      "  --layers N        transformer layers, a multiple of 2P (8)\n"
      "  --hidden N        hidden size (128)\n"
      "  --heads N         attention heads (4)\n"
      "  --vocab N         vocabulary size (1024)\n"
      "  --seq N           sequence length (64)\n"
      "  --micro-batch N   samples per microbatch (2)\n"
      "  --iters N         timed iterations per case (5)\n"
      "  --warmup N        untimed iterations per case first (2)\n"
      "  --help            this text\n",
      argv0);
}

bool parse_args(int argc, char** argv, bool talk, Options& o, int& code) {
  code = 0;
  ptdp::bench::Args args(argc, argv);
  while (args.next()) {
    const std::string arg = args.flag();
    if (arg == "--help" || arg == "-h") {
      if (talk) print_help(argv[0]);
      return false;
    }
    int* dst = arg == "--layers"        ? &o.layers
               : arg == "--hidden"      ? &o.hidden
               : arg == "--heads"       ? &o.heads
               : arg == "--vocab"       ? &o.vocab
               : arg == "--seq"         ? &o.seq
               : arg == "--micro-batch" ? &o.micro_batch
               : arg == "--iters"       ? &o.iters
               : arg == "--warmup"      ? &o.warmup
                                        : nullptr;
    std::string value;
    int x = 0;
    if (dst == nullptr || !args.value(value) || !parse_int(value, x) || x < (dst == &o.warmup ? 0 : 1)) {
      if (talk) std::fprintf(stderr, "%s: bad argument '%s' (try --help)\n", argv[0], args.raw());
      code = 2;
      return false;
    }
    *dst = x;
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class Bench {
 public:
  Bench(const Options& o, std::shared_ptr<ptdp::Runtime> rt, int rank, int world)
      : o_(o), rt_(std::move(rt)), rank_(rank), p_(world) {
    cfg_.num_layers = o.layers;
    cfg_.hidden_size = o.hidden;
    cfg_.num_attention_heads = o.heads;
    cfg_.vocab_size = o.vocab;
    cfg_.seq_length = o.seq;
  }

  int run() {
    // One traced iteration of the zero-bubble schedule of each layout measures F, B and W of
    // every chunk: ZB-H1 for v = 1, interleaved zero bubble for v = 2. The models stay: before
    // every timed iteration of a case, one more traced iteration refreshes the costs, so that
    // the prediction sees the machine's load of the same moment.
    struct Tracer {
      Case c;
      std::unique_ptr<ptdp::ProcessGroups> groups;
      std::unique_ptr<ptdp::GptPipeline> model;
      ptdp::Schedule schedule;
    };
    Tracer tracers[2] = {{{ScheduleKind::ZeroBubbleH1, 1, 2 * p_}, nullptr, nullptr, {}},
                         {{ScheduleKind::InterleavedZeroBubble, 2, 2 * p_}, nullptr, nullptr, {}}};
    for (Tracer& t : tracers) {
      t.groups = std::make_unique<ptdp::ProcessGroups>(rt_, layout(t.c));
      t.model = std::make_unique<ptdp::GptPipeline>(cfg_, *t.groups);
      t.schedule = ptdp::make_schedule(t.c.kind, p_, t.c.m, t.c.v);
      for (int i = 0; i < o_.warmup; ++i) iterate(*t.model, t.schedule, i, nullptr);
    }
    int it = o_.warmup;
    // Per-chunk compute costs from the traced iteration's spans; the transfer time from its
    // duration (ptdp::fit_p2p_latency: what the spans do not show, such as a peer's wake-up).
    auto measure = [&](Tracer& t) {
      ptdp::TraceRecorder trace;
      const double mine = iterate(*t.model, t.schedule, it++, &trace);
      double wall = 0;
      MPI_Allreduce(&mine, &wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      ptdp::ChunkCosts costs = ptdp::complete_chunk_costs(gather_costs(trace, p_ * t.c.v));
      costs.p2p_latency = ptdp::fit_p2p_latency(t.schedule, costs, wall);
      return costs;
    };
    const ptdp::LayerCosts fit0 = ptdp::fit_layer_costs(measure(tracers[1]), layers_of(2));
    if (rank_ == 0) {
      std::printf("model: %d layers, hidden %d, %d heads, vocab %d, seq %d, micro-batch %d; p = %d ranks\n",
                  cfg_.num_layers, cfg_.hidden_size, cfg_.num_attention_heads, cfg_.vocab_size, cfg_.seq_length,
                  o_.micro_batch, p_);
      std::printf("per-layer fit of an interleaved zero-bubble trace (ms): F %.3f B %.3f W %.3f per layer; first chunk "
                  "+F %.3f +B %.3f +W %.3f; last chunk +F %.3f +B %.3f +W %.3f; transfer %.3f\n",
                  fit0.layer[0] * 1e3, fit0.layer[2] * 1e3, fit0.layer[3] * 1e3, fit0.first_extra[0] * 1e3,
                  fit0.first_extra[2] * 1e3, fit0.first_extra[3] * 1e3, fit0.last_extra[0] * 1e3,
                  fit0.last_extra[2] * 1e3, fit0.last_extra[3] * 1e3, fit0.p2p_latency * 1e3);
      std::printf(
          "measured: the slowest rank's forward_backward of the case. Predicted by the simulator fed with costs\n"
          "measured from a trace of one iteration, taken just before each timed iteration (compute: mean spans\n"
          "per chunk; transfer time: what makes the traced iteration's simulation last as long as it did):\n"
          "  trace:  per-chunk costs of the zero-bubble schedule of the same layout (ZB-H1 for v = 1, interleaved\n"
          "          zero bubble for v = 2, m = 2p);\n"
          "  fit:    the per-layer fit of the interleaved zero-bubble trace (v = 2), applied to the case's chunks;\n"
          "  own:    per-chunk costs of the case's own timed iteration, transfer time the lower quartile of its\n"
          "          communication spans (no fitting to the measured time).\n"
          "Medians over %d timed iterations.\n",
          o_.iters);
      std::printf("\n%-24s %2s %2s %3s %9s %9s %7s %9s %7s %9s %7s\n", "schedule", "p", "v", "m", "measured", "trace",
                  "error", "fit", "error", "own", "error");
      std::printf("%s\n", std::string(102, '-').c_str());
      std::fflush(stdout);
    }
    const Case cases[] = {
        {ScheduleKind::OneFOneB, 1, 2 * p_},          {ScheduleKind::OneFOneB, 1, 4 * p_},
        {ScheduleKind::GPipe, 1, 4 * p_},             {ScheduleKind::ZeroBubbleH1, 1, 4 * p_},
        {ScheduleKind::Interleaved1F1B, 2, 4 * p_},   {ScheduleKind::InterleavedZeroBubble, 2, 4 * p_},
        {ScheduleKind::ZeroBubbleV, 2, 2 * p_},       {ScheduleKind::ZeroBubbleV, 2, 4 * p_},
        {ScheduleKind::DualPipeV, 2, 2 * p_},         {ScheduleKind::DualPipeV, 2, 4 * p_}};
    double worst[3] = {0, 0, 0}, sum[3] = {0, 0, 0};
    int n = 0;
    for (const Case& c : cases) {
      const ptdp::Schedule s = ptdp::make_schedule(c.kind, p_, c.m, c.v);
      const auto predict = [&] {
        std::array<double, 2> out{};
        out[0] = ptdp::simulate(s, measure(tracers[c.v == 1 ? 0 : 1])).makespan;
        const ptdp::LayerCosts fit = ptdp::fit_layer_costs(measure(tracers[1]), layers_of(2));
        out[1] = ptdp::simulate(s, ptdp::chunk_costs(fit, layers_of(c.v))).makespan;
        return out;
      };
      const std::array<double, 4> r = time_case(c, s, predict);  // measured, trace, fit, own
      if (rank_ == 0) {
        double err[3];
        for (int k = 0; k < 3; ++k) {
          err[k] = (r[static_cast<std::size_t>(k) + 1] - r[0]) / r[0];
          worst[k] = std::max(worst[k], std::abs(err[k]));
          sum[k] += std::abs(err[k]);
        }
        ++n;
        std::printf("%-24s %2d %2d %3d %7.1fms %7.1fms %+6.1f%% %7.1fms %+6.1f%% %7.1fms %+6.1f%%\n",
                    ptdp::schedule_kind_name(c.kind), p_, c.v, c.m, r[0] * 1e3, r[1] * 1e3, err[0] * 100, r[2] * 1e3,
                    err[1] * 100, r[3] * 1e3, err[2] * 100);
        std::fflush(stdout);
      }
    }
    if (rank_ == 0) {
      std::printf("\n%d cases, mean |error| (worst): trace %.1f%% (%.1f%%), fit %.1f%% (%.1f%%), own %.1f%% (%.1f%%)\n",
                  n, sum[0] / n * 100, worst[0] * 100, sum[1] / n * 100, worst[1] * 100, sum[2] / n * 100,
                  worst[2] * 100);
    }
    return 0;
  }

 private:
  std::vector<int> layers_of(int v) const {
    ptdp::PipelineSplit split;
    split.pipeline = p_;
    split.virtual_stages = v;
    return ptdp::chunk_layer_counts(cfg_.num_layers, split);
  }

  void batch(int64_t it, int m, std::vector<int32_t>& tokens, std::vector<int32_t>& labels) const {
    const std::size_t n = static_cast<std::size_t>(m) * static_cast<std::size_t>(o_.micro_batch) *
                          static_cast<std::size_t>(cfg_.seq_length);
    tokens.resize(n);
    labels.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<int32_t>((i * 7 + static_cast<std::size_t>(it) * 13) % static_cast<std::size_t>(cfg_.vocab_size));
      labels[i] = static_cast<int32_t>((i * 7 + 7 + static_cast<std::size_t>(it) * 13) % static_cast<std::size_t>(cfg_.vocab_size));
    }
  }

  ptdp::ParallelConfig layout(const Case& c) const {
    ptdp::ParallelConfig pc;
    pc.world = p_;
    pc.pipeline = p_;
    pc.virtual_stages = c.v;
    pc.chunk_placement = static_cast<int>(ptdp::placement_of(c.kind));
    return pc;
  }

  // One iteration of `model` through `s` after a world barrier; its wall time on this rank.
  double iterate(ptdp::GptPipeline& model, const ptdp::Schedule& s, int it, ptdp::TraceRecorder* trace) {
    std::vector<int32_t> tokens, labels;
    batch(it, s.m, tokens, labels);
    model.zero_grads();
    rt_->world().barrier()->wait();
    ptdp::ExecutorOptions eo;
    eo.trace = trace;
    const auto t0 = Clock::now();
    ptdp::forward_backward(model, s, tokens.data(), labels.data(), o_.micro_batch, it, eo);
    return seconds_since(t0);
  }

  // The per-chunk costs of a traced iteration, on every rank: each rank measures its chunks
  // (ptdp::measure_chunk_costs), the others have NaN there; MAX over -1 for NaN combines them.
  ptdp::ChunkCosts gather_costs(const ptdp::TraceRecorder& trace, int chunks) {
    std::vector<ptdp::TraceSpan> spans;
    for (const auto& e : trace.events()) spans.push_back({e.name, e.track == 1, e.dur_us * 1e-6});
    const ptdp::ChunkCosts mine = ptdp::measure_chunk_costs(spans, chunks);
    std::vector<double> flat;
    for (const auto* v : {&mine.forward, &mine.backward, &mine.backward_input, &mine.backward_weight}) {
      for (double x : *v) flat.push_back(std::isfinite(x) ? x : -1.0);
    }
    std::vector<double> all(flat.size());
    MPI_Allreduce(flat.data(), all.data(), static_cast<int>(flat.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double lat = mine.p2p_latency, lat_sum = 0;
    MPI_Allreduce(&lat, &lat_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ptdp::ChunkCosts out;
    const auto n = static_cast<std::size_t>(chunks);
    std::size_t at = 0;
    for (auto* v : {&out.forward, &out.backward, &out.backward_input, &out.backward_weight}) {
      v->resize(n);
      for (std::size_t i = 0; i < n; ++i, ++at) {
        (*v)[i] = all[at] >= 0 ? all[at] : std::numeric_limits<double>::quiet_NaN();
      }
    }
    out.p2p_latency = lat_sum / p_;
    return out;
  }

  // The case's own run: per timed iteration the slowest rank's time, predict() (called
  // before it: two predictions) and the simulator's prediction from the per-chunk costs in
  // that iteration's own trace; the medians of the four.
  template <typename Predict>
  std::array<double, 4> time_case(const Case& c, const ptdp::Schedule& s, Predict predict) {
    ptdp::ProcessGroups groups(rt_, layout(c));
    ptdp::GptPipeline model(cfg_, groups);
    std::vector<double> col[4];
    for (int i = 0; i < o_.warmup + o_.iters; ++i) {
      std::array<double, 2> ahead{};
      if (i >= o_.warmup) ahead = predict();
      ptdp::TraceRecorder trace;
      const double mine = iterate(model, s, i, &trace);
      double slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      const ptdp::ChunkCosts own = ptdp::complete_chunk_costs(gather_costs(trace, p_ * c.v));
      if (i >= o_.warmup) {
        col[0].push_back(slowest);
        col[1].push_back(ahead[0]);
        col[2].push_back(ahead[1]);
        col[3].push_back(ptdp::simulate(s, own).makespan);
      }
    }
    return {median(col[0]), median(col[1]), median(col[2]), median(col[3])};
  }

  Options o_;
  std::shared_ptr<ptdp::Runtime> rt_;
  int rank_, p_;
  ptdp::GptConfig cfg_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o;
  int status = 0;
  if (!parse_args(argc, argv, rank == 0, o, status)) {
    MPI_Finalize();
    return status;
  }
  if (size < 2 || o.layers % (2 * size) != 0) {
    if (rank == 0) {
      std::fprintf(stderr, "%s: needs W >= 2 ranks and --layers a multiple of 2W (got W = %d, %d layers)\n", argv[0],
                   size, o.layers);
    }
    MPI_Finalize();
    return 2;
  }
  try {
    ptdp::RuntimeOptions ro;
    ro.verify_collectives = false;
    MPI_Comm world = MPI_COMM_WORLD;
    auto rt = ptdp::Runtime::create_from_mpi(ro, &world);
    Bench bench(o, rt, rank, size);
    status = bench.run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_schedule_predict (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
