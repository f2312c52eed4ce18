// The CUDA backend's construction, memory movement, fused attention (delegated to the flash
// kernels of flash_attention.cuh) and per-device instances; each op group lives in its own file,
// as in kernels/cpu.
#include <atomic>
#include <mutex>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/flash_attention.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kMaxDevices = 64;
constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt workspace per device

const char* cublas_status_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "unknown cuBLAS status";
  }
}

}  // namespace

void throw_cuda_error(const char* call, cudaError_t err, int device) {
  throw Error(ErrorCode::Device,
              str_cat(call, ": ", cudaGetErrorString(err), " (device ", device, ")"));
}

void throw_cublas_error(const char* call, cublasStatus_t st, int device) {
  throw Error(ErrorCode::Device, str_cat(call, ": ", cublas_status_name(st), " (",
                                         static_cast<int>(st), ") (device ", device, ")"));
}

CudaBackend::CudaBackend(int device) : dev_(device) {
  DeviceGuard guard(dev_);
  PTDP_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PTDP_CUBLAS(cublasLtCreate(&lt_));
  workspace_bytes_ = kWorkspaceBytes;
  workspace_ = device_alloc(dev_, workspace_bytes_);
  partials_ = static_cast<double*>(device_alloc(dev_, (kReduceBlocks + 1) * sizeof(double)));
}

CudaBackend::~CudaBackend() {
  // Instances live until exit (see backend()); this runs only for a backend made elsewhere.
  cudaStreamSynchronize(stream_);
  for (auto& [key, plan] : plans_) destroy_plan(plan);
  device_free(dev_, scratch_, scratch_bytes_);
  device_free(dev_, ns_scratch_, ns_scratch_bytes_);
  device_free(dev_, grouped_ptrs_, 3 * grouped_ptrs_count_ * sizeof(void*));
  if (blas_) cublasDestroy(blas_);
  device_free(dev_, partials_, (kReduceBlocks + 1) * sizeof(double));
  device_free(dev_, workspace_, workspace_bytes_);
  cublasLtDestroy(lt_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  kcheck::not_null("copy_from_host", "dst", dst);
  kcheck::not_null("copy_from_host", "host_src", host_src);
  DeviceGuard guard(dev_);
  PTDP_CU(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may reuse or free its host buffer once we return; with page-locked memory the
  // asynchronous copy would still be reading it, so wait (host-to-device copies are rare).
  PTDP_CU(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  kcheck::not_null("copy_to_host", "host_dst", host_dst);
  kcheck::not_null("copy_to_host", "src", src);
  DeviceGuard guard(dev_);
  PTDP_CU(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  PTDP_CU(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  kcheck::not_null("copy", "dst", dst);
  kcheck::not_null("copy", "src", src);
  DeviceGuard guard(dev_);
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  const bool overlap = d < s + bytes && s < d + bytes;
  if (!overlap) {
    PTDP_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  // memmove semantics (as the CPU backend): go through a temporary block; freeing it right
  // after queuing is safe because its reuse is ordered on the same stream.
  void* tmp = device_alloc(dev_, bytes);
  PTDP_CU(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  PTDP_CU(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, stream_));
  device_free(dev_, tmp, bytes);
}

void CudaBackend::synchronize() {
  DeviceGuard guard(dev_);
  PTDP_CU(cudaStreamSynchronize(stream_));
}

bool CudaBackend::fused_attention_supported(DType t, int64_t dh) const {
  return flash_attention_supported(t, dh);
}

void CudaBackend::attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                                    DType t) {
  kcheck::check_attention_forward(d, qkv, ctx, lse, t);
  if (!fused_attention_supported(t, d.dh)) {
    throw Error(ErrorCode::Unsupported,
                str_cat("attention_forward: no fused attention kernel for t = ", dtype_name(t),
                        ", dh = ", d.dh, " (device ", dev_, ")"));
  }
  DeviceGuard guard(dev_);
  flash_attention_forward(d, qkv, ctx, lse, t, stream_);
  PTDP_CU_LAUNCHED("flash_attention_forward");
}

void CudaBackend::attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                                     const float* lse, const void* dctx, void* dqkv, float* delta,
                                     DType t) {
  kcheck::check_attention_backward(d, qkv, ctx, lse, dctx, dqkv, delta, t);
  if (!fused_attention_supported(t, d.dh)) {
    throw Error(ErrorCode::Unsupported,
                str_cat("attention_backward: no fused attention kernel for t = ", dtype_name(t),
                        ", dh = ", d.dh, " (device ", dev_, ")"));
  }
  DeviceGuard guard(dev_);
  flash_attention_backward(d, qkv, ctx, lse, dctx, dqkv, delta, t, stream_);
  PTDP_CU_LAUNCHED("flash_attention_backward");
}

namespace {

std::mutex g_create_mutex;
std::atomic<CudaBackend*> g_backends[kMaxDevices];

}  // namespace

Backend& backend(int device) {
  if (device >= 0 && device < kMaxDevices) {
    CudaBackend* b = g_backends[device].load(std::memory_order_acquire);
    if (b != nullptr) return *b;
  }
  const int count = device_count();
  if (device < 0 || device >= count || device >= kMaxDevices) {
    throw Error(ErrorCode::Device,
                str_cat("CUDA device ", device, " does not exist (", count, " devices)"));
  }
  CudaBackend* b = g_backends[device].load(std::memory_order_acquire);
  if (b != nullptr) return *b;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  b = g_backends[device].load(std::memory_order_relaxed);
  if (b == nullptr) {
    // Never destroyed: at exit the CUDA runtime may be torn down before static destructors.
    b = new CudaBackend(device);
    g_backends[device].store(b, std::memory_order_release);
  }
  return *b;
}

void* compute_stream(int device) { return static_cast<CudaBackend&>(backend(device)).stream(); }

void memcpy_to_host(int device, void* host, const void* dev, std::size_t bytes) {
  backend(device).copy_to_host(host, dev, bytes);
}

void memcpy_to_device(int device, void* dev, const void* host, std::size_t bytes) {
  backend(device).copy_from_host(dev, host, bytes);
}

}  // namespace ptdp::cuda
