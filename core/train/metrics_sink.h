// Where a training run's figures go: one record per iteration becomes Megatron's log line (every
// --log-interval), a JSON line (--log-json), a point of the curves (--plot-file) and the progress
// bar; each validation becomes its three lines, its JSON line and its point. Only the logging
// rank (the last pipeline stage's first tensor, context and data rank) has a sink that writes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/args/train_args.h"
#include "core/train/iteration_metrics.h"
#include "core/train/plot.h"

namespace ptdp {

/// The figures the same for every iteration of a run, which turn an iteration's time into
/// throughput (tokens/s, TFLOP/s per device, MFU).
struct RunFigures {
  double model_flops = 0;       ///< the paper's model FLOPs of one iteration
  double executed_flops = 0;    ///< with full recomputation's extra forward counted
  double tokens_per_batch = 0;  ///< global batch x sequence length
  double peak_flops = 0;        ///< one device's dense peak; 0 when unknown
  int world = 1;                ///< devices the iteration ran on

  /// The record of an iteration that took `seconds` (the throughput fields, the FLOPs, the
  /// peak and this process's memory high-water mark; the loop fills the rest).
  IterationMetrics measure(double seconds) const;
};

class MetricsSink {
 public:
  /// `logger`: this is the logging rank, which writes --log-json and --plot-file; every other
  /// rank's sink writes nothing. `out`: where the logging rank prints its lines; nullptr prints
  /// nothing (ptdp_trainer_options::print_log 0) but still writes the files. Opens --log-json
  /// (appending when `resumed`, the run going on from a checkpoint): throws
  /// Error(InvalidArgument) naming the flag when it cannot.
  MetricsSink(std::FILE* out, bool logger, const TrainArgs& args, const RunFigures& figures, bool resumed);
  ~MetricsSink();
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;

  /// A resumed run's curves start with the iterations its --log-json already holds (with
  /// --plot-file). A log that cannot be read leaves the curves to start afresh, which the sink
  /// says in a warning line naming the reason.
  void resume_plot();
  /// One iteration: its point of the curves, its JSON line, Megatron's log line when one is due
  /// (every --log-interval, the last iteration, or `stopping`: the run ends at this iteration),
  /// and the progress bar unless `stopping`. Returns whether the iteration is a log point (its
  /// line printed where the sink prints; the plot is due).
  bool record(const IterationMetrics& m, bool stopping);
  /// A validation after `iteration`: its point, Megatron's three lines and its JSON line.
  void record_validation(int64_t iteration, float loss);
  /// Rewrites --plot-file with the curves so far.
  void draw_plot();
  /// A line of the run's own (a save, the end), printed after clearing the progress bar.
  void note(const char* format, ...) __attribute__((format(printf, 2, 3)));

 private:
  void clear_progress();
  void write_json_line(const IterationMetrics& m);
  void print_log_line(const IterationMetrics& m);
  void reset_interval();
  std::string moe_log(const MoeMetrics& moe) const;
  void show_progress(int64_t iteration);

  std::FILE* out_;
  bool logger_;
  const TrainArgs& args_;
  RunFigures figures_;
  bool resumed_;
  bool progress_ = false;
  std::FILE* json_ = nullptr;
  PlotRun plot_;
  // Since the last log line: the time of the iterations, the loss of those neither skipped nor
  // NaN, and the NaN ones (Megatron's interval averages and counts).
  double interval_seconds_ = 0.0, interval_loss_ = 0.0;
  int64_t interval_iters_ = 0, interval_loss_iters_ = 0, nan_iters_ = 0;
  // The MoE losses summed over the interval's iterations (Megatron's total_loss_dict entries).
  double interval_load_balancing_loss_ = 0.0, interval_z_loss_ = 0.0;
  std::vector<double> interval_mtp_losses_;  // per MTP depth, summed over the interval
};

}  // namespace ptdp
