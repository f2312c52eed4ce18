// The training loop every front end shares (ptdp-train in C, ptdp.train in Python, the Rust,
// Julia and Fortran equivalents), read as one screen: from ptdp-train's parsed flags it builds
// the groups, checks that the run fits in memory, builds the model, the optimizer, the schedule
// and the data, resumes from --load; then each iteration trains one global batch, hands its
// record to the metrics sink (Megatron's log line, JSON lines, the SVG curves, a progress bar),
// validates, saves, and agrees with the other ranks whether to stop. Every language therefore
// prints the same lines and writes the same checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "core/args/train_args.h"
#include "core/comm/runtime.h"
#include "core/train/iteration_metrics.h"
#include "core/train/training_hooks.h"

namespace ptdp {

struct IterationOutcome;  // core/train/trainer.h

class TrainingLoop {
 public:
  /// Builds the run on `runtime` (collective over its world). `hooks` run at their points of
  /// every iteration, after the loop's own (PTDP_FAULT, --check-for-nan-in-loss-and-grad). The
  /// logging rank (the last pipeline stage's first tensor, context and data rank) prints on
  /// `log`; nullptr prints nothing. Throws Error naming the flag for a layout the world cannot
  /// hold, OutOfMemory for a run that would not fit (memory_check.h; PTDP_MEMORY_CHECK=0 skips
  /// the check), and Error for a model, optimizer, schedule or data set that cannot be built or
  /// a checkpoint that cannot be loaded; such failures are agreed by every rank.
  TrainingLoop(const TrainArgs& args, std::shared_ptr<Runtime> runtime, TrainingHooks hooks = {},
               std::FILE* log = stdout);
  ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  /// Trains from the current iteration to --train-iters, or until --exit-interval or a stop.
  /// Collective over the world. A failure on this rank alone (a peer that timed out, a file
  /// that could not be read here) leaves MPI unfinalised at exit, so that the launcher ends the
  /// job instead of waiting for ranks that will never arrive (failure_agreement.h).
  void run();
  /// Asks the run to stop after the current iteration (from any thread, or a signal handler).
  void request_stop() noexcept { stop_requested_.store(true); }

  /// The last iteration's record (zeros before the first).
  const IterationMetrics& last_metrics() const { return last_; }
  /// The MoE figures of the iteration just trained: already during its after_iteration hook,
  /// where last_metrics() is still the iteration before.
  const MoeMetrics& last_moe() const { return last_moe_; }
  /// This rank's seconds in the MoE token exchange during that iteration
  /// (IterationOutcome::moe_exchange_seconds).
  double last_moe_exchange_seconds() const { return last_moe_exchange_seconds_; }
  /// Each multi-token prediction depth's loss of the iteration just trained (as last_moe()).
  const std::vector<float>& last_mtp_losses() const { return last_mtp_losses_; }
  int64_t iteration() const;
  int world_rank() const;
  int world_size() const;

 private:
  struct State;
  void build(TrainingHooks hooks);
  void lay_out();
  void lock_save_dir();
  void allocate(TrainingHooks hooks);
  void resume();
  void open_metrics();
  void print_header() const;
  bool run_iteration();
  IterationOutcome train_batch();
  IterationMetrics metrics_of(const IterationOutcome& outcome) const;
  [[noreturn]] void stop_for_skips(const IterationMetrics& m);
  bool agree_to_stop(const IterationMetrics& m);
  void save();
  void finish();

  std::unique_ptr<State> s_;
  IterationMetrics last_;
  MoeMetrics last_moe_;
  double last_moe_exchange_seconds_ = 0;
  std::vector<float> last_mtp_losses_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace ptdp
