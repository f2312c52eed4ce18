// TopKRouter (Megatron-Core's megatron/core/transformer/moe/router.py): which k of the E routed
// experts each token goes to, and with what weight.
//
//   logits = x W^T (+ b) in fp32               W [E, h] replicated (x and W cast to fp32)
//   softmax:   top-k of the logits, probs = softmax over the k      (--moe-router-pre-softmax:
//              probs = the top-k of softmax over all E)
//   sigmoid:   scores = sigmoid(logits), top-k of scores + expert_bias (aux-loss-free balancing),
//              probs = the selected scores normalised to sum 1 (k > 1)
//   group-limited routing (--moe-router-num-groups / --moe-router-group-topk): the experts come
//   in groups; a token picks its group_topk best groups (a group's score: the sum of its best
//   k / group_topk scores) and its k experts among theirs; probs times
//   --moe-router-topk-scaling-factor.
// Ties go to the lower expert index.
//
// Capacity (--moe-expert-capacity-factor cf): an expert takes at most
// C = ceil(T k / E * cf) of the T tokens of the microbatch, where T counts the whole microbatch
// (every rank of the TensorContext group holds a piece of the same samples: the small routing
// data are all-gathered over it and every rank takes the same decisions). Policy probs keeps the
// C (token, expert) pairs with the highest probabilities, policy position the C first; ties in
// probability go to the earlier token; a token's position is its row in the whole microbatch's
// sequence-major activation (s_i * b + b_i). Neither T, the probabilities nor the positions
// depend on t, c or e, so neither do the decisions (docs/moe.md). A dropped pair keeps no weight
// (nothing renormalises). --moe-pad-expert-input-to-capacity fills each expert up to
// min(C, T) rows with zero rows, which change no result (their outputs carry weight 0).
//
// Balancing losses (training only), their gradients entering the backward scaled like the main
// loss (Step::grad_scale; Megatron's MoEAuxLossAutoScaler):
//   aux_loss      coeff E / (k T^2) sum_e P_e N_e: P_e the summed scores (softmax, or sigmoid
//                 normalised per token) of expert e over the microbatch, N_e the tokens whose
//                 top-k of those scores holds e. Each rank adds its own tokens' P_e times the
//                 N_e summed over the TensorContext group, so the group's sum is the loss.
//   seq_aux_loss  the same per sample (T = s), averaged over the b samples.
//   z_loss        coeff / T sum_tokens logsumexp(logits)^2 (ST-MoE).
// global_aux_loss is refused (MoeConfig::validate).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/layers/layer_config.h"
#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

/// The routing of one pass's N tokens (host memory): slot n * k + j is token n's j-th choice.
struct Routing {
  int64_t tokens = 0;
  int k = 0;
  std::vector<int32_t> expert;  ///< [N * k] the expert, or -1 where capacity dropped the pair
  std::vector<float> prob;      ///< [N * k] the combine weight (0 where dropped)
  std::vector<int64_t> pad;     ///< [E] zero rows this rank appends to each expert's input
};

/// What the router saw in one training microbatch, this rank's share (summed over the
/// TensorContext group it is the microbatch's).
struct RouterStats {
  std::vector<double> tokens_per_expert;  ///< [E] (token, expert) pairs kept after the drops
  double load_balancing_loss = 0.0;       ///< aux_loss (or seq_aux_loss) / coeff
  double z_loss = 0.0;                    ///< z_loss / coeff
};

class TopKRouter {
 public:
  /// Declares "<prefix>.weight" [E, h] (its gradient summed over the tensor group under
  /// sequence parallelism), "<prefix>.bias" [E] with linear biases, and with expert bias
  /// "<prefix>.expert_bias" [E] (zeros, no weight decay, never a gradient).
  TopKRouter(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp);

  /// x [N, h] (this rank's rows) -> the routing of its N tokens. Collective over the
  /// TensorContext group with a capacity factor or a balancing loss.
  const Routing& forward(const Tensor& x, const Step& step);
  /// dprob [N * k] (host; the gradient of the combine weights) -> dx [N, h] in x's type, with the
  /// balancing losses' gradients. Keeps the logits' gradient for backward_weight.
  Tensor backward_input(const std::vector<float>& dprob, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int weight_index() const { return weight_; }
  /// The expert bias's index, or -1 without aux-loss-free balancing.
  int expert_bias_index() const { return expert_bias_; }
  /// The training microbatches' statistics since the last clear_stats(), by microbatch (a
  /// recomputed forward writes its microbatch's entry again with the same values).
  const std::map<int64_t, RouterStats>& stats() const { return stats_; }
  void clear_stats() { stats_.clear(); }

 private:
  struct Slot {
    Tensor x;                    // [N, h] fp32: the input, for the weight gradient
    Tensor dlogits;              // [N, E] fp32, from backward_input
    std::vector<float> logits;   // [N, E] (host)
    Routing routing;
    std::vector<int32_t> sample; // [N] the sample of each row (seq_aux_loss)
    std::vector<double> aux_weight;  // [E] or [b, E]: d(aux_loss)/d(score) of each expert (and sample)
    double tokens = 0;           // T, the microbatch's tokens
    bool sharded = false;        // sequence parallelism: the weight gradient is partial per tensor rank
  };
  // The expert bias [E] (host, fp32), or empty without one.
  std::vector<float> expert_bias_values() const;
  // The token group: ranks holding pieces of the same samples (none for a group of one).
  bool grouped(const Step& step) const;
  int group_size(const Step& step) const;
  // Top-k choice and weights of token n into r.expert / r.prob (before drops).
  void route_token(const float* logits, const float* bias, int64_t n, Routing& r) const;
  // The capacity drops over the whole microbatch (see the top of this file).
  void drop_over_capacity(Routing& r, const Tensor& like, const Step& step, int64_t b) const;
  // The balancing losses' values into `stats` and their gradient weights into the slot.
  void balancing_losses(Slot& s, const Tensor& like, const Step& step, int64_t b, RouterStats& stats) const;
  // Host all-reduce (sum) of `v` over the token group.
  void group_sum(std::vector<double>& v, const Tensor& like, const Step& step) const;
  // The row of the whole microbatch's [s * b] activation of row j of token-group rank r.
  int64_t global_position(int r, int64_t j, int64_t rows, int64_t b, const Step& step) const;

  ParamTable& params_;
  const LayerConfig& cfg_;
  TensorParallel tp_;
  int weight_ = -1, bias_ = -1, expert_bias_ = -1;
  Slots<Slot> slots_;
  std::map<int64_t, RouterStats> stats_;
};

}  // namespace ptdp
