// What every layer shares: the step (iteration, microbatch) that keys dropout masks and
// activation slots, the slot store itself, and the GEMM shapes of a linear layer. The
// tensor-parallel group and its f/g operators are core/parallel/tensor_parallel.h.
//
// Shapes. Every tensor declaration in core/layers/ has its shape in a comment, in the notation
// of Narayanan et al. (SC'21): s sequence length, b micro-batch size, h hidden size, a attention
// heads, g query groups (key/value heads), dh head dim, ffn the MLP width, V the padded
// vocabulary, t the tensor-parallel size, c the context-parallel size. A shape is the memory
// layout, rows x columns, products written out: activations are sequence-major, so [s*b, h]
// holds position si of sample bi at row si*b + bi. A context rank holds [s/c*b, h] of it (its
// two chunks of the sequence); under sequence parallelism a tensor rank holds [s/c*b/t, h] of
// that; a decoding step's activations are [n, h], the n new tokens of one sequence. N is the
// row count where a layer takes any (the model passes s/c*b, s/c*b/t or n). "fp32" marks the
// fp32 statistics and gradients; every other tensor has the model's storage type.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/error.h"
#include "core/parallel/tensor_parallel.h"
#include "core/tensor/tensor.h"
#include "core/tensor/tensor_helpers.h"

namespace ptdp {

struct TokenPositions;

/// Which forward/backward pass a call belongs to.
struct Step {
  int64_t iteration = 0;   ///< optimizer step
  int64_t microbatch = 0;  ///< global microbatch index within the iteration (keys slots and masks)
  bool training = true;    ///< dropout on
  /// A generation step (GptModel::decode): the activations are the new tokens of one sequence,
  /// whole on every tensor rank (never split along the sequence), and the attention layers
  /// attend to the key/value cache handed to their decode().
  bool decoding = false;
  /// Packed documents (core/layers/attention.h): the microbatch's per-token positions and
  /// document starts, set by the model for its forward and backward passes; nullptr: token i of
  /// a sample is at position i and attends causally to the whole sample.
  const TokenPositions* positions = nullptr;
  /// Backward passes: the factor the main loss's gradient carries into this pass (1/m for m
  /// microbatches, the fp16 loss scale, and c under context parallelism; see
  /// GptModel::stage_backward_input). Auxiliary losses that a layer adds in its own backward
  /// (the MoE router's) are scaled by it, as Megatron's MoEAuxLossAutoScaler does.
  float grad_scale = 1.0f;
};

/// Per-microbatch saved activations of one layer: several microbatches can be in flight.
template <typename Slot>
class Slots {
 public:
  explicit Slots(std::string owner) : owner_(std::move(owner)) {}
  Slot& create(int64_t mb) {
    auto [it, inserted] = slots_.try_emplace(mb);
    if (!inserted) {
      throw_error(ErrorCode::InvalidState, owner_ + ": microbatch " + std::to_string(mb) +
                                               " is already in flight (forward ran twice without backward)");
    }
    return it->second;
  }
  Slot& get(int64_t mb) {
    auto it = slots_.find(mb);
    if (it == slots_.end()) {
      throw_error(ErrorCode::InvalidState, owner_ + ": no saved activations for microbatch " +
                                               std::to_string(mb) + " (forward not run, or backward already done)");
    }
    return it->second;
  }
  bool has(int64_t mb) const { return slots_.count(mb) != 0; }
  void release(int64_t mb) { slots_.erase(mb); }
  std::size_t in_flight() const { return slots_.size(); }

 private:
  std::string owner_;
  std::map<int64_t, Slot> slots_;
};

/// y [N, out] = x [N, in] W^T with W [out, in] (torch.nn.Linear's layout), then + b [out], in
/// one GEMM with a bias epilogue. x, W, b and y share the model's storage type. With `pre_gelu`
/// [N, out] (which needs b) the epilogue also applies GeLU: pre_gelu = x W^T + b and
/// y = gelu(pre_gelu).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y,
                    const Tensor* pre_gelu = nullptr);
/// dx [N, in] = dy [N, out] W (W [out, in]); with `pre_gelu` [N, in] (the GeLU input that
/// produced this layer's input) the epilogue also multiplies by gelu'(pre_gelu): the gradient
/// before the GeLU.
void linear_dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx, const Tensor* pre_gelu = nullptr);
/// dW [out, in] += dy^T x with dy [N, out] and x [N, in]; db [out] += column sums of dy
/// (accumulating over microbatches). dW and db are the fp32 main gradients whatever the storage
/// type of dy and x.
void linear_wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor* db);

}  // namespace ptdp
