#include "core/model/gpt.h"

#include <limits>
#include <vector>

#include "base/error.h"
#include "core/layers/dropout.h"
#include "kernels/op_scope.h"

namespace ptdp {

GptStage GptStage::chunk_of(const GptConfig& cfg, const PipelineSplit& split, int chunk) {
  const int chunks = split.pipeline * split.virtual_stages;
  PTDP_CHECK_ARG(chunks > 0 && chunk >= 0 && chunk < chunks,
                 "chunk " + std::to_string(chunk) + " of " + std::to_string(chunks) + " is invalid");
  const std::vector<int> counts = chunk_layer_counts(cfg.num_layers, split);
  GptStage s;
  s.first_layer = 0;
  for (int c = 0; c < chunk; ++c) s.first_layer += counts[static_cast<std::size_t>(c)];
  s.num_layers = counts[static_cast<std::size_t>(chunk)];
  s.pre_process = chunk == 0;
  s.post_process = chunk == chunks - 1;
  return s;
}

GptStage GptStage::chunk_of(const GptConfig& cfg, int chunk, int chunks, int p, int v) {
  PTDP_CHECK_ARG(chunks == p * v, "chunks " + std::to_string(chunks) + " are not p=" + std::to_string(p) + " x v=" +
                                      std::to_string(v));
  PipelineSplit split;
  split.pipeline = p;
  split.virtual_stages = v;
  return chunk_of(cfg, split, chunk);
}

GptModel::GptModel(const GptConfig& cfg, TensorParallel tp, Device device, GptStage stage, bool materialize)
    : cfg_(cfg), stage_(stage), tp_(tp), device_(device), padded_vocab_(0), params_(tp.rank, tp.size) {
  cfg_.validate(tp.size);
  tp_.sequence_parallel = cfg_.sequence_parallel;
  if (tp_.cp.size > 1) {
    const int c = tp_.cp.size;
    PTDP_CHECK_ARG(cfg_.seq_length % (2 * c) == 0,
                   "context parallelism cuts each sample into 2c chunks, but seq_length " +
                       std::to_string(cfg_.seq_length) + " is not divisible by 2 x context_parallel_size " +
                       std::to_string(c) + " = " + std::to_string(2 * c));
    PTDP_CHECK_ARG(!tp_.sequence_sharded(false) || (cfg_.seq_length / c) % tp_.size == 0,
                   "sequence parallelism splits each context rank's seq_length / context_parallel_size = " +
                       std::to_string(cfg_.seq_length / c) + " positions over the tensor group, but they are not "
                       "divisible by t = " + std::to_string(tp_.size));
  }
  if (cfg_.moe.enabled()) {
    const ExpertParallel& ep = tp_.ep;
    PTDP_CHECK_ARG(cfg_.moe.num_experts % ep.ep_size == 0,
                   "--num-experts " + std::to_string(cfg_.moe.num_experts) +
                       " is not divisible by --expert-model-parallel-size " + std::to_string(ep.ep_size));
    PTDP_CHECK_ARG(ep.ep_size == 1 || ep.ep_comm, "expert model parallel size " + std::to_string(ep.ep_size) +
                                                      " without an expert-model-parallel communicator");
    PTDP_CHECK_ARG(ep.tp_cp_size == tp_.size * tp_.cp.size,
                   "the MoE token group (TensorContext) has " + std::to_string(ep.tp_cp_size) + " ranks; t x c is " +
                       std::to_string(tp_.size * tp_.cp.size));
  }
  if (stage_.num_layers < 0) stage_.num_layers = cfg_.num_layers - stage_.first_layer;
  PTDP_CHECK_ARG(stage_.first_layer >= 0 && stage_.num_layers >= 0 &&
                     stage_.first_layer + stage_.num_layers <= cfg_.num_layers,
                 "layers [" + std::to_string(stage_.first_layer) + ", +" + std::to_string(stage_.num_layers) +
                     ") are outside the model's " + std::to_string(cfg_.num_layers));
  padded_vocab_ = cfg_.padded_vocab(tp.size);
  const int64_t h = cfg_.hidden_size;
  if (stage_.pre_process) {
    embedding_params_.first = params_.size();
    word_ = std::make_unique<VocabParallelEmbedding>(params_, "embedding.word_embeddings.weight", padded_vocab_, h,
                                                     cfg_.init_method_std, tp);
    if (cfg_.learned_positions()) {
      position_ = std::make_unique<ReplicatedEmbedding>(params_, "embedding.position_embeddings.weight",
                                                        cfg_.max_positions(), h, cfg_.init_method_std);
    }
    embedding_params_.second = params_.size();
  }
  for (int i = 0; i < stage_.num_layers; ++i) {
    const int first = params_.size();
    layers_.push_back(std::make_unique<TransformerLayer>(params_, cfg_, stage_.first_layer + i, tp_, device_));
    layer_params_.emplace_back(first, params_.size());
  }
  if (stage_.post_process) {
    head_params_.first = params_.size();
    final_ln_ = std::make_unique<Norm>(params_, "decoder.final_layernorm", cfg_.normalization, h, cfg_.layernorm_epsilon,
                                       sequence_norm_group(tp_));
    if (cfg_.tie_embeddings && stage_.pre_process) {
      head_ = std::make_unique<ColumnParallelLinear>(params_, word_->weight_index(), false, tp_);
    } else if (cfg_.tie_embeddings) {
      // The last pipeline stage keeps its own copy of the word embedding, initialised like the
      // first stage's (same name, same values); the embedding group sums their gradients.
      head_ = std::make_unique<ColumnParallelLinear>(params_, "embedding.word_embeddings", h, padded_vocab_, false,
                                                     false, cfg_.init_method_std, tp_);
      tied_copy_ = head_->weight_index();
    } else {
      head_ = std::make_unique<ColumnParallelLinear>(params_, "output_layer", h, padded_vocab_, false, false,
                                                     cfg_.init_method_std, tp_);
    }
    head_->set_profile_label("logits");
    const int64_t local = padded_vocab_ / tp.size;
    loss_ = std::make_unique<VocabParallelCrossEntropy>(cfg_.vocab_size, local * tp.rank, local, tp);
    head_params_.second = params_.size();
    mtp_params_ = {params_.size(), params_.size()};
    if (cfg_.mtp_num_layers > 0) {
      // The planner and the counts take MoE models with MTP (DeepSeek-V3); the engine's modules
      // build dense layers only so far.
      PTDP_CHECK_ARG(!cfg_.moe.enabled(), "--mtp-num-layers " + std::to_string(cfg_.mtp_num_layers) +
                                              " with MoE (--num-experts): the MTP modules' MoE layers are not "
                                              "supported yet");
      int word = stage_.pre_process ? word_->weight_index() : tied_copy_;
      if (word < 0) {
        // Untied, on a later pipeline stage: the modules embed with their own copy of the first
        // stage's word embedding (same name, same values), summed over the embedding group as the
        // tied head's is.
        word = params_.add("embedding.word_embeddings.weight", {padded_vocab_, h}, 0, ParamInit::Normal,
                           cfg_.init_method_std);
        tied_copy_ = word;
      }
      for (int k = 0; k < cfg_.mtp_num_layers; ++k)
        mtp_.push_back(std::make_unique<MtpModule>(params_, cfg_, k, word, head_->weight_index(), tp_, device_));
    }
    mtp_params_.second = params_.size();
  }
  if (materialize) {
    params_.allocate(device_, cfg_.precision);
    params_.initialize(cfg_.seed);
  }
}

int GptModel::tied_head_weight() const { return tied_copy_; }

Tensor GptModel::to_sequence_major(const int32_t* ids, int64_t b, const char* what, bool ignore_ok) const {
  PTDP_CHECK_ARG(ids != nullptr, std::string(what) + " is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  const int64_t s = cfg_.seq_length, sl = s / tp_.cp.size;  // this context rank's positions
  std::vector<int32_t> sb(static_cast<std::size_t>(sl * b));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t li = 0; li < sl; ++li) {
      const int64_t si = tp_.cp.global_position(li, sl);
      const int32_t v = ids[bi * s + si];
      PTDP_CHECK_ARG((v >= 0 && v < cfg_.vocab_size) || (ignore_ok && v == kIgnoreIndex),
                     std::string(what) + "[" + std::to_string(bi * s + si) + "] = " + std::to_string(v) +
                         " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")" +
                         (ignore_ok ? " and is not the ignore index " + std::to_string(kIgnoreIndex) : ""));
      sb[static_cast<std::size_t>(li * b + bi)] = v;
    }
  }
  return Tensor::from_host(sb.data(), {sl * b}, DType::I32, device_);
}

