// Newton-Schulz orthogonalisation (Muon) through cuBLAS: the iteration of NewtonSchulzDesc on
// the [k, n] orientation (k = min(rows, cols), n = max), in the backend's scratch (grown from the
// caching allocator, never shrunk), on the compute stream.
//
// The products are cublasGemmEx calls (the backend's handle, serialised by gemm_mutex_ as every
// GEMM of the backend, sharing cuBLASLt's workspace). cuBLAS has no bf16 or TF32 symmetric
// rank-k update, so unlike the CPU (kernels/cpu/newton_schulz.cpp) A = X X^T and A A are full
// products and no triangle is filled. The norm is a fixed-grid sum in double (kReduceBlocks
// partials added in order), so the bits do not depend on the GPU's size.
//
// precision 2 emulates PyTorch's torch.optim.Muon: X, A and B are bf16 in memory, each product
// accumulates in fp32 and cuBLAS applies the epilogue (b A + c A A, a X + B X) in fp32 and rounds
// its output to bf16 (round to nearest even), as the CPU's explicit rounding does. precision 1
// runs the fp32 products with TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32).
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kTile = 32;  // transpose tile (kTile x 8 threads)

// Pass 2 of ||x||_F (pass 1: sum_squares_partial_kernel): div = max(||x||_F, eps), the
// partials added in a fixed order.
__global__ void ns_norm_kernel(const double* partials, int count, float eps, float* div) {
  const double v = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  const double total = block_reduce(v, SumOp{}, 0.0);
  if (threadIdx.x == 0) div[0] = fmaxf(static_cast<float>(sqrt(total)), eps);
}

// xs [k, n] = x / div (tall: x [n, k] transposed through a shared tile), rounded to T.
template <typename T>
__global__ void ns_normalise_kernel(const float* x, T* xs, int64_t rows, int64_t cols, bool tall,
                                    const float* div) {
  const float dv = div[0];
  if (!tall) {
    PTDP_GRID_STRIDE(i, rows * cols) xs[i] = from_f32<T>(x[i] / dv);
    return;
  }
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = x[r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x;  // xs [cols, rows]
    if (r < rows && c < cols) xs[c * rows + r] = from_f32<T>(tile[threadIdx.x][j] / dv);
  }
}

// x [rows, cols] = xs [k, n] widened to fp32 (tall: transposed back through a shared tile).
template <typename T>
__global__ void ns_store_kernel(const T* xs, float* x, int64_t rows, int64_t cols, bool tall) {
  if (!tall) {
    PTDP_GRID_STRIDE(i, rows * cols) x[i] = to_f32(xs[i]);
    return;
  }
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x;  // xs [cols, rows]
    if (r < rows && c < cols) tile[threadIdx.x][j] = to_f32(xs[c * rows + r]);
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) x[r * cols + c] = tile[j][threadIdx.x];
  }
}

template <typename T>
constexpr cudaDataType_t ns_type() {
  return sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_16BF;
}

}  // namespace

void* CudaBackend::ns_scratch(std::size_t bytes) {
  if (bytes > ns_scratch_bytes_) {
    // As gemm_scratch: the caching allocator hands the old block out again only to later work
    // on this stream.
    device_free(dev_, ns_scratch_, ns_scratch_bytes_);
    ns_scratch_ = nullptr;
    ns_scratch_bytes_ = 0;
    ns_scratch_ = device_alloc(dev_, bytes);
    ns_scratch_bytes_ = bytes;
  }
  return ns_scratch_;
}

