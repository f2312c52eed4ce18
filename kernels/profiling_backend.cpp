// The profiling decorator: each method forwards its arguments unchanged and times the call.
#include "kernels/profiling_backend.h"

#include <cstring>

namespace ptdp {

const char* backend_op_name(BackendOp op) {
  static const char* const names[kBackendOpCount] = {
      "copy_from_host", "copy_to_host", "copy", "gemm", "bias_add", "bias_grad", "gelu_forward", "gelu_backward",
      "layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward", "rmsnorm_split_forward",
      "rmsnorm_split_backward", "row_dot", "swiglu_forward",
      "swiglu_backward", "rope_forward", "rope_backward", "softmax_forward", "softmax_forward_documents",
      "softmax_backward", "attention_forward", "attention_backward", "attention_block_forward",
      "attention_block_backward", "dropout_forward", "dropout_backward", "bias_dropout_add", "add", "axpy", "scale",
      "fill", "copy_2d", "fill_2d", "cast", "sum_squares", "embedding_forward", "embedding_backward",
      "ce_forward_local", "ce_rescale", "ce_loss", "ce_backward", "adamw_step", "sgd_step", "grouped_gemm", "moe_route",
      "moe_permute", "moe_unpermute", "moe_unpermute_backward", "moe_router_forward", "moe_router_backward",
      "moe_aux_scores_forward", "moe_aux_scores_backward", "moe_router_lse", "moe_router_z_loss_backward", "newton_schulz"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kBackendOpCount ? names[i] : "?";
}

ProfilingBackend::ProfilingBackend(Backend& inner)
    : inner_(inner), sync_(inner.device_type() != DeviceType::CPU) {}

std::vector<ProfilingBackend::Entry> ProfilingBackend::entries() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

void ProfilingBackend::reset() {
  const std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

void ProfilingBackend::record(BackendOp op, double flops, double seconds) {
  const OpContext context = op_context();
  const char* label = context.label != nullptr ? context.label : "";
  const std::lock_guard<std::mutex> lock(mutex_);
  // A step makes a few thousand calls over a few dozen keys: a linear search is cheap enough.
  for (Entry& e : entries_) {
    if (e.op == op && e.phase == context.phase && std::strcmp(e.label.c_str(), label) == 0) {
      ++e.calls;
      e.seconds += seconds;
      e.flops += flops;
      return;
    }
  }
  entries_.push_back(Entry{context.phase, op, label, 1, seconds, flops});
}

void ProfilingBackend::copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  timed(BackendOp::CopyFromHost, 0.0, [&] { inner_.copy_from_host(dst, host_src, bytes); });
}
void ProfilingBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  timed(BackendOp::CopyToHost, 0.0, [&] { inner_.copy_to_host(host_dst, src, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, std::size_t bytes) {
  timed(BackendOp::Copy, 0.0, [&] { inner_.copy(dst, src, bytes); });
}

void ProfilingBackend::gemm(const GemmDesc& d, const void* a, const void* b, void* c) {
  const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k) *
                       static_cast<double>(d.batch);
  timed(BackendOp::Gemm, flops, [&] { inner_.gemm(d, a, b, c); });
}

void ProfilingBackend::bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) {
  timed(BackendOp::BiasAdd, 0.0, [&] { inner_.bias_add(y, bias, t, rows, cols); });
}
void ProfilingBackend::bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols, bool accumulate) {
  timed(BackendOp::BiasGrad, 0.0, [&] { inner_.bias_grad(dy, t, dbias, rows, cols, accumulate); });
}

void ProfilingBackend::gelu_forward(const void* x, void* y, DType t, int64_t n) {
  timed(BackendOp::GeluForward, 0.0, [&] { inner_.gelu_forward(x, y, t, n); });
}
void ProfilingBackend::gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) {
  timed(BackendOp::GeluBackward, 0.0, [&] { inner_.gelu_backward(x, dy, dx, t, n); });
}

void ProfilingBackend::layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, DType t,
                                         float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
  timed(BackendOp::LayernormForward, 0.0,
        [&] { inner_.layernorm_forward(x, gamma, beta, y, t, mean, rstd, rows, cols, eps); });
}
void ProfilingBackend::layernorm_backward(const void* x, const void* gamma, const float* mean, const float* rstd,
                                          const void* dy, void* dx, DType t, float* dgamma, float* dbeta,
                                          int64_t rows, int64_t cols, bool accumulate) {
  timed(BackendOp::LayernormBackward, 0.0, [&] {
    inner_.layernorm_backward(x, gamma, mean, rstd, dy, dx, t, dgamma, dbeta, rows, cols, accumulate);
  });
}