TokenPositions GptModel::token_positions(int64_t b, const DocumentLayout& layout) const {
  const int64_t s = cfg_.seq_length, sl = s / tp_.cp.size;  // this context rank's positions
  TokenPositions out;
  std::vector<int32_t> pos(static_cast<std::size_t>(sl * b));  // [sl * b], sequence-major
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t li = 0; li < sl; ++li) {
      const int64_t si = tp_.cp.global_position(li, sl);
      int32_t p = static_cast<int32_t>(si);
      if (layout.position_ids) {
        p = layout.position_ids[bi * s + si];
        const int64_t limit = position_ ? cfg_.max_positions() : std::numeric_limits<int32_t>::max();
        PTDP_CHECK_ARG(p >= 0 && p < limit,
                       "position_ids[" + std::to_string(bi * s + si) + "] = " + std::to_string(p) +
                           (position_ ? " is outside the position table [0, " + std::to_string(limit) + ")"
                                      : " is negative"));
      }
      pos[static_cast<std::size_t>(li * b + bi)] = p;
    }
  }
  out.position_ids = Tensor::from_host(pos.data(), {sl * b}, DType::I32, device_);
  if (layout.document_starts) {
    const int32_t* starts = layout.document_starts;
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t si = 0; si < s; ++si) {
        const int64_t at = bi * s + si;
        const int32_t v = starts[at];
        const int32_t before = si > 0 ? starts[at - 1] : 0;
        PTDP_CHECK_ARG(v >= before && v <= si,
                       "document_starts[" + std::to_string(at) + "] = " + std::to_string(v) + " is not in [" +
                           std::to_string(before) + ", " + std::to_string(si) +
                           "]: a position's document starts at or before it, and not before the previous "
                           "position's (rows of " +
                           std::to_string(s) + ")");
      }
    }
    out.document_starts = Tensor::from_host(starts, {b, s}, DType::I32, device_);
  }
  return out;
}

