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
//   k / group_topk scores, or its best --moe-router-group-score-topk m: DeepSeek-V2's maximum,
//   V3's top-2) and its k experts among theirs; probs times --moe-router-topk-scaling-factor.
//   Device-limited routing (--moe-router-topk-limited-devices M) is group-limited routing with
//   group_topk M over groups fixed as a model hyperparameter (docs/deepseek.md).
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
//   global_aux_loss  Megatron-Core's (router.py _apply_global_aux_loss): the aux_loss formula with
//                 N_e summed over the TensorContext group and then over the d data-parallel
//                 replicas (Megatron's tp_dp_cp group), averaged over the microbatches the step
//                 has run so far (N_e of microbatch j: the mean of microbatches 0..j's sums, in
//                 the order their forwards run, which every ptdp schedule keeps per layer), and
//                 T = d times the microbatch's tokens. A recomputed forward reuses its
//                 microbatch's average (no second count); clear_stats() ends the global batch.
//                 By this definition each microbatch's loss depends on the other replicas' tokens:
//                 the run is the same for every t, c, e, p, schedule and recomputation at a given
//                 d, but not across d (docs/moe.md; test_moe_equivalence's "global" specs).
//   z_loss        coeff / T sum_tokens logsumexp(logits)^2 (ST-MoE).
//
// Where the work runs (the Backend's MoE ops, kernels/backend.h):
//   on the device  the logits (one fp32 GEMM with the bias), top-k and weights with every
//                  option above (moe_router_forward: score functions, pre-softmax, group-limited
//                  routing, expert bias, scaling) and their backward (moe_router_backward), the
//                  expert-sorted rows (moe_route), the balancing scores and their backward
//                  (moe_aux_scores_*), the z-loss's logsumexp and gradient (moe_router_lse,
//                  moe_router_z_loss_backward).
//   on the host    the per-expert counts, once per layer and microbatch (moe_route's own copy,
//                  as Megatron's tokens_per_expert): they size the exchange and the grouped
//                  GEMMs. With a capacity factor, the drop decisions: they rank each expert's
//                  pairs over the whole microbatch, gathered from the TensorContext group, by
//                  probability or position; that is a sort per expert across ranks, which no
//                  Backend op provides, so the slots' experts and weights come to the host and the
//                  kept ones go back (one round trip per layer and microbatch, capacity runs only).
//                  With a balancing loss, the histogram of each token's top-k scores per expert
//                  (and per sample for seq_aux_loss) and the score sums: the [N, E] scores come
//                  to the host once per training microbatch; the gradient goes back as [N, E]
//                  weights. The losses' values (z-loss: the [N] logsumexps) for the statistics.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/layers/layer_config.h"
#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

/// The routing of one pass's N tokens. The per-slot data stay on the backend's device (slot
/// n * k + j is token n's j-th choice); only the per-expert counts are on the host.
struct Routing {
  int64_t tokens = 0;
  int k = 0;
  Tensor expert;                ///< [N, k] int32: the expert, or -1 where capacity dropped the pair
  Tensor prob;                  ///< [N, k] fp32: the combine weight (0 where dropped)
  Tensor row_of;                ///< [N * k] int32: the slot's row in this rank's expert-sorted rows, -1 if dropped
  std::vector<int64_t> counts;  ///< [E] (host) those rows per expert, padding included
  std::vector<int64_t> pad;     ///< [E] zero rows this rank appends to each expert's rows
};

/// Expert-sorted rows for the slots' experts `expert` (`slots` int32 entries, -1 for dropped),
/// Backend::moe_route's order (expert, then slot), followed within each expert by the zero rows
/// of `pad` ([G * E]: G sources' padding, in source order). Writes *row_of [slots] int32 and the
/// host *counts [E] (padding included). On CUDA this is the layer's one wait for the device.
void route_rows(const Tensor& expert, int64_t slots, const std::vector<int64_t>& pad, int experts, Tensor* row_of,
                std::vector<int64_t>* counts);

