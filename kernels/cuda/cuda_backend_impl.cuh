// Private to kernels/cuda: the CudaBackend class (each op group is defined in its own .cu file,
// mirroring kernels/cpu), error checks that name the device, launch helpers, and the storage
// types every kernel is written over (f32, bf16, f16 in memory; fp32 in registers).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/validate.h"

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

/// Blocks for kernels that give each row of a matrix its own block (grid-stride over rows).
inline unsigned row_blocks(int64_t rows) {
  constexpr int64_t kMaxRowBlocks = 65535LL * 8;
  return static_cast<unsigned>(rows < 1 ? 1 : (rows < kMaxRowBlocks ? rows : kMaxRowBlocks));
}

/// Grid for kernels that stride over rows on y and over columns on x with kThreads threads per
/// block (the column of an element needs no division).
inline dim3 rows_cols_grid(int64_t rows, int64_t cols) {
  const int64_t x = (cols + kThreads - 1) / kThreads;
  constexpr int64_t kMaxX = 1024, kMaxY = 65535;
  return dim3(static_cast<unsigned>(x < 1 ? 1 : (x < kMaxX ? x : kMaxX)),
              static_cast<unsigned>(rows < 1 ? 1 : (rows < kMaxY ? rows : kMaxY)));
}

// ---- storage types ---------------------------------------------------------------------------
// Kernels are templates over the storage type T of their activations (float, __nv_bfloat16 or
// __half): they load with to_f32, compute in fp32 and round each result once with from_f32<T>
// (round to nearest even, as base/half.h; only NaN payloads may differ from the CPU's).

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

/// Names a storage type for dispatch_float's callback: `using T = typename decltype(tag)::type`.
template <typename T>
struct StorageTag {
  using type = T;
};

/// Calls f(StorageTag<T>{}) with T the storage type of the floating dtype t, once per op. The
/// ops check t first (kcheck::float_type), so the error below only guards against misuse.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32:
      f(StorageTag<float>{});
      return;
    case DType::BF16:
      f(StorageTag<__nv_bfloat16>{});
      return;
    case DType::F16:
      f(StorageTag<__half>{});
      return;
    default:
      break;
  }
  throw Error(ErrorCode::InvalidArgument,
              str_cat(op, ": dtype ", static_cast<int>(t), " is not f32, bf16 or f16"));
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
  DType ab_type, c_type;
  Epilogue epilogue;
  // Pointer alignments in bytes, capped at 256 (bias and aux: 256 when the epilogue has none).
  int align_a, align_b, align_c, align_bias, align_aux;
  bool operator<(const GemmKey& o) const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                    ab_type, c_type, epilogue, align_a, align_b, align_c, align_bias, align_aux) <
           std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.batch, o.stride_a,
                    o.stride_b, o.stride_c, o.ab_type, o.c_type, o.epilogue, o.align_a, o.align_b,
                    o.align_c, o.align_bias, o.align_aux);
  }
};

/// A cuBLASLt matmul ready to run: descriptors plus the heuristic's algorithm (or "unsupported").
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (=D)
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
};

/// One matrix of a GEMM after batch offsets are applied (the pointers of gemm()'s arguments).
struct GemmOperands {
  const void* a;
  const void* b;
  void* c;
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

  void gemm(const GemmDesc& d, const void* a, const void* b, void* c) override;

  void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override;
  void bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols,
                 bool accumulate) override;

  void gelu_forward(const void* x, void* y, DType t, int64_t n) override;
  void gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) override;

  void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, DType t,
                         float* mean, float* rstd, int64_t rows, int64_t cols,
                         float eps) override;
  void layernorm_backward(const void* x, const void* gamma, const float* mean, const float* rstd,
                          const void* dy, void* dx, DType t, float* dgamma, float* dbeta,
                          int64_t rows, int64_t cols, bool accumulate) override;

  void rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd,
                       int64_t rows, int64_t cols, float eps) override;
  void rmsnorm_backward(const void* x, const void* gamma, const float* rstd, const void* dy,
                        void* dx, DType t, float* dgamma, int64_t rows, int64_t cols,
                        bool accumulate) override;
  void rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq, void* y,
                             DType t, float* rstd, int64_t rows, int64_t cols, int64_t width,
                             float eps) override;
  void rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd,
                              const float* dot, const void* dy, void* dx, DType t, float* dgamma,
                              int64_t rows, int64_t cols, int64_t width, bool accumulate) override;

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
  void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit, int64_t rows,
               float* loss) override;
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

 private:
  // GEMM internals (gemm_cublaslt.cu); callers hold gemm_mutex_.
  /// The cached plan for `key`, created (descriptors + heuristic) on first use.
  GemmPlan& gemm_plan(const GemmKey& key, const void* bias, const void* aux);
  void destroy_plan(GemmPlan& plan) noexcept;
  /// One cuBLASLt call for `count` matrices of d's batch starting at `ops` (d's epilogue
  /// included); false when cuBLASLt has no algorithm for it or refuses the call.
  bool gemm_lt(const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc, int64_t count,
               const GemmOperands& ops);
  /// One matrix as a plain fp32 GEMM (into an f32 C itself, else into scratch_) followed by
  /// gemm_epilogue_kernel, which adds what is left of beta * C, applies the epilogue and rounds
  /// once to C's type. Throws Error(Unsupported) when cuBLASLt cannot compute the product.
  void gemm_via_scratch(const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc,
                        const GemmOperands& ops);
  /// scratch_ with at least `bytes` bytes (grown from the caching allocator, never shrunk).
  float* gemm_scratch(std::size_t bytes);
  /// The cuBLAS handle of grouped_gemm (created on first use, on stream_, sharing workspace_).
  cublasHandle_t blas();
  /// Device arrays of `count` A, B and C pointers for cublasGemmGroupedBatchedEx (grown from
  /// the caching allocator, never shrunk), filled on stream_ from host arrays without a copy
  /// from pageable memory (grouped_gemm.cu).
  void** grouped_pointers(std::size_t count);

  int dev_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  // Plans and the GEMM's fp32 scratch. One lock for a whole gemm() call, so the scratch is never
  // handed to two calls in flight on the host (on the device the stream orders them).
  std::mutex gemm_mutex_;
  std::map<GemmKey, GemmPlan> plans_;
  float* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  cublasHandle_t blas_ = nullptr;
  void** grouped_ptrs_ = nullptr;  // [3 * grouped_ptrs_count_]: A, B, C pointer arrays
  std::size_t grouped_ptrs_count_ = 0;
  // rmsnorm_backward and rmsnorm_split_backward: dgamma, then dx (dot NULL: each row's sum of
  // dy * gamma * xhat is computed in the row's block, else dot[r] * rstd over `width`).
  void rmsnorm_backward_rows(const void* x, const void* gamma, const float* rstd, const float* dot,
                             const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                             int64_t cols, int64_t width, bool accumulate, const char* op);
  // newton_schulz (newton_schulz.cu), under gemm_mutex_: the iteration with X, A and B stored as
  // T (float, or __nv_bfloat16 for precision 2), in ns_scratch_ (grown, never shrunk).
  template <typename T>
  void newton_schulz_as(float* x, const NewtonSchulzDesc& d);
  void* ns_scratch(std::size_t bytes);
  void* ns_scratch_ = nullptr;
  std::size_t ns_scratch_bytes_ = 0;
  // sum_squares: per-block partial sums and the final value, reused by every call.
  std::mutex reduce_mutex_;
  double* partials_ = nullptr;
};

}  // namespace ptdp::cuda