Tensor GptModel::embed(const Tensor& ids, const Tensor& pos, const Step& step) {
  Tensor x = word_->forward(ids, step);
  if (position_) {
    Tensor p = position_->forward(pos, step);
    Tensor sum = Tensor::empty(x.shape(), x.dtype(), device_);
    x.backend().add(x.raw(), p.raw(), sum.raw(), sum.dtype(), sum.numel());
    x = sum;
  }
  // Sequence parallelism: from here to the LM head each rank holds its rows of the sequence
  // (Megatron's scatter to the sequence-parallel region; the backward gathers them).
  const bool sharded = tp_.sequence_sharded(step.decoding);
  if (sharded) x = split_sequence(tp_, x, cfg_.hidden_size);
  return dropout_forward(x, cfg_.hidden_dropout, step, -1, DropoutSite::Embedding, cfg_.seed,
                         activation_pieces(tp_, sharded, x.numel()));
}

int64_t GptModel::activation_rows(int64_t b) const {
  const int64_t rows = static_cast<int64_t>(cfg_.seq_length) / tp_.cp.size * b;
  return tp_.sequence_sharded(false) ? rows / tp_.size : rows;
}

Tensor GptModel::stage_logits(const Tensor& input, const int32_t* tokens, int64_t b, const Step& step,
                              Tensor* normed) {
  const int64_t s = cfg_.seq_length, h = cfg_.hidden_size;
  Tensor x;
  if (stage_.pre_process) {
    const Tensor pos = step.positions ? step.positions->position_ids : token_positions(b, {}).position_ids;
    x = embed(to_sequence_major(tokens, b, "tokens"), pos, step);
  } else {
    const int64_t rows = activation_rows(b);
    PTDP_CHECK_ARG(input.defined() && input.numel() == rows * h,
                   "chunk input " + input.str() + " is not the [" + std::to_string(rows) + ", " + std::to_string(h) +
                       "] activation of " + std::to_string(b) + " samples of " + std::to_string(s) + " tokens" +
                       (rows != s * b ? " (this rank's rows under sequence or context parallelism)" : ""));
    x = input.reshape({rows, h});
  }
  for (auto& layer : layers_) x = layer->forward(x, step);
  if (!stage_.post_process) return x;
  x = final_ln_->forward(x, step);
  if (normed) *normed = x;
  return head_->forward(x, step);
}

