// GEMM through cuBLASLt: single and strided-batched, any leading dimensions, broadcast operands,
// f32/bf16/f16 storage with fp32 accumulation, and the Bias / BiasGelu / DGelu epilogues.
//
// GemmDesc is row-major; cuBLASLt is column-major. A row-major matrix with leading dimension ld
// is, read column-major, its transpose with the same ld. So the row-major product
//   C[m, n] = op(A)[m, k] op(B)[k, n]
// is computed as the column-major product C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m]: cuBLASLt's
// first operand is our B (transposed iff trans_b), its second is our A (transposed iff trans_a),
// and its output is our C with ldc. No data moves. Our bias is indexed by C's column, which is a
// row of cuBLASLt's D: exactly cuBLASLt's bias vector (length = D's rows = n). aux has C's layout,
// i.e. D's, with leading dimension ldc.
//
// Compute type CUBLAS_COMPUTE_32F for every storage type: all-f32 GEMMs are exact fp32 products
// and sums (no TF32), so they agree with the CPU's sgemm to fp32 rounding; bf16/f16 operands run
// on tensor cores with fp32 accumulation. C may be f32 under 16-bit A and B (wgrad accumulating
// into fp32 main gradients with beta = 1).
//
// Epilogues map to CUBLASLT_EPILOGUE_BIAS, _GELU_AUX_BIAS and _DGELU (cuBLASLt's GELU is the tanh
// approximation, like ours). Where cuBLASLt cannot take one (aux leading dimension not a multiple
// of 8, bias or aux not 16-byte aligned, a GeLU epilogue into an f32 C or with beta != 0, no
// algorithm from the heuristic, or the call refused), the plain GEMM runs first (into C itself
// when C is f32, else into an fp32 scratch buffer owned by the backend) and gemm_epilogue_kernel
// adds what is left of beta * C, applies the epilogue in fp32 and rounds once: the semantics hold
// on every path.
//
// One cuBLASLt handle and one 32 MiB workspace per device; the descriptors and the heuristic's
// algorithm are cached per (shape, transposes, leading dimensions, batch, strides, storage types,
// epilogue, pointer alignments).
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/gelu_math.cuh"

