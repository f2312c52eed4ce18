#include "core/layers/transformer_layer.h"

#include "core/layers/dropout.h"
#include "kernels/op_scope.h"

namespace ptdp {

namespace {

std::string prefix(int layer) { return "decoder.layers." + std::to_string(layer); }

// a + b, both [s/c*b, h] ([s/c*b/t, h] under sequence parallelism).
Tensor sum(const Tensor& a, const Tensor& b) {
  Tensor y = empty_like(a, a.shape());  // [s/c*b, h] ([s/c*b/t, h])
  a.backend().add(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel());
  return y;
}

// residual + dropout(x + bias), fused, piece by piece (one piece but under context
// parallelism), each with flat_dropout's mask at its place in the whole activation. x and
// residual [s/c*b, h] ([s/c*b/t, h] under sequence parallelism; [n, h] when decoding), bias [h]
// or undefined.
Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, const std::vector<FlatPiece>& pieces,
                        float p, const Step& step, int layer, DropoutSite site, uint64_t seed) {
  const int64_t cols = residual.dim(residual.ndim() - 1);
  Tensor y = empty_like(residual, residual.shape());  // [s/c*b, h] ([s/c*b/t, h]; [n, h])
  for (const FlatPiece& piece : pieces) {
    x.backend().bias_dropout_add(element_ptr(x, piece.local_offset), bias.defined() ? bias.raw() : nullptr,
                                 element_ptr(residual, piece.local_offset), element_ptr(y, piece.local_offset),
                                 x.dtype(), piece.n / cols, cols,
                                 flat_dropout(piece.n, p, step, layer, site, seed, piece.slice));
  }
  return y;
}

std::unique_ptr<AttentionLayer> make_attention(ParamTable& params, const std::string& name, const LayerConfig& cfg,
                                               int layer, TensorParallel tp, Device device) {
  if (cfg.multi_latent_attention) return std::make_unique<MlaAttention>(params, name, cfg, layer, tp, device);
  return std::make_unique<SelfAttention>(params, name, cfg, layer, tp, device);
}

}  // namespace

TransformerLayer::TransformerLayer(ParamTable& params, const LayerConfig& cfg, int layer, TensorParallel tp,
                                   Device device)
    : TransformerLayer(params, cfg, prefix(layer), layer, cfg.moe.is_moe_layer(layer), tp, device) {}

TransformerLayer::TransformerLayer(ParamTable& params, const LayerConfig& cfg, const std::string& name, int layer,
                                   bool moe, TensorParallel tp, Device device)
    : cfg_(cfg),
      layer_(layer),
      tp_(tp),
      ln1_(params, name + ".input_layernorm", cfg.normalization, cfg.hidden_size, cfg.layernorm_epsilon,
           sequence_norm_group(tp)),
      attn_(make_attention(params, name + ".self_attention", cfg, layer, tp, device)),
      ln2_(params, name + ".pre_mlp_layernorm", cfg.normalization, cfg.hidden_size, cfg.layernorm_epsilon,
           sequence_norm_group(tp)),
      slots_(name) {
  if (moe) {
    moe_ = std::make_unique<MoeLayer>(params, name + ".mlp", cfg, tp);
  } else {
    mlp_ = std::make_unique<Mlp>(params, name + ".mlp", cfg, tp);
  }
}

Tensor TransformerLayer::mlp_forward(const Tensor& x, const Step& step) {
  return moe_ ? moe_->forward(x, step) : mlp_->forward(x, step);
}

Tensor TransformerLayer::mlp_backward_input(const Tensor& dy, const Step& step) {
  return moe_ ? moe_->backward_input(dy, step) : mlp_->backward_input(dy, step);
}

std::vector<FlatPiece> TransformerLayer::slice(const Tensor& x, const Step& step) const {
  return activation_pieces(tp_, tp_.sequence_sharded(step.decoding), x.numel());
}

Tensor TransformerLayer::run_forward(const Tensor& x, const Step& step) {
  return after_attention(x, attn_->forward(ln1_.forward(x, step), step), step);
}

Tensor TransformerLayer::decode(const Tensor& x, KvCache& cache, const Step& step) {
  return after_attention(x, attn_->decode(ln1_.forward(x, step), cache, step), step);
}

Tensor TransformerLayer::after_attention(const Tensor& x, const Tensor& a, const Step& step) {
  const uint64_t seed = cfg_.seed;
  const float p = cfg_.hidden_dropout;
  // Under sequence parallelism x, the norms, dropouts and residuals are this rank's rows; the
  // dropout masks are indexed in the whole activation, so every layout drops the same elements.
  // x1, m and the result are all [s/c*b, h] ([s/c*b/t, h] under sequence parallelism; [n, h]
  // when decoding), as x and a.
  Tensor x1 = bias_dropout_add(a, attn_->output_bias(), x, slice(a, step), p, step, layer_,  // [s/c*b, h]
                               DropoutSite::AttentionOutput, seed);
  Tensor m = mlp_forward(ln2_.forward(x1, step), step);  // [s/c*b, h]
  const Tensor bias = mlp_ ? mlp_->output_bias() : Tensor();  // an MoE layer's experts add their own
  return bias_dropout_add(m, bias, x1, slice(m, step), p, step, layer_, DropoutSite::MlpOutput, seed);
}

void TransformerLayer::release_sublayers(const Step& step) {
  ln1_.release(step);
  attn_->release(step);
  ln2_.release(step);
  if (mlp_) mlp_->release(step);
  if (moe_) moe_->release(step);
}

Tensor TransformerLayer::forward(const Tensor& x, const Step& step) {
  Tensor out = run_forward(x, step);  // [s/c*b, h] ([s/c*b/t, h] under sequence parallelism)
  if (cfg_.recompute == Recompute::Full) {
    release_sublayers(step);
    slots_.create(step.microbatch).x = x;
  }
  return out;
}

Tensor TransformerLayer::backward_input(const Tensor& dout, const Step& step) {
  if (cfg_.recompute == Recompute::Full) {
    const Tensor x = slots_.get(step.microbatch).x;  // [s/c*b, h] ([s/c*b/t, h] under sequence parallelism)
    slots_.release(step.microbatch);
    const PhaseScope recompute(Phase::Recompute);
    run_forward(x, step);  // the same masks: bit-identical activations
  }
  // dm, dx1, da and the result are all [s/c*b, h] ([s/c*b/t, h] under sequence parallelism), as
  // dout.
  const uint64_t seed = cfg_.seed;
  Tensor dm = dropout_backward(dout, cfg_.hidden_dropout, step, layer_, DropoutSite::MlpOutput, seed,  // [s/c*b, h]
                               slice(dout, step));
  Tensor dx1 = sum(dout, ln2_.backward_input(mlp_backward_input(dm, step), step));  // [s/c*b, h]
  Tensor da = dropout_backward(dx1, cfg_.hidden_dropout, step, layer_,  // [s/c*b, h]
                               DropoutSite::AttentionOutput, seed, slice(dx1, step));
  return sum(dx1, ln1_.backward_input(attn_->backward_input(da, step), step));
}

void TransformerLayer::release(const Step& step) {
  release_sublayers(step);
  slots_.release(step.microbatch);
}

void TransformerLayer::backward_weight(const Step& step) {
  attn_->backward_weight(step);
  if (mlp_) mlp_->backward_weight(step);
  if (moe_) moe_->backward_weight(step);
}

}  // namespace ptdp
