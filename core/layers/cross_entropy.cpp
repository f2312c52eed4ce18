#include "core/layers/cross_entropy.h"

#include <algorithm>
#include <limits>

namespace ptdp {

VocabParallelCrossEntropy::VocabParallelCrossEntropy(int64_t vocab, int64_t vocab_start, int64_t local_vocab,
                                                     TensorParallel tp)
    : vocab_(vocab), vocab_start_(vocab_start), local_vocab_(local_vocab), tp_(tp),
      slots_("vocab-parallel cross-entropy") {
  PTDP_CHECK_ARG(vocab > 0 && local_vocab > 0 && vocab_start >= 0,
                 "cross-entropy: vocab " + std::to_string(vocab) + ", slice [" + std::to_string(vocab_start) +
                     ", +" + std::to_string(local_vocab) + ") is invalid");
}

Tensor VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& labels, const Step& step) {
  PTDP_CHECK_ARG(labels.dtype() == DType::I32, "labels must be i32, got " + labels.str());
  const int64_t n = rows_of(logits, local_vocab_, "logits");
  PTDP_CHECK_ARG(labels.numel() == n, "labels " + labels.str() + " do not match the " + std::to_string(n) +
                                          " rows of the logits");
  Backend& be = logits.backend();
  const DType t = logits.dtype();
  // Padded vocabulary columns of this slice take no part.
  const int64_t valid = std::clamp<int64_t>(vocab_ - vocab_start_, 0, local_vocab_);
  if (valid < local_vocab_) {
    be.fill_2d(element_ptr(logits, valid), t, local_vocab_, n, local_vocab_ - valid,
               -std::numeric_limits<float>::infinity());
  }
  Slot& s = slots_.create(step.microbatch);
  s.logits = logits;
  s.labels = labels;
  s.row_max = Tensor::empty({n}, DType::F32, logits.device());
  s.sum_exp = Tensor::empty({n}, DType::F32, logits.device());
  Tensor target = Tensor::empty({n}, DType::F32, logits.device());  // [N] fp32: the label's logit
  // One read of the logits gives this slice's max, sum of exponentials and target logit.
  be.ce_forward_local(logits.raw(), t, labels.data<int32_t>(), n, local_vocab_, vocab_start_, s.row_max.data<float>(),
                      s.sum_exp.data<float>(), target.data<float>());
  if (tp_.size > 1) {
    Tensor global_max = Tensor::empty({n}, DType::F32, logits.device());  // [N] fp32
    be.copy(global_max.raw(), s.row_max.raw(), s.row_max.nbytes());
    tp_.all_reduce(global_max, ReduceOp::Max);
    be.ce_rescale(s.row_max.data<float>(), s.sum_exp.data<float>(), global_max.data<float>(), n);
    tp_.all_reduce(s.sum_exp);
    tp_.all_reduce(target);
  }
  Tensor loss = Tensor::empty({n}, DType::F32, logits.device());  // [N] fp32
  be.ce_loss(s.row_max.data<float>(), s.sum_exp.data<float>(), target.data<float>(), n, loss.data<float>());
  // Ignored labels (negative) have no target column anywhere, so the kernels computed their
  // row's log-sum-exp; their loss is 0 instead. N labels and losses are a small copy next to
  // the logits.
  std::vector<int32_t> host(static_cast<std::size_t>(n));
  labels.copy_to_host(host.data(), host.size() * sizeof(int32_t));
  s.counted = 0;
  for (int32_t label : host) s.counted += label >= 0 ? 1 : 0;
  int64_t local_counted = s.counted;
  if (tp_.cp.size > 1) {
    // Context parallelism: the microbatch's tokens are spread over the context group; the mean
    // is over all of them (the serial run's denominator).
    Tensor c = Tensor::from_host(&s.counted, {1}, DType::I64, logits.device());  // [1] i64
    tp_.cp.comm->all_reduce(c, ReduceOp::Sum)->wait();
    c.copy_to_host(&s.counted, sizeof s.counted);
  }
  if (local_counted < n) {
    s.ignored.resize(host.size());
    std::vector<float> values(host.size());
    loss.copy_to_host(values.data(), values.size() * sizeof(float));
    for (std::size_t r = 0; r < host.size(); ++r) {
      s.ignored[r] = host[r] < 0 ? 1 : 0;
      if (s.ignored[r]) values[r] = 0.0f;
    }
    loss.copy_from_host(values.data(), values.size() * sizeof(float));
  }
  return loss;
}

Tensor VocabParallelCrossEntropy::mean_gradient(float scale, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = s.labels.numel();
  Tensor dloss = Tensor::empty({n}, DType::F32, s.logits.device());  // [N] fp32
  if (s.counted == 0) {
    dloss.fill(0.0);
    return dloss;
  }
  const double g = static_cast<double>(scale) / static_cast<double>(s.counted);
  if (s.ignored.empty()) {
    dloss.fill(g);
    return dloss;
  }
  std::vector<float> host(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < host.size(); ++r) host[r] = s.ignored[r] ? 0.0f : static_cast<float>(g);
  dloss.copy_from_host(host.data(), host.size() * sizeof(float));
  return dloss;
}

Tensor VocabParallelCrossEntropy::backward(const Tensor& dloss, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = s.labels.numel();
  PTDP_CHECK_ARG(dloss.numel() == n, "loss gradient " + dloss.str() + " does not match " + std::to_string(n) + " rows");
  Tensor dlogits = s.logits;  // [N, V/t], computed in place
  s.logits.backend().ce_backward(s.logits.raw(), s.logits.dtype(), s.row_max.data<float>(), s.sum_exp.data<float>(),
                                 s.labels.data<int32_t>(), dloss.data<float>(), n, local_vocab_, vocab_start_,
                                 dlogits.raw());
  slots_.release(step.microbatch);
  return dlogits;
}

}  // namespace ptdp
