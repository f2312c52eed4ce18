// The training loop every front end shares (ptdp-train in C, ptdp.train in Python, the Rust,
// Julia and Fortran equivalents): from ptdp-train's parsed flags it builds the groups, the
// model, the optimizer, the schedule and the data, resumes from --load, then runs iterations
// with Megatron's log line, JSON lines, validation, checkpoints, --exit-interval, a progress
// bar, a profile trace, the curves as an SVG, and FLOPs, TFLOP/s per device and MFU, so that
// every language prints the same lines and writes the same checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/args/train_args.h"
#include "core/comm/runtime.h"
#include "core/tensor/tensor.h"

namespace ptdp {

/// What one iteration reports, on every rank alike (the loss is the global batch's mean, the
/// norm the global norm) except the memory high-water mark, which is this rank's.
struct IterationReport {
  int64_t iteration = 0;    ///< iterations done, this one included (the log line's count)
  int64_t train_iters = 0;  ///< --train-iters
  int64_t consumed_samples = 0;
  int64_t global_batch_size = 0;
  float lm_loss = 0;  ///< mean over the global batch; NaN when the step found non-finite values
  double learning_rate = 0;
  double grad_norm = 0;  ///< before clipping; non-finite when the step was skipped
  float loss_scale = 1;
  bool skipped = false;  ///< the optimizer skipped this step (non-finite gradients)
  int64_t skipped_iterations = 0;
  double elapsed_s = 0;  ///< this iteration's wall time on this rank
  double tokens_per_second = 0;
  double model_flops = 0;     ///< the paper's model FLOPs of the iteration (GptConfig::paper_flops)
  double executed_flops = 0;  ///< with full recomputation's extra forward counted
  double tflops_per_device = 0;  ///< executed FLOPs / time / world, in 1e12 (the paper's figure)
  double mfu = 0;            ///< model FLOPs / time / world / peak_flops; 0 when the peak is unknown
  double peak_flops = 0;     ///< one device's dense peak (device_peak.h or --peak-tflops)
  double mem_high_water_mib = 0;
  bool validated = false;    ///< a validation ran after this iteration
  float validation_loss = 0;  ///< when validated
  bool saved = false;        ///< a checkpoint was saved after this iteration
};

/// What a run is about to allocate on this rank: the flags and the layout they give on this
/// world. TrainingLoopHooks::before_allocation receives it before the model, the optimizer or
/// the data are built, so a run that cannot fit is refused while nothing big exists (the
/// planner's memory model lives above train: the C API passes the check in).
struct RunShape {
  const TrainArgs* args = nullptr;
  int world = 1;
  int t = 1, p = 1, v = 1, c = 1, d = 1;
  int b = 1;             ///< micro-batch size
  int m = 1;             ///< microbatches per pipeline and iteration
  int64_t global_batch = 0;
  int local_size = 1;    ///< ranks sharing this node (and its memory)
  Device device;         ///< where the model will live
};

struct TrainingLoopHooks {
  /// Called on every rank with the run's shape before anything big is allocated; throwing
  /// refuses the run (every rank agrees, as for any build failure).
  std::function<void(const RunShape&)> before_allocation;
  /// Called on every rank after each iteration (after its validation and its interval save).
  /// Returning true asks the run to stop; the ranks agree, save with --save, and return from
  /// run() (last_report() then says saved).
  std::function<bool(const IterationReport&)> on_iteration;
  /// Where the logging rank prints its lines (the last pipeline stage's first tensor and data
  /// rank); nullptr prints nothing.
  std::FILE* out = stdout;
};

class TrainingLoop {
 public:
  /// Builds the run on `runtime` (collective over its world). Throws Error naming the flag for
  /// a layout the world cannot hold, a model, optimizer, schedule or data set that cannot be
  /// built, or a checkpoint that cannot be loaded; such failures are agreed by every rank.
  TrainingLoop(const TrainArgs& args, std::shared_ptr<Runtime> runtime, TrainingLoopHooks hooks = {});
  ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  /// Trains from the current iteration to --train-iters, or until --exit-interval or a stop.
  /// Collective over the world. A failure on this rank alone (a peer that timed out, a file
  /// that could not be read here) leaves MPI unfinalised at exit, so that the launcher ends the
  /// job instead of waiting for ranks that will never arrive.
  void run();
  /// Asks the run to stop after the current iteration (from any thread, or a signal handler).
  void request_stop() noexcept { stop_requested_.store(true); }

  /// The last iteration's report (zeros before the first).
  const IterationReport& last_report() const { return last_; }
  int64_t iteration() const;
  int world_rank() const;
  int world_size() const;

 private:
  struct State;
  void build(const TrainArgs& args, std::shared_ptr<Runtime> runtime);
  std::unique_ptr<State> s_;
  TrainingLoopHooks hooks_;
  IterationReport last_;
  std::atomic<bool> stop_requested_{false};
};

/// The whole of ptdp-train for any front end: parses `args` (without the program name), prints
/// --help, trains on MPI_COMM_WORLD (initialising MPI when nobody has), and reports a failure as
/// "PROGRAM: rank R: message" on stderr. Returns the exit status: 0 done, 1 failed, 2 bad flags.
/// Never throws.
/// `before_allocation`, when set, checks the run's shape first (TrainingLoopHooks).
int train_main(const std::string& program, const std::vector<std::string>& args,
               std::function<void(const RunShape&)> before_allocation = {});

}  // namespace ptdp