void ProfilingBackend::rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd, int64_t rows,
                                       int64_t cols, float eps) {
  timed(BackendOp::RmsnormForward, 0.0, [&] { inner_.rmsnorm_forward(x, gamma, y, t, rstd, rows, cols, eps); });
}
void ProfilingBackend::rmsnorm_backward(const void* x, const void* gamma, const float* rstd, const void* dy, void* dx,
                                        DType t, float* dgamma, int64_t rows, int64_t cols, bool accumulate) {
  timed(BackendOp::RmsnormBackward, 0.0,
        [&] { inner_.rmsnorm_backward(x, gamma, rstd, dy, dx, t, dgamma, rows, cols, accumulate); });
}
void ProfilingBackend::rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq, void* y, DType t,
                                             float* rstd, int64_t rows, int64_t cols, int64_t width, float eps) {
  timed(BackendOp::RmsnormSplitForward, 0.0,
        [&] { inner_.rmsnorm_split_forward(x, gamma, sum_sq, y, t, rstd, rows, cols, width, eps); });
}
void ProfilingBackend::rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd, const float* dot,
                                              const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                                              int64_t cols, int64_t width, bool accumulate) {
  timed(BackendOp::RmsnormSplitBackward, 0.0, [&] {
    inner_.rmsnorm_split_backward(x, gamma, rstd, dot, dy, dx, t, dgamma, rows, cols, width, accumulate);
  });
}
void ProfilingBackend::row_dot(const void* a, const void* b, const void* w, DType t, float* out, int64_t rows,
                               int64_t cols) {
  timed(BackendOp::RowDot, 0.0, [&] { inner_.row_dot(a, b, w, t, out, rows, cols); });
}

void ProfilingBackend::swiglu_forward(const void* x, void* y, DType t, int64_t rows, int64_t cols) {
  timed(BackendOp::SwigluForward, 0.0, [&] { inner_.swiglu_forward(x, y, t, rows, cols); });
}
void ProfilingBackend::swiglu_backward(const void* x, const void* dy, void* dx, DType t, int64_t rows, int64_t cols) {
  timed(BackendOp::SwigluBackward, 0.0, [&] { inner_.swiglu_backward(x, dy, dx, t, rows, cols); });
}

void ProfilingBackend::rope_forward(void* qkv, DType t, const RopeDesc& d) {
  timed(BackendOp::RopeForward, 0.0, [&] { inner_.rope_forward(qkv, t, d); });
}
void ProfilingBackend::rope_backward(void* dqkv, DType t, const RopeDesc& d) {
  timed(BackendOp::RopeBackward, 0.0, [&] { inner_.rope_backward(dqkv, t, d); });
}

void ProfilingBackend::softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq, int64_t sk,
                                       float scale, bool causal) {
  timed(BackendOp::SoftmaxForward, 0.0, [&] { inner_.softmax_forward(x, y, t, batch, sq, sk, scale, causal); });
}
void ProfilingBackend::softmax_forward_documents(const void* x, void* y, DType t, int64_t batch, int64_t heads,
                                                 int64_t s, float scale, const int32_t* document_starts) {
  timed(BackendOp::SoftmaxForwardDocuments, 0.0,
        [&] { inner_.softmax_forward_documents(x, y, t, batch, heads, s, scale, document_starts); });
}
void ProfilingBackend::softmax_backward(const void* y, const void* dy, void* dx, DType t, int64_t batch, int64_t sq,
                                        int64_t sk, float scale) {
  timed(BackendOp::SoftmaxBackward, 0.0, [&] { inner_.softmax_backward(y, dy, dx, t, batch, sq, sk, scale); });
}

void ProfilingBackend::attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse, DType t) {
  timed(BackendOp::AttentionForward, 0.0, [&] { inner_.attention_forward(d, qkv, ctx, lse, t); });
}
void ProfilingBackend::attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx, const float* lse,
                                          const void* dctx, void* dqkv, float* delta, DType t) {
  timed(BackendOp::AttentionBackward, 0.0,
        [&] { inner_.attention_backward(d, qkv, ctx, lse, dctx, dqkv, delta, t); });
}
void ProfilingBackend::attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv, float* out,
                                               float* lse, DType t) {
  timed(BackendOp::AttentionBlockForward, 0.0, [&] { inner_.attention_block_forward(d, q, kv, out, lse, t); });
}
void ProfilingBackend::attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv,
                                                const void* ctx, const float* lse, const void* dctx, float* dq,
                                                float* dkv, DType t) {
  timed(BackendOp::AttentionBlockBackward, 0.0,
        [&] { inner_.attention_block_backward(d, q, kv, ctx, lse, dctx, dq, dkv, t); });
}