namespace ptdp::cuda {

namespace {

// cuBLASLt reads the bias and the GeLU input with vector loads; narrower alignments go through
// the fallback (observed requirement, not a documented one).
constexpr int kEpilogueAlignment = 16;

// Largest power of two (<= 256, cuBLASLt's default assumption) dividing the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % static_cast<std::uintptr_t>(al) != 0) al /= 2;
  return al;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

bool reads_bias(Epilogue e) { return e == Epilogue::Bias || e == Epilogue::BiasGelu; }
bool uses_aux(Epilogue e) { return e == Epilogue::BiasGelu || e == Epilogue::DGelu; }

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::BiasGelu:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::DGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/// Whether cuBLASLt may be asked to run d's epilogue at all (its documented and observed limits).
/// The GeLU epilogues also stay on our kernel
///   - for an f32 C: cuBLASLt does not document the accuracy of its tanh (a hardware
///     approximation would be ~2^-11 relative, far coarser than an f32 result, and the all-f32
///     path is the one that must track the CPU to fp32 rounding); 16-bit results round more
///     coarsely than that, so they take cuBLASLt's fused epilogue;
///   - with beta != 0: where cuBLASLt applies gelu' relative to beta C is not documented, and
///     the layers never accumulate into a GeLU's output.
bool lt_epilogue_possible(const GemmDesc& d, int64_t ldc) {
  if (reads_bias(d.epilogue) && alignment_of(d.bias) < kEpilogueAlignment) return false;
  if (uses_aux(d.epilogue)) {
    if (d.c_type == DType::F32 || d.beta != 0.0f) return false;
    if (ldc % 8 != 0) return false;  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
    if (alignment_of(d.aux) < kEpilogueAlignment) return false;
  }
  return true;
}

std::string describe(const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc) {
  return str_cat("m=", d.m, " n=", d.n, " k=", d.k, " lda=", lda, " ldb=", ldb, " ldc=", ldc,
                 " a/b ", dtype_name(d.a_type), " c ", dtype_name(d.c_type));
}

// C = epilogue(s + beta * C), rounded once to TC, over `batch` matrices [m, n]. s is an fp32
// product (leading dimension lds, batch stride stride_s), or NULL for k == 0 (an empty product);
// it may be C itself (an f32 C, beta 0: each element is read and written by one thread). As in
// BLAS, C is not read when beta == 0. Epilogues come with batch == 1; bias has n elements and aux
// C's layout.
template <typename TC>
__global__ void gemm_epilogue_kernel(const float* s, int64_t lds, int64_t stride_s, TC* c,
                                     int64_t ldc, int64_t stride_c, int64_t m, int64_t n,
                                     int64_t batch, float beta, Epilogue epilogue, const TC* bias,
                                     TC* aux) {
  PTDP_GRID_STRIDE(t, batch * m * n) {
    const int64_t b = t / (m * n), r = (t / n) % m, col = t % n;
    const int64_t at = b * stride_c + r * ldc + col;
    float v = s != nullptr ? s[b * stride_s + r * lds + col] : 0.0f;
    if (beta != 0.0f) v = __fadd_rn(v, __fmul_rn(beta, to_f32(c[at])));
    switch (epilogue) {
      case Epilogue::Bias:
        v = __fadd_rn(v, to_f32(bias[col]));
        break;
      case Epilogue::BiasGelu:
        v = __fadd_rn(v, to_f32(bias[col]));
        aux[at] = from_f32<TC>(v);
        v = gelu_f32(v);
        break;
      case Epilogue::DGelu:
        v = __fmul_rn(v, gelu_grad_f32(to_f32(aux[at])));
        break;
      default:
        break;
    }
    c[at] = from_f32<TC>(v);
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

/// Matrix `i` of a strided batch: the operands advanced by i batch strides of their types.
GemmOperands batch_item(const GemmDesc& d, const GemmOperands& o, int64_t i) {
  const auto ea = static_cast<int64_t>(dtype_size(d.a_type));
  const auto ec = static_cast<int64_t>(dtype_size(d.c_type));
  return GemmOperands{static_cast<const char*>(o.a) + i * d.stride_a * ea,
                      static_cast<const char*>(o.b) + i * d.stride_b * ea,
                      static_cast<char*>(o.c) + i * d.stride_c * ec};
}

}  // namespace

void CudaBackend::destroy_plan(GemmPlan& plan) noexcept {
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.op) cublasLtMatmulDescDestroy(plan.op);
  plan = GemmPlan{};
}

GemmPlan& CudaBackend::gemm_plan(const GemmKey& k, const void* bias, const void* aux) {
  if (const auto it = plans_.find(k); it != plans_.end()) return it->second;
  GemmPlan plan;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    PTDP_CUBLAS(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, dev_);
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, dev_);
    if (k.epilogue != Epilogue::None) {
      set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(k.epilogue), dev_);
      // The heuristic reads the alignment of these pointers; gemm_lt sets them on every call.
      if (reads_bias(k.epilogue)) {
        // Bias has C's type (also cuBLASLt's default; said explicitly so it cannot drift).
        set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                 static_cast<int32_t>(cuda_type(k.c_type)), dev_);
        set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, dev_);
      }
      if (uses_aux(k.epilogue)) {
        // aux has D's type, cuBLASLt's default for the GeLU input.
        set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, dev_);
        set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, k.ldc, dev_);
      }
    }
    // Column-major views of the row-major storage (rows, cols, ld).
    const uint64_t a_rows = static_cast<uint64_t>(k.trans_b ? k.k : k.n);  // our B
    const uint64_t a_cols = static_cast<uint64_t>(k.trans_b ? k.n : k.k);
    const uint64_t b_rows = static_cast<uint64_t>(k.trans_a ? k.m : k.k);  // our A
    const uint64_t b_cols = static_cast<uint64_t>(k.trans_a ? k.k : k.m);
    const cudaDataType_t ab = cuda_type(k.ab_type), cd = cuda_type(k.c_type);
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.a, ab, a_rows, a_cols, k.ldb));
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.b, ab, b_rows, b_cols, k.lda));
    PTDP_CUBLAS(cublasLtMatrixLayoutCreate(&plan.c, cd, static_cast<uint64_t>(k.n),
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
    } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
               k.epilogue == Epilogue::None) {
      // An epilogue cuBLASLt rejects (whatever the status) just takes the fallback.
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

bool CudaBackend::gemm_lt(const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc, int64_t count,
                          const GemmOperands& ops) {
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
  key.ab_type = d.a_type;
  key.c_type = d.c_type;
  key.epilogue = d.epilogue;
  key.align_a = alignment_of(ops.a);
  key.align_b = alignment_of(ops.b);
  key.align_c = alignment_of(ops.c);
  key.align_bias = reads_bias(d.epilogue) ? alignment_of(d.bias) : 256;
  key.align_aux = uses_aux(d.epilogue) ? alignment_of(d.aux) : 256;
  GemmPlan& plan = gemm_plan(key, d.bias, d.aux);
  if (!plan.supported) return false;
  if (reads_bias(d.epilogue)) set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, d.bias, dev_);
  if (uses_aux(d.epilogue)) {
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, d.aux, dev_);
  }
  const float alpha = d.alpha, beta = d.beta;
  const cublasStatus_t st =
      cublasLtMatmul(lt_, plan.op, &alpha, ops.b, plan.a, ops.a, plan.b, &beta, ops.c, plan.c,
                     ops.c, plan.c, &plan.algo, workspace_, workspace_bytes_, stream_);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
      (st == CUBLAS_STATUS_INVALID_VALUE && d.epilogue != Epilogue::None)) {
    plan.supported = false;  // remember, and let the caller take another way
    return false;
  }
  if (st != CUBLAS_STATUS_SUCCESS) throw_cublas_error("cublasLtMatmul", st, dev_);
  return true;
}

