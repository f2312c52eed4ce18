#include "core/model/gpt_pipeline.h"

#include <set>

#include "core/model/param_io.h"
#include "kernels/error.h"

namespace ptdp {

namespace {

TensorParallel tensor_group(ProcessGroups& g, Device device) {
  TensorParallel tp;
  tp.comm = &g.comm_for_tensors(GroupKind::Tensor, device);
  tp.rank = g.rank(GroupKind::Tensor);
  tp.size = g.size(GroupKind::Tensor);
  return tp;
}

// The chunks' PipelineStages for one global batch.
class GptStages final : public PipelineStages {
 public:
  GptStages(GptPipeline& model, const int32_t* tokens, const int32_t* labels, int64_t b, int64_t iteration, int m,
            const TrainHooks& hooks)
      : model_(model), tokens_(tokens), labels_(labels), b_(b), iteration_(iteration), m_(m), hooks_(hooks),
        weight_passes_(model.chunks().size(), 0) {}

  Shape input_shape(int, int) override {
    const GptConfig& c = model_.config();
    return Shape{static_cast<int64_t>(c.seq_length) * b_, c.hidden_size};
  }

  Tensor forward(int chunk, int mb, const Tensor& input) override {
    GptModel& g = local(chunk);
    const int64_t offset = static_cast<int64_t>(mb) * b_ * model_.config().seq_length;
    Tensor out = g.stage_forward(input, tokens_ + offset, labels_ + offset, b_, step(mb));
    if (g.stage().post_process) loss_sum_ += GptModel::mean(out);
    return out;
  }

  Tensor backward_input(int chunk, int mb, const Tensor& grad_output) override {
    return local(chunk).stage_backward_input(grad_output, step(mb), hooks_.grad_scale / static_cast<float>(m_));
  }

  void backward_weight(int chunk, int mb) override {
    const int j = chunk / model_.pipeline_size();
    const bool last = ++weight_passes_[static_cast<std::size_t>(j)] == m_;
    if (!last || !hooks_.params_ready) {
      local(chunk).stage_backward_weight(step(mb));
      return;
    }
    // The chunk's gradients are final component by component: report them, except the tied
    // embedding, which the embedding group sums first.
    const int tied = model_.tied_embedding(j);
    local(chunk).stage_backward_weight(step(mb), [&](int first, int end) {
      if (tied >= first && tied < end) {
        if (first < tied) hooks_.params_ready(j, first, tied);
        if (tied + 1 < end) hooks_.params_ready(j, tied + 1, end);
      } else {
        hooks_.params_ready(j, first, end);
      }
    });
  }

  double loss_sum() const { return loss_sum_; }
  Device device() override { return model_.device(); }
  DType activation_dtype() override { return model_.config().precision; }

 private:
  GptModel& local(int chunk) { return *model_.chunks()[static_cast<std::size_t>(chunk / model_.pipeline_size())]; }
  Step step(int mb) const {
    Step s;
    s.iteration = iteration_;
    s.microbatch = hooks_.microbatch_offset + mb;
    return s;
  }

  GptPipeline& model_;
  const int32_t* tokens_;
  const int32_t* labels_;
  int64_t b_, iteration_;
  int m_;
  const TrainHooks& hooks_;
  std::vector<int> weight_passes_;
  double loss_sum_ = 0.0;
};

// The chunks' PipelineStages for a forward-only pass: each chunk's activations are released
// as soon as its output has been produced.
class EvalStages final : public PipelineStages {
 public:
  EvalStages(GptPipeline& model, const int32_t* tokens, const int32_t* labels, int64_t b)
      : model_(model), tokens_(tokens), labels_(labels), b_(b) {}

  Shape input_shape(int, int) override {
    const GptConfig& c = model_.config();
    return Shape{static_cast<int64_t>(c.seq_length) * b_, c.hidden_size};
  }