Tensor GptModel::stage_forward(const Tensor& input, const int32_t* tokens, const int32_t* labels, int64_t b,
                               const Step& step, const DocumentLayout& layout) {
  const PhaseScope phase(Phase::Forward);
  // Labels and the layout are checked before anything is kept, so a bad value leaves nothing in
  // flight.
  const Tensor targets = stage_.post_process ? to_sequence_major(labels, b, "labels", true) : Tensor();
  Step at = step;
  if (!layout.empty() || tp_.cp.size > 1) {  // context parallelism: the true positions always
    TokenPositions where = token_positions(b, layout);
    TokenPositions& kept = positions_.create(step.microbatch);
    kept = std::move(where);
    at.positions = &kept;
  }
  const bool mtp = !mtp_.empty() && step.training;
  Tensor normed;  // [rows, h]: the decoder's final-normed output, the first MTP module's input
  Tensor out = stage_logits(input, tokens, b, at, mtp ? &normed : nullptr);
  if (!stage_.post_process) return out;
  Tensor losses = loss_->forward(out, targets, at);
  if (mtp) mtp_forward(normed, tokens, labels, b, at);
  return losses;
}

void GptModel::mtp_forward(const Tensor& h, const int32_t* tokens, const int32_t* labels, int64_t b,
                           const Step& step) {
  const int64_t s = cfg_.seq_length;
  std::vector<float>& means = mtp_means_.create(step.microbatch);
  Tensor x = h;  // [rows, h]
  for (std::size_t k = 0; k < mtp_.size(); ++k) {
    // Depth k + 1 reads the token k + 1 ahead and predicts the label k + 1 ahead. Each rank has
    // the microbatch's whole ids, so the shift crosses context chunks without communication.
    const int shift = static_cast<int>(k) + 1;
    const std::vector<int32_t> ids = shifted_ids(tokens, b, s, shift, 0);
    const std::vector<int32_t> ahead = shifted_ids(labels, b, s, shift, kIgnoreIndex);
    MtpModule::Output out = mtp_[k]->forward(x, to_sequence_major(ids.data(), b, "tokens"),
                                             to_sequence_major(ahead.data(), b, "labels", true), step);
    means.push_back(masked_mean(out.losses, mtp_[k]->counted(step)));
    x = out.hidden;
  }
}

Tensor GptModel::mtp_backward(float loss_scale, const Step& step) {
  const float scale = loss_scale * cfg_.mtp_loss_scaling_factor / static_cast<float>(mtp_.size());
  Tensor dh;  // [rows, h]: the gradient of the next depth's input
  for (std::size_t k = mtp_.size(); k-- > 0;) dh = mtp_[k]->backward_input(dh, scale, step);
  mtp_means_.release(step.microbatch);
  return dh;
}

std::vector<float> GptModel::mtp_losses(const Step& step) {
  return mtp_means_.has(step.microbatch) ? mtp_means_.get(step.microbatch) : std::vector<float>{};
}

float GptModel::microbatch_loss(const Tensor& losses, const Step& step) {
  PTDP_CHECK_ARG(stage_.post_process, "microbatch_loss needs the chunk that computes the loss");
  return masked_mean(losses, loss_->counted(step));
}

float GptModel::masked_mean(const Tensor& losses, int64_t counted) const {
  std::vector<float> host(static_cast<std::size_t>(losses.numel()));
  losses.copy_to_host(host.data(), host.size() * sizeof(float));
  double sum = 0.0;
  if (tp_.cp.size > 1) {
    // Context parallelism: every context rank's token losses, summed in one order on each.
    Tensor all = Tensor::empty({tp_.cp.size * losses.numel()}, DType::F32, losses.device());
    tp_.cp.comm->all_gather(losses.reshape({losses.numel()}), all)->wait();
    host.resize(static_cast<std::size_t>(all.numel()));
    all.copy_to_host(host.data(), host.size() * sizeof(float));
  }
  for (float v : host) sum += v;  // the ignored tokens' losses are 0
  return counted > 0 ? static_cast<float>(sum / static_cast<double>(counted)) : 0.0f;
}