float* CudaBackend::gemm_scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Work queued with the old block may still run; the caching allocator hands the block out
    // again only to work queued after it on this stream.
    device_free(dev_, scratch_, scratch_bytes_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    scratch_ = static_cast<float*>(device_alloc(dev_, bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void CudaBackend::gemm_via_scratch(const GemmDesc& d, int64_t lda, int64_t ldb, int64_t ldc,
                                   const GemmOperands& ops) {
  GemmDesc product = d;  // the plain GEMM of d's matrix, no epilogue
  product.batch = 1;
  product.stride_a = product.stride_b = product.stride_c = 0;
  product.epilogue = Epilogue::None;
  product.bias = nullptr;
  product.aux = nullptr;
  // An f32 C can hold r = alpha op(A) op(B) + beta C itself (cuBLASLt adds beta C); the kernel
  // then applies the epilogue in place. Otherwise r's product goes to the fp32 scratch, packed.
  const float* s = nullptr;
  int64_t lds = 0;
  float beta = d.beta;  // what the kernel still has to add
  if (d.c_type == DType::F32 && d.epilogue != Epilogue::None &&
      gemm_lt(product, lda, ldb, ldc, 1, ops)) {
    s = static_cast<const float*>(ops.c);
    lds = ldc;
    beta = 0.0f;
  } else {
    float* scratch = gemm_scratch(static_cast<std::size_t>(d.m * d.n) * sizeof(float));
    product.c_type = DType::F32;
    product.beta = 0.0f;
    if (!gemm_lt(product, lda, ldb, d.n, 1, GemmOperands{ops.a, ops.b, scratch})) {
      throw Error(ErrorCode::Unsupported,
                  str_cat("gemm: cuBLASLt has no algorithm for ", describe(d, lda, ldb, ldc),
                          " (device ", dev_, ")"));
    }
    s = scratch;
    lds = d.n;
  }
  dispatch_float(d.c_type, "gemm", [&](auto tag) {
    using TC = typename decltype(tag)::type;
    gemm_epilogue_kernel<TC><<<grid_for(d.m * d.n), kThreads, 0, stream_>>>(
        s, lds, 0, static_cast<TC*>(ops.c), ldc, 0, d.m, d.n, 1, beta, d.epilogue,
        static_cast<const TC*>(d.bias), static_cast<TC*>(d.aux));
  });
  PTDP_CU_LAUNCHED("gemm_epilogue_kernel");
}

void CudaBackend::gemm(const GemmDesc& d, const void* a, const void* b, void* c) {
  const kcheck::GemmLayout layout = kcheck::check_gemm(d, a, b, c);
  if (layout.work == kcheck::Work::none) return;
  const int64_t lda = layout.lda, ldb = layout.ldb, ldc = layout.ldc;
  DeviceGuard guard(dev_);
  std::lock_guard<std::mutex> lock(gemm_mutex_);
  const GemmOperands ops{a, b, c};
  if (d.k == 0) {  // cuBLASLt wants k > 0; the product is empty: C = epilogue(beta * C)
    dispatch_float(d.c_type, "gemm", [&](auto tag) {
      using TC = typename decltype(tag)::type;
      gemm_epilogue_kernel<TC><<<grid_for(d.batch * d.m * d.n), kThreads, 0, stream_>>>(
          nullptr, 0, 0, static_cast<TC*>(c), ldc, d.stride_c, d.m, d.n, d.batch, d.beta,
          d.epilogue, static_cast<const TC*>(d.bias), static_cast<TC*>(d.aux));
    });
    PTDP_CU_LAUNCHED("gemm_epilogue_kernel");
    return;
  }
  if (d.epilogue != Epilogue::None) {  // batch == 1 (checked)
    if (lt_epilogue_possible(d, ldc) && gemm_lt(d, lda, ldb, ldc, 1, ops)) return;
    gemm_via_scratch(d, lda, ldb, ldc, ops);
    return;
  }
  // cuBLASLt counts batches in int32: larger batches go in chunks. A batch no algorithm takes
  // as a whole (broadcast strides, for example) falls back to one call per matrix, and a matrix
  // no algorithm writes directly (C's alignment, for example) to the fp32 scratch.
  constexpr int64_t kMaxChunk = INT32_MAX;
  for (int64_t first = 0; first < d.batch; first += kMaxChunk) {
    const int64_t count = std::min(kMaxChunk, d.batch - first);
    if (gemm_lt(d, lda, ldb, ldc, count, batch_item(d, ops, first))) continue;
    for (int64_t i = first; i < first + count; ++i) {
      const GemmOperands one = batch_item(d, ops, i);
      if (!gemm_lt(d, lda, ldb, ldc, 1, one)) gemm_via_scratch(d, lda, ldb, ldc, one);
    }
  }
}

}  // namespace ptdp::cuda
