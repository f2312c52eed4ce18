// Vocabulary-parallel embedding lookup and its deterministic scatter-add backward, for every
// floating storage type of the table and the activations (the table's gradient is fp32).
//
// Backward without float atomics: the tokens' table rows are sorted with a stable radix sort
// (token indices stay in ascending order within a row), and the first token of each row's
// segment gets a block that adds the segment's gradient rows in token order. The additions per
// table element therefore happen in the CPU backend's order (tokens ascending, fp32, starting
// from dtable's contents), so the result is bit-identical to the CPU's and to every other run.
#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr unsigned kMaxBlocks = 65535u * 8u;

// A copy: Bits is the storage word (float or uint16_t), and all-zero bits are 0 in every type.
template <typename Bits>
__global__ void embedding_forward_kernel(const int32_t* ids, int64_t n, const Bits* table,
                                         int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                         Bits* out) {
  PTDP_GRID_STRIDE(t, n * h) {
    const int64_t i = t / h, c = t % h;
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    out[t] = (row >= 0 && row < vocab_rows) ? table[row * h + c] : Bits(0);
  }
}

// keys[i]: the local table row of token i, or `absent` (larger than every row) when another
// rank owns it; vals[i] = i.
__global__ void embedding_keys_kernel(const int32_t* ids, int64_t n, int64_t vocab_start,
                                      int64_t vocab_rows, uint32_t absent, uint32_t* keys,
                                      int32_t* vals) {
  PTDP_GRID_STRIDE(i, n) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    keys[i] = (row >= 0 && row < vocab_rows) ? static_cast<uint32_t>(row) : absent;
    vals[i] = static_cast<int32_t>(i);
  }
}

// Block p handles sorted position p when it starts a segment of an owned row.
template <typename T>
__global__ void embedding_backward_kernel(const uint32_t* keys, const int32_t* tokens, int64_t n,
                                          const T* dout, int64_t h, uint32_t absent,
                                          float* dtable) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const uint32_t key = keys[p];
    if (key == absent || (p > 0 && keys[p - 1] == key)) continue;  // uniform across the block
    float* d = dtable + static_cast<int64_t>(key) * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      float acc = d[c];
      for (int64_t q = p; q < n && keys[q] == key; ++q) {
        acc += to_f32(dout[static_cast<int64_t>(tokens[q]) * h + c]);
      }
      d[c] = acc;
    }
  }
}

int bits_for(uint32_t v) {
  int b = 0;
  while (b < 32 && (v >> b) != 0) ++b;
  return b < 1 ? 1 : b;
}

}  // namespace

void CudaBackend::embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                                    int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                    void* out) {
  kcheck::check_embedding_forward(ids, n, table, t, vocab_start, vocab_rows, h, out);
  if (n == 0 || h == 0) return;
  DeviceGuard guard(dev_);
  if (t == DType::F32) {
    embedding_forward_kernel<<<grid_for(n * h), kThreads, 0, stream_>>>(
        ids, n, static_cast<const float*>(table), vocab_start, vocab_rows, h,
        static_cast<float*>(out));
  } else {  // bf16 and f16: 16-bit words
    embedding_forward_kernel<<<grid_for(n * h), kThreads, 0, stream_>>>(
        ids, n, static_cast<const uint16_t*>(table), vocab_start, vocab_rows, h,
        static_cast<uint16_t*>(out));
  }
  PTDP_CU_LAUNCHED("embedding_forward_kernel");
}

void CudaBackend::embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                                     int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                     float* dtable) {
  kcheck::check_embedding_backward(ids, n, dout, t, vocab_start, vocab_rows, h, dtable);
  if (n == 0 || h == 0 || vocab_rows == 0) return;
  PTDP_CHECK_ARG(n <= INT_MAX, "embedding_backward: n = " + std::to_string(n) +
                                   " tokens exceeds the CUDA backend's limit of " +
                                   std::to_string(INT_MAX));
  DeviceGuard guard(dev_);
  // Owned rows are < min(vocab_rows, 2^31) (ids are int32, vocab_start >= 0): `absent` is
  // larger than all of them and sorts last.
  const uint32_t absent =
      vocab_rows <= INT_MAX ? static_cast<uint32_t>(vocab_rows) : static_cast<uint32_t>(UINT32_MAX);
  const int end_bit = bits_for(absent);
  const auto count = static_cast<int>(n);
  const std::size_t key_bytes = static_cast<std::size_t>(n) * sizeof(uint32_t);
  const std::size_t val_bytes = static_cast<std::size_t>(n) * sizeof(int32_t);
  std::size_t temp_bytes = 0;
  PTDP_CU(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), count, 0, end_bit,
      stream_));
  // Scratch from the caching allocator; freeing it right after queuing is safe because any
  // reuse is ordered after these kernels on the same stream.
  auto* keys_in = static_cast<uint32_t*>(device_alloc(dev_, key_bytes));
  auto* keys_out = static_cast<uint32_t*>(device_alloc(dev_, key_bytes));
  auto* vals_in = static_cast<int32_t*>(device_alloc(dev_, val_bytes));
  auto* vals_out = static_cast<int32_t*>(device_alloc(dev_, val_bytes));
  void* temp = device_alloc(dev_, temp_bytes > 0 ? temp_bytes : 1);
  const auto release = [&]() noexcept {
    device_free(dev_, keys_in, key_bytes);
    device_free(dev_, keys_out, key_bytes);
    device_free(dev_, vals_in, val_bytes);
    device_free(dev_, vals_out, val_bytes);
    device_free(dev_, temp, temp_bytes > 0 ? temp_bytes : 1);
  };
  try {
    embedding_keys_kernel<<<grid_for(n), kThreads, 0, stream_>>>(ids, n, vocab_start, vocab_rows,
                                                                 absent, keys_in, vals_in);
    PTDP_CU_LAUNCHED("embedding_keys_kernel");
    PTDP_CU(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                            count, 0, end_bit, stream_));
    const auto blocks = static_cast<unsigned>(n < kMaxBlocks ? n : kMaxBlocks);
    dispatch_float(t, "embedding_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      embedding_backward_kernel<T><<<blocks, kThreads, 0, stream_>>>(
          keys_out, vals_out, n, static_cast<const T*>(dout), h, absent, dtable);
    });
    PTDP_CU_LAUNCHED("embedding_backward_kernel");
  } catch (...) {
    release();
    throw;
  }
  release();
}

}  // namespace ptdp::cuda
