// The record of one training iteration that the loop hands to its metrics sink (the log line,
// the JSON line, the plot, the progress bar) and to the after_iteration hook (ptdp_trainer's
// callback receives it as a ptdp_iteration_report).
#pragma once

#include <cstdint>
#include <vector>

namespace ptdp {

/// One MoE layer's expert load over the global batch.
struct MoeLayerLoad {
  int layer = 0;          ///< the decoder layer (0-based, global); num_layers + k: MTP module k's layer
  int64_t min_tokens = 0; ///< the fewest (token, expert) pairs any expert kept
  int64_t max_tokens = 0; ///< the most
};

/// An iteration's MoE figures (empty for a dense model).
struct MoeMetrics {
  int moe_layers = 0;                  ///< the MTP modules' MoE layers included; 0: the model has no MoE layer
  bool has_load_balancing_loss = false; ///< an aux_loss or seq_aux_loss coefficient is set
  bool has_z_loss = false;             ///< --moe-z-loss-coeff is set
  double load_balancing_loss = 0.0;    ///< the balancing loss / its coefficient (see the top)
  double z_loss = 0.0;                 ///< the z-loss / its coefficient
  std::vector<MoeLayerLoad> loads;     ///< every MoE layer, by layer
};

/// An iteration's QK-clip figures (core/train/qk_clip.h), per attention layer: the decoder's
/// layers in order, then the multi-token prediction modules'. Empty when QK-clip is off.
struct QkClipMetrics {
  /// The largest pre-softmax attention logit of the layer's heads over the global batch
  /// (Megatron's max_attention_logit, per layer).
  std::vector<float> max_logits;
  /// The layer's query heads whose largest logit exceeded the threshold (rescaled, with the rest
  /// of their key head's group under grouped-query attention; 0 where the step was skipped and
  /// nothing was rescaled).
  std::vector<int> clipped_heads;
};

/// One iteration's figures, the same on every rank (the loss is the global batch's mean, the
/// norm the global norm) except the memory high-water mark, which is this rank's.
struct IterationMetrics {
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
  MoeMetrics moe;            ///< MoE losses and expert loads (core/train/moe_metrics.h); empty when dense
  /// Each multi-token prediction depth's loss ("mtp_1 loss", ...; core/model/mtp.h); empty
  /// without MTP.
  std::vector<float> mtp_losses;
  QkClipMetrics qk_clip;  ///< per attention layer; empty without QK-clip
};

}  // namespace ptdp
