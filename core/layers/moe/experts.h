// The routed experts of an MoE layer on this rank (Megatron-Core's GroupedMLP / TEGroupedMLP):
// the E / e local experts J = ep_rank E / e, ..., each an MLP like the dense one (GeLU, or
// SwiGLU with --swiglu) of width ffn_e = --moe-ffn-hidden-size, fc1 column-parallel and fc2
// row-parallel over the ExpertTensor group (etp ranks). Parameters carry the global expert
// index as Megatron's distributed checkpoints do:
//   <prefix>.linear_fc1.weight{J} [ffn_e (x2 with SwiGLU: gate rows, then up rows), h]
//   <prefix>.linear_fc2.weight{J} [h, ffn_e]
// (with linear biases also .linear_fc1.bias{J} [ffn_e (x2)] and .linear_fc2.bias{J} [h]), all
// expert parameters (ParamTable::set_expert): the fc1 weights of the local experts declared
// consecutively, then the fc2 weights, so a grouped GEMM sees each set as one run.
// The rows arrive expert-major (the dispatcher's order) with a count per local expert (a host
// array). Each projection of all local experts is one Backend::grouped_gemm (forward, dgrad and
// wgrad alike; an expert without rows costs nothing), and the activation runs once over all
// rows, so the number of launches does not grow with the experts. Linear biases are added by a
// grouped GEMM of a column of ones with the experts' bias rows (their gradients by its
// transpose). fc2's output is this etp rank's partial sum (the dispatcher reduces it); its bias
// is added on etp rank 0 only. The grouped GEMM has no epilogue: GeLU's derivative and the
// biases apply to the GEMM's rounded output, which is the fused epilogue's result in fp32 and
// within one extra 16-bit rounding of it in bf16/fp16 (SwiGLU experts without biases, every MoE
// preset, see no difference at all).
#pragma once

#include <string>
#include <vector>

#include "core/layers/layer_config.h"
#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

class GroupedExperts {
 public:
  GroupedExperts(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp);

  /// x [R, h] expert-major with counts[le] rows of local expert le -> [R, h] (partial over etp).
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts, const Step& step);
  /// dy [R, h] (the same on every etp rank) -> dx [R, h] (partial over etp). Keeps dy.
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int num_local() const { return local_; }

 private:
  struct Slot {
    Tensor x;    // [R, h]
    Tensor pre;  // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp]): fc1's output plus bias
    Tensor act;  // [R, ffn_e/etp]: the activation, fc2's input
    Tensor dy;   // [R, h]
    Tensor dpre; // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp])
    Tensor ones; // [R, 1] of ones (with linear biases)
    std::vector<int64_t> counts;
  };
  ParamTable& params_;
  bool swiglu_;
  int local_ = 0;
  int64_t h_ = 0, width_ = 0;  // width_: ffn_e / etp, this rank's share
  bool bias_on_rank_ = false;  // fc2's bias is added here (etp rank 0)
  std::vector<int> fc1_w_, fc1_b_, fc2_w_, fc2_b_;  // by local expert; -1 without biases
  Slots<Slot> slots_;
};

}  // namespace ptdp
