// Token dispatchers (Megatron-Core's token_dispatcher.py): they carry each token's rows to the
// ranks holding its experts and the experts' outputs back, combined with the routing weights.
//
// alltoall (MoEAlltoAllTokenDispatcher): each rank sorts its (token, expert) pairs by expert
//   (the permutation), the ranks of the ExpertModel group exchange their per-expert counts and
//   then the rows themselves (all-to-all-v as one batch of sends and receives per peer, the
//   same on MPI and NCCL); with expert tensor parallelism (etp > 1) the rows are all-gathered
//   over the ExpertTensor group before the experts (every etp rank computes its slice of every
//   row) and the experts' partial outputs reduce-scattered after. Rows reach the experts
//   expert-major: local expert, then etp rank, then source rank, then the source's order.
// allgather (MoEAllGatherTokenDispatcher): the tokens and their routing are all-gathered over
//   the ExpertTensorAndModel group, every rank runs its local experts on the rows routed to
//   them, and the weighted outputs are reduce-scattered back (summing over etp's partial
//   products and over the ranks of the token's other experts).
//
// Both return the experts' output combined per token: out[n] = sum_j prob[n, j] y(n, j) over the
// pairs the capacity kept; the backward gives the experts' output gradient and, for the router,
// the weights' gradient dprob[n, j] = <dout[n], y(n, j)>. The reverse direction of every
// exchange is the backward of the forward one (an all-gather's backward a reduce-scatter).
// Zero rows padding an expert to its capacity (Routing::pad) ride along and change nothing.
//
// On the device: the permutation is one Backend::moe_permute over the router's expert-sorted
// rows (Routing::row_of), the combine one moe_unpermute with the weights and its backward one
// moe_unpermute_backward; reordering received rows expert-major is a moe_permute by an uploaded
// row map. The host sees only per-expert counts (Routing::counts, and the peers' counts the
// exchange needs): no launch or wait per row or per expert. The allgather dispatcher sorts the
// gathered slots once more (moe_route over all of them: a second count transfer per layer and
// microbatch) and permutes every gathered slot, its experts' rows being one window of those.
#pragma once

#include <memory>
#include <vector>

#include "core/layers/moe/router.h"

namespace ptdp {

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  /// x [N, h] and its routing -> the local experts' input [R, h], expert-major; *counts receives
  /// each local expert's rows (E / e of them).
  virtual Tensor dispatch(const Tensor& x, const Routing& r, const Step& step, std::vector<int64_t>* counts) = 0;
  /// y [R, h], the experts' output (partial sums over the ExpertTensor group) -> [N, h].
  virtual Tensor combine(const Tensor& y, const Step& step) = 0;
  /// dout [N, h] -> the experts' output gradient [R, h]; *dprob [N * k] fp32 the weights'
  /// gradient (0 for dropped slots).
  virtual Tensor combine_backward(const Tensor& dout, const Step& step, Tensor* dprob) = 0;
  /// dxe [R, h], the experts' input gradient (partial sums over the ExpertTensor group) -> dx [N, h].
  virtual Tensor dispatch_backward(const Tensor& dxe, const Step& step) = 0;
  virtual void release(const Step& step) = 0;
};

/// The dispatcher cfg.moe.dispatcher names, over tp.ep's groups.
std::unique_ptr<TokenDispatcher> make_token_dispatcher(const LayerConfig& cfg, TensorParallel tp, const std::string& owner);

/// Wall seconds this process has spent in the token dispatchers' communication, forward and
/// backward, waits included: the count all-gathers, the all-to-all-v over the e ranks, the etp
/// all-gather and reduce-scatter, and the allgather dispatcher's collectives. The part of comm_wait_seconds()
/// (core/comm/communicator.h) that overlapping one microbatch's exchange with another's compute
/// could hide at most; a training iteration reports its share (IterationOutcome).
double moe_exchange_seconds();

}  // namespace ptdp