  Tensor forward(int chunk, int mb, const Tensor& input) override {
    GptModel& g = *model_.chunks()[static_cast<std::size_t>(chunk / model_.pipeline_size())];
    const int64_t offset = static_cast<int64_t>(mb) * b_ * model_.config().seq_length;
    Step step;
    step.microbatch = mb;
    step.training = false;
    Tensor out;
    try {
      out = g.stage_forward(input, tokens_ + offset, labels_ + offset, b_, step);
    } catch (...) {
      g.release(step);
      throw;
    }
    g.release(step);
    if (g.stage().post_process) loss_sum_ += GptModel::mean(out);
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
  int64_t b_;
  double loss_sum_ = 0.0;
};

// Forward-only actions: microbatch after microbatch, each rank's chunks in order, receiving
// each chunk's input from the previous chunk's rank and sending its output on.
Schedule forward_only_schedule(int p, int m, int v) {
  Schedule s;
  s.kind = ScheduleKind::GPipe;
  s.p = p;
  s.m = m;
  s.v = v;
  s.ranks.resize(static_cast<std::size_t>(p));
  const int chunks = p * v;
  for (int r = 0; r < p; ++r) {
    auto& acts = s.ranks[static_cast<std::size_t>(r)];
    for (int mb = 0; mb < m; ++mb) {
      for (int j = 0; j < v; ++j) {
        const int c = j * p + r;
        if (c > 0) acts.push_back({ActionKind::RecvActivation, mb, c, (c - 1) % p});
        acts.push_back({ActionKind::Forward, mb, c, -1});
        if (c + 1 < chunks) acts.push_back({ActionKind::SendActivation, mb, c, (c + 1) % p});
      }
    }
  }
  return s;
}

}  // namespace

GptPipeline::GptPipeline(const GptConfig& cfg, ProcessGroups& groups, Device device)
    : cfg_(cfg), groups_(groups), device_(device), tp_(tensor_group(groups, device)) {
  p_ = groups.layout().pipeline();
  v_ = groups.layout().virtual_stages();
  pp_rank_ = groups.rank(GroupKind::Pipeline);
  cfg_.validate(tp_.size);
  const int chunks = p_ * v_;
  layers_per_chunk_ = GptStage::chunk_of(cfg_, 0, chunks, p_, v_).num_layers;
  if (layers_per_chunk_ == 0) {
    throw_error(ErrorCode::InvalidArgument, "num_layers " + std::to_string(cfg_.num_layers) + " is fewer than the p=" +
                                                std::to_string(p_) + " x v=" + std::to_string(v_) + " = " +
                                                std::to_string(chunks) + " model chunks");
  }
  for (int j = 0; j < v_; ++j) {
    const int c = chunk_index(j);
    chunks_.push_back(std::make_unique<GptModel>(cfg_, tp_, device_, GptStage::chunk_of(cfg_, c, chunks, p_, v_)));
  }
  // The whole model's parameter list, from tables without memory.
  std::set<std::string> seen;
  for (int c = 0; c < chunks; ++c) {
    GptModel meta(cfg_, tp_, Device{}, GptStage::chunk_of(cfg_, c, chunks, p_, v_), false);
    for (int i = 0; i < meta.params().size(); ++i) {
      if (seen.insert(meta.params().info(i).name).second) all_params_.push_back(meta.params().info(i));
    }
  }
}

void GptPipeline::zero_grads() {
  for (auto& c : chunks_) c->params().zero_grads();
}

int GptPipeline::tied_embedding(int j) const {
  const GptModel& c = *chunks_[static_cast<std::size_t>(j)];
  if (p_ == 1 || !cfg_.tie_embeddings) return -1;
  if (c.stage().pre_process) return c.params().index("embedding.word_embeddings.weight");
  if (c.stage().post_process) return c.tied_head_weight();
  return -1;
}

float GptPipeline::train_step(const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                              int64_t iteration, const ExecutorOptions& options) {
  return train_step(schedule, tokens, labels, b, iteration, options, TrainHooks{});
}

float GptPipeline::train_step(const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                              int64_t iteration, const ExecutorOptions& options, const TrainHooks& hooks) {
  PTDP_CHECK_ARG(schedule.p == p_ && schedule.v == v_,
                 "the schedule is for p=" + std::to_string(schedule.p) + ", v=" + std::to_string(schedule.v) +
                     "; the model is laid out for p=" + std::to_string(p_) + ", v=" + std::to_string(v_));
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  GptStages stages(*this, tokens, labels, b, iteration, schedule.m, hooks);
  Communicator* pipe = p_ > 1 ? &groups_.comm_for_tensors(GroupKind::Pipeline, device_) : nullptr;
  run_schedule(schedule, pp_rank_, stages, pipe, tp_, options);
  // Tied word embedding: the first and last stages sum their gradients.
  for (int j = 0; j < v_; ++j) {
    const int i = tied_embedding(j);
    if (i < 0) continue;
    groups_.comm_for_tensors(GroupKind::Embedding, device_)
        .all_reduce(chunks_[static_cast<std::size_t>(j)]->params().grad(i), ReduceOp::Sum)
        ->wait();
    if (hooks.params_ready) hooks.params_ready(j, i, i + 1);
  }
  // The loss lives on the last stage; every rank of the pipeline returns it.
  float loss = static_cast<float>(stages.loss_sum() / schedule.m);
  if (p_ > 1) groups_.comm(GroupKind::Pipeline).broadcast(Tensor::borrow(&loss, {1}, DType::F32), p_ - 1)->wait();
  return loss;
}

float GptPipeline::evaluate(const int32_t* tokens, const int32_t* labels, int64_t b, int m) {
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  PTDP_CHECK_ARG(m > 0, "number of microbatches must be > 0, got " + std::to_string(m));
  EvalStages stages(*this, tokens, labels, b);
  Communicator* pipe = p_ > 1 ? &groups_.comm_for_tensors(GroupKind::Pipeline, device_) : nullptr;
  ExecutorOptions options;
  options.scatter_gather = false;
  run_schedule(forward_only_schedule(p_, m, v_), pp_rank_, stages, pipe, tp_, options);
  float loss = static_cast<float>(stages.loss_sum() / m);
  if (p_ > 1) groups_.comm(GroupKind::Pipeline).broadcast(Tensor::borrow(&loss, {1}, DType::F32), p_ - 1)->wait();
  if (groups_.size(GroupKind::Data) > 1)
    groups_.comm(GroupKind::Data).all_reduce(Tensor::borrow(&loss, {1}, DType::F32), ReduceOp::Avg)->wait();
  return loss;
}

int GptPipeline::owner_chunk(const std::string& name) const {
  const int chunks = p_ * v_;
  const std::string layers = "decoder.layers.";
  if (name.rfind(layers, 0) == 0) {
    const int layer = std::stoi(name.substr(layers.size()));
    return layer / layers_per_chunk_;
  }
  if (name.rfind("embedding.", 0) == 0) return 0;
  return chunks - 1;  // final LayerNorm, output layer
}

void GptPipeline::get_global(const std::string& name, bool gradient, float* host) {
  int info_index = -1;
  for (std::size_t i = 0; i < all_params_.size(); ++i)
    if (all_params_[i].name == name) info_index = static_cast<int>(i);
  PTDP_CHECK_ARG(info_index >= 0, "no parameter named '" + name + "'");
  const ParamInfo& info = all_params_[static_cast<std::size_t>(info_index)];
  const int chunk = owner_chunk(name);
  const int owner = chunk % p_;
  if (owner == pp_rank_) {
    GptModel& g = *chunks_[static_cast<std::size_t>(chunk / p_)];
    const int i = g.params().index(name);
    gather_global(g.params(), i, gradient ? g.params().grad(i) : g.params().param(i), tp_, host);
  }
  if (p_ > 1) {
    groups_.comm(GroupKind::Pipeline)
        .broadcast(Tensor::borrow(host, {info.global_shape.numel()}, DType::F32), owner)
        ->wait();
  }
}

void GptPipeline::set_global(const std::string& name, const float* host) {
  bool found = false;
  for (const ParamInfo& p : all_params_) found |= p.name == name;
  PTDP_CHECK_ARG(found, "no parameter named '" + name + "'");
  for (auto& c : chunks_) {
    const int i = c->params().find(name);
    if (i < 0) continue;
    scatter_global(c->params(), i, host, c->params().param(i));
    c->params().sync_weight(i);
  }
}

}  // namespace ptdp
