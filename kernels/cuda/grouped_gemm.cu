// Grouped GEMM (GroupedGemmDesc) through cuBLAS's cublasGemmGroupedBatchedEx: every expert's
// GEMM in one call on the compute stream. The sizes are host values the caller already holds,
// so nothing waits for the device: the problems' shapes go to cuBLAS as host arrays, and the
// operand pointers it wants in device memory are written there by a kernel whose arguments carry
// them (no copy from pageable host memory, which may wait for the stream).
//
// Row-major to column-major as in gemm_cublaslt.cu: C[m, n] = op(A) op(B) is computed as
// C^T[n, m] = op(B)^T op(A)^T, cuBLAS's first operand being our B (transposed iff trans_b) and
// its second our A (transposed iff trans_a); leading dimensions carry over unchanged.
//   varying M: group g is (m_g, n, k), trans_a false, trans_b as given: (n, m_g, k) for cuBLAS
//   varying K: group g is (m, n, k_g), trans_a true, trans_b false:     (n, m, k_g) for cuBLAS
// Groups of no rows (varying M) are left out; groups of no tokens under varying K get
// C_g = beta * C_g from scale_kernel (cuBLAS is not asked to take k = 0).
//
// cublasGemmGroupedBatchedEx takes A, B and C of one type (f32, bf16 or f16; fp32 compute, no
// TF32, as every GEMM of this backend). A 16-bit product accumulated into an f32 C (the wgrad
// into fp32 main gradients), and any call cuBLAS refuses, run as one cublasGemmEx per group on
// the same stream instead: still no host synchronisation.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

// Problems whose pointers one fill_pointers_kernel launch carries (3 * 8 * 128 bytes of
// arguments, within the 4 KiB every architecture takes).
constexpr int kPointerChunk = 128;

struct PointerChunk {
  const void* a[kPointerChunk];
  const void* b[kPointerChunk];
  void* c[kPointerChunk];
  int count;
  int64_t first;
  int64_t total;  // problems in the whole call: the B array starts at total, C at 2 * total
};

__global__ void fill_pointers_kernel(PointerChunk chunk, void** out) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= chunk.count) return;
  out[chunk.first + i] = const_cast<void*>(chunk.a[i]);
  out[chunk.total + chunk.first + i] = const_cast<void*>(chunk.b[i]);
  out[2 * chunk.total + chunk.first + i] = chunk.c[i];
}

// C [m, n] (leading dimension ldc) = beta * C; as in BLAS, C is not read when beta == 0.
template <typename TC>
__global__ void scale_kernel(TC* c, int64_t ldc, int64_t m, int64_t n, float beta) {
  PTDP_GRID_STRIDE(i, m * n) {
    TC* at = c + (i / n) * ldc + i % n;
    *at = from_f32<TC>(beta == 0.0f ? 0.0f : __fmul_rn(beta, to_f32(*at)));
  }
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

const void* advance(const void* p, int64_t elements, DType t) {
  if (p == nullptr) return nullptr;
  return static_cast<const char*>(p) + static_cast<std::size_t>(elements) * dtype_size(t);
}
void* advance(void* p, int64_t elements, DType t) {
  return static_cast<char*>(p) + static_cast<std::size_t>(elements) * dtype_size(t);
}

/// The problems of one call in cuBLAS's (column-major) terms, one group of size 1 each.
struct Problems {
  std::vector<cublasOperation_t> transa, transb;
  std::vector<int64_t> m, n, k, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  std::vector<const void*> a, b;  // cuBLAS's A (our B) and B (our A)
  std::vector<void*> c;

  void add(cublasOperation_t ta, cublasOperation_t tb, int64_t mm, int64_t nn, int64_t kk,
           const void* pa, int64_t la, const void* pb, int64_t lb, void* pc, int64_t lc,
           float al, float be) {
    transa.push_back(ta);
    transb.push_back(tb);
    m.push_back(mm);
    n.push_back(nn);
    k.push_back(kk);
    a.push_back(pa);
    lda.push_back(la);
    b.push_back(pb);
    ldb.push_back(lb);
    c.push_back(pc);
    ldc.push_back(lc);
    alpha.push_back(al);
    beta.push_back(be);
    group_size.push_back(1);
  }
  std::size_t size() const { return m.size(); }
};

}  // namespace

