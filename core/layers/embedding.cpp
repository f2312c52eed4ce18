#include "core/layers/embedding.h"

namespace ptdp {

VocabParallelEmbedding::VocabParallelEmbedding(ParamTable& params, const std::string& name,
                                               int64_t padded_vocab, int64_t h, float init_std,
                                               TensorParallel tp)
    : params_(params), h_(h), tp_(tp), slots_(name) {
  weight_ = params.add(name, {padded_vocab, h}, 0, ParamInit::Normal, init_std);
  vocab_rows_ = padded_vocab / tp.size;
  vocab_start_ = vocab_rows_ * tp.rank;
}

VocabParallelEmbedding::VocabParallelEmbedding(ParamTable& params, int shared_weight, TensorParallel tp)
    : params_(params), weight_(shared_weight), tp_(tp), slots_(params.info(shared_weight).name) {
  const ParamInfo& w = params.info(shared_weight);
  PTDP_CHECK_ARG(w.partition_dim == 0 && w.global_shape.ndim() == 2,
                 "a shared embedding table must be [vocab, h] split on dim 0; " + w.name + " is not");
  h_ = w.global_shape[1];
  vocab_rows_ = w.global_shape[0] / tp.size;
  vocab_start_ = vocab_rows_ * tp.rank;
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, const Step& step) {
  PTDP_CHECK_ARG(ids.dtype() == DType::I32, "token ids must be i32, got " + ids.str());
  const int64_t n = ids.numel();
  const Tensor table = params_.weight(weight_);  // [V/t, h]
  Tensor out = empty_like(table, {n, h_});       // [N, h]
  ids.backend().embedding_forward(ids.data<int32_t>(), n, table.raw(), table.dtype(), vocab_start_, vocab_rows_,
                                  h_, out.raw());
  tp_.all_reduce(out);
  slots_.create(step.microbatch).ids = ids;
  return out;
}

void VocabParallelEmbedding::backward_input(const Tensor& dout, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(dout.numel() == s.ids.numel() * h_, "embedding gradient " + dout.str() + " does not match [" +
                                                        std::to_string(s.ids.numel()) + ", " + std::to_string(h_) + "]");
  s.dout = dout;
}

void VocabParallelEmbedding::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dout.defined(), "embedding backward_weight before backward_input");
  s.dout.backend().embedding_backward(s.ids.data<int32_t>(), s.ids.numel(), s.dout.raw(), s.dout.dtype(),
                                      vocab_start_, vocab_rows_, h_, params_.grad(weight_).data<float>());
  slots_.release(step.microbatch);
}

ReplicatedEmbedding::ReplicatedEmbedding(ParamTable& params, const std::string& name, int64_t rows, int64_t h,
                                         float init_std)
    : params_(params), rows_(rows), h_(h), slots_(name) {
  weight_ = params.add(name, {rows, h}, -1, ParamInit::Normal, init_std);
}

Tensor ReplicatedEmbedding::forward(const Tensor& ids, const Step& step) {
  const int64_t n = ids.numel();
  const Tensor table = params_.weight(weight_);  // [rows, h]
  Tensor out = empty_like(table, {n, h_});       // [N, h]
  ids.backend().embedding_forward(ids.data<int32_t>(), n, table.raw(), table.dtype(), 0, rows_, h_, out.raw());
  slots_.create(step.microbatch).ids = ids;
  return out;
}

void ReplicatedEmbedding::backward_input(const Tensor& dout, const Step& step) {
  slots_.get(step.microbatch).dout = dout;
}

void ReplicatedEmbedding::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dout.defined(), "embedding backward_weight before backward_input");
  s.dout.backend().embedding_backward(s.ids.data<int32_t>(), s.ids.numel(), s.dout.raw(), s.dout.dtype(), 0, rows_,
                                      h_, params_.grad(weight_).data<float>());
  slots_.release(step.microbatch);
}

}  // namespace ptdp
