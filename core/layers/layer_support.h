// What every layer shares: the tensor-parallel group, the step (iteration, microbatch) that
// keys dropout masks and activation slots, the slot store itself, and the GEMM shapes of a
// linear layer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/comm/communicator.h"
#include "core/tensor/tensor.h"
#include "kernels/error.h"

namespace ptdp {

/// The tensor-parallel group a layer's shards are spread over.
struct TensorParallel {
  Communicator* comm = nullptr;  ///< may be null when size == 1
  int rank = 0;
  int size = 1;

  /// Sum over the group, in place (no communication for a group of one).
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) const;
  /// out [size * n] = every rank's in [n], in rank order.
  void all_gather(const Tensor& in, const Tensor& out) const;
};

/// Which forward/backward pass a call belongs to.
struct Step {
  int64_t iteration = 0;   ///< optimizer step
  int64_t microbatch = 0;  ///< global microbatch index within the iteration (keys slots and masks)
  bool training = true;    ///< dropout on
};

/// Dropout sites of a transformer layer (and the embedding), for dropout_stream().
enum class DropoutSite : uint32_t { Embedding = 0, AttentionProbs = 1, AttentionOutput = 2, MlpOutput = 3 };

/// The Philox stream of one dropout site: a pure function of (iteration, microbatch, layer,
/// site), so every parallel layout draws the serial run's masks.
uint64_t dropout_stream(const Step& step, int layer, DropoutSite site);

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

/// y [N, out] = x [N, in] W^T with W [out, in] (torch.nn.Linear's layout), then + b, in one
/// GEMM with a bias epilogue. x, W, b and y share the model's storage type. With `pre_gelu`
/// (which needs b) the epilogue also applies GeLU: pre_gelu = x W^T + b and y = gelu(pre_gelu).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y,
                    const Tensor* pre_gelu = nullptr);
/// dx [N, in] = dy [N, out] W; with `pre_gelu` (the GeLU input that produced this layer's
/// input) the epilogue also multiplies by gelu'(pre_gelu): the gradient before the GeLU.
void linear_dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx, const Tensor* pre_gelu = nullptr);
/// dW += dy^T x; db += column sums of dy (accumulating over microbatches). dW and db are the
/// fp32 main gradients whatever the storage type of dy and x.
void linear_wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor* db);

/// A new tensor like `like` (its storage type and device) of shape `shape`.
Tensor empty_like(const Tensor& like, const Shape& shape);
/// The address of element `offset` of t (whatever its storage type), for backend calls that
/// address a sub-matrix or a strided operand inside a tensor. Throws when outside t.
void* element_ptr(const Tensor& t, int64_t offset);

/// Element count of `t` as rows of `cols` columns; throws naming `what` when it does not divide.
int64_t rows_of(const Tensor& t, int64_t cols, const char* what);

}  // namespace ptdp
