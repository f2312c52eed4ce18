// Fault injection for tests (PTDP_FAULT): kill, hang, slow a rank, write a NaN into its loss or
// into a named parameter's gradient, or make its next checkpoint save fail with an I/O error, at
// a chosen iteration and place, so that tests can show what a real failure does to a run (a
// named failure within the timeout, checkpoints intact, bit-identical results after a restart).
// A testing aid, documented in docs/guides/troubleshooting.md; read once when a training loop
// starts, and nothing but one null check per place when PTDP_FAULT is unset.
//
//   PTDP_FAULT = SPEC[,SPEC...]   (',' or ';' between specs)
//   SPEC       = KIND[:KEY=VALUE...]
//   KIND       = kill | hang | nan | slow | io-error
//   KEY        = rank (global rank; any when absent), iter (1-based iteration, the log line's
//                count; any when absent), at (before-forward | after-backward | save),
//                attempt (the supervisor's attempt number, PTDP_RESTART_ATTEMPT; any when absent),
//                param (nan: a parameter name; absent: the loss), ms (slow: milliseconds)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model/gpt_pipeline.h"
#include "core/train/training_hooks.h"

namespace ptdp {

enum class FaultKind { Kill, Hang, Nan, Slow, IoError };
/// Where in an iteration a fault strikes.
enum class FaultPoint {
  BeforeForward,  ///< after the batch is read, before the first forward
  AfterBackward,  ///< after the backward, before the data-parallel reduction finishes
  Save            ///< as the rank enters a checkpoint save (the other ranks are saving)
};

struct FaultSpec {
  FaultKind kind = FaultKind::Kill;
  int rank = -1;                ///< -1: every rank
  int64_t iteration = -1;       ///< 1-based; -1: every iteration
  FaultPoint at = FaultPoint::BeforeForward;
  int attempt = -1;             ///< -1: every attempt
  std::string param;            ///< nan: the parameter whose gradient gets the NaN; "": the loss
  double ms = 0.0;              ///< slow: the delay
  std::string text;             ///< the spec as given (for messages)
};

/// Parses PTDP_FAULT's value. Throws Error(InvalidArgument) naming the spec and what is wrong
/// (unknown kind or key, a malformed number, a key the kind does not take, a missing ms).
std::vector<FaultSpec> parse_fault_specs(const std::string& value);

/// The specs of one rank and attempt, queried by the training loop at each place.
class FaultInjector {
 public:
  FaultInjector() = default;
  /// PTDP_FAULT and PTDP_RESTART_ATTEMPT of this process, for `world_rank`; empty when unset.
  /// Throws Error(InvalidArgument) "PTDP_FAULT: ..." for a bad spec.
  static FaultInjector from_environment(int world_rank);
  FaultInjector(std::vector<FaultSpec> specs, int world_rank, int attempt);

  bool empty() const { return specs_.empty(); }
  /// kill, hang and slow specs for `point` of 1-based `iteration`: a kill raises SIGKILL on
  /// this process, a hang blocks forever, a slow spec sleeps. Each prints one line on stderr
  /// first ("ptdp: PTDP_FAULT kill:...: rank R ... at iteration I"); a slow spec, which may
  /// strike every iteration, only the first time ("... sleeps 150 ms at iteration I (before-forward),
  /// and at every other iteration it applies to").
  void strike(FaultPoint point, int64_t iteration) const;
  /// Whether a nan spec (without param) poisons this rank's loss at `iteration`.
  bool nan_loss(int64_t iteration) const;
  /// The parameters a nan spec poisons at `iteration` (their gradients get a NaN).
  std::vector<std::string> nan_params(int64_t iteration) const;
  /// An io-error spec due at or before `iteration` and not yet used: the next save on this rank
  /// is to fail. Marks it used.
  const FaultSpec* take_io_error(int64_t iteration);
  /// Every spec of this rank and attempt (for checks against the model).
  const std::vector<FaultSpec>& specs() const { return specs_; }
  /// The global rank the specs were chosen for.
  int rank() const { return rank_; }

 private:
  bool applies(const FaultSpec& s, int64_t iteration) const;
  std::vector<FaultSpec> specs_;  // only this rank's and attempt's
  std::vector<bool> used_;
  mutable std::vector<bool> announced_;  // slow specs that printed their line
  int rank_ = 0;
};

/// Refuses specs that cannot strike on this rank's part of the model: a nan spec's parameter
/// must be one the rank holds, an io-error spec needs a rank that writes checkpoint files (world
/// rank 0 or a first data-parallel rank). Throws Error(InvalidArgument) naming the spec.
void check_fault_specs(const FaultInjector& faults, GptPipeline& model, const ProcessGroups& groups);

/// The injector's specs at their points of a training iteration: kill, hang and slow before
/// the forward, after the backward and as a save starts; a nan spec's NaN in a gradient as it
/// becomes final or in the loss after the backward; an io-error spec's failing writes around
/// the save it is due at (saying so on stderr first). No hook is set when `faults` is empty.
TrainingHooks fault_injection_hooks(FaultInjector faults, GptPipeline& model);

/// Runs `save` as if the disk were full on this rank: every file this process writes meanwhile
/// fails (RLIMIT_FSIZE 0, SIGXFSZ ignored), so the checkpoint writer's own error path reports it
/// ("write failed: File too large"). The limits are restored afterwards.
void with_failing_writes(const std::function<void()>& save);

}  // namespace ptdp
