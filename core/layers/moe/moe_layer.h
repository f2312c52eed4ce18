// The mixture-of-experts MLP (Megatron-Core's MoELayer): a TopKRouter picks each token's experts,
// a TokenDispatcher carries the rows to the ranks holding them (expert parallelism), the
// GroupedExperts run, and the dispatcher brings the outputs back combined with the routing
// weights. With --moe-shared-expert-intermediate-size a dense MLP of that width (split over the
// tensor group like the dense MLP) runs on every token and is added; with
// --moe-shared-expert-gate (Qwen2-MoE) its output is first multiplied by
// sigmoid(x . gate_weight), gate_weight [1, h] (fp32, on the device).
//
// Parameters: "<prefix>.router.*", "<prefix>.experts.*", "<prefix>.shared_experts.linear_fc1/2.*"
// and "<prefix>.shared_experts.gate_weight".
// Under sequence parallelism the input and output are this rank's rows: the router and the
// dispatcher work on them, and the shared experts gather and reduce-scatter like the dense MLP.
// With cfg.moe.recompute (Megatron's --recompute-modules moe) only the input is kept and the
// forward runs again before the backward, drawing the same routing (the same weights, the same
// decisions), so the results are the same bits.
#pragma once

#include <memory>
#include <string>

#include "core/layers/mlp.h"
#include "core/layers/moe/experts.h"
#include "core/layers/moe/router.h"
#include "core/layers/moe/token_dispatcher.h"

namespace ptdp {

class MoeLayer {
 public:
  MoeLayer(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp);

  /// x [N, h] -> [N, h] (this rank's rows under sequence parallelism). No bias is left for the
  /// caller (the experts add theirs).
  Tensor forward(const Tensor& x, const Step& step);
  /// dy, the output's shape -> dx, x's shape.
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step);

  TopKRouter& router() { return router_; }
  const TopKRouter& router() const { return router_; }

 private:
  Tensor run_forward(const Tensor& x, const Step& step);
  void release_parts(const Step& step);

  // gate_weight [1, h] in fp32.
  Tensor gate_weight32() const;

  struct Slot {
    Tensor x;                     // [N, h]: kept for recomputation
    Tensor shared;                // [N, h]: the shared experts' output before the gate
    Tensor x32;                   // [N, h] fp32: the gate's input, for its weight gradient
    Tensor gate_logit;            // [N, 1] fp32: x . gate_weight
    Tensor gate;                  // [N] fp32: sigmoid(x . gate_weight)
    Tensor gate_slot;             // [N] int32: the one-expert router's choice (0)
    Tensor identity;              // [N] int32: 0, 1, ..., N - 1 (the gate's row map)
    Tensor dgate;                 // [N, 1] fp32: the gate logits' gradient, for backward_weight
  };
  const LayerConfig& cfg_;
  ParamTable& params_;
  TensorParallel tp_;
  bool recompute_;
  TopKRouter router_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  GroupedExperts experts_;
  std::unique_ptr<Mlp> shared_;
  int gate_ = -1;
  Slots<Slot> slots_;
};

}  // namespace ptdp
