// Pictures of training runs: the records of the training loop's JSON lines (--log-json) kept in
// memory or read back from a file, and one standalone SVG drawing them against the iteration:
// training and validation loss, learning rate, grad norm, loss scale and tokens per second
// (and for mixtures of experts the balancing losses and every MoE layer's expert load), several
// runs overlaid. ptdp-plot and `ptdp-train --plot-file` draw the same picture.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ptdp {

/// One MoE layer's expert load at an iteration: the fewest and the most tokens any of its experts
/// took over the global batch.
struct ExpertLoadPoint {
  int layer = 0;  ///< the decoder layer (0-based)
  double min_tokens = 0;
  double max_tokens = 0;
};

/// One iteration of a run. A value that is missing or not finite is NaN and leaves a gap in its
/// curve.
struct TrainPoint {
  int64_t iteration = 0;         ///< the iteration the values are for
  double lm_loss = 0;            ///< training loss
  double learning_rate = 0;      ///< learning rate of the step
  double grad_norm = 0;          ///< global gradient norm (before clipping)
  double loss_scale = 0;         ///< loss scale (1 without fp16 scaling)
  double tokens_per_second = 0;  ///< throughput of the iteration
  /// MoE: Megatron's logged load_balancing_loss and z_loss (NaN: not logged) and every MoE
  /// layer's expert load (empty for a dense model).
  double load_balancing_loss = std::numeric_limits<double>::quiet_NaN();
  double z_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<ExpertLoadPoint> expert_load{};
};

/// One validation of a run (NaN loss when missing or not finite).
struct ValidPoint {
  int64_t iteration = 0;  ///< the training iteration after which it was evaluated
  double lm_loss = 0;     ///< validation loss
};

/// A run: the name its legend entry shows and its records, in any order (they are drawn by
/// iteration).
struct PlotRun {
  std::string label;               ///< legend name (any bytes: escaped and made valid UTF-8)
  std::vector<TrainPoint> train;   ///< per iteration
  std::vector<ValidPoint> valid;   ///< per validation
};

/// The SVG document (with its XML declaration) of `runs` under `title` (empty: "training"): a
/// legend naming each run in its own colour, then one panel per quantity, all sharing the
/// iteration axis: loss (training solid, validation dashed with a marker per validation),
/// learning rate, grad norm, loss scale, tokens per second; when a run has MoE figures, two more:
/// the MoE losses (load_balancing_loss solid, z_loss dashed) and the expert load (per MoE layer
/// the most tokens per expert solid, the fewest dashed; data-series expert_load_max_layer_N and
/// expert_load_min_layer_N). Axes have round ticks that enclose
/// the data; grad norm and loss scale switch to a logarithmic axis when their positive values
/// span two decades or more. Every series of every run is exactly one <path class="series">
/// (empty when the run has no value for it) with data-run (the run's index) and data-series
/// (lm_loss, validation_lm_loss, learning_rate, grad_norm, loss_scale, tokens_per_second);
/// long series are thinned to the extremes of each pixel column, so a run of any length gives
/// a picture of bounded size. Never throws for the values: NaN and infinities become gaps.
std::string training_plot_svg(const std::vector<PlotRun>& runs, const std::string& title);

/// Reads the JSON lines of a training log: objects with "iteration" (and "lm_loss",
/// "learning_rate", "grad_norm", "loss_scale", "tokens_per_second", for MoE "load_balancing_loss",
/// "z_loss" and "moe_expert_load", a list of {"layer", "min", "max"}) and objects with
/// "validation_iteration" (and "lm_loss"); other keys and other objects are ignored, blank lines
/// skipped. Values that are absent, null, not numbers, not finite, or (grad norm, which the loop
/// writes as -1 when it was not finite) negative become NaN; the bare words nan and inf that C's
/// printf writes for such values are read as null. A record whose iteration is not beyond the
/// previous one starts over from there (a run resumed from a checkpoint appends to its log), so
/// the records superseded by the resumed run are dropped. A last line without its newline that is
/// not JSON yet is taken as being written and left out. The label is the file's name.
/// Throws Error(Io) naming the path when it is missing, unreadable or not a regular file (a
/// directory or FIFO is refused, never opened for a blocking read), and naming the path and the
/// line number when a line is not a JSON object or its iteration is not a non-negative integer;
/// InvalidArgument for an empty path.
PlotRun read_training_log(const std::string& jsonl_path);

/// Writes training_plot_svg(runs, title) to `svg_path` atomically (a temporary file renamed over
/// it), so that a viewer reloading the file while the loop refreshes it never reads half a
/// picture. Throws Error(Io) naming the path when it cannot be written (the old file then stays),
/// InvalidArgument for an empty path.
void write_training_plot(const std::vector<PlotRun>& runs, const std::string& title, const std::string& svg_path);

/// Reads every log (read_training_log) and writes their picture with write_training_plot().
/// `labels` is empty or has one entry per log; an empty entry means the log's file name, or the
/// path as given where two logs have the same file name. Throws InvalidArgument for no logs, a
/// labels list of another length, an empty path, or `svg_path` naming one of the logs (it would
/// be overwritten), all before any file is touched; then what the reads and the write throw.
void plot_training_logs(const std::vector<std::string>& jsonl_paths, const std::vector<std::string>& labels,
                        const std::string& title, const std::string& svg_path);

}  // namespace ptdp
