#include "core/train/trainer.h"

#include <chrono>

#include "core/layers/moe/token_dispatcher.h"
#include "core/train/qk_clip.h"

namespace ptdp {

std::unique_ptr<Optimizer> make_optimizer(GptPipeline& model, ProcessGroups& groups, const OptimizerConfig& config) {
  std::vector<ParamTable*> spaces;
  std::vector<std::vector<int>> excluded;
  for (std::size_t j = 0; j < model.chunks().size(); ++j) {
    GptModel& c = *model.chunks()[j];
    spaces.push_back(&c.params());
    std::vector<int> skip;
    if (!c.stage().pre_process && c.stage().post_process && model.tied_embedding(static_cast<int>(j)) >= 0) {
      skip.push_back(model.tied_embedding(static_cast<int>(j)));
    }
    excluded.push_back(skip);
  }
  return std::make_unique<Optimizer>(spaces, excluded, config, groups);
}

IterationOutcome train_iteration(GptPipeline& model, Optimizer& optimizer, ProcessGroups& groups,
                                 const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                                 int64_t iteration, const ExecutorOptions& options, const DocumentLayout& layout,
                                 const TrainingHooks& hooks) {
  if (hooks.before_iteration) hooks.before_iteration(iteration + 1);
  const auto start = std::chrono::steady_clock::now();
  const double wait0 = comm_wait_seconds(), exchange0 = moe_exchange_seconds();
  model.zero_grads();
  const OptimizerConfig& oc = optimizer.config();
  const bool qk_clip = oc.kind == OptimizerKind::Muon && oc.muon.qk_clip;
  if (qk_clip) record_max_logits(model, true);  // clears the previous iteration's records too
  ReplicaSettings replica;
  replica.microbatch_offset = static_cast<int64_t>(groups.rank(GroupKind::Data)) * schedule.m;
  replica.grad_scale = optimizer.loss_scale();
  const GradsReady grads_ready = [&](int j, int first, int end) {
    if (hooks.on_grads_ready) hooks.on_grads_ready(j, first, end);
    optimizer.params_ready(j, first, end);
  };
  IterationOutcome r;
  r.loss = forward_backward(model, schedule, tokens, labels, b, iteration, options, replica, layout, grads_ready,
                            &r.mtp_losses);
  if (hooks.after_backward) hooks.after_backward(r.loss);
  if (hooks.before_optimizer_step) {
    optimizer.finish_grad_sync();  // the step's own first act; nothing in flight when a check stops the run
    hooks.before_optimizer_step();
  }
  r.step = optimizer.step(iteration);
  if (qk_clip) {
    r.qk_clip = apply_qk_clip(model, groups, oc.muon.qk_clip_threshold, oc.muon.qk_clip_alpha, !r.step.skipped);
  }
  r.moe = finish_moe_iteration(model, groups, schedule.m);
  if (hooks.after_optimizer_step) hooks.after_optimizer_step(r.step);
  if (groups.size(GroupKind::Data) > 1) {
    groups.comm(GroupKind::Data).all_reduce(Tensor::borrow(&r.loss, {1}, DType::F32), ReduceOp::Avg)->wait();
    if (!r.mtp_losses.empty()) {
      const Tensor mtp = Tensor::borrow(r.mtp_losses.data(), {static_cast<int64_t>(r.mtp_losses.size())}, DType::F32);
      groups.comm(GroupKind::Data).all_reduce(mtp, ReduceOp::Avg)->wait();
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.comm_wait_seconds = comm_wait_seconds() - wait0;
  r.moe_exchange_seconds = moe_exchange_seconds() - exchange0;
  return r;
}

}  // namespace ptdp