cublasHandle_t CudaBackend::blas() {
  if (blas_ == nullptr) {
    PTDP_CUBLAS(cublasCreate(&blas_));
    PTDP_CUBLAS(cublasSetStream(blas_, stream_));
    // The GEMMs of this backend are serialised by gemm_mutex_ and ordered on stream_, so cuBLAS
    // may share cuBLASLt's workspace (and allocates none of its own).
    PTDP_CUBLAS(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
  }
  return blas_;
}

void** CudaBackend::grouped_pointers(std::size_t count) {
  if (count > grouped_ptrs_count_) {
    // As gemm_scratch: the caching allocator hands the old block out again only to later work
    // on this stream.
    device_free(dev_, grouped_ptrs_, 3 * grouped_ptrs_count_ * sizeof(void*));
    grouped_ptrs_ = nullptr;
    grouped_ptrs_count_ = 0;
    grouped_ptrs_ = static_cast<void**>(device_alloc(dev_, 3 * count * sizeof(void*)));
    grouped_ptrs_count_ = count;
  }
  return grouped_ptrs_;
}

void CudaBackend::grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) {
  const kcheck::GroupedGemmLayout l = kcheck::check_grouped_gemm(d, a, b, c);
  if (l.work == kcheck::Work::none) return;
  DeviceGuard guard(dev_);
  std::lock_guard<std::mutex> lock(gemm_mutex_);
  Problems p;
  int64_t off = 0;  // first row of group g in the stacked operands
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t s = d.sizes[g];
    if (d.varying == GroupedDim::M) {
      if (s > 0) {
        p.add(d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, d.n, s, d.k,
              advance(b, g * l.stride, d.b_type), l.ldb, advance(a, off * l.lda, d.a_type), l.lda,
              advance(c, off * l.ldc, d.c_type), l.ldc, d.alpha, d.beta);
      }
    } else if (s > 0) {
      p.add(CUBLAS_OP_N, CUBLAS_OP_T, d.n, d.m, s, advance(b, off * l.ldb, d.b_type), l.ldb,
            advance(a, off * l.lda, d.a_type), l.lda, advance(c, g * l.stride, d.c_type), l.ldc,
            d.alpha, d.beta);
    } else if (d.beta != 1.0f) {  // a group without tokens: C_g = beta * C_g
      dispatch_float(d.c_type, "grouped_gemm", [&](auto tag) {
        using TC = typename decltype(tag)::type;
        scale_kernel<TC><<<grid_for(d.m * d.n), kThreads, 0, stream_>>>(
            static_cast<TC*>(advance(c, g * l.stride, d.c_type)), l.ldc, d.m, d.n, d.beta);
      });
      PTDP_CU_LAUNCHED("scale_kernel");
    }
    off += s;
  }
  if (p.size() == 0) return;
  const cudaDataType_t ab = cuda_type(d.a_type), ct = cuda_type(d.c_type);
  cublasHandle_t h = blas();
  if (d.c_type == d.a_type) {
    const std::size_t count = p.size();
    void** ptrs = grouped_pointers(count);
    for (std::size_t first = 0; first < count; first += kPointerChunk) {
      PointerChunk chunk{};
      chunk.count = static_cast<int>(std::min<std::size_t>(kPointerChunk, count - first));
      chunk.first = static_cast<int64_t>(first);
      chunk.total = static_cast<int64_t>(count);
      for (int i = 0; i < chunk.count; ++i) {
        chunk.a[i] = p.a[first + static_cast<std::size_t>(i)];
        chunk.b[i] = p.b[first + static_cast<std::size_t>(i)];
        chunk.c[i] = p.c[first + static_cast<std::size_t>(i)];
      }
      fill_pointers_kernel<<<1, kPointerChunk, 0, stream_>>>(chunk, ptrs);
      PTDP_CU_LAUNCHED("fill_pointers_kernel");
    }
    const cublasStatus_t st = cublasGemmGroupedBatchedEx_64(
        h, p.transa.data(), p.transb.data(), p.m.data(), p.n.data(), p.k.data(), p.alpha.data(),
        const_cast<const void* const*>(ptrs), ab, p.lda.data(),
        const_cast<const void* const*>(ptrs + count), ab, p.ldb.data(), p.beta.data(),
        ptrs + 2 * count, ct, p.ldc.data(), static_cast<int64_t>(count), p.group_size.data(),
        CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) {
      throw_cublas_error("cublasGemmGroupedBatchedEx_64", st, dev_);
    }
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    PTDP_CUBLAS(cublasGemmEx_64(h, p.transa[i], p.transb[i], p.m[i], p.n[i], p.k[i], &p.alpha[i],
                                p.a[i], ab, p.lda[i], p.b[i], ab, p.ldb[i], &p.beta[i], p.c[i],
                                ct, p.ldc[i], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace ptdp::cuda
