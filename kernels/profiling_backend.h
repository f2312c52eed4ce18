// A decorator of the Backend interface that times every call it forwards and attributes the
// time to the op (the Backend method), the calling thread's phase and label (kernels/op_scope.h).
// It computes nothing itself: every call goes unchanged to the wrapped backend, so results are
// bit-identical with and without it. Benchmarks install it (core/tensor/tensor.h,
// set_cpu_backend_decorator) to break one training step down by op; production code never does.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_scope.h"

namespace ptdp {

/// The Backend methods that compute or move data (the queries, device_type, name and
/// synchronize, are forwarded untimed).
enum class BackendOp : std::uint8_t {
  CopyFromHost, CopyToHost, Copy, Gemm, BiasAdd, BiasGrad, GeluForward, GeluBackward,
  LayernormForward, LayernormBackward, RmsnormForward, RmsnormBackward, RmsnormSplitForward,
  RmsnormSplitBackward, RowDot, SwigluForward,
  SwigluBackward, RopeForward, RopeBackward, SoftmaxForward, SoftmaxForwardDocuments,
  SoftmaxBackward, AttentionForward, AttentionBackward, AttentionBlockForward,
  AttentionBlockBackward, DropoutForward, DropoutBackward, BiasDropoutAdd, Add, Axpy, Scale, Fill,
  Copy2d, Fill2d, Cast, SumSquares, EmbeddingForward, EmbeddingBackward, CeForwardLocal, CeRescale,
  CeLoss, CeBackward, AdamwStep, SgdStep, GroupedGemm, MoeRoute, MoePermute, MoeUnpermute,
  MoeUnpermuteBackward, MoeRouterForward, MoeRouterBackward, MoeAuxScoresForward, MoeAuxScoresBackward,
  MoeRouterLse, MoeRouterZLossBackward, NewtonSchulz
};
inline constexpr int kBackendOpCount = static_cast<int>(BackendOp::NewtonSchulz) + 1;

/// The method's name as in backend.h ("gemm", "layernorm_forward", ...).
const char* backend_op_name(BackendOp op);

class ProfilingBackend final : public Backend {
 public:
  /// Time and calls of one (phase, op, label); label is "" where no OpScope was open.
  struct Entry {
    Phase phase = Phase::Other;
    BackendOp op = BackendOp::Copy;
    std::string label;
    std::int64_t calls = 0;
    double seconds = 0.0;
    double flops = 0.0;  ///< GEMMs: 2 m n k per matrix of the batch; 0 for the other ops
  };

  /// Forwards to `inner`, which must outlive this object. Where inner is not the CPU backend,
  /// each call is followed by inner.synchronize() so that its time is the device's.
  explicit ProfilingBackend(Backend& inner);

  /// Every (phase, op, label) seen since construction or reset(), in first-seen order.
  std::vector<Entry> entries() const;
  void reset();
  Backend& inner() const { return inner_; }

  DeviceType device_type() const override { return inner_.device_type(); }
  const char* name() const override { return inner_.name(); }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override { inner_.synchronize(); }

