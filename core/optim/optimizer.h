// The optimizer of a data-parallel replica set: gradient reduction over the data-parallel
// group in buckets that overlap the backward (GradBuckets), the distributed optimizer
// (reduce-scatter, update the own shard of fp32 weights and moments, all-gather), loss scaling
// with a found-inf flag agreed by every rank, gradient clipping by the global L2 norm, and AdamW
// or SGD with Megatron's weight-decay rule.
//
// It works on flat parameter/gradient buffers ("spaces"): a GPT chunk's ParamTable, or the
// tensors a user registers, packed into one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/params/params.h"
#include "core/optim/grad_buckets.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_schedule.h"
#include "core/parallel/groups.h"

namespace ptdp {

enum class OptimizerKind : int { Adam = 0, Sgd = 1, Muon = 2 };

/// Muon's scale of the orthogonalised update of an [out, in] matrix (Megatron's
/// --muon-scale-mode): spectral sqrt(max(out, in)), unit_rms_norm sqrt(out / in),
/// shape_scaling sqrt(max(1, out / in)); times MuonConfig::extra_scale_factor. PyTorch's
/// adjust_lr_fn "original" is shape_scaling, "match_rms_adamw" spectral with extra factor 0.2.
enum class MuonScaleMode : int { Spectral = 0, UnitRmsNorm = 1, ShapeScaling = 2 };
/// How a matrix split over the tensor group is orthogonalised (Megatron's --muon-tp-mode).
/// Distributed: the whole matrix, once in the tensor x data group (ptdp's default);
/// Duplicated: the whole matrix, on every tensor rank holding a piece (the same result);
/// Blockwise: each rank's piece on its own, a different update (Megatron's default).
enum class MuonTpMode : int { Distributed = 0, Duplicated = 1, Blockwise = 2 };
/// The Newton-Schulz coefficient sets (Megatron's --muon-coefficient-type), used cyclically.
enum class NsCoefficients : int { Quintic = 0, Simple = 1, PolarExpress = 2, Aol = 3 };
/// Precision of the Newton-Schulz products (Megatron's --muon-fp32-matmul-prec):
/// highest fp32; high TF32 on CUDA (fp32 on the CPU); medium bf16 operands and results with
/// fp32 accumulation (PyTorch's torch.optim.Muon runs its iteration in bf16).
enum class NsPrecision : int { Highest = 0, High = 1, Medium = 2 };

/// Muon (momentum orthogonalised by Newton-Schulz) for the 2-D hidden weights; the embeddings,
/// the output layer, norms and biases take AdamW with the same learning rate and Megatron's
/// weight-decay rule.
struct MuonConfig {
  float momentum = 0.95f;   ///< --muon-momentum: buf = lerp(buf, g, 1 - momentum)
  bool nesterov = false;    ///< --muon-nesterov: orthogonalise lerp(g, buf, momentum)
  int ns_steps = 5;         ///< --muon-num-ns-steps
  NsCoefficients coefficients = NsCoefficients::Quintic;
  float ns_eps = 1e-7f;     ///< the Frobenius normalisation's floor
  NsPrecision precision = NsPrecision::Highest;
  MuonScaleMode scale_mode = MuonScaleMode::Spectral;
  float extra_scale_factor = 1.0f;
  /// Orthogonalise q, k and v (of every query group together) and SwiGLU's gate and up as
  /// separate matrices, as a model with separate projections has them (--muon-no-split-qkv: no).
  bool split_qkv = true;
  MuonTpMode tp_mode = MuonTpMode::Distributed;
  /// MuonClip (Kimi K2, Megatron's --qk-clip): after the step, the query and key weights of
  /// every head whose largest attention logit exceeded qk_clip_threshold are scaled by
  /// (threshold / max logit)^alpha and ^(1 - alpha).
  bool qk_clip = false;
  float qk_clip_threshold = 100.0f;
  float qk_clip_alpha = 0.5f;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;  ///< Adam is AdamW (decoupled weight decay), as Megatron's
  LrSchedule lr;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float momentum = 0.9f;  ///< SGD
  bool nesterov = false;
  MuonConfig muon;        ///< kind == Muon
  float clip_grad = 1.0f;  ///< 0: no clipping
  LossScalerConfig loss_scale;
  /// Megatron's --use-distributed-optimizer: the Adam moments and, for 16-bit model weights, the
  /// fp32 master weights are sharded over the data-parallel group (full sharding: 6 + 12/d
  /// bytes per parameter with bf16 weights, 8 + 8/d with fp32).
  bool distributed = false;
  int64_t bucket_elements = 0;  ///< elements per gradient bucket; 0: one bucket per space
  /// Megatron's --overlap-grad-reduce: each bucket's reduction starts as soon as the backward
  /// completes it (otherwise all start after the backward). Bitwise the same results.
  bool overlap_grad_reduce = false;
  /// Megatron's --overlap-param-gather (distributed optimizer): the all-gathers of the updated
  /// weights are started bucket by bucket after the step and each is waited for just before
  /// the next forward first uses a parameter of its bucket (otherwise the step waits for them).
  /// Bitwise the same results.
  bool overlap_param_gather = false;

