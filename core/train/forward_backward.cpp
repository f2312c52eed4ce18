#include "core/train/forward_backward.h"

#include "base/error.h"

namespace ptdp {

namespace {

// The chunks' PipelineStages for one global batch.
class GptStages final : public PipelineStages {
 public:
  GptStages(GptPipeline& model, const int32_t* tokens, const int32_t* labels, const DocumentLayout& layout,
            int64_t b, int64_t iteration, int m, const ReplicaSettings& replica, const GradsReady& grads_ready)
      : model_(model), tokens_(tokens), labels_(labels), layout_(layout), b_(b), iteration_(iteration), m_(m),
        replica_(replica), grads_ready_(grads_ready), weight_passes_(model.chunks().size(), 0) {}

  Shape input_shape(int, int) override {
    return Shape{model_.chunks().front()->activation_rows(b_), model_.config().hidden_size};
  }

  Tensor forward(int chunk, int mb, const Tensor& input) override {
    GptModel& g = local(chunk);
    const int64_t seq = model_.config().seq_length;
    const int64_t offset = static_cast<int64_t>(mb) * b_ * seq;
    Tensor out = g.stage_forward(input, tokens_ + offset, labels_ + offset, b_, step(mb),
                                 layout_.from_sample(static_cast<int64_t>(mb) * b_, seq));
    if (g.stage().post_process) {
      loss_sum_ += g.microbatch_loss(out, step(mb));
      const std::vector<float> mtp = g.mtp_losses(step(mb));
      mtp_sums_.resize(mtp.size(), 0.0);
      for (std::size_t k = 0; k < mtp.size(); ++k) mtp_sums_[k] += mtp[k];
    }
    return out;
  }

  Tensor backward_input(int chunk, int mb, const Tensor& grad_output) override {
    return local(chunk).stage_backward_input(grad_output, step(mb), replica_.grad_scale / static_cast<float>(m_));
  }

  // A chunk's gradients are final after its m-th weight pass, component by component: they are
  // reported then, except the tied embedding's, which finalize_model_grads sums first.
  void backward_weight(int chunk, int mb) override {
    const int j = model_.local_of_chunk(chunk);
    const bool last = ++weight_passes_[static_cast<std::size_t>(j)] == m_;
    if (!last || !grads_ready_) {
      local(chunk).stage_backward_weight(step(mb));
      return;
    }
    const int tied = model_.tied_embedding(j);
    local(chunk).stage_backward_weight(step(mb), [&](int first, int end) {
      if (tied >= first && tied < end) {
        if (first < tied) grads_ready_(j, first, tied);
        if (tied + 1 < end) grads_ready_(j, tied + 1, end);
      } else {
        grads_ready_(j, first, end);
      }
    });
  }

  double loss_sum() const { return loss_sum_; }
  /// Each MTP depth's loss summed over the microbatches (the last chunk's rank; empty elsewhere).
  const std::vector<double>& mtp_sums() const { return mtp_sums_; }
  Device device() override { return model_.device(); }
  DType activation_dtype() override { return model_.config().precision; }

 private:
  GptModel& local(int chunk) { return *model_.chunks()[static_cast<std::size_t>(model_.local_of_chunk(chunk))]; }
  Step step(int mb) const {
    Step s;
    s.iteration = iteration_;
    s.microbatch = replica_.microbatch_offset + mb;
    return s;
  }

  GptPipeline& model_;
  const int32_t* tokens_;
  const int32_t* labels_;
  DocumentLayout layout_;
  int64_t b_, iteration_;
  int m_;
  const ReplicaSettings& replica_;
  const GradsReady& grads_ready_;
  std::vector<int> weight_passes_;  // per local chunk: weight passes run this step
  double loss_sum_ = 0.0;
  std::vector<double> mtp_sums_;
};

// The chunks' PipelineStages for a forward-only pass: each chunk's activations are released
// as soon as its output has been produced.
class EvalStages final : public PipelineStages {
 public:
  EvalStages(GptPipeline& model, const int32_t* tokens, const int32_t* labels, const DocumentLayout& layout, int64_t b)
      : model_(model), tokens_(tokens), labels_(labels), layout_(layout), b_(b) {}