Tensor GptModel::stage_backward_input(const Tensor& grad_output, const Step& step_in, float grad_scale) {
  const PhaseScope phase(Phase::Backward);
  // The forward's positions and documents, for the layers' backward (and the forward that full
  // recomputation runs again).
  Step step = step_in;
  if (positions_.has(step.microbatch)) step.positions = &positions_.get(step.microbatch);
  // What the main loss's gradient carries (see cp_scale below): the MoE routers scale their
  // auxiliary losses' gradients by it.
  step.grad_scale = grad_scale * static_cast<float>(tp_.cp.size);
  Tensor dx;
  if (stage_.post_process) {
    // Context parallelism: each context rank's gradient is its tokens' part of the microbatch's;
    // times c, so that the optimizer's average over the d * c ranks of the data+context group is
    // the sum over the context ranks averaged over the d replicas (Megatron scales so too).
    const float cp_scale = static_cast<float>(tp_.cp.size);
    dx = head_->backward_input(loss_->backward(loss_->mean_gradient(grad_scale * cp_scale, step), step), step);
    if (mtp_means_.has(step.microbatch)) {
      const Tensor dh = mtp_backward(grad_scale * cp_scale, step);  // [rows, h]
      dx.backend().add(dx.raw(), dh.raw(), dx.raw(), dx.dtype(), dx.numel());
    }
    dx = final_ln_->backward_input(dx, step);
  } else {
    PTDP_CHECK_ARG(grad_output.defined(), "chunk output gradient is missing");
    dx = grad_output.reshape({grad_output.numel() / cfg_.hidden_size, cfg_.hidden_size});
  }
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) dx = (*it)->backward_input(dx, step);
  positions_.release(step.microbatch);
  if (!stage_.pre_process) return dx;
  const bool sharded = tp_.sequence_sharded(step.decoding);
  dx = dropout_backward(dx, cfg_.hidden_dropout, step, -1, DropoutSite::Embedding, cfg_.seed,
                        activation_pieces(tp_, sharded, dx.numel()));
  if (sharded) dx = gather_sequence(tp_, dx, cfg_.hidden_size);
  word_->backward_input(dx, step);
  if (position_) position_->backward_input(dx, step);
  return Tensor();
}

void GptModel::stage_backward_weight(const Step& step, const ParamsReady& ready) {
  const PhaseScope phase(Phase::Backward);
  if (stage_.post_process) {
    // The modules add to the shared head's and embedding's gradients: before those are final.
    for (std::size_t k = mtp_.size(); k-- > 0;) mtp_[k]->backward_weight(step);
    if (ready && mtp_params_.first < mtp_params_.second) ready(mtp_params_.first, mtp_params_.second);
    head_->backward_weight(step);
    if (ready) ready(head_params_.first, head_params_.second);
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->backward_weight(step);
    if (ready) ready(layer_params_[i].first, layer_params_[i].second);
  }
  if (stage_.pre_process) {
    word_->backward_weight(step);
    if (position_) position_->backward_weight(step);
    if (ready) ready(embedding_params_.first, embedding_params_.second);
  }
}

void GptModel::release(const Step& step) {
  if (word_) word_->release(step);
  if (position_) position_->release(step);
  for (auto& layer : layers_) layer->release(step);
  if (final_ln_) final_ln_->release(step);
  if (head_) head_->release(step);
  if (loss_) loss_->release(step);
  for (auto& m : mtp_) m->release(step);
  mtp_means_.release(step.microbatch);
  positions_.release(step.microbatch);
}

float GptModel::forward_backward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                                 float grad_scale, const DocumentLayout& layout) {
  PTDP_CHECK_ARG(stage_.pre_process && stage_.post_process,
                 "forward_backward needs the whole model; this chunk is one pipeline stage");
  float loss = 0.0f;
  try {
    loss = microbatch_loss(stage_forward(Tensor(), tokens, labels, b, step, layout), step);
  } catch (...) {
    release(step);  // a failed forward leaves nothing in flight
    throw;
  }
  stage_backward_input(Tensor(), step, grad_scale);
  stage_backward_weight(step);
  return loss;
}

