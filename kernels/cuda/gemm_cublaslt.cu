// GEMM through cuBLASLt: single and strided-batched, any leading dimensions, broadcast operands.
//
// GemmDesc is row-major; cuBLASLt is column-major. A row-major matrix with leading dimension ld
// is, read column-major, its transpose with the same ld. So the row-major product
//   C[m, n] = op(A)[m, k] op(B)[k, n]
// is computed as the column-major product C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m]: cuBLASLt's
// first operand is our B (transposed iff trans_b), its second is our A (transposed iff trans_a),
// and its output is our C with ldc. No data moves.
//
// Compute type CUBLAS_COMPUTE_32F: exact fp32 products and sums (no TF32), so results agree
// with the CPU's sgemm to fp32 rounding. One cuBLASLt handle and one 32 MiB workspace per device;
// the descriptors and the heuristic's algorithm are cached per (shape, transposes, leading
// dimensions, batch, strides, pointer alignments).
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

// Largest power of two (<= 256, cuBLASLt's default assumption) dividing the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % static_cast<std::uintptr_t>(al) != 0) al /= 2;
  return al;
}

// k == 0: C = beta * C (C = 0 when beta is 0, as BLAS does), over every batch matrix.
__global__ void scale_c_kernel(float* c, int64_t m, int64_t n, int64_t ldc, int64_t batch,
                               int64_t stride_c, float beta) {
  PTDP_GRID_STRIDE(t, batch * m * n) {
    const int64_t b = t / (m * n), r = (t / n) % m, col = t % n;
    float* e = c + b * stride_c + r * ldc + col;
    *e = beta == 0.0f ? 0.0f : beta * *e;
  }
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, T value, int dev_) {
  PTDP_CUBLAS(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value));
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T value, int dev_) {
  PTDP_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, attr, &value, sizeof value));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, T value,
              int dev_) {
  PTDP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof value));
}

}  // namespace

void CudaBackend::destroy_plan(GemmPlan& plan) noexcept {
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.op) cublasLtMatmulDescDestroy(plan.op);
  plan = GemmPlan{};
}

GemmPlan& CudaBackend::gemm_plan(const GemmKey& k) {
  if (const auto it = plans_.find(k); it != plans_.end()) return it->second;
  GemmPlan plan;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    PTDP_CUBLAS(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, dev_);
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, dev_);
    // Column-major views of the row-major storage (rows, cols, ld).
    const uint64_t a_rows = static_cast<uint64_t>(k.trans_b ? k.k : k.n);  // our B
    const uint64_t a_cols = static_cast<uint64_t>(k.trans_b ? k.n : k.k);
    const uint64_t b_rows = static_cast<uint64_t>(k.trans_a ? k.m : k.k);  // our A
    const uint64_t b_cols = static_cast<uint64_t>(k.trans_a ? k.k : k.m);
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, a_rows, a_cols, k.ldb));
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, b_rows, b_cols, k.lda));
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, static_cast<uint64_t>(k.n),
                                           static_cast<uint64_t>(k.m), k.ldc));
    if (k.batch > 1) {
      const auto count = static_cast<int32_t>(k.batch);
      set_layout(plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, dev_);
      set_layout(plan.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, dev_);
      set_layout(plan.c, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, dev_);
      set_layout(plan.a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, k.stride_b, dev_);
      set_layout(plan.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, k.stride_a, dev_);
      set_layout(plan.c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, k.stride_c, dev_);
    }
    PTDP_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
             static_cast<uint64_t>(workspace_bytes_), dev_);
    // Attention reads Q, K, V at offsets inside the QKV activation: tell the heuristic the
    // pointers' real alignment instead of the default 256 bytes it would otherwise assume.
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(k.align_b),
             dev_);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(k.align_a),
             dev_);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(k.align_c),
             dev_);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(k.align_c),
             dev_);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, plan.op, plan.a, plan.b, plan.c,
                                                             plan.c, pref, 1, &result, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
      plan.algo = result.algo;
      plan.supported = true;
    } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
      throw_cublas_error("cublasLtMatmulAlgoGetHeuristic", st, dev_);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    pref = nullptr;
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    destroy_plan(plan);
    throw;
  }
  return plans_.emplace(k, plan).first->second;
}

void CudaBackend::gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  const kcheck::GemmLayout layout = kcheck::check_gemm(d, a, b, c);
  if (layout.work == kcheck::Work::none) return;
  const int64_t lda = layout.lda, ldb = layout.ldb, ldc = layout.ldc;
  DeviceGuard guard(dev_);
  if (d.k == 0) {  // cuBLASLt wants k > 0; the product is empty
    scale_c_kernel<<<grid_for(d.batch * d.m * d.n), kThreads, 0, stream_>>>(
        c, d.m, d.n, ldc, d.batch, d.stride_c, d.beta);
    PTDP_CU_LAUNCHED("gemm scale_c_kernel");
    return;
  }
  const float alpha = d.alpha, beta = d.beta;
  // Runs `count` matmuls starting at batch index `first` as one strided-batched call; false when
  // cuBLASLt supports no algorithm for it.
  const auto run = [&](int64_t first, int64_t count) -> bool {
    const float* pa = a + first * d.stride_a;
    const float* pb = b + first * d.stride_b;
    float* pc = c + first * d.stride_c;
    GemmKey key{};
    key.trans_a = d.trans_a;
    key.trans_b = d.trans_b;
    key.m = d.m;
    key.n = d.n;
    key.k = d.k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.batch = count;
    key.stride_a = count > 1 ? d.stride_a : 0;
    key.stride_b = count > 1 ? d.stride_b : 0;
    key.stride_c = count > 1 ? d.stride_c : 0;
    key.align_a = alignment_of(pa);
    key.align_b = alignment_of(pb);
    key.align_c = alignment_of(pc);
    std::lock_guard<std::mutex> lock(gemm_mutex_);
    GemmPlan& plan = gemm_plan(key);
    if (!plan.supported) return false;
    const cublasStatus_t st =
        cublasLtMatmul(lt_, plan.op, &alpha, pb, plan.a, pa, plan.b, &beta, pc, plan.c, pc, plan.c,
                       &plan.algo, workspace_, workspace_bytes_, stream_);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
      plan.supported = false;  // remember, and let the caller split the batch
      return false;
    }
    if (st != CUBLAS_STATUS_SUCCESS) throw_cublas_error("cublasLtMatmul", st, dev_);
    return true;
  };
  // cuBLASLt counts batches in int32: larger batches go in chunks. A batch no algorithm takes
  // as a whole (broadcast strides, for example) falls back to one call per matrix.
  constexpr int64_t kMaxChunk = INT32_MAX;
  for (int64_t first = 0; first < d.batch; first += kMaxChunk) {
    const int64_t count = std::min(kMaxChunk, d.batch - first);
    if (run(first, count)) continue;
    for (int64_t i = first; i < first + count; ++i) {
      if (!run(i, 1)) {
        throw Error(ErrorCode::Unsupported,
                    str_cat("gemm: cuBLASLt has no fp32 algorithm for m=", d.m, " n=", d.n, " k=",
                            d.k, " lda=", lda, " ldb=", ldb, " ldc=", ldc, " (device ", dev_, ")"));
      }
    }
  }
}

}  // namespace ptdp::cuda
