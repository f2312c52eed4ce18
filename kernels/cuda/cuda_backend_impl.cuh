// Private to kernels/cuda: the CudaBackend class (each op group is defined in its own .cu file,
// mirroring kernels/cpu), error checks that name the device, and launch helpers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/backend.h"
#include "kernels/validate.h"
#include "kernels/error.h"

namespace ptdp::cuda {

/// Throws Error(Device) "<call>: <message> (device N)".
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t err, int device);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t st, int device);

}  // namespace ptdp::cuda

// CUDA runtime call on the device `dev_` (an int in scope).
#define PTDP_CU(call)                                                             \
  do {                                                                            \
    const cudaError_t err_ = (call);                                              \
    if (err_ != cudaSuccess) ::ptdp::cuda::throw_cuda_error(#call, err_, (dev_)); \
  } while (0)

#define PTDP_CUBLAS(call)                                                                   \
  do {                                                                                      \
    const cublasStatus_t st_ = (call);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS) ::ptdp::cuda::throw_cublas_error(#call, st_, (dev_)); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, execution errors at the next
// synchronising call.
#define PTDP_CU_LAUNCHED(name)                                                             \
  do {                                                                                     \
    const cudaError_t err_ = cudaGetLastError();                                           \
    if (err_ != cudaSuccess) ::ptdp::cuda::throw_cuda_error(name " launch", err_, (dev_)); \
  } while (0)

// Grid-stride loop over [0, n) with a 64-bit index.
#define PTDP_GRID_STRIDE(i, n)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace ptdp::cuda {

inline constexpr int kThreads = 256;
// sum_squares: partial sums per call (fixed, so the summation order is too).
inline constexpr int kReduceBlocks = 256;

/// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t want = (n + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 65535LL * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(want < 1 ? 1 : (want > kMaxBlocks ? kMaxBlocks : want));
}

/// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : dev_(device) {
    PTDP_CU(cudaGetDevice(&prev_));
    if (prev_ != dev_) PTDP_CU(cudaSetDevice(dev_));
  }
  ~DeviceGuard() {
    if (prev_ != dev_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int dev_;
  int prev_ = 0;
};

/// What a cached GEMM plan depends on (everything but the pointers' values and alpha/beta).
struct GemmKey {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  int align_a, align_b, align_c;  // pointer alignment in bytes, capped at 256
  bool operator<(const GemmKey& o) const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                    align_a, align_b, align_c) <
           std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.batch, o.stride_a,
                    o.stride_b, o.stride_c, o.align_a, o.align_b, o.align_c);
  }
};

/// A cuBLASLt matmul ready to run: descriptors plus the heuristic's algorithm (or "unsupported").
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (=D)
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  int device() const { return dev_; }
  cudaStream_t stream() const { return stream_; }

  DeviceType device_type() const override { return DeviceType::CUDA; }
  const char* name() const override { return "cuda"; }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override;

  void gemm(const GemmDesc& d, const float* a, const float* b, float* c) override;

  void bias_add(float* y, const float* bias, int64_t rows, int64_t cols) override;
  void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                 bool accumulate) override;

  void gelu_forward(const float* x, float* y, int64_t n) override;
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override;

  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* rstd, int64_t rows, int64_t cols, float eps) override;
  void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                          const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows,
                          int64_t cols, bool accumulate) override;

  void softmax_forward(const float* x, float* y, int64_t batch, int64_t sq, int64_t sk, float scale,
                       bool causal) override;
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
  void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit, int64_t rows,
               float* loss) override;
  void ce_backward(const float* logits, const float* row_max, const float* sum_exp,
                   const int32_t* targets, const float* dloss, int64_t rows, int64_t v,
                   int64_t vocab_start, float* dlogits) override;

  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p) override;
  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                const SgdParams& p) override;

 private:
  /// The cached plan for `key`, created (descriptors + heuristic) on first use. Caller holds
  /// gemm_mutex_.
  GemmPlan& gemm_plan(const GemmKey& key);
  void destroy_plan(GemmPlan& plan) noexcept;

  int dev_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::mutex gemm_mutex_;
  std::map<GemmKey, GemmPlan> plans_;
  // sum_squares: per-block partial sums and the final value, reused by every call.
  std::mutex reduce_mutex_;
  double* partials_ = nullptr;
};

}  // namespace ptdp::cuda
