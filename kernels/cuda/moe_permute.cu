// Dispatch and combine of MoE tokens on the device (see kernels/cpu/moe_permute.cpp).
//   moe_permute:            one block row per slot copies the token's row, in 16-byte words
//                           where the row width and the pointers allow, else element by element;
//   moe_unpermute:          one block row per token sums its slots' rows in slot order in fp32;
//   moe_unpermute_backward: one warp per slot writes de = w dy and reduces dprobs = <dy, e>
//                           with a fixed shuffle tree (deterministic).
// Each output element is written by one thread, so the results do not depend on scheduling.
#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kSlotsPerBlock = kThreads / kWarp;

/// The row slot s maps to, or -1 where it is dropped or outside [0, rows).
__device__ __forceinline__ int64_t slot_row(const int32_t* row_of, int64_t s, int64_t rows) {
  const int64_t r = row_of[s];
  return r >= 0 && r < rows ? r : -1;
}

// Rows of `units` words of type U; slot s copies token s / k's row to row_of[s].
template <typename U>
__global__ void permute_kernel(const U* x, const int32_t* row_of, int64_t slots, int64_t k,
                               int64_t units, int64_t rows, U* out) {
  for (int64_t s = blockIdx.y; s < slots; s += gridDim.y) {
    const int64_t r = slot_row(row_of, s, rows);
    if (r < 0) continue;
    const U* src = x + (s / k) * units;
    U* dst = out + r * units;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < units;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      dst[c] = src[c];
    }
  }
}

template <typename T>
__global__ void unpermute_kernel(const T* e, const float* probs, const int32_t* row_of,
                                 int64_t tokens, int64_t k, int64_t h, int64_t rows, T* y) {
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < h;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = slot_row(row_of, t * k + j, rows);
        if (r < 0) continue;
        const float w = probs != nullptr ? probs[t * k + j] : 1.0f;
        acc = __fadd_rn(acc, __fmul_rn(w, to_f32(e[r * h + c])));
      }
      y[t * h + c] = from_f32<T>(acc);
    }
  }
}

template <typename T>
__global__ void unpermute_backward_kernel(const T* dy, const T* e, const float* probs,
                                          const int32_t* row_of, int64_t slots, int64_t k,
                                          int64_t h, int64_t rows, T* de, float* dprobs) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kSlotsPerBlock;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kSlotsPerBlock + threadIdx.x / kWarp;
       s < slots; s += warps) {
    const int64_t r = slot_row(row_of, s, rows);
    if (r < 0) {
      if (lane == 0) dprobs[s] = 0.0f;
      continue;
    }
    const float w = probs[s];
    const T* dyr = dy + (s / k) * h;
    const T* er = e + r * h;
    T* der = de + r * h;
    float dot = 0.0f;
    for (int64_t c = lane; c < h; c += kWarp) {
      const float g = to_f32(dyr[c]);
      dot = __fadd_rn(dot, __fmul_rn(g, to_f32(er[c])));
      der[c] = from_f32<T>(__fmul_rn(w, g));
    }
    for (int off = kWarp / 2; off > 0; off /= 2) dot += __shfl_down_sync(0xffffffffu, dot, off);
    if (lane == 0) dprobs[s] = dot;
  }
}

template <typename U>
void launch_permute(const void* x, const int32_t* row_of, int64_t slots, int64_t k,
                    std::size_t row_bytes, int64_t rows, void* out, cudaStream_t stream) {
  const auto units = static_cast<int64_t>(row_bytes / sizeof(U));
  permute_kernel<U><<<rows_cols_grid(slots, units), kThreads, 0, stream>>>(
      static_cast<const U*>(x), row_of, slots, k, units, rows, static_cast<U*>(out));
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace

void CudaBackend::moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens,
                              int64_t k, int64_t h, int64_t rows, void* out) {
  if (kcheck::check_moe_permute(x, t, row_of, tokens, k, h, rows, out) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  const std::size_t row_bytes = static_cast<std::size_t>(h) * dtype_size(t);
  const int64_t slots = tokens * k;
  // The widest word that divides the row and both buffers' alignment (every row then starts on
  // such a word too).
  if (row_bytes % 16 == 0 && aligned(x, 16) && aligned(out, 16)) {
    launch_permute<uint4>(x, row_of, slots, k, row_bytes, rows, out, stream_);
  } else if (row_bytes % 8 == 0 && aligned(x, 8) && aligned(out, 8)) {
    launch_permute<uint64_t>(x, row_of, slots, k, row_bytes, rows, out, stream_);
  } else if (row_bytes % 4 == 0 && aligned(x, 4) && aligned(out, 4)) {
    launch_permute<uint32_t>(x, row_of, slots, k, row_bytes, rows, out, stream_);
  } else {
    launch_permute<uint16_t>(x, row_of, slots, k, row_bytes, rows, out, stream_);
  }
  PTDP_CU_LAUNCHED("permute_kernel");
}

void CudaBackend::moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of,
                                int64_t tokens, int64_t k, int64_t h, int64_t rows, void* y) {
  if (kcheck::check_moe_unpermute(e, t, row_of, tokens, k, h, rows, y) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  dispatch_float(t, "moe_unpermute", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unpermute_kernel<T><<<rows_cols_grid(tokens, h), kThreads, 0, stream_>>>(
        static_cast<const T*>(e), probs, row_of, tokens, k, h, rows, static_cast<T*>(y));
  });
  PTDP_CU_LAUNCHED("unpermute_kernel");
}

void CudaBackend::moe_unpermute_backward(const void* dy, const void* e, DType t,
                                         const float* probs, const int32_t* row_of,
                                         int64_t tokens, int64_t k, int64_t h, int64_t rows,
                                         void* de, float* dprobs) {
  if (kcheck::check_moe_unpermute_backward(dy, e, t, probs, row_of, tokens, k, h, rows, de,
                                           dprobs) == kcheck::Work::none) {
    return;
  }
  DeviceGuard guard(dev_);
  const int64_t slots = tokens * k;
  dispatch_float(t, "moe_unpermute_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unpermute_backward_kernel<T>
        <<<grid_for(slots, kSlotsPerBlock), kThreads, 0, stream_>>>(
            static_cast<const T*>(dy), static_cast<const T*>(e), probs, row_of, slots, k, h, rows,
            static_cast<T*>(de), dprobs);
  });
  PTDP_CU_LAUNCHED("unpermute_backward_kernel");
}

}  // namespace ptdp::cuda
