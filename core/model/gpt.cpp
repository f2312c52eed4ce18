#include "core/model/gpt.h"

#include <vector>

#include "kernels/error.h"

namespace ptdp {

GptModel::GptModel(const GptConfig& cfg, TensorParallel tp, Device device)
    : cfg_(cfg), tp_(tp), device_(device), padded_vocab_(0), params_(tp.rank, tp.size) {
  cfg_.validate(tp.size);
  padded_vocab_ = cfg_.padded_vocab(tp.size);
  const int64_t h = cfg_.hidden_size;
  word_ = std::make_unique<VocabParallelEmbedding>(params_, "embedding.word_embeddings.weight", padded_vocab_, h,
                                                   cfg_.init_method_std, tp);
  position_ = std::make_unique<ReplicatedEmbedding>(params_, "embedding.position_embeddings.weight",
                                                    cfg_.max_positions(), h, cfg_.init_method_std);
  for (int i = 0; i < cfg_.num_layers; ++i) layers_.push_back(std::make_unique<TransformerLayer>(params_, cfg_, i, tp));
  final_ln_ = std::make_unique<LayerNorm>(params_, "decoder.final_layernorm", h, cfg_.layernorm_epsilon);
  if (cfg_.tie_embeddings) {
    head_ = std::make_unique<ColumnParallelLinear>(params_, word_->weight_index(), false, tp);
  } else {
    head_ = std::make_unique<ColumnParallelLinear>(params_, "output_layer", h, padded_vocab_, false, false,
                                                   cfg_.init_method_std, tp);
  }
  loss_ = std::make_unique<VocabParallelCrossEntropy>(cfg_.vocab_size, word_->vocab_start(), word_->vocab_rows(), tp);
  params_.allocate(device_);
  params_.initialize(cfg_.seed);
}

Tensor GptModel::to_sequence_major(const int32_t* ids, int64_t b, const char* what) const {
  PTDP_CHECK_ARG(ids != nullptr, std::string(what) + " is NULL");
  PTDP_CHECK_ARG(b > 0, "micro batch size must be > 0, got " + std::to_string(b));
  const int64_t s = cfg_.seq_length;
  std::vector<int32_t> sb(static_cast<std::size_t>(s * b));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int32_t v = ids[bi * s + si];
      PTDP_CHECK_ARG(v >= 0 && v < cfg_.vocab_size,
                     std::string(what) + "[" + std::to_string(bi * s + si) + "] = " + std::to_string(v) +
                         " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
      sb[static_cast<std::size_t>(si * b + bi)] = v;
    }
  }
  return Tensor::from_host(sb.data(), {s * b}, DType::I32, device_);
}

Tensor GptModel::positions(int64_t b) const {
  const int64_t s = cfg_.seq_length;
  std::vector<int32_t> pos(static_cast<std::size_t>(s * b));
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi) pos[static_cast<std::size_t>(si * b + bi)] = static_cast<int32_t>(si);
  return Tensor::from_host(pos.data(), {s * b}, DType::I32, device_);
}

Tensor GptModel::forward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step) {
  const Tensor ids = to_sequence_major(tokens, b, "tokens");
  const Tensor targets = to_sequence_major(labels, b, "labels");
  Tensor e = word_->forward(ids, step);
  Tensor p = position_->forward(positions(b), step);
  Tensor x = Tensor::empty(e.shape(), DType::F32, device_);
  e.backend().add(e.data<float>(), p.data<float>(), x.data<float>(), x.numel());
  x = dropout_forward(x, cfg_.hidden_dropout, step, -1, DropoutSite::Embedding, cfg_.seed);
  for (auto& layer : layers_) x = layer->forward(x, step);
  x = final_ln_->forward(x, step);
  Tensor logits = head_->forward(x, step);
  return loss_->forward(logits, targets, step);
}

void GptModel::backward(const Tensor& losses, const Step& step, float grad_scale) {
  const int64_t n = losses.numel();
  Tensor dloss = Tensor::empty({n}, DType::F32, device_);
  dloss.fill(static_cast<double>(grad_scale) / static_cast<double>(n));
  Tensor dx = head_->backward_input(loss_->backward(dloss, step), step);
  head_->backward_weight(step);
  dx = final_ln_->backward_input(dx, step);
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    dx = (*it)->backward_input(dx, step);
    (*it)->backward_weight(step);
  }
  dx = dropout_backward(dx, cfg_.hidden_dropout, step, -1, DropoutSite::Embedding, cfg_.seed);
  word_->backward_input(dx, step);
  word_->backward_weight(step);
  position_->backward_input(dx, step);
  position_->backward_weight(step);
}

void GptModel::release(const Step& step) {
  word_->release(step);
  position_->release(step);
  for (auto& layer : layers_) layer->release(step);
  final_ln_->release(step);
  head_->release(step);
  loss_->release(step);
}

float GptModel::mean(const Tensor& losses) {
  std::vector<float> host(static_cast<std::size_t>(losses.numel()));
  losses.copy_to_host(host.data(), host.size() * sizeof(float));
  double sum = 0.0;
  for (float v : host) sum += v;
  return static_cast<float>(sum / static_cast<double>(host.size()));
}

float GptModel::forward_backward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                                 float grad_scale) {
  Tensor losses;
  try {
    losses = forward(tokens, labels, b, step);
  } catch (...) {
    release(step);  // a failed forward leaves nothing in flight
    throw;
  }
  const float loss = mean(losses);
  backward(losses, step, grad_scale);
  return loss;
}

float GptModel::forward_loss(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step) {
  Tensor losses;
  try {
    losses = forward(tokens, labels, b, step);
  } catch (...) {
    release(step);
    throw;
  }
  release(step);
  return mean(losses);
}

}  // namespace ptdp