  void validate() const;
};

/// One flat parameter space: the buffers and which elements decay and count in the norm.
struct ParamSpace {
  ParamTable* table = nullptr;
  struct Segment {
    int64_t offset, numel;
    bool weight_decay;
    bool in_norm;  ///< false for copies counted elsewhere (tensor-replicated on tp rank > 0, tied copies)
  };
  std::vector<Segment> segments;  ///< by parameter index
};

/// What one optimizer step did: the figures a log line reports for it.
struct OptimizerStepResult {
  double grad_norm = 0;  ///< before clipping (after unscaling); inf/nan when skipped
  double lr = 0;         ///< the learning rate the step used
  float loss_scale = 1;  ///< the scale the step's gradients carried (1 without fp16 scaling)
  bool skipped = false;  ///< non-finite gradients: the parameters were left as they were
};

class MuonOrthogonalizer;

/// Whether parameter `p` keeps state buffer `k` of an optimizer whose buffers are `states`
/// (Optimizer::state_names()): Muon's matrices keep "momentum_buffer" only and its other
/// parameters the AdamW moments only; every parameter keeps every buffer of the others.
bool state_applies(const std::vector<std::string>& states, std::size_t k, const ParamInfo& p);

class Optimizer {
 public:
  /// `excluded[s]` lists parameter indices of space s that do not count in the norm (the last
  /// stage's copy of a tied embedding).
  Optimizer(std::vector<ParamTable*> spaces, const std::vector<std::vector<int>>& excluded, OptimizerConfig config,
            ProcessGroups& groups);
  ~Optimizer();

  /// Parameters [first, end) of space s have their final gradients for this iteration; starts
  /// the reduction of every bucket they complete.
  void params_ready(int space, int first, int end);
  /// Reduces whatever was not started, waits for every bucket.
  void finish_grad_sync();
  /// Unscales, agrees on found-inf, clips, updates (own shard with the distributed optimizer,
  /// then all-gathers). Call finish_grad_sync() first (step does it if needed). Returns what a
  /// log line reports.
  OptimizerStepResult step(int64_t iteration);
  /// Gradient multiplier for the backward: the loss scale.
  float loss_scale() const { return scaler_.scale(); }
  int64_t skipped_iterations() const { return skipped_; }
  /// Bytes of optimizer state on this rank: the moments and, for spaces with 16-bit model
  /// weights, the fp32 master weights (none for fp32 weights, which are their own masters);
  /// with the distributed optimizer both are this rank's 1/d shard.
  std::size_t state_bytes() const;
  const OptimizerConfig& config() const { return config_; }

  // ---- state, for checkpoints --------------------------------------------------------------
  /// Names of the per-element state buffers: Adam {"exp_avg", "exp_avg_sq"} (PyTorch's names),
  /// SGD with momentum {"momentum_buffer"}, SGD without none; Muon {"momentum_buffer",
  /// "exp_avg", "exp_avg_sq"}: the momentum of Muon's matrices and the AdamW moments of the
  /// other parameters (has_state() says which parameter keeps which).
  std::vector<std::string> state_names() const;
  /// Whether parameter `param` of space `s` keeps state buffer `k` (Muon: its matrices keep the
  /// momentum only, the others the AdamW moments only; every parameter keeps every buffer of
  /// the other optimizers). A buffer a parameter does not keep reads as zeros.
  bool has_state(int s, int param, int k) const;

  int num_spaces() const { return static_cast<int>(spaces_.size()); }
  /// State buffer `k` of space `s` laid out like the space's flat parameter buffer
  /// (capacity() elements). With the distributed optimizer each rank holds 1/d of it and the
  /// rest is all-gathered: collective over the data-parallel group then (the expert region's
  /// over the expert-data-parallel group).
  std::vector<float> get_state(int s, int k);
  /// Sets this rank's part of state buffer `k` of space `s` from the whole flat-layout values
  /// (capacity() elements). No communication.
  void set_state(int s, int k, const float* values);
  /// Counters that are not per element: successful steps (Adam's bias correction), skipped
  /// steps and the loss scaler.
  struct Counters {
    int64_t steps = 0, skipped = 0;
    float loss_scale = 1.0f;
    int growth_tracker = 0, hysteresis_left = 0;
  };
  Counters counters() const;
  void restore(const Counters& c);

 private:
  struct Space;
  /// Divides the gradients by the loss scale; returns this rank's part of the squared norm, or
  /// infinity when any of its gradients is not finite.
  double unscale_grads(Backend& be);
  /// Every rank's verdict from its part: whether any gradient overflowed, and the squared norm.
  struct GradVerdict {
    bool found_inf = false;
    double norm_sq = 0;
  };
  GradVerdict agree_on_grads(double local_norm_sq);
  /// The factor that brings the gradient norm down to clip_grad (1 when it is below).
  float clip_coefficient(double grad_norm) const;
  /// Clips and updates this rank's shard of every space with the learning rate `lr` (Muon:
  /// the scalar parameters, and the momentum of the matrices).
  void update_shards(Backend& be, float clip, double lr);
  /// Muon after update_shards(): orthogonalises the momentum updates of the matrices (left in
  /// the gradient buffer, which serves as the work buffer: all-gathered over the data-parallel
  /// group with the distributed optimizer, and the results reduce-scattered back) and applies
  /// them to this rank's shard.
  void muon_update(Backend& be, double lr);
  /// This rank's shard [shard_lo, shard_hi) of bucket b's state buffer k (host).
  std::vector<float> shard_state(const Space& sp, std::size_t b, int k) const;
  /// Gives every data-parallel replica the updated shards of the others: the 16-bit weights
  /// rounded from the sharded masters, or the fp32 weights. Each bucket's gather is waited for
  /// here, or (overlap_param_gather) handed to its table to be waited for at first use.
  void all_gather_updated_shards(Backend& be);

  OptimizerConfig config_;
  ProcessGroups& groups_;
  LossScaler scaler_;
  int64_t steps_ = 0;  ///< successful steps (Adam's bias correction counts these)
  int64_t skipped_ = 0;
  std::vector<std::unique_ptr<Space>> spaces_;
  std::unique_ptr<MuonOrthogonalizer> muon_;
  std::shared_ptr<void> progress_;  ///< keeps MPI progressing while overlap is on
};

}  // namespace ptdp