  void gemm(const GemmDesc& d, const void* a, const void* b, void* c) override;
  void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override;
  void bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols, bool accumulate) override;
  void gelu_forward(const void* x, void* y, DType t, int64_t n) override;
  void gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) override;
  void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, DType t, float* mean,
                         float* rstd, int64_t rows, int64_t cols, float eps) override;
  void layernorm_backward(const void* x, const void* gamma, const float* mean, const float* rstd, const void* dy,
                          void* dx, DType t, float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                          bool accumulate) override;
  void rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd, int64_t rows, int64_t cols,
                       float eps) override;
  void rmsnorm_backward(const void* x, const void* gamma, const float* rstd, const void* dy, void* dx, DType t,
                        float* dgamma, int64_t rows, int64_t cols, bool accumulate) override;
  void rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq, void* y, DType t, float* rstd,
                             int64_t rows, int64_t cols, int64_t width, float eps) override;
  void rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd, const float* dot, const void* dy,
                              void* dx, DType t, float* dgamma, int64_t rows, int64_t cols, int64_t width,
                              bool accumulate) override;
  void row_dot(const void* a, const void* b, const void* w, DType t, float* out, int64_t rows, int64_t cols) override;
  void swiglu_forward(const void* x, void* y, DType t, int64_t rows, int64_t cols) override;
  void swiglu_backward(const void* x, const void* dy, void* dx, DType t, int64_t rows, int64_t cols) override;
  void rope_forward(void* qkv, DType t, const RopeDesc& d) override;
  void rope_backward(void* dqkv, DType t, const RopeDesc& d) override;
  void softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq, int64_t sk, float scale,
                       bool causal) override;
  void softmax_forward_documents(const void* x, void* y, DType t, int64_t batch, int64_t heads, int64_t s,
                                 float scale, const int32_t* document_starts) override;
  void softmax_backward(const void* y, const void* dy, void* dx, DType t, int64_t batch, int64_t sq, int64_t sk,
                        float scale) override;
  bool fused_attention_supported(DType t, int64_t dh) const override {
    return inner_.fused_attention_supported(t, dh);
  }
  void attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse, DType t) override;
  void attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx, const float* lse,
                          const void* dctx, void* dqkv, float* delta, DType t) override;
  bool attention_block_supported(DType t, int64_t dh) const override {
    return inner_.attention_block_supported(t, dh);
  }
  void attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv, float* out, float* lse,
                               DType t) override;
  void attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv, const void* ctx,
                                const float* lse, const void* dctx, float* dq, float* dkv, DType t) override;
  void dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) override;
  void dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) override;
  void bias_dropout_add(const void* x, const void* bias, const void* residual, void* y, DType t, int64_t rows,
                        int64_t cols, const DropoutDesc& d) override;
  void add(const void* a, const void* b, void* y, DType t, int64_t n) override;
  void axpy(float alpha, const float* x, float* y, int64_t n) override;
  void scale(float* x, float alpha, int64_t n) override;
  void fill(void* x, DType t, double value, int64_t n) override;
  void copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t, int64_t rows,
               int64_t cols) override;
  void fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) override;
  void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;
  void embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t, int64_t vocab_start,
                         int64_t vocab_rows, int64_t h, void* out) override;
  void embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t, int64_t vocab_start,
                          int64_t vocab_rows, int64_t h, float* dtable) override;
  void ce_forward_local(const void* logits, DType t, const int32_t* targets, int64_t rows, int64_t v,
                        int64_t vocab_start, float* row_max, float* sum_exp, float* target_logit) override;
  void ce_rescale(float* row_max, float* sum_exp, const float* global_max, int64_t rows) override;
  void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit, int64_t rows,
               float* loss) override;
  void ce_backward(const void* logits, DType t, const float* row_max, const float* sum_exp, const int32_t* targets,
                   const float* dloss, int64_t rows, int64_t v, int64_t vocab_start, void* dlogits) override;
  void grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) override;
  void moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts, int32_t* row_of,
                 int64_t* counts) override;
  void moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens, int64_t k, int64_t h,
                   int64_t rows, void* out) override;
  void moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of, int64_t tokens, int64_t k,
                     int64_t h, int64_t rows, void* y) override;
  void moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs, const int32_t* row_of,
                              int64_t tokens, int64_t k, int64_t h, int64_t rows, void* de, float* dprobs) override;
  void moe_router_forward(const RouterDesc& d, const float* logits, const float* expert_bias, int32_t* indices,
                          float* probs) override;
  void moe_router_backward(const RouterDesc& d, const float* logits, const int32_t* indices, const float* dprobs,
                           float* dlogits, bool accumulate) override;
  void moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens, int64_t experts,
                              float* scores) override;
  void moe_aux_scores_backward(RouterScore score, const float* logits, const float* dscores, int64_t tokens,
                               int64_t experts, float* dlogits, bool accumulate) override;
  void moe_router_lse(const float* logits, int64_t tokens, int64_t experts, float* lse) override;
  void moe_router_z_loss_backward(const float* logits, const float* lse, float scale, int64_t tokens, int64_t experts,
                                  float* dlogits, bool accumulate) override;
  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p) override;
  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n, const SgdParams& p) override;
  void newton_schulz(float* x, const NewtonSchulzDesc& d) override;

 private:
  using Clock = std::chrono::steady_clock;

  // Runs f (the forwarded call), waits for the device where it is not the CPU, and records the
  // time under the calling thread's phase and label.
  template <class F>
  void timed(BackendOp op, double flops, F&& f) {
    const Clock::time_point t0 = Clock::now();
    f();
    if (sync_) inner_.synchronize();
    record(op, flops, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  void record(BackendOp op, double flops, double seconds);

  Backend& inner_;
  bool sync_;
  mutable std::mutex mutex_;  // calls may come from several threads (communication helpers)
  std::vector<Entry> entries_;
};

}  // namespace ptdp