void ProfilingBackend::dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) {
  timed(BackendOp::DropoutForward, 0.0, [&] { inner_.dropout_forward(x, y, t, d); });
}
void ProfilingBackend::dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) {
  timed(BackendOp::DropoutBackward, 0.0, [&] { inner_.dropout_backward(dy, dx, t, d); });
}
void ProfilingBackend::bias_dropout_add(const void* x, const void* bias, const void* residual, void* y, DType t,
                                        int64_t rows, int64_t cols, const DropoutDesc& d) {
  timed(BackendOp::BiasDropoutAdd, 0.0, [&] { inner_.bias_dropout_add(x, bias, residual, y, t, rows, cols, d); });
}

void ProfilingBackend::add(const void* a, const void* b, void* y, DType t, int64_t n) {
  timed(BackendOp::Add, 0.0, [&] { inner_.add(a, b, y, t, n); });
}
void ProfilingBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  timed(BackendOp::Axpy, 0.0, [&] { inner_.axpy(alpha, x, y, n); });
}
void ProfilingBackend::scale(float* x, float alpha, int64_t n) {
  timed(BackendOp::Scale, 0.0, [&] { inner_.scale(x, alpha, n); });
}
void ProfilingBackend::fill(void* x, DType t, double value, int64_t n) {
  timed(BackendOp::Fill, 0.0, [&] { inner_.fill(x, t, value, n); });
}
void ProfilingBackend::copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t, int64_t rows,
                               int64_t cols) {
  timed(BackendOp::Copy2d, 0.0, [&] { inner_.copy_2d(dst, ld_dst, src, ld_src, t, rows, cols); });
}
void ProfilingBackend::fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) {
  timed(BackendOp::Fill2d, 0.0, [&] { inner_.fill_2d(x, t, ld, rows, cols, value); });
}
void ProfilingBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  timed(BackendOp::Cast, 0.0, [&] { inner_.cast(src, src_type, dst, dst_type, n); });
}
double ProfilingBackend::sum_squares(const float* x, int64_t n) {
  double result = 0.0;
  timed(BackendOp::SumSquares, 0.0, [&] { result = inner_.sum_squares(x, n); });
  return result;
}

void ProfilingBackend::embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                                         int64_t vocab_start, int64_t vocab_rows, int64_t h, void* out) {
  timed(BackendOp::EmbeddingForward, 0.0,
        [&] { inner_.embedding_forward(ids, n, table, t, vocab_start, vocab_rows, h, out); });
}
void ProfilingBackend::embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                                          int64_t vocab_start, int64_t vocab_rows, int64_t h, float* dtable) {
  timed(BackendOp::EmbeddingBackward, 0.0,
        [&] { inner_.embedding_backward(ids, n, dout, t, vocab_start, vocab_rows, h, dtable); });
}

void ProfilingBackend::ce_forward_local(const void* logits, DType t, const int32_t* targets, int64_t rows, int64_t v,
                                        int64_t vocab_start, float* row_max, float* sum_exp, float* target_logit) {
  timed(BackendOp::CeForwardLocal, 0.0, [&] {
    inner_.ce_forward_local(logits, t, targets, rows, v, vocab_start, row_max, sum_exp, target_logit);
  });
}
void ProfilingBackend::ce_rescale(float* row_max, float* sum_exp, const float* global_max, int64_t rows) {
  timed(BackendOp::CeRescale, 0.0, [&] { inner_.ce_rescale(row_max, sum_exp, global_max, rows); });
}
void ProfilingBackend::ce_loss(const float* row_max, const float* sum_exp, const float* target_logit, int64_t rows,
                               float* loss) {
  timed(BackendOp::CeLoss, 0.0, [&] { inner_.ce_loss(row_max, sum_exp, target_logit, rows, loss); });
}
void ProfilingBackend::ce_backward(const void* logits, DType t, const float* row_max, const float* sum_exp,
                                   const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                                   int64_t vocab_start, void* dlogits) {
  timed(BackendOp::CeBackward, 0.0, [&] {
    inner_.ce_backward(logits, t, row_max, sum_exp, targets, dloss, rows, v, vocab_start, dlogits);
  });
}

