#include "core/layers/transformer_layer.h"

namespace ptdp {

namespace {

std::string prefix(int layer) { return "decoder.layers." + std::to_string(layer); }

Tensor sum(const Tensor& a, const Tensor& b) {
  Tensor y = Tensor::empty(a.shape(), DType::F32, a.device());
  a.backend().add(a.data<float>(), b.data<float>(), y.data<float>(), a.numel());
  return y;
}

}  // namespace

TransformerLayer::TransformerLayer(ParamTable& params, const GptConfig& cfg, int layer, TensorParallel tp)
    : cfg_(cfg),
      layer_(layer),
      ln1_(params, prefix(layer) + ".input_layernorm", cfg.hidden_size, cfg.layernorm_epsilon),
      attn_(params, prefix(layer) + ".self_attention", cfg, layer, tp),
      ln2_(params, prefix(layer) + ".pre_mlp_layernorm", cfg.hidden_size, cfg.layernorm_epsilon),
      mlp_(params, prefix(layer) + ".mlp", cfg, tp),
      slots_(prefix(layer)) {}

Tensor TransformerLayer::run_forward(const Tensor& x, const Step& step) {
  const uint64_t seed = cfg_.seed;
  Tensor a = attn_.forward(ln1_.forward(x, step), step);
  Tensor x1 = sum(x, dropout_forward(a, cfg_.hidden_dropout, step, layer_, DropoutSite::AttentionOutput, seed));
  Tensor m = mlp_.forward(ln2_.forward(x1, step), step);
  return sum(x1, dropout_forward(m, cfg_.hidden_dropout, step, layer_, DropoutSite::MlpOutput, seed));
}

void TransformerLayer::release_sublayers(const Step& step) {
  ln1_.release(step);
  attn_.release(step);
  ln2_.release(step);
  mlp_.release(step);
}

Tensor TransformerLayer::forward(const Tensor& x, const Step& step) {
  Tensor out = run_forward(x, step);
  if (cfg_.recompute == Recompute::Full) {
    release_sublayers(step);
    slots_.create(step.microbatch).x = x;
  }
  return out;
}

Tensor TransformerLayer::backward_input(const Tensor& dout, const Step& step) {
  if (cfg_.recompute == Recompute::Full) {
    const Tensor x = slots_.get(step.microbatch).x;
    slots_.release(step.microbatch);
    run_forward(x, step);  // the same masks: bit-identical activations
  }
  const uint64_t seed = cfg_.seed;
  Tensor dm = dropout_backward(dout, cfg_.hidden_dropout, step, layer_, DropoutSite::MlpOutput, seed);
  Tensor dx1 = sum(dout, ln2_.backward_input(mlp_.backward_input(dm, step), step));
  Tensor da = dropout_backward(dx1, cfg_.hidden_dropout, step, layer_, DropoutSite::AttentionOutput, seed);
  return sum(dx1, ln1_.backward_input(attn_.backward_input(da, step), step));
}

void TransformerLayer::release(const Step& step) {
  release_sublayers(step);
  slots_.release(step.microbatch);
}

void TransformerLayer::backward_weight(const Step& step) {
  attn_.backward_weight(step);
  mlp_.backward_weight(step);
}

}  // namespace ptdp