  Shape input_shape(int, int) override {
    return Shape{model_.chunks().front()->activation_rows(b_), model_.config().hidden_size};
  }

  Tensor forward(int chunk, int mb, const Tensor& input) override {
    GptModel& g = *model_.chunks()[static_cast<std::size_t>(model_.local_of_chunk(chunk))];
    const int64_t seq = model_.config().seq_length;
    const int64_t offset = static_cast<int64_t>(mb) * b_ * seq;
    Step step;
    step.microbatch = mb;
    step.training = false;
    Tensor out;
    try {
      out = g.stage_forward(input, tokens_ + offset, labels_ + offset, b_, step,
                            layout_.from_sample(static_cast<int64_t>(mb) * b_, seq));
      if (g.stage().post_process) loss_sum_ += g.microbatch_loss(out, step);
    } catch (...) {
      g.release(step);
      throw;
    }
    g.release(step);
    return out;
  }

  Tensor backward_input(int, int, const Tensor&) override {
    throw_error(ErrorCode::Internal, "a forward-only pass has no backward");
  }
  void backward_weight(int, int) override { throw_error(ErrorCode::Internal, "a forward-only pass has no backward"); }
  Device device() override { return model_.device(); }
  DType activation_dtype() override { return model_.config().precision; }

  double loss_sum() const { return loss_sum_; }