void ProfilingBackend::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                                  const AdamWParams& p) {
  timed(BackendOp::AdamwStep, 0.0, [&] { inner_.adamw_step(param, grad, m, v, n, p); });
}
void ProfilingBackend::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, const SgdParams& p) {
  timed(BackendOp::SgdStep, 0.0, [&] { inner_.sgd_step(param, grad, momentum_buf, n, p); });
}
void ProfilingBackend::newton_schulz(float* x, const NewtonSchulzDesc& d) {
  timed(BackendOp::NewtonSchulz, newton_schulz_flops(d.rows, d.cols, d.steps),
        [&] { inner_.newton_schulz(x, d); });
}

void ProfilingBackend::grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) {
  // 2 m n k summed over the groups is 2 m n k with the varying dimension's total, which d holds.
  const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
  timed(BackendOp::GroupedGemm, flops, [&] { inner_.grouped_gemm(d, a, b, c); });
}
void ProfilingBackend::moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts, int32_t* row_of,
                                 int64_t* counts) {
  timed(BackendOp::MoeRoute, 0.0, [&] { inner_.moe_route(indices, tokens, k, experts, row_of, counts); });
}
void ProfilingBackend::moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens, int64_t k,
                                   int64_t h, int64_t rows, void* out) {
  timed(BackendOp::MoePermute, 0.0, [&] { inner_.moe_permute(x, t, row_of, tokens, k, h, rows, out); });
}
void ProfilingBackend::moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of,
                                     int64_t tokens, int64_t k, int64_t h, int64_t rows, void* y) {
  timed(BackendOp::MoeUnpermute, 0.0, [&] { inner_.moe_unpermute(e, t, probs, row_of, tokens, k, h, rows, y); });
}
void ProfilingBackend::moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs,
                                              const int32_t* row_of, int64_t tokens, int64_t k, int64_t h,
                                              int64_t rows, void* de, float* dprobs) {
  timed(BackendOp::MoeUnpermuteBackward, 0.0,
        [&] { inner_.moe_unpermute_backward(dy, e, t, probs, row_of, tokens, k, h, rows, de, dprobs); });
}
void ProfilingBackend::moe_router_forward(const RouterDesc& d, const float* logits, const float* expert_bias,
                                          int32_t* indices, float* probs) {
  timed(BackendOp::MoeRouterForward, 0.0, [&] { inner_.moe_router_forward(d, logits, expert_bias, indices, probs); });
}
void ProfilingBackend::moe_router_backward(const RouterDesc& d, const float* logits, const int32_t* indices,
                                           const float* dprobs, float* dlogits, bool accumulate) {
  timed(BackendOp::MoeRouterBackward, 0.0,
        [&] { inner_.moe_router_backward(d, logits, indices, dprobs, dlogits, accumulate); });
}
void ProfilingBackend::moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens,
                                              int64_t experts, float* scores) {
  timed(BackendOp::MoeAuxScoresForward, 0.0,
        [&] { inner_.moe_aux_scores_forward(score, logits, tokens, experts, scores); });
}
void ProfilingBackend::moe_aux_scores_backward(RouterScore score, const float* logits, const float* dscores,
                                               int64_t tokens, int64_t experts, float* dlogits, bool accumulate) {
  timed(BackendOp::MoeAuxScoresBackward, 0.0,
        [&] { inner_.moe_aux_scores_backward(score, logits, dscores, tokens, experts, dlogits, accumulate); });
}
void ProfilingBackend::moe_router_lse(const float* logits, int64_t tokens, int64_t experts, float* lse) {
  timed(BackendOp::MoeRouterLse, 0.0, [&] { inner_.moe_router_lse(logits, tokens, experts, lse); });
}
void ProfilingBackend::moe_router_z_loss_backward(const float* logits, const float* lse, float scale, int64_t tokens,
                                                  int64_t experts, float* dlogits, bool accumulate) {
  timed(BackendOp::MoeRouterZLossBackward, 0.0,
        [&] { inner_.moe_router_z_loss_backward(logits, lse, scale, tokens, experts, dlogits, accumulate); });
}

}  // namespace ptdp