float GptModel::forward_loss(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                             const DocumentLayout& layout) {
  PTDP_CHECK_ARG(stage_.pre_process && stage_.post_process,
                 "forward_loss needs the whole model; this chunk is one pipeline stage");
  float loss = 0.0f;
  try {
    loss = microbatch_loss(stage_forward(Tensor(), tokens, labels, b, step, layout), step);
  } catch (...) {
    release(step);
    throw;
  }
  release(step);
  return loss;
}

std::vector<float> GptModel::logits(const int32_t* tokens, int64_t b) {
  PTDP_CHECK_ARG(stage_.pre_process && stage_.post_process,
                 "logits need the whole model; this chunk is one pipeline stage");
  PTDP_CHECK_ARG(tp_.cp.size == 1, "logits: context parallelism (context_parallel_size " +
                                       std::to_string(tp_.cp.size) + ") splits the sequence; use 1");
  const int64_t s = cfg_.seq_length;
  Step step;
  step.training = false;
  Tensor local;  // [s * b, padded vocab / t], rows sequence-major
  try {
    local = stage_logits(Tensor(), tokens, b, step);
  } catch (...) {
    release(step);
    throw;
  }
  release(step);
  return gather_logits(local, s, b);
}

std::vector<float> GptModel::gather_logits(Tensor local, int64_t s, int64_t b) {
  const int64_t vocab = cfg_.vocab_size;
  if (local.dtype() != DType::F32) local = local.to(DType::F32);
  const int64_t rows = s * b, cols = local.shape()[1];
  Tensor all = local;
  if (tp_.size > 1) {
    all = Tensor::empty({tp_.size * rows, cols}, DType::F32, device_);
    tp_.comm->all_gather(local, all)->wait();
  }
  std::vector<float> gathered(static_cast<std::size_t>(all.numel()));
  all.copy_to_host(gathered.data(), all.nbytes());
  // Rank r holds vocabulary columns [r * cols, (r + 1) * cols) of every row.
  std::vector<float> out(static_cast<std::size_t>(b * s * vocab));
  const float* src = gathered.data();
  for (int64_t r = 0; r < tp_.size; ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t si = row / b, bi = row % b;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t v = r * cols + c;
        if (v >= vocab) break;
        out[static_cast<std::size_t>((bi * s + si) * vocab + v)] = src[(r * rows + row) * cols + c];
      }
    }
  }
  return out;
}

std::vector<float> GptModel::decode(const int32_t* tokens, int64_t n, KvCache& cache) {
  PTDP_CHECK_ARG(stage_.pre_process && stage_.post_process,
                 "decode needs the whole model; this chunk is one pipeline stage");
  PTDP_CHECK_ARG(tp_.cp.size == 1, "decode: context parallelism (context_parallel_size " +
                                       std::to_string(tp_.cp.size) + ") has no key/value cache; use 1");
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(n > 0 && cache.length + n <= cache.capacity,
                 "decode: " + std::to_string(n) + " new tokens after " + std::to_string(cache.length) +
                     " cached must be > 0 and fit the cache's capacity " + std::to_string(cache.capacity));
  PTDP_CHECK_ARG(!position_ || cache.capacity <= cfg_.max_positions(),
                 "decode: a cache of " + std::to_string(cache.capacity) + " tokens exceeds the position table's " +
                     std::to_string(cfg_.max_positions()) + " rows");
  std::vector<int32_t> ids(tokens, tokens + n), pos(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    PTDP_CHECK_ARG(ids[static_cast<std::size_t>(i)] >= 0 && ids[static_cast<std::size_t>(i)] < cfg_.vocab_size,
                   "tokens[" + std::to_string(i) + "] = " + std::to_string(ids[static_cast<std::size_t>(i)]) +
                       " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
    pos[static_cast<std::size_t>(i)] = static_cast<int32_t>(cache.length + i);
  }
  Step step;
  step.training = false;
  step.decoding = true;
  Tensor local;  // [n, padded vocab / t]
  try {
    Tensor x = embed(Tensor::from_host(ids.data(), {n}, DType::I32, device_),
                     Tensor::from_host(pos.data(), {n}, DType::I32, device_), step);
    for (auto& layer : layers_) x = layer->decode(x, cache, step);
    local = head_->forward(final_ln_->forward(x, step), step);
  } catch (...) {
    release(step);
    throw;
  }
  release(step);
  cache.length += n;
  return gather_logits(local, n, 1);
}

}  // namespace ptdp