 private:
  GptPipeline& model_;
  const int32_t* tokens_;
  const int32_t* labels_;
  DocumentLayout layout_;
  int64_t b_;
  double loss_sum_ = 0.0;
};

// The loss lives on the last chunk's stage; every rank of the pipeline returns it.
float pipeline_loss(GptPipeline& model, double loss_sum, int m) {
  float loss = static_cast<float>(loss_sum / m);
  const int p = model.pipeline_size();
  if (p > 1) {
    model.groups()
        .comm(GroupKind::Pipeline)
        .broadcast(Tensor::borrow(&loss, {1}, DType::F32), model.rank_of_chunk(p * model.virtual_stages() - 1))
        ->wait();
  }
  return loss;
}

// Each MTP depth's mean over the m microbatches, broadcast from the last chunk as the loss is.
std::vector<float> pipeline_mtp_losses(GptPipeline& model, const std::vector<double>& sums, int m) {
  std::vector<float> out(static_cast<std::size_t>(model.config().mtp_num_layers), 0.0f);
  for (std::size_t k = 0; k < sums.size() && k < out.size(); ++k) out[k] = static_cast<float>(sums[k] / m);
  const int p = model.pipeline_size();
  if (p > 1 && !out.empty()) {
    model.groups()
        .comm(GroupKind::Pipeline)
        .broadcast(Tensor::borrow(out.data(), {static_cast<int64_t>(out.size())}, DType::F32),
                   model.rank_of_chunk(p * model.virtual_stages() - 1))
        ->wait();
  }
  return out;
}

}  // namespace

float forward_backward(GptPipeline& model, const Schedule& schedule, const int32_t* tokens, const int32_t* labels,
                       int64_t b, int64_t iteration, const ExecutorOptions& options, const ReplicaSettings& replica,
                       const DocumentLayout& layout, const GradsReady& grads_ready, std::vector<float>* mtp_losses) {
  const int p = model.pipeline_size(), v = model.virtual_stages();
  PTDP_CHECK_ARG(schedule.p == p && schedule.v == v,
                 "the schedule is for p=" + std::to_string(schedule.p) + ", v=" + std::to_string(schedule.v) +
                     "; the model is laid out for p=" + std::to_string(p) + ", v=" + std::to_string(v));
  PTDP_CHECK_ARG(schedule.placement == model.placement(),
                 std::string(schedule_kind_name(schedule.kind)) + " places the model chunks " +
                     chunk_placement_name(schedule.placement) + "; the model is built with the " +
                     chunk_placement_name(model.placement()) + " placement (the layout's chunk_placement)");
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  GptStages stages(model, tokens, labels, layout, b, iteration, schedule.m, replica, grads_ready);
  Communicator* pipe = p > 1 ? &model.groups().comm_for_tensors(GroupKind::Pipeline, model.device()) : nullptr;
  // Under sequence parallelism the tensor ranks' activations differ (each holds its rows): the
  // scatter/gather of identical stage-boundary tensors does not apply, as in Megatron.
  ExecutorOptions run_options = options;
  if (model.tensor_parallel().sequence_sharded(false)) run_options.scatter_gather = false;
  run_schedule(schedule, model.pipeline_rank(), stages, pipe, model.tensor_parallel(), run_options);
  finalize_model_grads(model, grads_ready);
  if (mtp_losses) *mtp_losses = pipeline_mtp_losses(model, stages.mtp_sums(), schedule.m);
  return pipeline_loss(model, stages.loss_sum(), schedule.m);
}

void finalize_model_grads(GptPipeline& model, const GradsReady& grads_ready) {
  const int last = model.pipeline_size() * model.virtual_stages() - 1;
  const auto grad = [&](int j, int i) { return model.chunks()[static_cast<std::size_t>(j)]->params().grad(i); };
  if (model.rank_of_chunk(0) == model.rank_of_chunk(last)) {  // the V placement: both copies here
    if (model.pipeline_rank() != model.rank_of_chunk(0) || model.tied_embedding(0) < 0) return;
    const int j0 = model.local_of_chunk(0), j1 = model.local_of_chunk(last);
    const int i0 = model.tied_embedding(j0), i1 = model.tied_embedding(j1);
    Tensor g0 = grad(j0, i0), g1 = grad(j1, i1);
    g0.backend().add(g0.raw(), g1.raw(), g0.raw(), g0.dtype(), g0.numel());
    g0.backend().copy(g1.raw(), g0.raw(), g0.nbytes());
    if (grads_ready) {
      grads_ready(j0, i0, i0 + 1);
      grads_ready(j1, i1, i1 + 1);
    }
    return;
  }
  for (int j = 0; j < model.virtual_stages(); ++j) {
    const int i = model.tied_embedding(j);
    if (i < 0) continue;
    model.groups().comm_for_tensors(GroupKind::Embedding, model.device()).all_reduce(grad(j, i), ReduceOp::Sum)->wait();
    if (grads_ready) grads_ready(j, i, i + 1);
  }
}

float evaluate(GptPipeline& model, const int32_t* tokens, const int32_t* labels, int64_t b, int m,
               const DocumentLayout& layout) {
  const int p = model.pipeline_size(), v = model.virtual_stages();
  ProcessGroups& groups = model.groups();
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  PTDP_CHECK_ARG(m > 0, "number of microbatches must be > 0, got " + std::to_string(m));
  EvalStages stages(model, tokens, labels, layout, b);
  Communicator* pipe = p > 1 ? &groups.comm_for_tensors(GroupKind::Pipeline, model.device()) : nullptr;
  ExecutorOptions options;
  options.scatter_gather = false;
  run_schedule(make_forward_only(p, m, v, model.placement()), model.pipeline_rank(), stages, pipe,
               model.tensor_parallel(), options);
  float loss = pipeline_loss(model, stages.loss_sum(), m);
  if (groups.size(GroupKind::Data) > 1)
    groups.comm(GroupKind::Data).all_reduce(Tensor::borrow(&loss, {1}, DType::F32), ReduceOp::Avg)->wait();
  return loss;
}

}  // namespace ptdp