/// What the router saw in one training microbatch, this rank's share (summed over the
/// TensorContext group it is the microbatch's).
struct RouterStats {
  std::vector<double> tokens_per_expert;  ///< [E] (token, expert) pairs kept after the drops
  double load_balancing_loss = 0.0;       ///< aux_loss (seq_aux_loss, global_aux_loss) / coeff
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
  /// dprob [N * k] fp32 (the gradient of the combine weights, 0 for dropped slots) -> dx [N, h] in
  /// x's type, with the balancing losses' gradients. Keeps the logits' gradient for backward_weight.
  Tensor backward_input(const Tensor& dprob, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int weight_index() const { return weight_; }
  /// The expert bias's index, or -1 without aux-loss-free balancing.
  int expert_bias_index() const { return expert_bias_; }
  /// The training microbatches' statistics since the last clear_stats(), by microbatch (a
  /// recomputed forward writes its microbatch's entry again with the same values).
  const std::map<int64_t, RouterStats>& stats() const { return stats_; }
  /// Clears the statistics and ends global_aux_loss's global batch (its running expert counts):
  /// the training loop calls it once per iteration, after the optimizer step.
  void clear_stats() {
    stats_.clear();
    global_counts_.clear();
    global_steps_ = 0;
    global_average_.clear();
  }

 private:
  struct Slot {
    Tensor x;                    // [N, h] fp32: the input, for the weight gradient
    Tensor logits;               // [N, E] fp32 (with the linear bias)
    Tensor selected;             // [N, k] int32: the top-k before the capacity drops
    Tensor dlogits;              // [N, E] fp32, from backward_input
    Routing routing;
    std::vector<int32_t> sample; // [N] the sample of each row (seq_aux_loss)
    std::vector<double> aux_weight;  // [E] or [b, E]: d(aux_loss)/d(score) of each expert (and sample)
    Tensor lse;                  // [N] fp32: logsumexp of the logits (z-loss)
    double tokens = 0;           // T, the microbatch's tokens
    bool sharded = false;        // sequence parallelism: the weight gradient is partial per tensor rank
  };
  // The expert bias [E] fp32 on the device, or undefined without one.
  Tensor expert_bias_values() const;
  // The token group: ranks holding pieces of the same samples (none for a group of one).
  bool grouped(const Step& step) const;
  int group_size(const Step& step) const;
  RouterDesc desc(int64_t tokens) const;
  // The capacity drops over the whole microbatch (see the top of this file) on the host copies
  // of the slots' experts and weights, [N * k] each; fills pad.
  void drop_over_capacity(std::vector<int32_t>& expert, std::vector<float>& prob, std::vector<int64_t>& pad,
                          const Tensor& like, const Step& step, int64_t b) const;
  // The balancing losses' values into `stats` and their gradient weights into the slot.
  void balancing_losses(Slot& s, const Tensor& like, const Step& step, int64_t b, RouterStats& stats);
  // Host all-reduce (sum) of `v` over the token group.
  void group_sum(std::vector<double>& v, const Tensor& like, const Step& step) const;
  // global_aux_loss: the microbatch's counts [E] (summed over the token group) -> the running
  // mean over the step's microbatches of their sums over the data-parallel replicas.
  std::vector<double> global_counts(const std::vector<double>& counts, const Tensor& like, const Step& step);
  // The row of the whole microbatch's [s * b] activation of row j of token-group rank r.
  int64_t global_position(int r, int64_t j, int64_t rows, int64_t b, const Step& step) const;

  ParamTable& params_;
  const LayerConfig& cfg_;
  TensorParallel tp_;
  int weight_ = -1, bias_ = -1, expert_bias_ = -1;
  Slots<Slot> slots_;
  std::map<int64_t, RouterStats> stats_;
  // global_aux_loss's global batch so far: the summed counts [E], the microbatches counted, and
  // each microbatch's mean (a recomputed forward takes it again).
  std::vector<double> global_counts_;
  int64_t global_steps_ = 0;
  std::map<int64_t, std::vector<double>> global_average_;
};

}  // namespace ptdp
