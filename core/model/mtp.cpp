#include "core/model/mtp.h"

#include "core/layers/dropout.h"

namespace ptdp {

namespace {

std::string prefix(int depth) { return "mtp.layers." + std::to_string(depth); }

}  // namespace

std::vector<int32_t> shifted_ids(const int32_t* ids, int64_t b, int64_t seq_length, int shift, int32_t fill) {
  std::vector<int32_t> out(static_cast<std::size_t>(b * seq_length), fill);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si + shift < seq_length; ++si)
      out[static_cast<std::size_t>(bi * seq_length + si)] = ids[bi * seq_length + si + shift];
  return out;
}

MtpModule::MtpModule(ParamTable& params, const GptConfig& cfg, int depth, int word_weight, int head_weight,
                     TensorParallel tp, Device device)
    : cfg_(cfg),
      depth_(depth),
      tp_(tp),
      embedding_(params, word_weight, tp),
      enorm_(params, prefix(depth) + ".enorm", cfg.normalization, cfg.hidden_size, cfg.layernorm_epsilon,
             sequence_norm_group(tp)),
      hnorm_(params, prefix(depth) + ".hnorm", cfg.normalization, cfg.hidden_size, cfg.layernorm_epsilon,
             sequence_norm_group(tp)),
      eh_proj_(params, prefix(depth) + ".eh_proj", 2 * int64_t{cfg.hidden_size}, cfg.hidden_size, false, true,
               cfg.init_method_std, tp),
      // The dropout key of a layer past the decoder's: masks no decoder layer draws. The decoder's
      // last layer's kind (Megatron's get_gpt_mtp_block_spec): MoE when that layer is.
      layer_(params, cfg, prefix(depth) + ".transformer_layer", cfg.num_layers + depth, cfg.mtp_moe(), tp, device),
      final_ln_(params, prefix(depth) + ".final_layernorm", cfg.normalization, cfg.hidden_size, cfg.layernorm_epsilon,
                sequence_norm_group(tp)),
      head_(params, head_weight, false, tp),
      loss_(cfg.vocab_size, params.info(head_weight).global_shape[0] / tp.size * tp.rank,
            params.info(head_weight).global_shape[0] / tp.size, tp) {
  head_.set_profile_label("logits");
}

MtpModule::Output MtpModule::forward(const Tensor& h, const Tensor& ids, const Tensor& labels, const Step& step) {
  const int64_t hs = cfg_.hidden_size;
  const bool sharded = tp_.sequence_sharded(step.decoding);
  // Megatron's LanguageModelEmbedding: the word embedding, scattered to the sequence-parallel
  // region, with the embedding dropout (its own masks: the module's layer key).
  Tensor e = embedding_.forward(ids, step);  // [s/c*b, h]
  if (sharded) e = split_sequence(tp_, e, hs);
  e = dropout_forward(e, cfg_.hidden_dropout, step, cfg_.num_layers + depth_, DropoutSite::Embedding, cfg_.seed,
                      activation_pieces(tp_, sharded, e.numel()));
  const Tensor en = enorm_.forward(e, step);  // [rows, h]
  const Tensor hn = hnorm_.forward(h, step);  // [rows, h]
  const int64_t rows = hn.numel() / hs;
  Tensor cat = empty_like(hn, {rows, 2 * hs});  // [rows, 2h]: [enorm(emb); hnorm(h)]
  cat.backend().copy_2d(cat.raw(), 2 * hs, en.raw(), hs, cat.dtype(), rows, hs);
  cat.backend().copy_2d(element_ptr(cat, hs), 2 * hs, hn.raw(), hs, cat.dtype(), rows, hs);
  // eh_proj is column-parallel with its output gathered (Megatron's gather_from_tensor_model_
  // parallel_region after it); under sequence parallelism its input rows are gathered and the
  // output scattered back to this rank's rows.
  Tensor x = eh_proj_.forward(cat, step);  // [s/c*b, h]
  if (sharded) x = split_sequence(tp_, x, hs);
  x = final_ln_.forward(layer_.forward(x, step), step);  // [rows, h]
  Output out;
  out.hidden = x;
  out.losses = loss_.forward(head_.forward(x, step), labels, step);
  return out;
}

Tensor MtpModule::backward_input(const Tensor& dnext, float loss_scale, const Step& step) {
  const int64_t hs = cfg_.hidden_size;
  const bool sharded = tp_.sequence_sharded(step.decoding);
  Tensor dx = head_.backward_input(loss_.backward(loss_.mean_gradient(loss_scale, step), step), step);  // [rows, h]
  if (dnext.defined()) dx.backend().add(dx.raw(), dnext.raw(), dx.raw(), dx.dtype(), dx.numel());
  dx = layer_.backward_input(final_ln_.backward_input(dx, step), step);  // [rows, h]
  if (sharded) dx = gather_sequence(tp_, dx, hs);                        // [s/c*b, h]
  const Tensor dcat = eh_proj_.backward_input(dx, step);                 // [rows, 2h]
  const int64_t rows = dcat.numel() / (2 * hs);
  Tensor den = empty_like(dcat, {rows, hs}), dhn = empty_like(dcat, {rows, hs});  // [rows, h] each
  dcat.backend().copy_2d(den.raw(), hs, dcat.raw(), 2 * hs, dcat.dtype(), rows, hs);
  dcat.backend().copy_2d(dhn.raw(), hs, element_ptr(dcat, hs), 2 * hs, dcat.dtype(), rows, hs);
  Tensor de = dropout_backward(enorm_.backward_input(den, step), cfg_.hidden_dropout, step, cfg_.num_layers + depth_,
                               DropoutSite::Embedding, cfg_.seed, activation_pieces(tp_, sharded, den.numel()));
  if (sharded) de = gather_sequence(tp_, de, hs);
  embedding_.backward_input(de, step);
  return hnorm_.backward_input(dhn, step);
}

void MtpModule::backward_weight(const Step& step) {
  head_.backward_weight(step);
  final_ln_.backward_weight(step);
  layer_.backward_weight(step);
  eh_proj_.backward_weight(step);
  hnorm_.backward_weight(step);
  enorm_.backward_weight(step);
  embedding_.backward_weight(step);
  loss_.release(step);
  release(step);
}

void MtpModule::release(const Step& step) {
  embedding_.release(step);
  enorm_.release(step);
  hnorm_.release(step);
  eh_proj_.release(step);
  layer_.release(step);
  final_ln_.release(step);
  head_.release(step);
  loss_.release(step);
}

}  // namespace ptdp
