// The CPU backend: OpenBLAS for GEMMs, OpenMP across rows for everything else. It is the
// reference every other backend is tested against, so each op is written for clarity first
// and uses fp32 arithmetic with double accumulation where sums get long. 16-bit storage is
// widened on load and rounded once on store (kernels/cpu/storage.h).
#pragma once

#include "kernels/backend.h"

namespace ptdp {

class CpuBackend final : public Backend {
 public:
  DeviceType device_type() const override { return DeviceType::CPU; }
  const char* name() const override { return "cpu"; }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override {}

  void gemm(const GemmDesc& d, const void* a, const void* b, void* c) override;

  void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override;
  void bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols,
                 bool accumulate) override;

  void gelu_forward(const void* x, void* y, DType t, int64_t n) override;
  void gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) override;

  void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, DType t,
                         float* mean, float* rstd, int64_t rows, int64_t cols,
                         float eps) override;
  void layernorm_backward(const void* x, const void* gamma, const float* mean,
                          const float* rstd, const void* dy, void* dx, DType t, float* dgamma,
                          float* dbeta, int64_t rows, int64_t cols, bool accumulate) override;

  void rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd,
                       int64_t rows, int64_t cols, float eps) override;
  void rmsnorm_backward(const void* x, const void* gamma, const float* rstd, const void* dy,
                        void* dx, DType t, float* dgamma, int64_t rows, int64_t cols,
                        bool accumulate) override;
  void rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq, void* y, DType t,
                             float* rstd, int64_t rows, int64_t cols, int64_t width, float eps) override;
  void rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd, const float* dot,
                              const void* dy, void* dx, DType t, float* dgamma, int64_t rows, int64_t cols,
                              int64_t width, bool accumulate) override;

  void swiglu_forward(const void* x, void* y, DType t, int64_t rows, int64_t cols) override;
  void swiglu_backward(const void* x, const void* dy, void* dx, DType t, int64_t rows,
                       int64_t cols) override;

  void rope_forward(void* qkv, DType t, const RopeDesc& d) override;
  void rope_backward(void* dqkv, DType t, const RopeDesc& d) override;

  void softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq, int64_t sk,
                       float scale, bool causal) override;
  void softmax_forward_documents(const void* x, void* y, DType t, int64_t batch, int64_t heads,
                                 int64_t s, float scale, const int32_t* document_starts) override;
  void softmax_backward(const void* y, const void* dy, void* dx, DType t, int64_t batch,
                        int64_t sq, int64_t sk, float scale) override;

  bool fused_attention_supported(DType t, int64_t dh) const override;
  void attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                         DType t) override;
  void attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                          const float* lse, const void* dctx, void* dqkv, float* delta,
                          DType t) override;
  bool attention_block_supported(DType t, int64_t dh) const override;
  void attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv, float* out,
                               float* lse, DType t) override;
  void attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv,
                                const void* ctx, const float* lse, const void* dctx, float* dq,
                                float* dkv, DType t) override;

  void dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) override;
  void dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) override;
  void bias_dropout_add(const void* x, const void* bias, const void* residual, void* y, DType t,
                        int64_t rows, int64_t cols, const DropoutDesc& d) override;

  void add(const void* a, const void* b, void* y, DType t, int64_t n) override;
  void axpy(float alpha, const float* x, float* y, int64_t n) override;
  void scale(float* x, float alpha, int64_t n) override;
  void fill(void* x, DType t, double value, int64_t n) override;
  void copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t, int64_t rows,
               int64_t cols) override;
  void fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) override;
  void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;
  void row_dot(const void* a, const void* b, const void* w, DType t, float* out, int64_t rows,
               int64_t cols) override;

  void embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                         int64_t vocab_start, int64_t vocab_rows, int64_t h, void* out) override;
  void embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                          int64_t vocab_start, int64_t vocab_rows, int64_t h,
                          float* dtable) override;

  void ce_forward_local(const void* logits, DType t, const int32_t* targets, int64_t rows,
                        int64_t v, int64_t vocab_start, float* row_max, float* sum_exp,
                        float* target_logit) override;
  void ce_rescale(float* row_max, float* sum_exp, const float* global_max,
                  int64_t rows) override;
  void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
               int64_t rows, float* loss) override;
  void ce_backward(const void* logits, DType t, const float* row_max, const float* sum_exp,
                   const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                   int64_t vocab_start, void* dlogits) override;

  void grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) override;
  void moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts,
                 int32_t* row_of, int64_t* counts) override;
  void moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens, int64_t k,
                   int64_t h, int64_t rows, void* out) override;
  void moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of,
                     int64_t tokens, int64_t k, int64_t h, int64_t rows, void* y) override;
  void moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs,
                              const int32_t* row_of, int64_t tokens, int64_t k, int64_t h,
                              int64_t rows, void* de, float* dprobs) override;
  void moe_router_forward(const RouterDesc& d, const float* logits, const float* expert_bias,
                          int32_t* indices, float* probs) override;
  void moe_router_backward(const RouterDesc& d, const float* logits, const int32_t* indices,
                           const float* dprobs, float* dlogits, bool accumulate) override;
  void moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens,
                              int64_t experts, float* scores) override;
  void moe_aux_scores_backward(RouterScore score, const float* logits, const float* dscores,
                               int64_t tokens, int64_t experts, float* dlogits,
                               bool accumulate) override;
  void moe_router_lse(const float* logits, int64_t tokens, int64_t experts, float* lse) override;
  void moe_router_z_loss_backward(const float* logits, const float* lse, float scale,
                                  int64_t tokens, int64_t experts, float* dlogits,
                                  bool accumulate) override;

  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p) override;
  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                const SgdParams& p) override;
  void newton_schulz(float* x, const NewtonSchulzDesc& d) override;
};

}  // namespace ptdp