template <typename T>
void CudaBackend::newton_schulz_as(float* x, const NewtonSchulzDesc& d) {
  const bool tall = d.rows > d.cols;
  const int64_t k = tall ? d.cols : d.rows, n = tall ? d.rows : d.cols;
  const int ik = static_cast<int>(k), in = static_cast<int>(n);
  const cudaDataType_t type = ns_type<T>();
  const cublasComputeType_t compute = d.precision == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Scratch: partials [kReduceBlocks] double, div [1] float (256-byte slot), X and the next X
  // [k, n], A and B [k, k], each 256-byte aligned.
  auto round_up = [](std::size_t b) { return (b + 255) / 256 * 256; };
  const std::size_t xb = round_up(static_cast<std::size_t>(k * n) * sizeof(T));
  const std::size_t ab = round_up(static_cast<std::size_t>(k * k) * sizeof(T));
  const std::size_t head = round_up(kReduceBlocks * sizeof(double)) + 256;
  char* base = static_cast<char*>(ns_scratch(head + 2 * xb + 2 * ab));
  auto* partials = reinterpret_cast<double*>(base);
  auto* div = reinterpret_cast<float*>(base + head - 256);
  T* xs = reinterpret_cast<T*>(base + head);            // X [k, n]
  T* ys = reinterpret_cast<T*>(base + head + xb);       // the next X [k, n]
  T* a = reinterpret_cast<T*>(base + head + 2 * xb);    // A [k, k]
  T* b = reinterpret_cast<T*>(base + head + 2 * xb + ab);  // B [k, k]

  // X = x / max(||x||_F, eps) (the norm does not depend on the orientation)
  // ||x||_F: the partial sums of squares, then their total.
  sum_squares_partial_kernel<<<kReduceBlocks, kThreads, 0, stream_>>>(x, d.rows * d.cols, partials);
  PTDP_CU_LAUNCHED("sum_squares_partial_kernel");
  ns_norm_kernel<<<1, kReduceBlocks, 0, stream_>>>(partials, kReduceBlocks, d.eps, div);
  PTDP_CU_LAUNCHED("ns_norm_kernel");
  // Tall: rows > cols, so the rows' tiles go on x (up to 2^31 - 1), the columns' on y.
  const dim3 tiles(static_cast<unsigned>((d.rows + kTile - 1) / kTile),
                   static_cast<unsigned>((d.cols + kTile - 1) / kTile));
  if (tall) {
    ns_normalise_kernel<T><<<tiles, dim3(kTile, 8), 0, stream_>>>(x, xs, d.rows, d.cols, true, div);
  } else {
    ns_normalise_kernel<T><<<grid_for(k * n), kThreads, 0, stream_>>>(x, xs, d.rows, d.cols, false, div);
  }
  PTDP_CU_LAUNCHED("ns_normalise_kernel");

  // Row-major [r, c] is cuBLAS's column-major [c, r]: X is Xc [n, k] (ld n), and A, B are
  // symmetric, so row- and column-major agree for them.
  cublasHandle_t h = blas();
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < d.steps; ++i) {
    const float* coef = d.coefficients[i % d.num_sets];
    // A = X X^T [k, k] = Xc^T Xc
    PTDP_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, ik, ik, in, &one, xs, type, in, xs, type, in,
                             &zero, a, type, ik, compute, CUBLAS_GEMM_DEFAULT));
    // B = b A + c A A [k, k]
    PTDP_CU(cudaMemcpyAsync(b, a, static_cast<std::size_t>(k * k) * sizeof(T), cudaMemcpyDeviceToDevice,
                            stream_));
    PTDP_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, ik, ik, ik, &coef[2], a, type, ik, a, type, ik,
                             &coef[1], b, type, ik, compute, CUBLAS_GEMM_DEFAULT));
    // X = a X + B X [k, n]: Yc [n, k] = a Xc + Xc B^T (B = B^T)
    PTDP_CU(cudaMemcpyAsync(ys, xs, static_cast<std::size_t>(k * n) * sizeof(T), cudaMemcpyDeviceToDevice,
                            stream_));
    PTDP_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, in, ik, ik, &one, xs, type, in, b, type, ik,
                             &coef[0], ys, type, in, compute, CUBLAS_GEMM_DEFAULT));
    std::swap(xs, ys);
  }

  if (tall) {
    ns_store_kernel<T><<<tiles, dim3(kTile, 8), 0, stream_>>>(xs, x, d.rows, d.cols, true);
  } else {
    ns_store_kernel<T><<<grid_for(k * n), kThreads, 0, stream_>>>(xs, x, d.rows, d.cols, false);
  }
  PTDP_CU_LAUNCHED("ns_store_kernel");
}

void CudaBackend::newton_schulz(float* x, const NewtonSchulzDesc& d) {
  kcheck::check_newton_schulz(x, d);
  DeviceGuard guard(dev_);
  std::lock_guard<std::mutex> lock(gemm_mutex_);
  if (d.precision == 2) {
    newton_schulz_as<__nv_bfloat16>(x, d);
  } else {
    newton_schulz_as<float>(x, d);
  }
}

}  // namespace ptdp::cuda
