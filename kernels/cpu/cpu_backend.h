// The CPU backend: OpenBLAS for GEMMs, OpenMP across rows for everything else. It is the
// reference every other backend is tested against, so each op is written for clarity first
// and uses fp32 arithmetic with double accumulation where sums get long.
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

  void gemm(const GemmDesc& d, const float* a, const float* b, float* c) override;

  void bias_add(float* y, const float* bias, int64_t rows, int64_t cols) override;
  void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                 bool accumulate) override;

  void gelu_forward(const float* x, float* y, int64_t n) override;
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override;

  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* rstd, int64_t rows, int64_t cols,
                         float eps) override;
  void layernorm_backward(const float* x, const float* gamma, const float* mean,
                          const float* rstd, const float* dy, float* dx, float* dgamma,
                          float* dbeta, int64_t rows, int64_t cols, bool accumulate) override;

  void softmax_forward(const float* x, float* y, int64_t batch, int64_t sq, int64_t sk,
                       float scale, bool causal) override;
  void softmax_backward(const float* y, const float* dy, float* dx, int64_t batch, int64_t sq,
                        int64_t sk, float scale) override;

  void dropout_forward(const float* x, float* y, const DropoutDesc& d) override;
  void dropout_backward(const float* dy, float* dx, const DropoutDesc& d) override;

  void add(const float* a, const float* b, float* y, int64_t n) override;
  void axpy(float alpha, const float* x, float* y, int64_t n) override;
  void scale(float* x, float alpha, int64_t n) override;
  void fill(void* x, DType t, double value, int64_t n) override;
  void copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
               int64_t cols) override;
  void fill_2d(float* x, int64_t ld, int64_t rows, int64_t cols, float value) override;
  void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;

  void embedding_forward(const int32_t* ids, int64_t n, const float* table, int64_t vocab_start,
                         int64_t vocab_rows, int64_t h, float* out) override;
  void embedding_backward(const int32_t* ids, int64_t n, const float* dout, int64_t vocab_start,
                          int64_t vocab_rows, int64_t h, float* dtable) override;

  void ce_row_max(const float* logits, int64_t rows, int64_t v, float* row_max) override;
  void ce_sum_exp(const float* logits, const float* row_max, int64_t rows, int64_t v,
                  float* sum_exp) override;
  void ce_target_logit(const float* logits, const int32_t* targets, int64_t rows, int64_t v,
                       int64_t vocab_start, float* target_logit) override;
  void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
               int64_t rows, float* loss) override;
  void ce_backward(const float* logits, const float* row_max, const float* sum_exp,
                   const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                   int64_t vocab_start, float* dlogits) override;

  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p) override;
  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                const SgdParams& p) override;
};

}  // namespace ptdp
